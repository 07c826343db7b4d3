// Package raftnode runs one Raft node around floe's state machine: the
// hashicorp/raft instance, its log and stable store (internal/raftlog), its
// snapshot store and its transport, all under one data directory.
//
// Writes go through Propose, which returns the state machine's Result (a
// domain outcome such as "already exists" is a value, not an error) or one of
// the errors below, each stating what the caller can know about whether the
// command was applied. Reads go through Read (linearizable, ReadIndex-style,
// leader only for now) or StaleRead (the local state machine as it is).
package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/raftlog"
	"github.com/floe-catalog/floe/internal/replica"
	"github.com/floe-catalog/floe/transport"
)

// Errors returned by Node. Each says what the caller can know about the
// command or read it was returned for. The first four are package replica's
// values, so that the layers above the node classify them without importing
// it.
var (
	// ErrNotLeader: this node is not the leader. For Propose, nothing was
	// appended to the log: the command will never be applied, and it is safe
	// to send it to another node. For Read, nothing was read.
	ErrNotLeader = replica.ErrNotLeader
	// ErrNoLeader: no leader is known to this node (an election is under way
	// or this node cannot reach a quorum).
	ErrNoLeader = replica.ErrNoLeader
	// ErrUnknownOutcome: the command was handed to Raft but the node cannot
	// tell whether it was committed: leadership was lost mid-commit, the
	// context ended while waiting, or the node shut down. It may or may not
	// be applied, now or later. Do not retry blindly and never report it as
	// a conflict: the commit state is unknown.
	//
	// An error wrapping ErrUnknownOutcome never also wraps ErrNotLeader,
	// ErrNoLeader or ErrShutdown, so callers may test for those in any order.
	ErrUnknownOutcome = replica.ErrUnknownOutcome
	// ErrShutdown: the node is shut down or shutting down, and for Propose
	// nothing was appended to the log. (A command appended before the
	// shutdown gets ErrUnknownOutcome instead.)
	ErrShutdown = replica.ErrShutdown
	// ErrNotAccepted: Raft did not take the command within the enqueue
	// timeout (the leader is overloaded); nothing was appended to the log.
	ErrNotAccepted = replica.ErrNotAccepted
	// ErrBehind: a follower's read gave up because its log stopped
	// advancing towards the read index (see readStallLimit).
	ErrBehind = replica.ErrBehind
	// ErrClockSkew: the leader refused a forwarded keyed command whose time
	// is more than maxProposerSkew from its clock; nothing was appended.
	ErrClockSkew = replica.ErrClockSkew
	// ErrCatchingUp is wrapped by Ready while a leader is known but the
	// local state machine has not yet applied what the leader had committed
	// when this node first heard from it.
	ErrCatchingUp = errors.New("raftnode: catching up")
	// ErrNotMember is wrapped, with ErrNoLeader, by Ready while the latest
	// membership this node knows does not hold it (it was removed).
	ErrNotMember = errors.New("raftnode: not a member of the cluster")
	// ErrRejoinRefused: this node has no Raft state, asked to join, and the
	// leader's configuration already holds its ID as a voter (it lost its
	// data directory, or another node uses its ID). It did not join and
	// takes no part in Raft; Failed is closed and Err wraps this error. See
	// Config.RejoinAsNonvoter.
	ErrRejoinRefused = errors.New("raftnode: rejoin refused")
)

// Defaults for the Config knobs left zero.
const (
	DefaultHeartbeatTimeout   = 300 * time.Millisecond
	DefaultElectionTimeout    = 300 * time.Millisecond
	DefaultLeaderLeaseTimeout = 300 * time.Millisecond
	DefaultCommitTimeout      = 5 * time.Millisecond
	DefaultSnapshotInterval   = 2 * time.Minute
	DefaultSnapshotThreshold  = 8192
	DefaultTrailingLogs       = 10240
	DefaultApplyTimeout       = 10 * time.Second

	snapshotsRetained = 2
	transportMaxPool  = 3
	transportTimeout  = 10 * time.Second
	monitorInterval   = 100 * time.Millisecond
)

// NewNetworkTransport is the Raft transport a node runs over stream:
// hashicorp/raft's NetworkTransport with a pool of 3 connections per peer,
// a 10 s I/O deadline, and no pipelined replication (MaxRPCsInFlight 1:
// each AppendEntries to a follower waits for its answer before the next).
//
// hashicorp/raft's pipeline (v1.7.2, as v1.8.0) can deadlock: when its decoder stops,
// on a follower's Success=false (a log mismatch after a restart; a failed
// read looks the same) or an answer from a newer term, a send under way,
// or one started after (a select may still pick another ready case), blocks
// on a hand-off to the response reader, which blocks on the decoder that
// has gone, and the pipeline is closed only once that send returns. The
// follower then gets heartbeats but no more entries, so it never calls an
// election that would heal it; and Raft's Shutdown waits for that
// goroutine forever. Synchronous replication has no such hand-off; each
// request still carries up to MaxAppendEntries (64) waiting entries, and
// hashicorp's own measurements show pipelining barely helps with batching.
//
// Tools that build raw Raft clusters to compare floe against use it too,
// so the comparison keeps to the same transport.
func NewNetworkTransport(stream raft.StreamLayer, logger hclog.Logger) *raft.NetworkTransport {
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:          stream,
		MaxPool:         transportMaxPool,
		Timeout:         transportTimeout,
		Logger:          logger,
		MaxRPCsInFlight: 1,
	})
}

// Config configures a Node. DataDir and ClusterAddr are required.
type Config struct {
	// NodeID is this node's Raft server ID. Default: the cluster address as
	// bound (so "127.0.0.1:0" yields the real port).
	NodeID string
	// DataDir holds the state machine (fsm.db), the Raft log and stable
	// store (raft.db) and the snapshots (snapshots/).
	DataDir string
	// ClusterAddr is the TCP address Raft binds and advertises, for example
	// 127.0.0.1:8182. It must name a concrete interface: other nodes dial it.
	ClusterAddr string
	// Bootstrap bootstraps a new cluster when this node has no Raft state
	// (no log, no term, no snapshot). A node with state ignores it, so it is
	// safe to leave on across restarts.
	Bootstrap bool
	// Peers is the initial configuration Bootstrap writes; it must include
	// this node. Empty means a cluster of this node alone. Starting every
	// node of a new cluster with Bootstrap and the same Peers is safe: the
	// configurations are identical and Raft elects one leader.
	Peers []raft.Server
	// Logger receives the node's logs, Raft's included. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the floe_raft_* metrics; nil disables them. They
	// are unregistered again by Shutdown.
	Registerer prometheus.Registerer

	// HeartbeatTimeout is how long a follower waits without hearing from
	// the leader before it starts an election (Raft checks at random
	// intervals between one and two of it, so a stopped leader is noticed
	// after 1-2×). Lower detects a dead leader sooner; too low for the
	// network or for GC and fsync pauses causes needless elections.
	// Default 300ms (a LAN or loopback: a failover then takes about half a
	// second, and a loaded three-node cluster on two shared cores saw no
	// needless election in 10 minutes; raise it on congested or
	// long-distance links: cmd/node's --raft-heartbeat-timeout).
	HeartbeatTimeout time.Duration
	// ElectionTimeout is how long a candidate waits for votes before it
	// starts another election. At least HeartbeatTimeout. Default 300ms.
	ElectionTimeout time.Duration
	// LeaderLeaseTimeout is how long a leader stays leader without hearing
	// from a quorum; it then steps down. At most HeartbeatTimeout.
	// Default 300ms.
	LeaderLeaseTimeout time.Duration
	// CommitTimeout bounds how long followers may go without an
	// AppendEntries carrying the leader's commit index when nothing new is
	// written. It is also how stale a follower's view can be right after a
	// write, which a linearizable read on that follower waits out. Default
	// 5ms: a few hundred small messages a second per follower, to keep
	// read-after-write on followers fast.
	CommitTimeout time.Duration
	// SnapshotInterval is how often Raft checks whether to snapshot;
	// SnapshotThreshold is how many new entries make it do so. Defaults 2m
	// and 8192.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	// TrailingLogs is how many entries to keep in the log after a snapshot,
	// so that a slightly lagging follower catches up from the log rather
	// than by installing a snapshot. Default 10240.
	TrailingLogs uint64
	// ApplyTimeout bounds how long Propose waits for Raft to accept a
	// command when the context has no deadline. Default 10s.
	ApplyTimeout time.Duration

	// AdvertiseAddr is the cluster address other nodes dial to reach this
	// one, when it differs from ClusterAddr (a proxy, NAT). Default:
	// ClusterAddr as bound.
	AdvertiseAddr string
	// TLS enables mutual TLS on the cluster port (Raft and RPC alike).
	TLS *transport.TLSFiles
	// HTTPAddr is the catalog address this node advertises to operators
	// (GET /management/v1/cluster).
	HTTPAddr string
	// Join lists cluster addresses of other nodes. A node without Raft
	// state asks them for the leader and asks the leader to add it as a
	// voter; with BootstrapExpect it may instead form a new cluster with
	// them. A node with state ignores both, except that it refuses to start
	// (ErrOtherCluster) when more than half of the Join nodes hold one
	// other cluster's identity at start and none holds its state's.
	//
	// Until the leader has answered (or the node has bootstrapped with
	// BootstrapExpect, or sees such a cluster still forming), a node
	// without state refuses all Raft traffic. If the leader's configuration
	// already holds this node's ID as a voter, the node is refused
	// (ErrRejoinRefused) unless RejoinAsNonvoter is set.
	Join []string
	// BootstrapExpect, when > 0, forms a new cluster once this node and
	// the Join nodes it can reach, none of which has state, number at least
	// BootstrapExpect.
	BootstrapExpect int
	// RejoinAsNonvoter lets a node without Raft state whose ID is a voter
	// in the cluster rejoin as a non-voter: the leader demotes the voter
	// entry, the node catches up, and an operator promotes it again
	// (AddVoter). Without it such a node is refused (ErrRejoinRefused).
	//
	// The reason is the vote record. Raft keeps the current term and the
	// vote cast in it in the stable store, in the data directory; a voter
	// must never vote twice in one term, or two candidates can each win a
	// majority of the same term (two leaders in a term). A node whose data
	// directory is new or was lost has no record of the votes its ID cast,
	// so it must not vote under that ID until it has caught up with the
	// cluster's current term as a non-voter and an operator has promoted it.
	// A node whose ID is not a member (a new node, or one whose old member
	// an operator removed first) is unaffected.
	RejoinAsNonvoter bool

	// Faults, when set, wraps the node's Raft connections and gates its
	// cluster RPC (see Faults). It is for tests that cut nodes off from each
	// other inside one process; production nodes leave it nil.
	Faults Faults
	// Clock is the node's wall clock, nil for time.Now. It only stamps the
	// keyed commands this node forwards (proposeRequest.SentMs) and judges
	// those forwarded to it; tests give nodes clocks that disagree.
	Clock func() time.Time
}

func (c *Config) setDefaults() {
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	def(&c.ElectionTimeout, DefaultElectionTimeout)
	def(&c.LeaderLeaseTimeout, DefaultLeaderLeaseTimeout)
	def(&c.CommitTimeout, DefaultCommitTimeout)
	def(&c.SnapshotInterval, DefaultSnapshotInterval)
	def(&c.ApplyTimeout, DefaultApplyTimeout)
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
}

// Node is one Raft node and its state machine. Its methods are safe for
// concurrent use.
type Node struct {
	cfg    Config
	id     raft.ServerID
	logger *slog.Logger

	fsm     *fsm.FSM
	logs    *raftlog.Store
	snaps   *raft.FileSnapshotStore
	mux     *transport.Mux
	rpc     *transport.Client
	hold    *holdLayer
	trans   *gatedTransport
	raft    *raft.Raft
	metrics *metrics
	// foreignLog throttles checkPeerCluster's log line per address.
	foreignLog throttle
	// clusterIDRecorded: raft.db holds the cluster identity (recordClusterID).
	clusterIDRecorded atomic.Bool
	// memberMu serialises membership changes on the leader, each from
	// reading the configuration it checks to the change's commit (see
	// configChange).
	memberMu sync.Mutex

	// ctx is canceled by Shutdown: it is the stop signal of the background
	// goroutines and ends every wait on a Raft future.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	observerCh chan raft.Observation
	observer   *raft.Observer

	// leader follows the leader this node knows, so that calls to one that
	// is no longer the leader are abandoned (see leaderWatch).
	leader         *leaderWatch
	leaderObserver *raft.Observer

	// barrierSem lets one goroutine at a time issue the per-term barrier;
	// barrierTerm is the last term in which one completed (see Read), and
	// barrierApplied the applied index when it did.
	barrierSem     chan struct{}
	barrierTerm    atomic.Uint64
	barrierApplied atomic.Uint64

	// leaderBatch and followerBatch coalesce concurrent read-index
	// requests (see indexBatcher).
	leaderBatch   *indexBatcher
	followerBatch *indexBatcher

	// Readiness (see Ready): openedAt is fixed at Open.
	openedAt time.Time
	readyMu  sync.Mutex
	caughtUp atomic.Bool
	// behindAt is the read index a follower's read gave up waiting for
	// (0: none): until the log reaches it, Ready reports catching up, so
	// a load balancer stops sending reads this node cannot answer.
	behindAt    atomic.Uint64
	readyTarget uint64
	readyWant   uint64 // the leader's commit index, once it answered
	// stamping: a stampClusterID runs; lastStamp is when it last asked
	// the members, stampWaitLogged when it last said why it waits.
	stamping        atomic.Bool
	lastStamp       time.Time
	stampWaitLogged string
	targetSet       bool
	// askingMembers: an askMembership runs; removedBy is what it last
	// learned (nil: nothing, or a leader was heard since).
	askingMembers atomic.Bool
	removedBy     atomic.Pointer[removal]

	// leaderTasks run while this node leads (see OnLeadership).
	leaderMu     sync.Mutex
	leaderTasks  []func(ctx context.Context)
	leaderCancel context.CancelFunc
	leaderCtx    context.Context
	// leaderSince is the log's last index when this node last became the
	// leader (LeadershipStartIndex).
	leaderSince atomic.Uint64
	leaderWG    sync.WaitGroup

	// failed is closed, after failErr is set, when the node gives up on
	// joining the cluster by itself (see Failed).
	failed   chan struct{}
	failOnce sync.Once
	failErr  error

	shutdownOnce sync.Once
	shutdownErr  error
	closed       atomic.Bool
	// clockOff says the last clock check (checkClock) found this leader's
	// clock far from the other voters'; clockDetail says what it saw.
	clockOff        atomic.Bool
	clockMu         sync.Mutex
	clockDetail     string
	clockTransferAt time.Time // only watchClock's goroutine uses it
	// checkedWall and checkedMono are this node's wall clock (without its
	// monotonic reading) and monotonic clock when the last check started
	// (clockMoved); under clockMu. clockCheckMu lets one check run at once.
	checkedWall, checkedMono time.Time
	clockCheckMu             sync.Mutex
	// proposing counts the proposals waiting for Raft's answer on this
	// node (its own and those followers forwarded): Shutdown lets them
	// finish first (see proposalDrain).
	proposing atomic.Int64
}

// proposalDrain bounds how long Shutdown waits for the proposals in flight
// on this node to be answered before it stops waiting for them. After a
// handover (HandOver) Raft answers them within a round or two to the new
// leader; cutting them off answered commands the cluster had applied as
// of unknown outcome (500), which clients do not resend.
var proposalDrain = 2 * time.Second

// Open opens the node's stores under cfg.DataDir, binds cfg.ClusterAddr and
// starts Raft. With cfg.Bootstrap and no existing Raft state it first writes
// the initial configuration. It does not wait for a leader: see WaitLeader
// and Ready.
func Open(cfg Config) (*Node, error) {
	cfg.setDefaults()
	if cfg.DataDir == "" {
		return nil, errors.New("raftnode: DataDir is required")
	}
	if cfg.ClusterAddr == "" {
		return nil, errors.New("raftnode: ClusterAddr is required")
	}
	if err := privateDataDir(cfg.DataDir, cfg.Logger); err != nil {
		return nil, fmt.Errorf("raftnode: create data dir: %w", err)
	}

	n := &Node{cfg: cfg, logger: cfg.Logger, metrics: newMetrics(), barrierSem: make(chan struct{}, 1), failed: make(chan struct{})}
	if err := n.metrics.register(cfg.Registerer); err != nil {
		return nil, err
	}
	// On failure, undo whatever was opened, newest first.
	var (
		undo []func()
		ok   bool
		err  error
	)
	defer func() {
		if !ok {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
			n.metrics.unregister(cfg.Registerer)
		}
	}()

	hlog := newHCLog(cfg.Logger.With("component", "raft"), "raft")

	n.fsm, err = fsm.Open(filepath.Join(cfg.DataDir, "fsm.db"), cfg.Logger.With("component", "fsm"))
	if err != nil {
		return nil, damaged(err)
	}
	undo = append(undo, func() { n.fsm.Close() })
	n.fsm.OnSnapshot(func(d time.Duration, size int64) {
		n.metrics.snapshotDuration.Observe(d.Seconds())
		n.metrics.snapshotBytes.Set(float64(size))
	})

	n.logs, err = raftlog.Open(filepath.Join(cfg.DataDir, "raft.db"), raftlog.Options{})
	if err != nil {
		return nil, damaged(err)
	}
	undo = append(undo, func() { n.logs.Close() })

	// The snapshot store creates <DataDir>/snapshots.
	removeUnfinishedSnapshots(filepath.Join(cfg.DataDir, "snapshots"), cfg.Logger)
	n.snaps, err = privateSnapshotStore(cfg.DataDir, hlog, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("raftnode: snapshot store: %w", err)
	}
	restored, err := n.restoreIfBehindSnapshot()
	if err != nil {
		return nil, err
	}
	var damagedSnapshot string
	if !restored {
		if damagedSnapshot, err = n.checkNewestSnapshot(); err != nil {
			return nil, err
		}
	}
	if err := n.checkStateMachineNotAhead(); err != nil {
		return nil, err
	}
	if err := n.checkClusterIDMatches(); err != nil {
		return nil, err
	}
	hasState, err := raft.HasExistingState(n.logs, n.logs, n.snaps)
	if err != nil {
		return nil, fmt.Errorf("raftnode: check existing state: %w", err)
	}

	// One port carries Raft and floe's RPC (forwarded writes, read
	// indexes, membership); see package transport.
	n.mux, err = transport.Listen(transport.Config{
		BindAddr: cfg.ClusterAddr, AdvertiseAddr: cfg.AdvertiseAddr, TLS: cfg.TLS, DialFromBindIP: true,
		Logger: cfg.Logger, Registerer: cfg.Registerer,
	})
	if err != nil {
		return nil, fmt.Errorf("raftnode: cluster transport on %s: %w", cfg.ClusterAddr, err)
	}
	undo = append(undo, func() { n.mux.Close() })
	n.rpc, err = transport.NewClient(transport.ClientConfig{
		TLS: cfg.TLS, Logger: cfg.Logger, Registerer: cfg.Registerer,
		// Every linearizable read on a follower is one call to the leader;
		// keep enough idle connections that concurrent readers do not
		// dial a new one per call.
		MaxIdlePerAddr: 64,
		LocalIP:        transport.BindIP(cfg.ClusterAddr),
	})
	if err != nil {
		return nil, fmt.Errorf("raftnode: cluster client: %w", err)
	}
	undo = append(undo, func() { n.rpc.Close() })
	n.hold = newHoldLayer(n.mux.RaftLayer())
	n.hold.checkPeer = n.checkPeerCluster
	var layer raft.StreamLayer = n.hold
	if cfg.Faults != nil {
		layer = cfg.Faults.WrapStreamLayer(layer)
	}
	if !hasState && len(cfg.Join) > 0 && !cfg.Bootstrap {
		// A node without state that joins may be a voter that lost its
		// data directory, and with it its vote record: the leader would
		// replicate to it at its old address and candidates would ask for
		// its vote, and it would answer as a voter with no memory of the
		// votes it cast. Its Raft port stays shut until formCluster knows
		// whether its ID is a member (see Config.RejoinAsNonvoter).
		n.hold.held.Store(true)
	}
	if !hasState && cfg.Bootstrap && len(cfg.Peers) <= 1 && cfg.BootstrapExpect <= 1 {
		// A cluster of one about to form may be a member of another that
		// lost its data directory. Until it has stamped its own identity,
		// nothing tells that cluster's leader apart from it
		// (checkPeerCluster), and within its first election timeout that
		// leader's heartbeat, at a later term, would make it a follower
		// over a log whose first entry (index 1, term 1) matches any
		// cluster's. It needs no inbound Raft connection to lead itself.
		n.hold.inboundHeld.Store(true)
	}
	n.trans = newGatedTransport(NewNetworkTransport(layer, hlog))
	undo = append(undo, func() { n.trans.Close() })
	if cfg.NodeID == "" {
		cfg.NodeID = string(n.trans.LocalAddr())
		n.cfg.NodeID = cfg.NodeID
	}
	n.id = raft.ServerID(cfg.NodeID)
	n.logger = cfg.Logger.With("node_id", cfg.NodeID)
	seeded, err := n.checkSeed()
	if err != nil {
		return nil, err
	}
	// After the seed record: a seeded directory is checked against it.
	if err := n.checkNodeID(hasState, seeded); err != nil {
		return nil, err
	}
	if err := n.checkJoinCluster(hasState); err != nil {
		return nil, err
	}

	rc := raft.DefaultConfig()
	rc.LocalID = n.id
	rc.Logger = hlog
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	// The state machine is durable on its own: every ApplyBatch commits its
	// entries together with the applied index in one fsynced bbolt
	// transaction, and after a restart it skips every entry at or below that
	// index. Restoring the newest snapshot on start would only replace the
	// fsm.db we already have with an older copy (and then replay the log on
	// top of it). With NoSnapshotRestoreOnStart Raft still reads the
	// snapshot's metadata (configuration, index, term) and replays the log
	// from the snapshot's index on; the entries the state machine already
	// has are skipped by it, so none is applied twice. The one case where
	// fsm.db is older than the snapshot (the file was lost or replaced) is
	// handled before Raft starts by restoreIfBehindSnapshot.
	rc.NoSnapshotRestoreOnStart = true
	// A leader that removes itself steps down and stays up, as a removed
	// follower does. With raft's default it would shut Raft down itself,
	// and Shutdown could then no longer wait for Raft's goroutines before
	// closing the stores they use.
	rc.ShutdownOnRemove = false
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("raftnode: %w", err)
	}

	if cfg.Bootstrap {
		if err := n.bootstrap(rc); err != nil {
			return nil, err
		}
	}

	snaps := cleaningSnapshotStore{FileSnapshotStore: n.snaps, dir: filepath.Join(cfg.DataDir, "snapshots"), logger: cfg.Logger}
	n.raft, err = newRaft(rc, n.fsm, n.logs, snaps, n.trans)
	if err != nil {
		return nil, fmt.Errorf("raftnode: start raft: %w", err)
	}
	wanted := n.wantsAppend // stored once n.raft is set: the transport reads it
	n.trans.stillWanted.Store(&wanted)
	n.openedAt = time.Now()
	n.ctx, n.cancel = context.WithCancel(context.Background())
	// Shutdown cancels n.ctx, then closes both batchers and waits for their
	// goroutines.
	n.leaderBatch = &indexBatcher{timeout: cfg.ApplyTimeout, stop: n.ctx, role: roleLeader, log: n.logger,
		fetch:  func(ctx context.Context, _ func() bool) (uint64, error) { return n.leaderReadIndex(ctx) },
		served: observeReads(n.metrics.readIndexBatch.WithLabelValues(roleLeader))}
	n.followerBatch = &indexBatcher{timeout: cfg.ApplyTimeout, stop: n.ctx, role: roleFollower, log: n.logger,
		fetch:  n.followerReadIndex,
		served: observeReads(n.metrics.readIndexBatch.WithLabelValues(roleFollower))}
	n.leader = newLeaderWatch(n.electionBound())
	n.leaderTasks = append(n.leaderTasks, n.watchClock)

	n.observerCh = make(chan raft.Observation, 64)
	n.observer = raft.NewObserver(n.observerCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.RaftState, raft.LeaderObservation:
			return true
		}
		return false
	})
	n.raft.RegisterObserver(n.observer)
	leaderCh := make(chan raft.Observation, 16)
	n.leaderObserver = raft.NewObserver(leaderCh, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.raft.RegisterObserver(n.leaderObserver)
	n.mux.Serve(n.handleRPC)
	n.wg.Add(3)
	go n.observe()
	go n.monitor()
	go n.watchLeader(leaderCh)
	n.wg.Add(1)
	go n.formCluster()
	if damagedSnapshot != "" {
		n.wg.Add(1)
		go n.replaceDamagedSnapshot(damagedSnapshot)
	}

	n.logger.Info("raft node started", "cluster_addr", string(n.trans.LocalAddr()), "data_dir", cfg.DataDir,
		"applied_index", n.fsm.AppliedIndex(), "last_index", n.raft.LastIndex())
	if seeded {
		n.clearSeed()
	}
	ok = true
	return n, nil
}

// bootstrap writes the initial configuration when there is no Raft state.
func (n *Node) bootstrap(rc *raft.Config) error {
	has, err := raft.HasExistingState(n.logs, n.logs, n.snaps)
	if err != nil {
		return fmt.Errorf("raftnode: check existing state: %w", err)
	}
	if has {
		n.logger.Info("raft state exists; not bootstrapping")
		return nil
	}
	servers := n.cfg.Peers
	if len(servers) == 0 {
		servers = []raft.Server{{ID: n.id, Address: n.trans.LocalAddr(), Suffrage: raft.Voter}}
	}
	self := false
	for _, s := range servers {
		if s.ID == n.id {
			self = true
		}
	}
	if !self {
		return fmt.Errorf("raftnode: bootstrap peers do not include this node (%s)", n.id)
	}
	conf := raft.Configuration{Servers: servers}
	if err := raft.BootstrapCluster(rc, n.logs, n.logs, n.snaps, n.trans, conf); err != nil {
		return fmt.Errorf("raftnode: bootstrap: %w", err)
	}
	n.logger.Info("bootstrapped new cluster", "servers", len(servers))
	return nil
}

// restoreIfBehindSnapshot restores the state machine from the newest
// snapshot when fsm.db holds less than that snapshot. Raft runs with
// NoSnapshotRestoreOnStart and replays the log only from the snapshot's
// index on, so a state machine that is behind the snapshot (fsm.db lost,
// replaced by an older copy) would otherwise silently miss the entries in
// between. The state machine's applied index counts only entries it is
// given: a snapshot index above it is normal when the entries in between are
// no-ops or barriers, so the log decides.
func (n *Node) restoreIfBehindSnapshot() (restored bool, err error) {
	metas, err := n.snaps.List()
	if err != nil {
		return false, fmt.Errorf("raftnode: list snapshots: %w", err)
	}
	if len(metas) == 0 {
		return false, nil
	}
	meta := metas[0]
	applied := n.fsm.AppliedIndex()
	if applied >= meta.Index {
		return false, nil
	}
	// Entries above the applied index that are still in the log tell: if
	// they are all no-ops or barriers, the state machine has everything. An
	// entry compacted away is known only to the snapshot.
	target, compacted, err := n.lastVisible(meta.Index)
	if err != nil {
		return false, err
	}
	if !compacted && target <= applied {
		return false, nil
	}
	n.logger.Warn("state machine is behind the newest snapshot; restoring it from the snapshot",
		"applied_index", applied, "snapshot_index", meta.Index, "snapshot_id", meta.ID)
	_, rc, err := n.snaps.Open(meta.ID)
	if err != nil {
		// The state it holds is nowhere else on this node.
		return false, snapshotDamaged(meta.ID, err)
	}
	if err := n.fsm.Restore(rc); err != nil { // Restore closes rc
		return false, fmt.Errorf("raftnode: restore snapshot %s: %w", meta.ID, err)
	}
	return true, nil
}

// checkNewestSnapshot reads the newest snapshot whole, as the snapshot
// store's Open does to check its CRC, and returns its id when it is
// damaged. Raft sends only the newest snapshot to a follower that needs
// one and never falls back to an older one, so a damaged one (found only
// when a snapshot had to be sent) left a follower or a joining node
// catching up for ever while this node answered ready. fsm.db holds what
// it holds (restoreIfBehindSnapshot did not need it), so the node starts
// and replaces it (replaceDamagedSnapshot). It costs one read of the
// snapshot per start.
func (n *Node) checkNewestSnapshot() (damaged string, err error) {
	metas, err := n.snaps.List()
	if err != nil {
		return "", fmt.Errorf("raftnode: list snapshots: %w", err)
	}
	if len(metas) == 0 {
		return "", nil
	}
	_, rc, err := n.snaps.Open(metas[0].ID)
	if err != nil {
		if derr := snapshotDamaged(metas[0].ID, err); !errors.Is(derr, ErrDamaged) {
			return "", derr
		}
		n.logger.Error("the newest snapshot is damaged; fsm.db holds its state, so the node starts and replaces it with a new snapshot as soon as one can be taken; until then a follower that needs a snapshot from this node waits",
			"snapshot_id", metas[0].ID, "error", err)
		return metas[0].ID, nil
	}
	return "", rc.Close()
}

// replaceDamagedSnapshot takes a snapshot, until one is taken or the node
// shuts down, so that the damaged snapshot id is no longer the newest.
// Raft refuses one while nothing was applied since the newest (the next
// leader's no-op entry is enough), so it tries again every second.
func (n *Node) replaceDamagedSnapshot(id string) {
	defer n.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		err := n.raft.Snapshot().Error()
		if err == nil {
			n.logger.Info("the damaged snapshot is replaced by a new one", "damaged_snapshot_id", id)
			return
		}
		if !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			n.logger.Warn("could not yet replace the damaged snapshot", "damaged_snapshot_id", id, "error", err)
		}
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// snapshotDamaged is the error of a snapshot the store cannot open: a
// read error as it is, anything else (a CRC mismatch, metadata that does
// not parse) ErrDamaged with the way out.
func snapshotDamaged(id string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("raftnode: open snapshot %s: %w", id, err)
	}
	return fmt.Errorf("%w: snapshot %s (snapshots/%s/state.bin) cannot be read: %v; %s", ErrDamaged, id, id, err, damagedHint)
}

// fsmTarget returns the applied index the state machine must reach to
// reflect every entry up to index.
//
// It is not index itself: Raft hands the state machine only command and
// configuration entries. No-ops (one starts every leader's term) and
// barriers never reach it, so when they are the newest entries the state
// machine's applied index stays below the commit index for good, and a wait
// for the commit index would never end. The state after a no-op is the state
// after the last entry before it, so the target is the newest entry at or
// below index that the state machine sees.
//
// While Raft runs, an entry compacted out of the log is covered by a
// snapshot the running state machine produced, so it is already applied.
// (Not so before Raft starts, when fsm.db may have been lost: see
// restoreIfBehindSnapshot.)
func (n *Node) fsmTarget(index uint64) (uint64, error) {
	target, _, err := n.lastVisible(index)
	return target, err
}

// lastVisible scans the log down from index to the state machine's applied
// index and returns the first entry the state machine sees (a command or a
// configuration), else the applied index. compacted reports that the scan
// reached an entry no longer in the log before finding one.
func (n *Node) lastVisible(index uint64) (target uint64, compacted bool, err error) {
	applied := n.fsm.AppliedIndex()
	var l raft.Log
	for i := index; i > applied; i-- {
		if err := n.logs.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				return applied, true, nil
			}
			if n.closed.Load() {
				// Shutdown closed the log store under the read.
				return 0, false, fmt.Errorf("%w: read log entry %d: %w", ErrShutdown, i, err)
			}
			return 0, false, fmt.Errorf("raftnode: read log entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return i, false, nil
		}
	}
	return applied, false, nil
}

// Failed returns a channel that is closed when the node has given up on
// joining the cluster by itself and needs an operator: so far only when its
// rejoin was refused (ErrRejoinRefused). The node then stays out of Raft
// and serves nothing useful; the caller reports Err and shuts it down.
func (n *Node) Failed() <-chan struct{} { return n.failed }

// Err returns why Failed was closed, nil while it is open.
func (n *Node) Err() error {
	select {
	case <-n.failed:
		return n.failErr // written before failed was closed
	default:
		return nil
	}
}

// fail records err and closes Failed; only the first call counts.
func (n *Node) fail(err error) {
	n.failOnce.Do(func() {
		n.failErr = err
		close(n.failed)
	})
}

// FSM returns the state machine.
func (n *Node) FSM() *fsm.FSM { return n.fsm }

// ID returns this node's Raft server ID.
func (n *Node) ID() string { return string(n.id) }

// Addr returns the cluster address this node advertises.
func (n *Node) Addr() string { return string(n.trans.LocalAddr()) }

// IsLeader reports whether this node currently believes it is the leader.
// Leadership can be lost at any moment after this returns.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the cluster address and ID of the leader this node knows
// of, or empty strings when none is known.
func (n *Node) Leader() (addr, id string) {
	a, i := n.raft.LeaderWithID()
	return string(a), string(i)
}

// Propose replicates cmd and returns what the state machine's Apply
// returned for it. On a follower the encoded command is forwarded to the
// leader; the errors below then describe the leader's answer, and a lost
// answer is ErrUnknownOutcome. A domain outcome (already exists, no such table, commit
// failed) is a Result whose Err is non-nil, with a nil error: the command was
// committed and applied, and the decision is final.
//
// A non-nil error means no Result is known:
//
//   - ErrNotLeader: nothing was appended; safe to send the command to the
//     leader.
//   - ErrShutdown: the node was shut down before the command was appended;
//     it will not be applied.
//   - ErrUnknownOutcome (possibly also wrapping raft's error or the
//     context's error): the command was handed to Raft and may or may not
//     be applied.
//   - ErrNotAccepted (with context.DeadlineExceeded and, on the leader,
//     raft.ErrEnqueueTimeout): Raft never took the command within its
//     enqueue timeout; it will not be applied.
//   - the context's error alone: ctx had ended before anything was sent;
//     nothing was appended.
//   - an encoding error: cmd is not a registered command.
//
// The time Raft may take to accept the command is bounded by ctx's deadline,
// else by Config.ApplyTimeout. The wait for the result is bounded by ctx.
func (n *Node) Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	if n.closed.Load() {
		return fsm.Result{}, ErrShutdown
	}
	if err := ctx.Err(); err != nil {
		return fsm.Result{}, fmt.Errorf("raftnode: propose: %w", err)
	}
	data, err := fsm.Encode(cmd)
	if err != nil {
		return fsm.Result{}, fmt.Errorf("raftnode: %w", err)
	}
	if n.raft.State() != raft.Leader {
		// A follower forwards the prepared command, not the request: one
		// hop to the leader, with the caller's deadline.
		return n.forward(ctx, data)
	}
	res, err := n.proposeLocal(ctx, data)
	if errors.Is(err, ErrNotLeader) {
		// Refused before it had an index (this leader is handing over or
		// stepping down): nothing was appended, so it goes to the next
		// leader as a follower's command would, not back to the client.
		return n.forward(ctx, data)
	}
	return res, err
}

// ProposeAfterLeaving is Propose for a node that may have just removed
// itself from the cluster (a membership change it made as leader, whose
// outcome must still be recorded): such a node knows no leader and never
// will, though the members it left have one. When this node's latest
// membership does not list it, cmd is sent to the leader the remaining
// members name, one hop, as a follower forwards; they are asked again
// every half heartbeat timeout until one names a leader other than this
// node, or ctx ends (then ErrNoLeader). It does not first wait for a
// leader of its own as Propose does (electionBound, four heartbeat
// timeouts, which with long timeouts outlasts the caller's deadline).
// Otherwise, and when Propose finds no leader before the node leaves, it
// is Propose. The error contract is Propose's.
func (n *Node) ProposeAfterLeaving(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	if n.notMember() == nil {
		res, err := n.Propose(ctx, cmd)
		if !errors.Is(err, ErrNoLeader) || ctx.Err() != nil || n.notMember() == nil {
			return res, err
		}
	}
	data, err := fsm.Encode(cmd)
	if err != nil {
		return fsm.Result{}, fmt.Errorf("raftnode: %w", err)
	}
	for {
		f := n.raft.GetConfiguration()
		if f.Error() == nil {
			servers := slices.DeleteFunc(slices.Clone(f.Configuration().Servers), func(s raft.Server) bool { return s.ID == n.id })
			infos, errs := n.askAll(ctx, servers, n.cfg.HeartbeatTimeout)
			tried := map[string]bool{}
			for i, info := range infos {
				if errs[i] != nil || info.LeaderAddr == "" || info.LeaderID == "" || info.LeaderID == string(n.id) || tried[info.LeaderAddr] {
					continue
				}
				tried[info.LeaderAddr] = true
				res, ferr := n.forwardTo(ctx, ctx, info.LeaderAddr, data)
				if ferr == nil {
					return res, nil
				}
				if !errors.Is(ferr, ErrNotLeader) && !errors.Is(ferr, ErrNoLeader) {
					// It may have been appended: not sent again.
					return fsm.Result{}, ferr
				}
			}
		}
		select {
		case <-ctx.Done():
			return fsm.Result{}, fmt.Errorf("%w: no member this node left names a leader: %w", ErrNoLeader, ctx.Err())
		case <-n.ctx.Done():
			return fsm.Result{}, ErrShutdown
		case <-time.After(n.cfg.HeartbeatTimeout / 2):
		}
	}
}

// proposeLocal appends an encoded command on this node, which believes it
// leads. See Propose for the error contract.
func (n *Node) proposeLocal(ctx context.Context, data []byte) (fsm.Result, error) {
	n.proposing.Add(1)
	defer n.proposing.Add(-1)
	if n.closed.Load() {
		return fsm.Result{}, ErrShutdown
	}
	if err := n.clockOffErr(ctx, data); err != nil {
		return fsm.Result{}, err
	}
	timeout := n.enqueueTimeout(ctx)
	start := time.Now()
	f := n.raft.Apply(data, timeout)
	err := n.await(ctx, f)
	n.metrics.applyDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		var index uint64
		if !errors.Is(err, errAwaitCanceled) {
			// Raft responded; the future is no longer written to.
			index = f.Index()
		}
		return fsm.Result{}, proposeError(err, index, timeout)
	}
	switch res := f.Response().(type) {
	case fsm.Result:
		return res, nil
	default:
		// The state machine returns a Result for every command it applies;
		// nil means it skipped the entry as already applied, which a new
		// entry never is.
		return fsm.Result{}, fmt.Errorf("%w: state machine returned %T for entry %d", ErrUnknownOutcome, res, f.Index())
	}
}

// proposeError maps the error of waiting on an Apply future to Propose's
// contract. index is the log index Raft assigned to the entry, 0 if it never
// assigned one (and then the entry was never written to the log).
func proposeError(err error, index uint64, timeout time.Duration) error {
	switch {
	case errors.Is(err, errAwaitCanceled):
		// We stopped waiting (ctx ended or the node is shutting down); Raft
		// still has the command and may commit it.
		if errors.Is(err, ErrShutdown) {
			return fmt.Errorf("%w: node shut down while waiting for the result", ErrUnknownOutcome)
		}
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Answered by a follower or candidate loop, or by a leader that is
		// stepping down or handing leadership over, before the entry was
		// given an index: it is not in any log.
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		// Returned by Apply itself when its timer fired before the main loop
		// took the command: nothing was enqueued.
		return fmt.Errorf("%w: raft did not take it within %s: %w: %w", ErrNotAccepted, timeout, context.DeadlineExceeded, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		if index == 0 {
			// Apply saw the shutdown before handing the command over.
			return fmt.Errorf("%w: %w", ErrShutdown, err)
		}
		// Committed entries waiting for the state machine when Raft shut
		// down are answered this way: appended, maybe committed.
		return fmt.Errorf("%w: node shut down after appending the command: %w", ErrUnknownOutcome, err)
	default:
		// raft.ErrLeadershipLost ("there is no way to guarantee whether the
		// write succeeded or failed"), a log store failure on the leader,
		// raft.ErrAbortedByRestore and anything new: the entry may have
		// reached other logs, so the outcome is unknown.
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	}
}

// enqueueTimeout is the timeout passed to Raft's Apply and Barrier: the time
// left before ctx's deadline, else Config.ApplyTimeout.
func (n *Node) enqueueTimeout(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d > 0 {
			return d
		}
		return time.Nanosecond
	}
	return n.cfg.ApplyTimeout
}

// errAwaitCanceled is wrapped by await when it stops waiting before Raft
// answered.
var errAwaitCanceled = errors.New("stopped waiting for raft")

// await waits for f, for ctx or for Shutdown, whichever comes first. Raft
// answers every future eventually except committed entries still queued for
// the state machine when it shuts down, so waiting happens in a goroutine
// that ends when Raft answers (or, for those, stays blocked with the
// discarded Raft instance); the caller never blocks beyond ctx or Shutdown.
func (n *Node) await(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errAwaitCanceled, ctx.Err())
	case <-n.ctx.Done():
		return fmt.Errorf("%w: %w", errAwaitCanceled, ErrShutdown)
	}
}

// StaleRead runs fn on the local state machine as it is, without any check:
// on a follower or a deposed leader it may miss writes that were already
// acknowledged. Use it only when the client asked for it.
func (n *Node) StaleRead(fn func(*fsm.Reader) error) error {
	if n.closed.Load() {
		return ErrShutdown
	}
	return n.view(fn)
}

func (n *Node) view(fn func(*fsm.Reader) error) error {
	err := n.fsm.View(fn)
	if errors.Is(err, fsm.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrShutdown, err)
	}
	return err
}

// WaitLeader blocks until a leader (this node or another) is known, ctx
// ends (ErrNoLeader wrapping ctx's error) or the node shuts down.
func (n *Node) WaitLeader(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if n.closed.Load() {
			return ErrShutdown
		}
		if _, id := n.raft.LeaderWithID(); id != "" {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrNoLeader, ctx.Err())
		case <-n.ctx.Done():
			return ErrShutdown
		}
	}
}

// Ready returns nil when this node can usefully serve: a leader is known and
// the local state machine has caught up. Caught up means, on the leader,
// that it has applied every entry of earlier terms (the barrier it issues on
// taking office has completed) and, on a follower, that its commit index
// reaches, and its state machine has applied, the commit index the leader
// answered when this node asked it after first hearing from it since
// starting. Catching
// up is checked once per Open; after that Ready only requires a known
// leader. Otherwise it returns ErrShutdown, ErrNoLeader
// or an error wrapping ErrCatchingUp, each saying why.
func (n *Node) Ready() error {
	if n.closed.Load() {
		return ErrShutdown
	}
	if _, id := n.raft.LeaderWithID(); id == "" {
		if err := n.notMember(); err != nil {
			return err
		}
		return ErrNoLeader
	}
	if err := n.updateReadiness(); err != nil {
		return err
	}
	if at := n.behindAt.Load(); at != 0 {
		if applied := n.raft.AppliedIndex(); applied < at {
			return fmt.Errorf("%w: this node's log stopped advancing at %d, below the read index %d a read waited for", ErrCatchingUp, applied, at)
		}
		n.behindAt.CompareAndSwap(at, 0)
	}
	return nil
}

// notMemberWarnEvery spaces the monitor's warnings that this node is not
// in the membership it last knew; notMemberSettle is how long that must
// last, without a leader, before the first.
const (
	notMemberWarnEvery = 30 * time.Second
	notMemberSettle    = 5 * time.Second
)

// wantsAppend reports whether an append to id at target is still this
// node's to send: it leads, and its latest membership has id at that
// address (the transport's wait for a peer that is down ends otherwise).
func (n *Node) wantsAppend(id raft.ServerID, target raft.ServerAddress) bool {
	if n.raft.State() != raft.Leader {
		return false
	}
	f := n.raft.GetConfiguration()
	return f.Error() == nil && slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool {
		return s.ID == id && s.Address == target
	})
}

// notMember returns an error wrapping ErrNoLeader and ErrNotMember when the
// latest membership this node knows (from its own log or snapshot) does not
// hold it: it was removed, and restarting it, with --join or without,
// does not bring it back. Nil otherwise, also while it knows no membership
// (a node still joining).
func (n *Node) notMember() error {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	servers := f.Configuration().Servers
	if len(servers) == 0 {
		return nil
	}
	if slices.ContainsFunc(servers, func(s raft.Server) bool { return s.ID == n.id }) {
		r := n.removedBy.Load()
		if r == nil {
			return nil
		}
		return fmt.Errorf("%w: %w: node %s was removed from the cluster (the membership of the leader, %s, lists %d nodes, not this one; "+
			"this node never received the change); to bring it back, run `floe members add-voter %s %s` against a member, or empty its data directory and start it with --join",
			ErrNoLeader, ErrNotMember, n.id, r.leader, r.members, n.id, n.Addr())
	}
	return fmt.Errorf("%w: %w: node %s was removed from the cluster (the membership it last knew lists %d other nodes); "+
		"to bring it back, run `floe members add-voter %s %s` against a member, or empty its data directory and start it with --join",
		ErrNoLeader, ErrNotMember, n.id, len(servers), n.id, n.Addr())
}

// removal is what askMembership learned: the leader whose membership does
// not list this node, and how many it lists.
type removal struct {
	leader  string
	members int
}

// membershipAskAfter is how long a node that still finds itself in its
// latest membership must have known no leader before it asks the others
// whether it was removed; membershipAskEvery spaces the asking.
const (
	membershipAskAfter = 5 * time.Second
	membershipAskEvery = 5 * time.Second
)

// askMembership asks the other servers of this node's latest membership
// and its Join addresses, in parallel and each within a heartbeat timeout,
// what they know, then the leader they name if it is none of them. A leader
// that has applied its term's entries, holds this cluster's state and lists
// a membership without this node means it was removed without learning so:
// Raft stops replicating to a server once the leader appends the
// configuration that removes it, so a node that was down then, or whose
// last best-effort replication lost a race, never receives that entry,
// and its own log still lists it. The finding stands (see notMember) until
// a leader is heard again. Servers that do not answer, or answer from an
// older binary, teach nothing.
func (n *Node) askMembership() {
	defer n.askingMembers.Store(false)
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	servers := slices.DeleteFunc(slices.Clone(f.Configuration().Servers), func(s raft.Server) bool { return s.ID == n.id })
	// The Join nodes too, and the leader a member names: the leader may
	// be a node added since this one last heard (its replacement, say).
	for _, addr := range n.cfg.Join {
		servers = append(servers, raft.Server{Address: raft.ServerAddress(addr)})
	}
	infos, errs := n.askAll(n.ctx, servers, n.cfg.HeartbeatTimeout)
	if n.learnRemoval(servers, infos, errs) {
		return
	}
	var named []raft.Server
	for i, info := range infos {
		if errs[i] == nil && info.LeaderID != "" && info.LeaderAddr != "" && info.LeaderID != string(n.id) &&
			!slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.Address) == info.LeaderAddr }) &&
			!slices.ContainsFunc(named, func(s raft.Server) bool { return string(s.Address) == info.LeaderAddr }) {
			named = append(named, raft.Server{ID: raft.ServerID(info.LeaderID), Address: raft.ServerAddress(info.LeaderAddr)})
		}
	}
	if len(named) > 0 {
		infos, errs = n.askAll(n.ctx, named, n.cfg.HeartbeatTimeout)
		n.learnRemoval(named, infos, errs)
	}
}

// learnRemoval records what the first of the answers from a ready leader
// of this cluster says (see askMembership) and reports whether there was
// one. A server with an ID must answer as that ID; a Join address, asked
// without one, may be any node.
func (n *Node) learnRemoval(servers []raft.Server, infos []nodeInfo, errs []error) bool {
	own := n.ClusterID()
	for i, info := range infos {
		// A Join address, asked without an ID, counts only when both hold
		// the same cluster's identity: it may name another cluster.
		if servers[i].ID == "" && (own == "" || info.ClusterID != own) {
			continue
		}
		if errs[i] != nil || (servers[i].ID != "" && info.ID != string(servers[i].ID)) || info.ID == string(n.id) ||
			info.State != stateLabel(raft.Leader) || info.LeaderReady == nil || !*info.LeaderReady ||
			len(info.Members) == 0 || (own != "" && info.ClusterID != own) {
			continue
		}
		if !slices.Contains(info.Members, string(n.id)) {
			if n.removedBy.Swap(&removal{leader: info.ID, members: len(info.Members)}) == nil {
				n.logger.Info("the leader's membership does not list this node", "leader_id", info.ID, "members", info.Members)
			}
		}
		return true
	}
	return false
}

// updateReadiness is called by Ready and by the monitor loop.
func (n *Node) updateReadiness() error {
	if n.caughtUp.Load() {
		return nil
	}
	n.readyMu.Lock()
	defer n.readyMu.Unlock()
	if n.caughtUp.Load() {
		return nil
	}
	if _, id := n.raft.LeaderWithID(); id == "" {
		return ErrNoLeader
	}
	if n.raft.State() == raft.Leader {
		term := n.raft.CurrentTerm()
		if n.barrierTerm.Load() != term {
			return fmt.Errorf("%w: leader has not yet applied the entries of earlier terms (term %d)", ErrCatchingUp, term)
		}
		n.latchReady()
		return nil
	}
	// A follower's own commit index says little right after it starts: it
	// learns the leader's from AppendEntries, not from heartbeats, and
	// only up to the entries it has received, while the leader may be
	// backing off from a peer that was down. So it asks the leader for
	// its commit index once, and waits until its own reaches that index
	// and its state machine has applied it.
	if !n.raft.LastContact().After(n.openedAt) {
		return fmt.Errorf("%w: no contact from the leader yet", ErrCatchingUp)
	}
	if !n.targetSet {
		if n.readyWant == 0 {
			want, err := n.leaderCommitIndex()
			if err != nil {
				return fmt.Errorf("%w: cannot ask the leader for its commit index: %w", ErrCatchingUp, err)
			}
			n.readyWant = max(want, 1)
		}
		// This node's commit index, not its last index: entries beyond
		// it may be stale ones the leader will overwrite.
		if ci := n.raft.CommitIndex(); ci < n.readyWant {
			return fmt.Errorf("%w: commit index %d of the leader's %d", ErrCatchingUp, ci, n.readyWant)
		}
		target, err := n.fsmTarget(n.readyWant)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCatchingUp, err)
		}
		n.readyTarget, n.targetSet = target, true
	}
	if applied := n.fsm.AppliedIndex(); applied < n.readyTarget {
		return fmt.Errorf("%w: applied index %d of %d", ErrCatchingUp, applied, n.readyTarget)
	}
	n.latchReady()
	return nil
}

// leaderCommitIndex asks the leader for its commit index, within a
// heartbeat timeout.
func (n *Node) leaderCommitIndex() (uint64, error) {
	addr, _ := n.raft.LeaderWithID()
	if addr == "" {
		return 0, ErrNoLeader
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.HeartbeatTimeout)
	defer cancel()
	var info nodeInfo
	if err := n.call(ctx, string(addr), rpcInfo, struct{}{}, &info); err != nil {
		return 0, err
	}
	// A leader that has not applied its term's barrier may not have
	// learned the cluster's commit index yet (after a restart Raft's
	// starts at 0); nor has a node that is no longer the leader.
	if info.LeaderReady != nil && !*info.LeaderReady {
		return 0, errors.New("the leader has not yet applied the entries of earlier terms")
	}
	return info.CommitIndex, nil
}

func (n *Node) latchReady() {
	n.caughtUp.Store(true)
	n.logger.Info("raft node ready", "state", stateLabel(n.raft.State()), "applied_index", n.fsm.AppliedIndex(),
		"commit_index", n.raft.CommitIndex(), "since_open", time.Since(n.openedAt).Round(time.Millisecond))
}

// OnLeadership registers task to run, in its own goroutine, every time this
// node becomes leader; its context is canceled when leadership is lost or the
// node shuts down, and Shutdown waits for it to return. This is how
// leader-only subsystems (schedulers, pruners) are switched on and off.
// Register tasks before the node can become leader (right after Open on a
// single-node cluster may be too late: OnLeadership then starts the task at
// once if this node already leads).
func (n *Node) OnLeadership(task func(ctx context.Context)) {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	n.leaderTasks = append(n.leaderTasks, task)
	if n.leaderCancel != nil {
		n.startTaskLocked(task)
	}
}

// LeadershipStartIndex is the last index of this node's log when it last
// became the leader, read as its leader tasks started (0 if it never led).
// While it still leads, every entry above it was appended during this
// leadership: proposed after the election. A leader task uses it to tell
// fresh entries from those an earlier leader left.
func (n *Node) LeadershipStartIndex() uint64 { return n.leaderSince.Load() }

func (n *Node) leadershipChanged(leader bool) {
	n.leaderMu.Lock()
	if leader && n.leaderCancel == nil && !n.closed.Load() {
		n.leaderSince.Store(n.raft.LastIndex())
		var ctx context.Context
		ctx, n.leaderCancel = context.WithCancel(n.ctx)
		n.leaderCtx = ctx
		for _, task := range n.leaderTasks {
			n.startTaskLocked(task)
		}
		tasks := len(n.leaderTasks)
		n.leaderMu.Unlock()
		n.logger.Info("leader tasks started", "tasks", tasks)
		return
	}
	if !leader && n.leaderCancel != nil {
		n.leaderCancel()
		n.leaderCancel = nil
		n.leaderMu.Unlock()
		n.leaderWG.Wait()
		n.logger.Info("leader tasks stopped")
		return
	}
	n.leaderMu.Unlock()
}

func (n *Node) startTaskLocked(task func(ctx context.Context)) {
	ctx := n.leaderCtx
	n.leaderWG.Add(1)
	go func() {
		defer n.leaderWG.Done()
		task(ctx)
	}()
}

// observe logs leadership and state changes and counts leader changes.
func (n *Node) observe() {
	defer n.wg.Done()
	var leader raft.ServerID
	for {
		select {
		case <-n.ctx.Done():
			return
		case o := <-n.observerCh:
			switch d := o.Data.(type) {
			case raft.RaftState:
				n.metrics.setState(d)
				n.logger.Info("raft state changed", "state", stateLabel(d))
				n.leadershipChanged(d == raft.Leader)
			case raft.LeaderObservation:
				if d.LeaderID == leader {
					continue
				}
				leader = d.LeaderID
				if d.LeaderID == "" {
					n.logger.Warn("raft leader lost", "term", n.raft.CurrentTerm())
					continue
				}
				n.metrics.leaderChanges.Inc()
				n.logger.Info("raft leader changed", "leader_id", string(d.LeaderID), "leader_addr", string(d.LeaderAddr),
					"self", d.LeaderID == n.id, "term", n.raft.CurrentTerm())
			}
		}
	}
}

// monitor refreshes the gauges, issues the barrier of each new term in which
// this node leads (so Ready turns nil without waiting for a first read), and
// advances readiness.
func (n *Node) monitor() {
	defer n.wg.Done()
	t := time.NewTicker(monitorInterval)
	defer t.Stop()
	var lastNotMember, notMemberSince, noLeaderSince, lastMembershipAsk time.Time
	for {
		n.metrics.setState(n.raft.State())
		n.metrics.term.Set(float64(n.raft.CurrentTerm()))
		n.metrics.commitIndex.Set(float64(n.raft.CommitIndex()))
		n.metrics.appliedIndex.Set(float64(n.fsm.AppliedIndex()))
		n.leader.update(n.raft.LeaderWithID())
		if n.hold.inboundHeld.Load() {
			n.openInbound()
		}
		n.recordClusterID()
		if n.raft.State() == raft.Leader {
			term := n.raft.CurrentTerm()
			if n.barrierTerm.Load() != term {
				ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ApplyTimeout)
				if err := n.termBarrier(ctx, term); err != nil && n.ctx.Err() == nil {
					n.logger.Debug("term barrier failed", "term", term, "error", err)
				}
				cancel()
			}
			if n.barrierTerm.Load() == term && n.ClusterID() == "" && n.stamping.CompareAndSwap(false, true) {
				n.wg.Add(1)
				go func() {
					defer n.wg.Done()
					defer n.stamping.Store(false)
					n.stampClusterID()
				}()
			}
		}
		if !n.caughtUp.Load() {
			_ = n.updateReadiness()
		}
		// A node whose own log still lists it, without a leader for a
		// while, asks whether it was removed (askMembership).
		if _, id := n.raft.LeaderWithID(); id != "" {
			noLeaderSince = time.Time{}
			n.removedBy.Store(nil)
		} else if noLeaderSince.IsZero() {
			noLeaderSince = time.Now()
		} else if time.Since(noLeaderSince) >= membershipAskAfter && time.Since(lastMembershipAsk) >= membershipAskEvery &&
			n.notMember() == nil && n.askingMembers.CompareAndSwap(false, true) {
			lastMembershipAsk = time.Now()
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				n.askMembership()
			}()
		}
		// Only without a leader, and only once it has lasted: a node
		// joining replays the configurations that predate its own
		// addition, with a leader known, for a moment.
		if _, id := n.raft.LeaderWithID(); id != "" || n.notMember() == nil {
			notMemberSince = time.Time{}
		} else if notMemberSince.IsZero() {
			notMemberSince = time.Now()
		} else if time.Since(notMemberSince) >= notMemberSettle && time.Since(lastNotMember) >= notMemberWarnEvery {
			lastNotMember = time.Now()
			n.logger.Warn("this node is not in the cluster's membership", "error", n.notMember())
		}
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ClusterID is the identity of the cluster whose state this node holds,
// "" until a leader has stamped one (see stampClusterID).
func (n *Node) ClusterID() string {
	var id string
	_ = n.fsm.View(func(r *fsm.Reader) error {
		id = r.ClusterID()
		return nil
	})
	return id
}

// stampClusterIDEvery spaces the leader's attempts to stamp the cluster's
// identity while it has none (each asks every member).
const stampClusterIDEvery = 2 * time.Second

// stampClusterID gives this node's replica the cluster's identity, on the
// leader, once the leader has applied its term's entries and holds none.
// The id is the one other members already hold, when any does: a replica
// on an older binary skips SetClusterID (it is ignorable), and once
// upgraded and leading it must adopt the id the others have, not mint its
// own, or replicas would disagree. A new id (a UUIDv7) is minted only when
// every member answers, on a binary that reports its id and having applied
// the entries of earlier terms, that it holds none; the first SetClusterID
// to apply wins on every replica. A failure or an incomplete answer is
// retried after stampClusterIDEvery. One runs at a time, on a goroutine of
// its own (the monitor starts it).
func (n *Node) stampClusterID() {
	if n.ClusterID() != "" || time.Since(n.lastStamp) < stampClusterIDEvery {
		return
	}
	n.lastStamp = time.Now()
	// Every entry of earlier terms, where another leader's stamp would
	// be, is at or below the barrier; this term's entries are this
	// node's, and its own stamp would be in its replica already. Not the
	// applied index now: under steady writes members always trail it.
	applied := n.barrierApplied.Load()
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	// This node's own answer counts as any member's: no id, and at least
	// the barrier's index applied.
	infos, errs := n.askAll(n.ctx, cf.Configuration().Servers, statusProbeTimeout)
	id, mint, err := clusterIDFrom(infos, errs, applied)
	if err != nil || (id == "" && !mint) {
		// Said once, not at every attempt.
		if why := fmt.Sprint(err); why != n.stampWaitLogged {
			n.stampWaitLogged = why
			n.logger.Info("not stamping a cluster id yet: a member did not answer, runs an older binary, is behind, or holds another id", "error", err)
		}
	}
	switch {
	case err != nil:
		return
	case mint:
		u, err := uuid.NewV7()
		if err != nil {
			return
		}
		id = u.String()
	case id == "":
		return // a member that did not answer, or runs an older binary, may hold one
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ApplyTimeout)
	defer cancel()
	if _, err := n.Propose(ctx, fsm.SetClusterID{ID: id}); err != nil {
		if n.ctx.Err() == nil {
			n.logger.Debug("stamping the cluster id failed", "error", err)
		}
		return
	}
	n.logger.Info("cluster identity stamped", "cluster_id", n.ClusterID())
	n.openInbound()
}

// openInbound lets inbound Raft connections in once this node holds a
// cluster identity (see holdLayer.inboundHeld).
func (n *Node) openInbound() {
	if n.ClusterID() != "" && n.hold.inboundHeld.Swap(false) {
		n.logger.Info("accepting Raft connections: this cluster has its identity")
	}
}

// clusterIDFrom decides, from the members' info answers (errs[i] set for
// one that did not answer), which cluster id a leader without one stamps:
// the one members hold (id), a new one when every member answered, on a
// binary that reports its id, that it holds none and has applied at least
// index applied (mint), or none yet (both zero). Members holding different
// ids are an error.
func clusterIDFrom(infos []nodeInfo, errs []error, applied uint64) (id string, mint bool, err error) {
	complete := true
	for i, info := range infos {
		switch {
		case errs[i] != nil:
			complete = false
		case info.ClusterID != "" && id == "":
			id = info.ClusterID
		case info.ClusterID != "" && id != info.ClusterID:
			return "", false, fmt.Errorf("members hold different cluster ids (%s, %s)", id, info.ClusterID)
		case info.ClusterID != "":
		case !info.ClusterIDAware || info.Applied < applied:
			// An older binary, or a member yet to apply an entry that
			// may stamp one.
			complete = false
		}
	}
	return id, id == "" && complete, nil
}

// Shutdown stops Raft, then closes the log store and the state machine. It
// refuses new proposals at once (ErrShutdown) and first gives those waiting
// for Raft's answer up to proposalDrain to get it; any Propose or Read
// still waiting then returns (ErrUnknownOutcome or ErrShutdown).
// Every goroutine the node started (the read-index batchers, the observer,
// the monitor, cluster formation, leader tasks) has returned when Shutdown
// returns. The one exception is a goroutine of await still waiting on a
// command Raft had committed but not yet handed to the state machine when
// it shut down: Raft never answers that future (see await).
// It is idempotent: later calls return the first call's result.
func (n *Node) Shutdown() error {
	n.shutdownOnce.Do(func() {
		n.closed.Store(true)
		n.drainProposals()
		n.cancel()
		n.logger.Info("raft node shutting down")
		// The cancel ends a read-index fetch in flight; wait for the
		// batchers' goroutines before Raft and the transport go away.
		n.leaderBatch.close()
		n.followerBatch.close()
		var errs []error
		// Raft's Shutdown waits for its replication goroutines, which may
		// be waiting for a peer that is down to come back.
		n.trans.stopWaiting()
		stopping := n.raft.Shutdown()
		// Raft may be reading a snapshot off a connection whose peer went
		// silent, or sending one to it: cut the Raft connections so that
		// it ends.
		n.hold.closeConns()
		if err := stopping.Error(); err != nil {
			errs = append(errs, fmt.Errorf("raftnode: raft shutdown: %w", err))
		}
		// A heartbeat may still be in Raft, saving the term to the log
		// store closed below.
		n.trans.stopHeartbeats()
		n.raft.DeregisterObserver(n.observer)
		n.raft.DeregisterObserver(n.leaderObserver)
		n.wg.Wait()
		n.leader.close()
		n.leadershipChanged(false)
		if err := n.trans.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftnode: close raft transport: %w", err))
		}
		n.rpc.Close()
		if err := n.mux.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftnode: close cluster port: %w", err))
		}
		n.metrics.setState(raft.Shutdown)
		if err := n.logs.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftnode: close log store: %w", err))
		}
		if err := n.fsm.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftnode: close state machine: %w", err))
		}
		n.metrics.unregister(n.cfg.Registerer)
		n.shutdownErr = errors.Join(errs...)
		n.logger.Info("raft node stopped")
	})
	return n.shutdownErr
}

// drainProposals waits, at most proposalDrain, until no proposal on this
// node waits for Raft's answer. New ones are refused already (closed).
func (n *Node) drainProposals() {
	if n.proposing.Load() == 0 {
		return
	}
	deadline := time.Now().Add(proposalDrain)
	for n.proposing.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if left := n.proposing.Load(); left > 0 {
		n.logger.Warn("stopping with proposals still waiting for Raft; they are answered as of unknown outcome", "proposals", left, "waited", proposalDrain)
	}
}

// newRaft is raft.NewRaft, with a panic while it reads the stores (a
// snapshot whose metadata is damaged, with the log it stands for compacted
// away: "log not found") turned into ErrDamaged.
func newRaft(rc *raft.Config, f *fsm.FSM, logs *raftlog.Store, snaps raft.SnapshotStore, trans raft.Transport) (r *raft.Raft, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("%w: Raft could not start from its log and snapshots (%v); %s", ErrDamaged, p, damagedHint)
		}
	}()
	r, err = raft.NewRaft(rc, f, logs, logs, snaps, trans)
	// Raft formats its stores' errors with %v: a damaged log record
	// (raftlog.ErrCorruptRecord) is known by its text.
	if err != nil && strings.Contains(err.Error(), raftlog.ErrCorruptRecord.Error()) {
		return nil, fmt.Errorf("%w: raft.db: %v; %s", ErrDamaged, err, damagedHint)
	}
	return r, err
}

// unfinishedSnapshotSuffix ends the name of the directory raft's file
// snapshot store writes a snapshot into, until it renames it into place.
const unfinishedSnapshotSuffix = ".tmp"

// removeUnfinishedSnapshots removes the snapshots a killed process left
// half-written (directories ending in ".tmp", which the snapshot store
// renames only once a snapshot is whole): the store skips them with a
// warning at every start and never removes them, so every crash during a
// snapshot's write or install kept up to a snapshot's worth of disk. Open
// holds raft.db's lock, so no other process writes one now. A failure is
// logged and left: the store works beside them.
func removeUnfinishedSnapshots(dir string, logger *slog.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return // none yet
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), unfinishedSnapshotSuffix) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		var size int64
		_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					size += fi.Size()
				}
			}
			return nil
		})
		if err := os.RemoveAll(path); err != nil {
			logger.Warn("could not remove an unfinished snapshot", "path", path, "error", err)
			continue
		}
		logger.Info("removed an unfinished snapshot left by a stopped process", "path", path, "bytes", size)
	}
}
