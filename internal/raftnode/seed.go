package raftnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/floe-catalog/floe/fsm"
)

// Errors of seeding a data directory from a copy of the state (Seed) and of
// starting a node on it (Open).
var (
	// ErrHasState: the data directory already holds a node's state (a state
	// machine, a Raft log, snapshots, or a seed not yet started). Seed
	// refuses it and writes nothing.
	ErrHasState = errors.New("raftnode: the data directory already has state")
	// ErrSeedMismatch: Open found a seeded data directory that was prepared
	// for another node ID or cluster address than the node's. The node did
	// not start; start it with the ID and address the directory was seeded
	// for (see SeedConfig).
	ErrSeedMismatch = errors.New("raftnode: the data directory was seeded for another node")
)

// Files under a data directory. The snapshot store owns snapshotsDir.
const (
	fsmFile      = "fsm.db"
	raftFile     = "raft.db"
	snapshotsDir = "snapshots"
	// seedFile records the node ID and address a seeded data directory was
	// prepared for; Open checks it and removes it on the first start.
	seedFile = "seed.json"
	// seedStateFile holds the state while Seed gives it a new cluster
	// identity (SeedConfig.ClusterID); removed before Seed returns.
	seedStateFile = "seed-state.tmp"
	// seedTerm is the term of a seed snapshot: a seeded cluster starts a
	// new history, whatever the term of the cluster the state came from.
	seedTerm = 1
)

// seedRecord is the content of seedFile.
type seedRecord struct {
	NodeID  string `json:"node-id"`
	Address string `json:"cluster-address"`
	Index   uint64 `json:"index"`
}

// SeedConfig says which one-node cluster Seed prepares.
type SeedConfig struct {
	// DataDir is the data directory of the node that will start the
	// cluster. It may exist (for example holding a warehouse) but must
	// hold no node state.
	DataDir string
	// NodeID and Address are the Raft server ID and cluster address the
	// node will start with (Config.NodeID, and Config.AdvertiseAddr or
	// else Config.ClusterAddr). Open refuses to start the seeded directory
	// under any other (ErrSeedMismatch).
	NodeID  string
	Address string
	// Index is the log index the state reflects (the state machine's
	// applied index inside it), at least 1. The new cluster's log goes on
	// after it.
	Index uint64
	// ClusterID, when set, replaces the cluster identity the state holds
	// (fsm.WriteAsNewCluster): the seeded cluster is a new cluster,
	// and nodes of the one the state came from are refused by it
	// (checkSameCluster). The state is then staged in the data directory
	// while it is changed, so it needs its size again in free space there.
	ClusterID string
	// Logger receives the snapshot store's logs. Default slog.Default().
	Logger *slog.Logger
}

// CheckNoState returns an error wrapping ErrHasState when dataDir holds a
// node's state, nil when it does not exist or holds none.
func CheckNoState(dataDir string) error {
	for _, name := range []string{fsmFile, raftFile, seedFile} {
		_, err := os.Stat(filepath.Join(dataDir, name))
		if err == nil {
			return fmt.Errorf("%w: %s exists", ErrHasState, filepath.Join(dataDir, name))
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("raftnode: %w", err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(dataDir, snapshotsDir))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("raftnode: %w", err)
	}
	for _, e := range entries {
		// An unfinished snapshot (a killed Seed's, or a node's) is not
		// state: the store skips it, and Seed and Open remove it.
		if !e.IsDir() || !strings.HasSuffix(e.Name(), unfinishedSnapshotSuffix) {
			return fmt.Errorf("%w: %s is not empty", ErrHasState, filepath.Join(dataDir, snapshotsDir))
		}
	}
	return nil
}

// Seed prepares cfg.DataDir so that a node opened on it with cfg.NodeID and
// cfg.Address starts as a one-node cluster whose state is the state machine
// file read from state (a copy written by fsm.Reader.WriteTo), at log index
// cfg.Index; other nodes then join it as usual.
//
// It installs state as a Raft snapshot (term 1, configuration: this node
// alone as a voter), the way a node keeps its own snapshots; on start the
// node restores its state machine from it (see restoreIfBehindSnapshot) and
// elects itself. The snapshot becomes visible only once complete.
//
// state is read to its end; an error from it (a backup reader that finds
// the file corrupt at the end) fails Seed. On any failure Seed removes what
// it created and the directory is as it was; ErrHasState means it found
// state and touched nothing.
func Seed(cfg SeedConfig, state io.Reader) (err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DataDir == "" || cfg.NodeID == "" || cfg.Address == "" {
		return errors.New("raftnode: seed: DataDir, NodeID and Address are required")
	}
	if cfg.Index == 0 {
		return errors.New("raftnode: seed: Index must be at least 1")
	}
	if err := CheckNoState(cfg.DataDir); err != nil {
		return err
	}
	// Undo on failure: the data directory if Seed created it, else what
	// it created inside.
	_, statErr := os.Stat(cfg.DataDir)
	createdDir := errors.Is(statErr, fs.ErrNotExist)
	snapPath := filepath.Join(cfg.DataDir, snapshotsDir)
	_, statErr = os.Stat(snapPath)
	createdSnaps := errors.Is(statErr, fs.ErrNotExist)
	snapID := "" // the completed snapshot, once there is one
	defer func() {
		if err == nil {
			return
		}
		if createdDir {
			_ = os.RemoveAll(cfg.DataDir)
			return
		}
		if createdSnaps {
			_ = os.RemoveAll(snapPath)
		} else if snapID != "" {
			_ = os.RemoveAll(filepath.Join(snapPath, snapID))
		}
		_ = os.Remove(filepath.Join(cfg.DataDir, seedFile))
	}()
	if err := privateDataDir(cfg.DataDir, cfg.Logger); err != nil {
		return fmt.Errorf("raftnode: seed: create data dir: %w", err)
	}
	// The state goes into the snapshot as it is, or, to get a new
	// identity, staged in a file first (removed on every return; a
	// leftover of a killed Seed is removed by the next Seed or Open).
	write := func(w io.Writer) error {
		_, err := io.Copy(w, state)
		return err
	}
	if cfg.ClusterID != "" {
		staged := filepath.Join(cfg.DataDir, seedStateFile)
		defer os.Remove(staged)
		if err := stage(staged, state); err != nil {
			return err
		}
		// The index the snapshot is filed under must be the one the state
		// was applied up to: above it the seeded log would start with a
		// gap, below it the state machine would skip the next entries as
		// applied. (A backup's header is checksummed, not signed: an
		// edited one must be refused here, not by a panic at start.)
		applied, err := fsm.AppliedIndexOf(staged)
		if err != nil {
			return fmt.Errorf("raftnode: seed: %w", err)
		}
		if max(applied, 1) != cfg.Index {
			return fmt.Errorf("raftnode: seed: the state was applied up to log index %d, not %d as given", applied, cfg.Index)
		}
		write = func(w io.Writer) error {
			_, err := fsm.WriteAsNewCluster(staged, cfg.ClusterID, w)
			return err
		}
	}

	removeUnfinishedSnapshots(snapPath, cfg.Logger) // a killed Seed's
	store, err := privateSnapshotStore(cfg.DataDir, newHCLog(cfg.Logger, "raft"), cfg.Logger)
	if err != nil {
		return fmt.Errorf("raftnode: seed: snapshot store: %w", err)
	}
	// The snapshot store records the voters' addresses in a legacy field
	// through a transport's EncodePeer; an in-memory transport encodes
	// them as the network transport does (the address itself).
	_, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.Address))
	defer trans.Close()
	conf := raft.Configuration{Servers: []raft.Server{{
		Suffrage: raft.Voter, ID: raft.ServerID(cfg.NodeID), Address: raft.ServerAddress(cfg.Address),
	}}}
	sink, err := store.Create(raft.SnapshotVersionMax, cfg.Index, seedTerm, conf, cfg.Index, trans)
	if err != nil {
		return fmt.Errorf("raftnode: seed: create snapshot: %w", err)
	}
	if err := write(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("raftnode: seed: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("raftnode: seed: complete snapshot: %w", err)
	}
	snapID = sink.ID()

	rec, err := json.Marshal(seedRecord{NodeID: cfg.NodeID, Address: cfg.Address, Index: cfg.Index})
	if err != nil {
		return fmt.Errorf("raftnode: seed: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(cfg.DataDir, seedFile), rec); err != nil {
		return fmt.Errorf("raftnode: seed: %w", err)
	}
	return nil
}

// stage copies state into a new file at path (replacing a leftover).
func stage(path string, state io.Reader) error {
	// 0600: the copy still holds the signing keys of the cluster it came
	// from until WriteAsNewCluster removes them.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("raftnode: seed: %w", err)
	}
	_, err = io.Copy(f, state)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("raftnode: seed: %w", err)
	}
	return nil
}

// checkSeed compares a seeded data directory's record with this node's ID
// and address. It reports whether the directory was seeded and not yet
// started; a mismatch is ErrSeedMismatch.
func (n *Node) checkSeed() (bool, error) {
	// A Seed killed while it staged the state leaves the staged copy.
	_ = os.Remove(filepath.Join(n.cfg.DataDir, seedStateFile))
	raw, err := os.ReadFile(filepath.Join(n.cfg.DataDir, seedFile))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("raftnode: %w", err)
	}
	var rec seedRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return false, fmt.Errorf("raftnode: %s: %w", seedFile, err)
	}
	if rec.NodeID != string(n.id) || rec.Address != n.Addr() {
		return false, fmt.Errorf("%w: it was seeded for node %q at cluster address %s; this node is %q at %s",
			ErrSeedMismatch, rec.NodeID, rec.Address, n.id, n.Addr())
	}
	n.logger.Info("starting a seeded cluster of one from restored state", "index", rec.Index)
	return true, nil
}

// clearSeed removes the seed record once Raft has started on the seeded
// state: from then on the node is an ordinary member, free to move (see
// readdress).
func (n *Node) clearSeed() {
	if err := os.Remove(filepath.Join(n.cfg.DataDir, seedFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		n.logger.Warn("could not remove the seed record", "error", err)
		return
	}
	if err := syncDirPath(n.cfg.DataDir); err != nil {
		n.logger.Warn("could not sync the data directory", "error", err)
	}
}

// MemberIDs returns the server IDs of the latest Raft configuration this
// node knows, sorted. It fails only when Raft cannot answer (shut down).
func (n *Node) MemberIDs() ([]string, error) {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, fmt.Errorf("raftnode: configuration: %w", err)
	}
	var ids []string
	for _, s := range cf.Configuration().Servers {
		ids = append(ids, string(s.ID))
	}
	slices.Sort(ids)
	return ids, nil
}

// writeFileAtomic writes data to path through a synced temp file and a
// rename, then syncs the directory.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDirPath(filepath.Dir(path))
}

func syncDirPath(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
