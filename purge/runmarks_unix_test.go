//go:build unix

package purge

import (
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The marks directory is read at start: what is not a small regular file
// there is removed unread (a FIFO's read would hold the start for ever),
// and a mark is taken at its word.
func TestOpenRunMarksReadsOnlyMarks(t *testing.T) {
	dir := t.TempDir()
	name := func(id string) string { return filepath.Join(dir, hex.EncodeToString([]byte(id))) }
	require.NoError(t, os.WriteFile(name("job-a"), []byte("42\n"), 0o600))
	require.NoError(t, syscall.Mkfifo(name("job-b"), 0o600))
	require.NoError(t, os.WriteFile(name("job-c"), make([]byte, 4096), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "not-hex"), []byte("1\n"), 0o600))

	done := make(chan *runMarks, 1)
	go func() {
		m, err := openRunMarks(dir, slog.New(slog.NewTextHandler(io.Discard, nil)))
		assert.NoError(t, err)
		done <- m
	}()
	var m *runMarks
	select {
	case m = <-done:
	case <-time.After(30 * time.Second):
		if w, err := os.OpenFile(name("job-b"), os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		t.Fatal("opening the marks directory did not return")
	}
	assert.Equal(t, map[string]uint64{"job-a": 42}, m.leftOver())
	assert.True(t, m.lost("job-a", 42))
	assert.False(t, m.lost("job-a", 43))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "only the mark is left")
	assert.Equal(t, hex.EncodeToString([]byte("job-a")), entries[0].Name())
}
