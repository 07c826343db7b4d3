package raftnode

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// The data directory holds the whole replicated state, signing keys
// included: fsm.db and raft.db are written 0600, and the directories
// are kept to their owner, since raft's snapshot store writes each
// snapshot (a full copy of fsm.db) with the process's default modes
// (directories 0755, files 0644 under the usual umask).

// privateDataDir creates dir (mode 0700) if it does not exist, and makes
// an existing one that others may enter or read private to its owner. It
// fails only when dir cannot be created or is not a directory: a mode
// that cannot be changed (a volume's root the process does not own) is
// logged and left, since the snapshots under it are kept private on their
// own (privateSnapshotStore).
func privateDataDir(dir string, logger *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(dir, fi.Mode().Perm()&0o700); err != nil {
		logger.Warn("the data directory is open to other users and its mode cannot be changed (the process does not own it): the users it is open to may read the state it holds, signing keys included",
			"path", dir, "mode", fi.Mode().Perm().String(), "error", err)
		return nil
	}
	logger.Warn("made the data directory private to its owner: it holds the catalog's signing keys",
		"path", dir, "was", fi.Mode().Perm().String())
	return nil
}

// privateSnapshotStore is raft's file snapshot store under dataDir, with
// its directory (<dataDir>/snapshots, which raft creates 0755) made 0700,
// so that no snapshot raft writes there, whatever its own mode, can be
// read by another user. A directory whose mode the process may not change
// (another user's, on a volume shared through a group) is logged and
// used as it is, as the data directory is (privateDataDir).
func privateSnapshotStore(dataDir string, hlog hclog.Logger, logger *slog.Logger) (*raft.FileSnapshotStore, error) {
	store, err := raft.NewFileSnapshotStoreWithLogger(dataDir, snapshotsRetained, hlog)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(dataDir, snapshotsDir)
	if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			logger.Warn("the snapshots directory is open to other users and its mode cannot be changed (the process does not own it): the users it is open to may read the snapshots, signing keys included",
				"path", dir, "mode", fi.Mode().Perm().String(), "error", err)
		}
	}
	return store, nil
}
