package raftnode

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failingSink fails as raft's file sink does on a full disk: Cancel
// returns before removing anything; Close removes the directory but
// leaves the file open (here: held by the test).
type failingSink struct {
	raft.SnapshotSink
	dir string
}

func (f failingSink) Cancel() error { return errors.New("write state.bin: no space left on device") }
func (f failingSink) Close() error {
	_ = os.RemoveAll(f.dir)
	return errors.New("write state.bin: no space left on device")
}

// A snapshot whose write fails gives its space back at once: its file is
// truncated (even while another handle keeps it open) and its directory
// removed, whether raft failed to cancel it or to finish it.
func TestFailedSnapshotFreesItsSpace(t *testing.T) {
	for _, how := range []string{"cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "2-30-123.tmp")
			require.NoError(t, os.MkdirAll(dir, 0o755))
			state := filepath.Join(dir, snapshotStateFile)
			require.NoError(t, os.WriteFile(state, make([]byte, 1<<20), 0o644))
			raftsHandle, err := os.Open(state) // raft's, left open
			require.NoError(t, err)
			defer raftsHandle.Close()

			c := &cleaningSink{SnapshotSink: failingSink{dir: dir}, dir: dir, logger: slog.New(slog.DiscardHandler)}
			if how == "cancel" {
				require.Error(t, c.Cancel(), "raft's error is returned")
			} else {
				require.Error(t, c.Close())
			}
			fi, err := raftsHandle.Stat()
			require.NoError(t, err)
			assert.Zero(t, fi.Size(), "the file's blocks are freed")
			_, err = os.Stat(dir)
			assert.ErrorIs(t, err, os.ErrNotExist, "the unfinished snapshot is gone")
		})
	}
}

// Through raft's real store: a snapshot that is cancelled or finished
// leaves no unfinished directory behind.
func TestCleaningStoreKeepsRaftsBehaviour(t *testing.T) {
	base := t.TempDir()
	fss, err := raft.NewFileSnapshotStoreWithLogger(base, 2, newHCLog(slog.New(slog.DiscardHandler), "raft"))
	require.NoError(t, err)
	s := cleaningSnapshotStore{FileSnapshotStore: fss, dir: filepath.Join(base, "snapshots"), logger: slog.New(slog.DiscardHandler)}
	for i, finish := range []bool{false, true} {
		sink, err := s.Create(raft.SnapshotVersionMax, uint64(10+i), 1, raft.Configuration{}, 1, nil)
		require.NoError(t, err)
		_, err = sink.Write([]byte("state"))
		require.NoError(t, err)
		if finish {
			require.NoError(t, sink.Close())
		} else {
			require.NoError(t, sink.Cancel())
		}
	}
	entries, err := os.ReadDir(filepath.Join(base, "snapshots"))
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, "1-11-", entries[0].Name()[:5])
	metas, err := s.List()
	require.NoError(t, err)
	require.Len(t, metas, 1)
	_, rc, err := s.Open(metas[0].ID)
	require.NoError(t, err)
	rc.Close()
}
