package fsm

import (
	"bytes"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The first SetClusterID wins; a copy of the state given a new identity
// (a restore's seed) keeps everything else but the signing keys, and the
// old id is reported.
func TestClusterIDIsSetOnceAndReplacedOnlyInACopy(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	privateKey := []byte("the-private-key-of-the-source-cluster-3f9a")
	holdsKey := func(b []byte) bool {
		return bytes.Contains(b, privateKey) || bytes.Contains(b, []byte(base64.StdEncoding.EncodeToString(privateKey)))
	}
	clusterID := func(f *FSM) (id string) {
		require.NoError(t, f.View(func(r *Reader) error { id = r.ClusterID(); return nil }))
		return id
	}
	assert.Equal(t, "", clusterID(f))
	f.Apply(entry(t, 1, SetClusterID{ID: "first"}))
	f.Apply(entry(t, 2, SetClusterID{ID: "second"}))
	f.Apply(entry(t, 3, CreateNamespace{Namespace: nsA}))
	f.Apply(entry(t, 4, AddSigningKey{Key: SigningKey{ID: "k1", Algorithm: "EdDSA", PublicKey: []byte("pub"), PrivateKey: privateKey, CreatedMs: 1}}))
	assert.Equal(t, "first", clusterID(f))
	keys := func(f *FSM) (keys []SigningKey) {
		require.NoError(t, f.View(func(r *Reader) error { keys = r.SigningKeys(); return nil }))
		return keys
	}
	require.Len(t, keys(f), 1)

	var state bytes.Buffer
	require.NoError(t, f.View(func(r *Reader) error { _, err := r.WriteTo(&state); return err }))
	path := filepath.Join(t.TempDir(), "copy.db")
	require.NoError(t, os.WriteFile(path, state.Bytes(), 0o600))
	var out bytes.Buffer
	old, err := WriteAsNewCluster(path, "restored", &out)
	require.NoError(t, err)
	assert.Equal(t, "first", old)
	assert.Equal(t, "first", clusterID(f), "the live state is not touched")
	assert.LessOrEqual(t, out.Len(), state.Len()+64<<10, "no free space bbolt added at the end")
	require.True(t, holdsKey(state.Bytes()))
	assert.False(t, holdsKey(out.Bytes()), "no byte of the removed key is left in pages bbolt freed")
	assert.NoFileExists(t, path+".compact")

	g := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	require.NoError(t, g.Restore(io.NopCloser(bytes.NewReader(out.Bytes()))))
	assert.Equal(t, "restored", clusterID(g))
	assert.Equal(t, uint64(4), g.AppliedIndex())
	assert.Empty(t, keys(g), "a new cluster signs with keys of its own")
	assert.Len(t, keys(f), 1, "the live state keeps its keys")
	require.NoError(t, g.View(func(r *Reader) error {
		_, ok := r.Namespace(nsA)
		assert.True(t, ok)
		return nil
	}))

	_, err = WriteAsNewCluster(path, "", io.Discard)
	assert.Error(t, err, "an empty id")
	notState := filepath.Join(t.TempDir(), "other.db")
	require.NoError(t, os.WriteFile(notState, []byte("not a state machine file"), 0o600))
	_, err = WriteAsNewCluster(notState, "x", io.Discard)
	assert.Error(t, err)
}
