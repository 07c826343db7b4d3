package storage

import (
	"bytes"
	"compress/gzip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// Ungzipped passes plain bytes through, inflates gzip, and refuses a
// corrupt stream or one that inflates beyond its limit.
func TestUngzipped(t *testing.T) {
	plain := []byte(`{"format-version":2}`)
	out, err := ungzipped(plain, 100)
	require.NoError(t, err)
	assert.Equal(t, plain, out)

	out, err = ungzipped(gz(t, plain), 100)
	require.NoError(t, err)
	assert.Equal(t, plain, out)

	_, err = ungzipped([]byte{0x1f, 0x8b, 'x', 'y'}, 100)
	assert.Error(t, err, "gzip magic, then garbage")

	_, err = ungzipped(gz(t, bytes.Repeat([]byte{' '}, 101)), 100)
	assert.ErrorContains(t, err, "beyond 100 bytes")
	out, err = ungzipped(gz(t, bytes.Repeat([]byte{' '}, 100)), 100)
	require.NoError(t, err)
	assert.Len(t, out, 100)
}
