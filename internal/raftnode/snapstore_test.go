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

// failingSink fails to cancel as raft's file sink does on a full disk:
// before removing anything.
type failingSink struct{ raft.SnapshotSink }

func (failingSink) Cancel() error { return errors.New("write state.bin: no space left on device") }

// closeFailure is a raft sink whose Close fails at a given point:
// "finish" as raft's does when the final flush fails (directory removed,
// file left open), "meta" before the rename (directory left), "reap" after
// the rename (the snapshot is in place).
type closeFailure struct {
	raft.SnapshotSink
	dir, at string
}

func (f closeFailure) Close() error {
	switch f.at {
	case "finish":
		_ = os.RemoveAll(f.dir)
	case "reap":
		if err := os.Rename(f.dir, f.dir[:len(f.dir)-len(".tmp")]); err != nil {
			return err
		}
	}
	return errors.New("failed at " + f.at)
}

// Whatever point raft's Close fails at, a snapshot that did not reach its
// place leaves neither its directory nor its blocks behind, and one that
// did is kept whole.
func TestFailedSnapshotCloseKeepsOnlyWhatIsInPlace(t *testing.T) {
	for _, at := range []string{"finish", "meta", "reap"} {
		t.Run(at, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "2-30-123.tmp")
			require.NoError(t, os.MkdirAll(dir, 0o755))
			state := filepath.Join(dir, snapshotStateFile)
			require.NoError(t, os.WriteFile(state, make([]byte, 4096), 0o644))
			raftsHandle, err := os.Open(state)
			require.NoError(t, err)
			defer raftsHandle.Close()

			c := &cleaningSink{SnapshotSink: closeFailure{dir: dir, at: at}, dir: dir, logger: slog.New(slog.DiscardHandler)}
			require.Error(t, c.Close())
			fi, err := raftsHandle.Stat()
			require.NoError(t, err)
			_, tmpErr := os.Stat(dir)
			assert.ErrorIs(t, tmpErr, os.ErrNotExist, "no unfinished snapshot is left")
			if at == "reap" {
				assert.Equal(t, int64(4096), fi.Size(), "a snapshot in place is kept whole")
				_, err := os.Stat(filepath.Join(base, "2-30-123", snapshotStateFile))
				assert.NoError(t, err)
			} else {
				assert.Zero(t, fi.Size(), "the file's blocks are freed")
			}
		})
	}
}

// A snapshot raft fails to cancel gives its space back at once: its file
// is truncated (even while raft's handle keeps it open) and its directory
// removed.
func TestFailedSnapshotCancelFreesItsSpace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "2-30-123.tmp")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	state := filepath.Join(dir, snapshotStateFile)
	require.NoError(t, os.WriteFile(state, make([]byte, 1<<20), 0o644))
	raftsHandle, err := os.Open(state) // raft's, left open
	require.NoError(t, err)
	defer raftsHandle.Close()

	c := &cleaningSink{SnapshotSink: failingSink{}, dir: dir, logger: slog.New(slog.DiscardHandler)}
	require.Error(t, c.Cancel(), "raft's error is returned")
	fi, err := raftsHandle.Stat()
	require.NoError(t, err)
	assert.Zero(t, fi.Size(), "the file's blocks are freed")
	_, err = os.Stat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "the unfinished snapshot is gone")
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
