//go:build unix

package storage_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/storage"
)

// A FIFO (or a directory) where an object should be is refused at once:
// its open waited for a writer for ever, holding a table's loads, a sync
// purge and every worker slot of the async purges that read it.
func TestLocalReadRefusesWhatIsNotAFile(t *testing.T) {
	m := newLocal(t, storage.Config{})
	dir := t.TempDir() + "/wh/ns/t/metadata"
	require.NoError(t, os.MkdirAll(dir+"/00001.metadata.json", 0o755))
	require.NoError(t, syscall.Mkfifo(dir+"/00000.metadata.json", 0o644))
	for _, name := range []string{"00000.metadata.json", "00001.metadata.json"} {
		uri := "file://" + dir + "/" + name
		done := make(chan error, 1)
		go func() {
			_, err := m.Read(context.Background(), uri)
			done <- err
		}()
		select {
		case err := <-done:
			require.Error(t, err, name)
			assert.NotErrorIs(t, err, storage.ErrNotFound, name)
			assert.Contains(t, err.Error(), "not a regular file", name)
		case <-time.After(30 * time.Second):
			// Unblock the read before failing: open the FIFO for writing.
			if w, err := os.OpenFile(dir+"/"+name, os.O_WRONLY, 0); err == nil {
				w.Close()
			}
			t.Fatalf("reading %s did not return", name)
		}
	}
}
