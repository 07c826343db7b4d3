package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/floe-catalog/floe/internal/boltopen"
	"github.com/floe-catalog/floe/internal/raftlog"
)

// Errors of a data directory that is not this node's, or not whole. The
// node did not start and changed nothing.
var (
	// ErrForeignState: the state machine holds entries this node's Raft log
	// and snapshots never had (fsm.db copied from another node or cluster,
	// or raft.db lost or replaced). Served, it would answer with state no
	// other member has, and skip the cluster's entries up to its index.
	ErrForeignState = errors.New("raftnode: the state machine is not this node's")
	// ErrNodeIDMismatch: the data directory belongs to another node ID.
	// Started under a new ID the node would hold the old member's vote
	// record and log while the configuration does not name it.
	ErrNodeIDMismatch = errors.New("raftnode: the data directory belongs to another node ID")
	// ErrDamaged: a file of the data directory cannot be read.
	ErrDamaged = errors.New("raftnode: the data directory is damaged")
)

// nodeIDFile records the node ID a data directory belongs to, written at
// the first start.
const nodeIDFile = "node-id"

// damagedHint is the way out of a damaged data directory.
const damagedHint = "remove the node from the cluster (floe members remove), empty its data directory and start it with --join; if it was the cluster's last node, start a new cluster from a backup (floe restore)"

// damaged is the error of opening one of the data directory's files: for
// a damaged file, ErrDamaged with the way out.
func damaged(err error) error {
	if errors.Is(err, boltopen.ErrDamaged) {
		return fmt.Errorf("%w: %w; %s", ErrDamaged, err, damagedHint)
	}
	return fmt.Errorf("raftnode: %w", err)
}

// checkStateMachineNotAhead refuses a state machine that applied entries
// beyond the end of this node's Raft log and newest snapshot: every entry
// is in the log before it is applied, and an installed snapshot is stored
// before the state machine takes it, so only a state machine file from
// elsewhere (or a Raft log lost or replaced beside it) is ahead.
func (n *Node) checkStateMachineNotAhead() error {
	applied := n.fsm.AppliedIndex()
	if applied == 0 {
		return nil
	}
	last, err := n.logs.LastIndex()
	if err != nil {
		return fmt.Errorf("raftnode: read the log's last index: %w", err)
	}
	metas, err := n.snaps.List()
	if err != nil {
		return fmt.Errorf("raftnode: list snapshots: %w", err)
	}
	if len(metas) > 0 && metas[0].Index > last {
		last = metas[0].Index
	}
	if applied <= last {
		return nil
	}
	return fmt.Errorf("%w: fsm.db has applied entry %d, but this node's Raft log and snapshots end at %d (raft.db lost or replaced, or fsm.db copied from another node); %s",
		ErrForeignState, applied, last, damagedHint)
}

// stableClusterIDKey is the key under which the Raft stable store (raft.db)
// keeps the cluster identity this node's state machine first held.
var stableClusterIDKey = []byte("floe-cluster-id")

// checkClusterIDMatches refuses a state machine holding another cluster's
// identity than the one raft.db recorded: fsm.db copied from a node of
// another cluster, whatever its applied index (checkStateMachineNotAhead
// catches only one ahead of the log).
func (n *Node) checkClusterIDMatches() error {
	rec, err := n.logs.Get(stableClusterIDKey)
	if errors.Is(err, raftlog.ErrKeyNotFound) || len(rec) == 0 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("raftnode: read the recorded cluster id: %w", err)
	}
	if have := n.ClusterID(); have != "" && have != string(rec) {
		return fmt.Errorf("%w: fsm.db holds the state of cluster %s, and this node's Raft log is cluster %s's (fsm.db copied from another cluster's node); %s",
			ErrForeignState, have, rec, damagedHint)
	}
	return nil
}

// recordClusterID writes the state machine's cluster identity into raft.db
// once it has one (see checkClusterIDMatches).
func (n *Node) recordClusterID() {
	id := n.ClusterID()
	if id == "" || n.clusterIDRecorded.Load() {
		return
	}
	rec, err := n.logs.Get(stableClusterIDKey)
	if err == nil && string(rec) == id {
		n.clusterIDRecorded.Store(true)
		return
	}
	if err := n.logs.Set(stableClusterIDKey, []byte(id)); err != nil {
		n.logger.Warn("could not record the cluster id in raft.db", "error", err)
		return
	}
	n.clusterIDRecorded.Store(true)
}

// checkNodeID refuses a data directory recorded for another node ID, and
// records the ID in one that has none (a new directory, or one written
// before the record existed). The ID defaults to the cluster address, so a
// node moved to a new address without --node-id would change its ID.
// A directory without state (no Raft state, nothing applied) is no
// node's yet, and a seeded one not started yet is the node's its seed
// record names (checked by checkSeed): their record is replaced.
func (n *Node) checkNodeID(hasState, seeded bool) error {
	path := filepath.Join(n.cfg.DataDir, nodeIDFile)
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		rec := strings.TrimSpace(string(raw))
		if rec != string(n.id) && (seeded || !hasState && n.fsm.AppliedIndex() == 0) {
			return recordNodeID(path, n.id)
		}
		if rec != string(n.id) {
			return fmt.Errorf("%w: %s holds node %q's state, and this node is %q; start it with --node-id %s, or give %q an empty data directory",
				ErrNodeIDMismatch, n.cfg.DataDir, rec, n.id, rec, n.id)
		}
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return recordNodeID(path, n.id)
	default:
		return fmt.Errorf("raftnode: %w", err)
	}
}

// recordNodeID writes id into the node-id file at path.
func recordNodeID(path string, id raft.ServerID) error {
	if err := writeFileAtomic(path, []byte(string(id)+"\n")); err != nil {
		return fmt.Errorf("raftnode: record the node id: %w", err)
	}
	return nil
}

// ErrOtherCluster: the data directory holds the state of another cluster
// than the one the Join nodes form. Started, the node would lead or serve
// that other cluster's state as if it were theirs.
var ErrOtherCluster = errors.New("raftnode: the data directory holds another cluster's state than the --join nodes")

// joinProbeTimeout bounds the identity probe of each Join node at start.
const joinProbeTimeout = time.Second

// checkJoinCluster refuses a node with state whose Join nodes belong to
// another cluster: more than half of them (itself left out) answer with
// one other cluster's identity, and none with this state's. A data
// directory copied from another cluster, or left from one, was otherwise
// started under --join as if it were this cluster's member: it elected
// itself leader of its own configuration and served and took writes the
// cluster never saw. A majority, because the check cannot tell which side
// is the stray one: members restarted together answer only once they
// run, and a lone member that lost its data and was started alone answers
// with a cluster of its own; one such answer must not keep the real
// members from starting. Nodes that do not answer (not started yet, down),
// or answer without an identity, are not judged, nor is a node whose state
// has no identity.
func (n *Node) checkJoinCluster(hasState bool) error {
	ours := n.ClusterID()
	if !hasState || ours == "" || len(n.cfg.Join) == 0 {
		return nil
	}
	self := map[string]bool{n.cfg.ClusterAddr: true, n.cfg.AdvertiseAddr: true, string(n.trans.LocalAddr()): true}
	var peers []string
	for _, addr := range n.cfg.Join {
		if !self[addr] && !slices.Contains(peers, addr) {
			peers = append(peers, addr)
		}
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		same   bool
		others = map[string][]string{} // cluster id -> the peers holding it
	)
	for _, addr := range peers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), joinProbeTimeout)
			defer cancel()
			info, err := n.probe(ctx, addr)
			if err != nil || info.ClusterID == "" {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if info.ClusterID == ours {
				same = true
			} else {
				others[info.ClusterID] = append(others[info.ClusterID], addr)
			}
		})
	}
	wg.Wait()
	if same {
		return nil
	}
	for id, addrs := range others {
		if 2*len(addrs) <= len(peers) {
			continue
		}
		sort.Strings(addrs)
		return fmt.Errorf("%w: it holds cluster %s, while most of the --join nodes (%s) hold cluster %s. "+
			"If this directory is a copy from another cluster, or a member removed from theirs, start it with an empty data directory to join them; "+
			"if it holds the state to keep, check --join: it names nodes of another cluster",
			ErrOtherCluster, ours, strings.Join(addrs, ", "), id)
	}
	return nil
}
