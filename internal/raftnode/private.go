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
		logger.Warn("the data directory is open to other users and its mode cannot be changed; its state files are 0600 and its snapshots private",
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
// read by another user. It fails if that mode cannot be set.
func privateSnapshotStore(dataDir string, logger hclog.Logger) (*raft.FileSnapshotStore, error) {
	store, err := raft.NewFileSnapshotStoreWithLogger(dataDir, snapshotsRetained, logger)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(filepath.Join(dataDir, snapshotsDir), 0o700); err != nil {
		return nil, fmt.Errorf("keep snapshots private: %w", err)
	}
	return store, nil
}
