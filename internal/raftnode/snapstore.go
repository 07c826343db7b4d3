package raftnode

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/raft"
)

// cleaningSnapshotStore is raft's file snapshot store, except that a
// snapshot whose write fails gives its disk space back at once.
//
// raft's FileSnapshotSink.Cancel flushes and closes the snapshot file
// before it removes the unfinished directory, and returns at the first
// failure: on a full disk the flush fails, so the directory stays, its
// file stays open, and each retry (the state machine's next snapshot, the
// leader's next InstallSnapshot) leaves another. A node then filled any
// space an operator freed with abandoned snapshots until it was
// restarted (removeUnfinishedSnapshots runs on start). Here the sink holds
// a handle of its own on the snapshot's file: when raft fails to cancel or
// to finish the snapshot, the file is truncated through it, which frees
// its blocks even though raft's handle is still open (that handle is
// closed when the abandoned sink is collected), and the directory is
// removed.
type cleaningSnapshotStore struct {
	*raft.FileSnapshotStore
	dir    string // <DataDir>/snapshots, where the store keeps them
	logger *slog.Logger
}

func (s cleaningSnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &cleaningSink{SnapshotSink: sink, dir: filepath.Join(s.dir, sink.ID()+".tmp"), logger: s.logger}, nil
}

// snapshotStateFile is the name of raft's file snapshot's data file.
const snapshotStateFile = "state.bin"

type cleaningSink struct {
	raft.SnapshotSink
	dir    string // the unfinished snapshot's directory
	logger *slog.Logger
}

// Cancel is raft's; if that failed, the clean-up raft skipped follows.
func (c *cleaningSink) Cancel() error {
	state := c.openState()
	err := c.SnapshotSink.Cancel()
	if err == nil {
		closeState(state)
		return nil
	}
	c.release(state)
	rerr := os.RemoveAll(c.dir)
	if rerr != nil {
		c.logger.Warn("could not remove a failed snapshot", "path", c.dir, "error", rerr)
	} else {
		c.logger.Info("removed a snapshot whose write failed", "path", c.dir, "error", err)
	}
	return err
}

// Close is raft's. Raft's Close can fail at three points: finishing the
// file (it then removes the directory but leaves the file open, so its
// blocks stay taken until the abandoned sink is collected), writing the
// metadata or renaming (the directory stays until a restart), or after the
// rename (syncing the parent directory, reaping older snapshots: the
// snapshot is complete and in place, and must be kept). Only the first two
// are cleaned up here.
func (c *cleaningSink) Close() error {
	state := c.openState()
	err := c.SnapshotSink.Close()
	if err == nil || c.inPlace() {
		closeState(state)
		return err
	}
	c.release(state)
	if rerr := os.RemoveAll(c.dir); rerr != nil {
		c.logger.Warn("could not remove a failed snapshot", "path", c.dir, "error", rerr)
	} else {
		c.logger.Info("removed a snapshot whose write failed", "path", c.dir, "error", err)
	}
	return err
}

// inPlace reports whether the snapshot was renamed into place: its
// directory without the .tmp suffix exists.
// Only "does not exist" counts as not in place: a snapshot that may be in
// place is never truncated.
func (c *cleaningSink) inPlace() bool {
	_, err := os.Stat(strings.TrimSuffix(c.dir, ".tmp"))
	return !errors.Is(err, fs.ErrNotExist)
}

// openState opens the snapshot's data file, to free its blocks through
// this handle should raft fail to finish it; nil if it cannot be opened.
func (c *cleaningSink) openState() *os.File {
	f, err := os.OpenFile(filepath.Join(c.dir, snapshotStateFile), os.O_WRONLY, 0)
	if err != nil {
		return nil
	}
	return f
}

// release truncates and closes the data file of a snapshot that failed.
func (c *cleaningSink) release(f *os.File) {
	if f == nil {
		return
	}
	if err := f.Truncate(0); err != nil {
		c.logger.Warn("could not free a failed snapshot's space", "path", c.dir, "error", err)
	}
	closeState(f)
}

func closeState(f *os.File) {
	if f != nil {
		_ = f.Close()
	}
}
