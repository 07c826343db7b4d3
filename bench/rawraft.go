package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/harness"
	"github.com/floe-catalog/floe/internal/raftlog"
	"github.com/floe-catalog/floe/internal/raftnode"
	"github.com/floe-catalog/floe/transport"
)

// rawSnapshotsRetained mirrors internal/raftnode's unexported snapshot
// retention; keep it in step so the raw baseline runs Raft exactly as a
// floe node does (the transport is raftnode.NewNetworkTransport itself).
const rawSnapshotsRetained = 2

// RawFSM selects the state machine of a raw Raft cluster.
type RawFSM int

const (
	// RawDiscard applies nothing: the cost of Raft, the log store and the
	// transport alone. This is the baseline of the commit throughput item.
	RawDiscard RawFSM = iota
	// RawFloeFSM is floe's own state machine (package fsm, bbolt) applying
	// fsm.Noop: Raft plus the state machine's per-batch write and fsync,
	// without the catalog on top. It splits floe's cost in two.
	RawFloeFSM
)

func (k RawFSM) String() string {
	if k == RawFloeFSM {
		return "floe fsm"
	}
	return "discard"
}

// RawCluster is a hashicorp/raft cluster inside this process built from
// floe's parts: the internal/raftlog bbolt log and stable store, the
// cluster port of package transport (transport.Listen, then
// raftnode.NewNetworkTransport on its RaftLayer) and internal/raftnode's
// default Raft settings. It has no catalog, no HTTP and no forwarding: it is
// what floe's commits would cost if they were nothing but log entries.
type RawCluster struct {
	Nodes []*rawNode
	Dir   string
	hlog  hclog.Logger
}

type rawNode struct {
	id    raft.ServerID
	raft  *raft.Raft
	logs  *raftlog.Store
	mux   *transport.Mux
	trans *raft.NetworkTransport
	fsm   *fsm.FSM // nil for RawDiscard
}

// rawRaftConfig is raft.DefaultConfig with the settings internal/raftnode
// applies at its defaults.
func rawRaftConfig(id raft.ServerID, logger hclog.Logger) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = id
	rc.Logger = logger
	rc.HeartbeatTimeout = raftnode.DefaultHeartbeatTimeout
	rc.ElectionTimeout = raftnode.DefaultElectionTimeout
	rc.LeaderLeaseTimeout = raftnode.DefaultLeaderLeaseTimeout
	rc.CommitTimeout = raftnode.DefaultCommitTimeout
	rc.SnapshotInterval = raftnode.DefaultSnapshotInterval
	rc.SnapshotThreshold = raftnode.DefaultSnapshotThreshold
	rc.TrailingLogs = raftnode.DefaultTrailingLogs
	rc.NoSnapshotRestoreOnStart = true
	return rc
}

// StartRawCluster starts size Raft nodes on 127.0.0.1 with their files
// under dir and waits (bounded) for a leader.
func StartRawCluster(ctx context.Context, dir string, size int, kind RawFSM, log *slog.Logger) (rc *RawCluster, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	rc = &RawCluster{Dir: dir}
	defer func() {
		if err != nil {
			rc.Stop()
		}
	}()
	hlog := hclog.New(&hclog.LoggerOptions{Name: "rawraft", Level: hclog.Warn, Output: os.Stderr})
	rc.hlog = hlog
	var servers []raft.Server
	for i := range size {
		n := &rawNode{id: raft.ServerID(fmt.Sprintf("raw%d", i+1))}
		ndir := filepath.Join(dir, string(n.id))
		if err := os.MkdirAll(ndir, 0o755); err != nil {
			return rc, err
		}
		if n.logs, err = raftlog.Open(filepath.Join(ndir, "raft.db"), raftlog.Options{}); err != nil {
			return rc, err
		}
		if kind == RawFloeFSM {
			if n.fsm, err = fsm.Open(filepath.Join(ndir, "fsm.db"), log.With("component", "fsm", "node", string(n.id))); err != nil {
				n.logs.Close()
				return rc, err
			}
		}
		if n.mux, err = transport.Listen(transport.Config{BindAddr: "127.0.0.1:0", DialFromBindIP: true, Logger: log}); err != nil {
			rc.closeNode(n)
			return rc, err
		}
		n.trans = raftnode.NewNetworkTransport(n.mux.RaftLayer(), hlog)
		rc.Nodes = append(rc.Nodes, n)
		servers = append(servers, raft.Server{ID: n.id, Address: n.trans.LocalAddr(), Suffrage: raft.Voter})
	}
	for _, n := range rc.Nodes {
		cfg := rawRaftConfig(n.id, hlog)
		snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(dir, string(n.id)), rawSnapshotsRetained, hlog)
		if err != nil {
			return rc, err
		}
		if err := raft.BootstrapCluster(cfg, n.logs, n.logs, snaps, n.trans, raft.Configuration{Servers: servers}); err != nil {
			return rc, err
		}
		var machine raft.FSM = discardFSM{}
		if n.fsm != nil {
			machine = n.fsm
		}
		if n.raft, err = raft.NewRaft(cfg, machine, n.logs, n.logs, snaps, n.trans); err != nil {
			return rc, err
		}
	}
	if _, err := rc.Leader(ctx); err != nil {
		return rc, err
	}
	return rc, nil
}

// Leader waits up to harness.HealthyTimeout for a node that leads.
func (rc *RawCluster) Leader(ctx context.Context) (*raft.Raft, error) {
	var leader *raft.Raft
	err := harness.Poll(ctx, harness.HealthyTimeout, harness.PollInterval, func(context.Context) error {
		for _, n := range rc.Nodes {
			if n.raft != nil && n.raft.State() == raft.Leader {
				// A leader's first entries wait for its term's no-op.
				if err := n.raft.Barrier(harness.ControlTimeout).Error(); err != nil {
					return err
				}
				leader = n.raft
				return nil
			}
		}
		return errors.New("no raw raft leader yet")
	})
	return leader, err
}

// Stop shuts every node down and closes its files.
func (rc *RawCluster) Stop() {
	if rc.hlog != nil {
		// Connections closing under a shutdown are logged as errors.
		rc.hlog.SetLevel(hclog.Off)
	}
	var wg sync.WaitGroup
	for _, n := range rc.Nodes {
		wg.Go(func() { rc.closeNode(n) })
	}
	wg.Wait()
}

func (rc *RawCluster) closeNode(n *rawNode) {
	if n.raft != nil {
		_ = n.raft.Shutdown().Error()
	}
	if n.trans != nil {
		_ = n.trans.Close()
	}
	if n.mux != nil {
		_ = n.mux.Close()
	}
	if n.logs != nil {
		_ = n.logs.Close()
	}
	if n.fsm != nil {
		_ = n.fsm.Close()
	}
}

// discardFSM applies nothing and snapshots nothing.
type discardFSM struct{}

func (discardFSM) Apply(*raft.Log) any                 { return nil }
func (discardFSM) Snapshot() (raft.FSMSnapshot, error) { return discardSnapshot{}, nil }
func (discardFSM) Restore(rc io.ReadCloser) error {
	_, err := io.Copy(io.Discard, rc)
	return errors.Join(err, rc.Close())
}

type discardSnapshot struct{}

func (discardSnapshot) Persist(sink raft.SnapshotSink) error { return sink.Close() }
func (discardSnapshot) Release()                             {}

// NoopOfSize returns an encoded fsm.Noop of exactly size bytes when size is
// reachable (any size ≥ 2+len(`{}`)), else the nearest larger one.
func NoopOfSize(size int) ([]byte, error) {
	for pad := 0; pad <= size; pad++ {
		cmd := fsm.Noop{}
		if pad > 0 {
			cmd.Pad = make([]byte, pad)
		}
		b, err := fsm.Encode(cmd)
		if err != nil {
			return nil, err
		}
		if len(b) >= size {
			return b, nil
		}
	}
	return nil, fmt.Errorf("no Noop of %d bytes", size)
}
