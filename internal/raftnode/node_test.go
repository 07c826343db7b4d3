package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/harness"
	"github.com/floe-catalog/floe/internal/raftnode/raftfault"
	"github.com/floe-catalog/floe/internal/testenv"
)

// testLogger discards logs unless FLOE_TEST_LOG=1.
func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("FLOE_TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := harness.FreeAddr("127.0.0.1")
	require.NoError(t, err)
	return addr
}

// testConfig has timings short enough for tests yet loose enough for -race
// on two cores.
func testConfig(t *testing.T, dir, addr string) Config {
	return Config{
		DataDir:            dir,
		ClusterAddr:        addr,
		Logger:             testLogger(t),
		HeartbeatTimeout:   300 * time.Millisecond,
		ElectionTimeout:    300 * time.Millisecond,
		LeaderLeaseTimeout: 150 * time.Millisecond,
		CommitTimeout:      10 * time.Millisecond,
		Faults:             raftfault.New(),
	}
}

// isolate cuts n off from the rest of its cluster (on) or reconnects it
// (off); n must have been opened with a testConfig.
func isolate(n *Node, on bool) {
	n.cfg.Faults.(*raftfault.Network).Isolate(on)
}

func mustOpen(t *testing.T, cfg Config) *Node {
	t.Helper()
	n, err := Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Shutdown() })
	return n
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func waitLeaderOf(t *testing.T, n *Node) {
	t.Helper()
	require.NoError(t, n.WaitLeader(ctxTimeout(t, 10*time.Second)))
	require.Eventually(t, n.IsLeader, 10*time.Second, 10*time.Millisecond, "node %s never became leader", n.ID())
}

func createNS(name string) fsm.CreateNamespace {
	return fsm.CreateNamespace{Namespace: []string{name}, AtMs: 1700000000000}
}

// mustPropose proposes cmd through n. An answer saying nothing was applied
// (no leader yet, or leadership moved under the request, as it may right
// after a cluster forms on a busy machine) is retried, as a client would;
// any other error fails the test.
func mustPropose(t *testing.T, n *Node, cmd fsm.Command) fsm.Result {
	t.Helper()
	ctx := ctxTimeout(t, 20*time.Second)
	unknown := false
	for {
		res, err := n.Propose(ctx, cmd)
		if err == nil {
			if unknown && errors.Is(res.Err(), fsm.ErrAlreadyExists) {
				// The first attempt did apply: what a client retrying a
				// create after a lost answer sees.
				return fsm.Result{}
			}
			return res
		}
		if errors.Is(err, ErrUnknownOutcome) && ctx.Err() == nil {
			// Leadership moved while the entry was in flight (a busy
			// machine): retry, as a client would.
			unknown = true
		} else if (!errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrNoLeader)) || ctx.Err() != nil {
			require.NoError(t, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func hasNamespace(t *testing.T, read func(func(*fsm.Reader) error) error, name string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, read(func(r *fsm.Reader) error {
		_, ok = r.Namespace([]string{name})
		return nil
	}))
	return ok
}

func linearRead(t *testing.T, n *Node) func(func(*fsm.Reader) error) error {
	return func(fn func(*fsm.Reader) error) error { return n.Read(ctxTimeout(t, 10*time.Second), fn) }
}

func TestSingleNodeProposeAndRead(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := testConfig(t, t.TempDir(), freeAddr(t))
	cfg.Bootstrap = true
	cfg.Registerer = reg
	n := mustOpen(t, cfg)
	assert.Equal(t, cfg.ClusterAddr, n.ID(), "node ID defaults to the cluster address")

	waitLeaderOf(t, n)
	require.Eventually(t, func() bool { return n.Ready() == nil }, 10*time.Second, 10*time.Millisecond)

	res := mustPropose(t, n, createNS("demo"))
	require.NoError(t, res.Err())
	assert.True(t, hasNamespace(t, linearRead(t, n), "demo"))
	assert.True(t, hasNamespace(t, n.StaleRead, "demo"))

	// A domain outcome is a Result, not a Go error.
	res = mustPropose(t, n, createNS("demo"))
	require.ErrorIs(t, res.Err(), fsm.ErrAlreadyExists)
	assert.Equal(t, fsm.StatusAlreadyExists, res.Status)

	// A read right after a term's no-op/barrier must not wait for an index
	// the state machine never sees.
	for range 3 {
		assert.True(t, hasNamespace(t, linearRead(t, n), "demo"))
	}

	assert.Equal(t, 1.0, testutil.ToFloat64(n.metrics.state.WithLabelValues("leader")))
	assert.Equal(t, 0.0, testutil.ToFloat64(n.metrics.state.WithLabelValues("follower")))
	assert.GreaterOrEqual(t, testutil.ToFloat64(n.metrics.leaderChanges), 1.0)
	families, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range []string{"floe_raft_state", "floe_raft_term", "floe_raft_commit_index", "floe_raft_applied_index",
		"floe_raft_leader_changes_total", "floe_raft_apply_duration_seconds", "floe_raft_read_index_wait_seconds",
		"floe_raft_read_index_round_trips_total", "floe_raft_read_index_batch_size"} {
		assert.True(t, names[want], "metric %s not registered", want)
	}

	require.NoError(t, n.Shutdown())
	require.NoError(t, n.Shutdown(), "Shutdown is idempotent")
	_, err = n.Propose(context.Background(), createNS("late"))
	require.ErrorIs(t, err, ErrShutdown)
	require.ErrorIs(t, n.Read(context.Background(), func(*fsm.Reader) error { return nil }), ErrShutdown)
	require.ErrorIs(t, n.Ready(), ErrShutdown)
	families, err = reg.Gather()
	require.NoError(t, err)
	assert.Empty(t, families, "Shutdown unregisters the metrics")
}

func TestRestartKeepsStateAndAppliesNothingTwice(t *testing.T) {
	dir, addr := t.TempDir(), freeAddr(t)
	cfg := testConfig(t, dir, addr)
	cfg.Bootstrap = true

	n := mustOpen(t, cfg)
	waitLeaderOf(t, n)
	for i := range 5 {
		require.NoError(t, mustPropose(t, n, createNS(fmt.Sprintf("ns%d", i))).Err())
	}
	applied := n.FSM().AppliedIndex()
	confIndex := n.raft.GetConfiguration().Index()
	require.NoError(t, n.Shutdown())

	n2 := mustOpen(t, cfg) // Bootstrap still set: must be ignored
	// The state machine resumes from its own applied index; Raft replays only
	// what follows it.
	assert.GreaterOrEqual(t, n2.FSM().AppliedIndex(), applied)
	waitLeaderOf(t, n2)
	require.Eventually(t, func() bool { return n2.Ready() == nil }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, confIndex, n2.raft.GetConfiguration().Index(), "configuration was not bootstrapped again")
	assert.Len(t, n2.raft.GetConfiguration().Configuration().Servers, 1)
	for i := range 5 {
		assert.True(t, hasNamespace(t, linearRead(t, n2), fmt.Sprintf("ns%d", i)))
	}
	assert.GreaterOrEqual(t, n2.FSM().AppliedIndex(), applied)
	res := mustPropose(t, n2, createNS("ns0"))
	require.ErrorIs(t, res.Err(), fsm.ErrAlreadyExists)
	require.NoError(t, mustPropose(t, n2, createNS("after-restart")).Err())
	assert.Greater(t, n2.FSM().AppliedIndex(), applied)
}

// A snapshot a killed process left half-written (a ".tmp" directory) is
// removed when the node opens again: the snapshot store only skips it, so
// every crash during a snapshot kept up to a snapshot's worth of disk.
func TestOpenRemovesUnfinishedSnapshots(t *testing.T) {
	dir, addr := t.TempDir(), freeAddr(t)
	cfg := testConfig(t, dir, addr)
	cfg.Bootstrap = true
	n := mustOpen(t, cfg)
	waitLeaderOf(t, n)
	require.NoError(t, mustPropose(t, n, createNS("ns")).Err())
	require.NoError(t, n.raft.Snapshot().Error())
	require.NoError(t, n.Shutdown())

	snaps := filepath.Join(dir, "snapshots")
	unfinished := filepath.Join(snaps, "2-9-1700000000000.tmp")
	require.NoError(t, os.MkdirAll(unfinished, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(unfinished, "state.bin"), make([]byte, 4096), 0o600))
	before, err := os.ReadDir(snaps)
	require.NoError(t, err)
	require.Len(t, before, 2, "one whole snapshot and the unfinished one")

	n2 := mustOpen(t, cfg)
	waitLeaderOf(t, n2)
	assert.NoDirExists(t, unfinished)
	after, err := os.ReadDir(snaps)
	require.NoError(t, err)
	assert.Len(t, after, 1, "the whole snapshot stays")
	assert.True(t, hasNamespace(t, linearRead(t, n2), "ns"))
}

// TestRestartRestoresLostStateMachineFromSnapshot covers the one case where
// NoSnapshotRestoreOnStart needs help: fsm.db is gone but a snapshot exists.
func TestRestartRestoresLostStateMachineFromSnapshot(t *testing.T) {
	dir, addr := t.TempDir(), freeAddr(t)
	cfg := testConfig(t, dir, addr)
	cfg.Bootstrap = true
	cfg.TrailingLogs = 1 // compact the log right behind the snapshot

	n := mustOpen(t, cfg)
	waitLeaderOf(t, n)
	for i := range 5 {
		require.NoError(t, mustPropose(t, n, createNS(fmt.Sprintf("ns%d", i))).Err())
	}
	require.NoError(t, n.raft.Snapshot().Error())
	require.NoError(t, n.Shutdown())
	require.NoError(t, os.Remove(filepath.Join(dir, "fsm.db")))

	n2 := mustOpen(t, cfg)
	waitLeaderOf(t, n2)
	for i := range 5 {
		assert.True(t, hasNamespace(t, linearRead(t, n2), fmt.Sprintf("ns%d", i)))
	}
}

func TestReadyBeforeLeader(t *testing.T) {
	cfg := testConfig(t, t.TempDir(), freeAddr(t))
	// No bootstrap and no peers: this node never learns of a leader.
	n := mustOpen(t, cfg)
	require.ErrorIs(t, n.Ready(), ErrNoLeader)
	err := n.WaitLeader(ctxTimeout(t, 200*time.Millisecond))
	require.ErrorIs(t, err, ErrNoLeader)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = n.Propose(context.Background(), createNS("x"))
	require.ErrorIs(t, err, ErrNoLeader)
	require.ErrorIs(t, n.Read(context.Background(), func(*fsm.Reader) error { return nil }), ErrNoLeader)
}

func TestOpenRejectsBadConfig(t *testing.T) {
	_, err := Open(Config{ClusterAddr: "127.0.0.1:0"})
	require.Error(t, err)
	_, err = Open(Config{DataDir: t.TempDir()})
	require.Error(t, err)
	cfg := testConfig(t, t.TempDir(), "0.0.0.0:0")
	_, err = Open(cfg)
	require.Error(t, err, "an unspecified address cannot be advertised")

	cfg = testConfig(t, t.TempDir(), freeAddr(t))
	cfg.Bootstrap = true
	cfg.Peers = []raft.Server{{ID: "other", Address: "127.0.0.1:1", Suffrage: raft.Voter}}
	_, err = Open(cfg)
	require.ErrorContains(t, err, "do not include this node")
	// The failed Open released the files: a second Open of the dir works.
	cfg.Peers = nil
	n := mustOpen(t, cfg)
	waitLeaderOf(t, n)
}

// openThree opens a cluster of three voters, node0 to node2, each
// bootstrapped with all three as peers.
func openThree(t *testing.T) ([]*Node, []raft.Server) {
	const size = 3
	peers := make([]raft.Server, size)
	for i := range peers {
		addr := freeAddr(t)
		peers[i] = raft.Server{ID: raft.ServerID(fmt.Sprintf("node%d", i)), Address: raft.ServerAddress(addr), Suffrage: raft.Voter}
	}
	nodes := make([]*Node, size)
	for i := range nodes {
		cfg := testConfig(t, t.TempDir(), string(peers[i].Address))
		cfg.NodeID, cfg.Bootstrap, cfg.Peers = string(peers[i].ID), true, peers
		nodes[i] = mustOpen(t, cfg)
	}
	return nodes, peers
}

func TestThreeNodeCluster(t *testing.T) {
	nodes, _ := openThree(t)
	leader := waitOneLeader(t, nodes)
	for _, n := range nodes {
		require.Eventually(t, func() bool { return n.Ready() == nil }, 10*time.Second, 10*time.Millisecond, "node %s not ready: %v", n.ID(), n.Ready())
	}

	res := mustPropose(t, leader, createNS("one"))
	require.NoError(t, res.Err())
	assert.True(t, hasNamespace(t, linearRead(t, leader), "one"))

	for _, n := range nodes {
		if n == leader {
			continue
		}
		// A follower forwards the write and serves a linearizable read
		// that sees it at once.
		name := "via-" + n.ID()
		res, err := n.Propose(ctxTimeout(t, 5*time.Second), createNS(name))
		require.NoError(t, err)
		require.NoError(t, res.Err())
		for _, m := range nodes {
			assert.True(t, hasNamespace(t, linearRead(t, m), name), "%s does not see %s", m.ID(), name)
		}
	}

	// Stop the leader: the other two elect a new one, which takes writes
	// and still has the earlier one.
	require.NoError(t, leader.Shutdown())
	var rest []*Node
	for _, n := range nodes {
		if n != leader {
			rest = append(rest, n)
		}
	}
	leader2 := waitOneLeader(t, rest)
	require.NotEqual(t, leader.ID(), leader2.ID())
	require.NoError(t, mustPropose(t, leader2, createNS("two")).Err())
	assert.True(t, hasNamespace(t, linearRead(t, leader2), "one"))
	assert.True(t, hasNamespace(t, linearRead(t, leader2), "two"))
	require.Eventually(t, func() bool { return leader2.Ready() == nil }, 10*time.Second, 10*time.Millisecond)
}

// waitOneLeader waits until exactly one of nodes leads and the others know it.
func waitOneLeader(t *testing.T, nodes []*Node) *Node {
	t.Helper()
	var leader *Node
	require.Eventually(t, func() bool {
		leader = nil
		for _, n := range nodes {
			if n.IsLeader() {
				if leader != nil {
					return false
				}
				leader = n
			}
		}
		if leader == nil {
			return false
		}
		for _, n := range nodes {
			if _, id := n.Leader(); id != leader.ID() {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "no single leader elected")
	return leader
}

func TestProposeErrorMapping(t *testing.T) {
	const timeout = time.Second
	tests := []struct {
		name    string
		err     error
		index   uint64
		is      []error
		isNot   []error
		message string
	}{
		{name: "follower", err: raft.ErrNotLeader, is: []error{ErrNotLeader, raft.ErrNotLeader}, isNot: []error{ErrUnknownOutcome}},
		{name: "transfer", err: raft.ErrLeadershipTransferInProgress, is: []error{ErrNotLeader}, isNot: []error{ErrUnknownOutcome}},
		{name: "leadership lost", err: raft.ErrLeadershipLost, index: 7, is: []error{ErrUnknownOutcome, raft.ErrLeadershipLost}, isNot: []error{ErrNotLeader}},
		{name: "enqueue timeout", err: raft.ErrEnqueueTimeout, is: []error{ErrNotAccepted, context.DeadlineExceeded, raft.ErrEnqueueTimeout}, isNot: []error{ErrUnknownOutcome, ErrNotLeader}},
		{name: "shutdown before enqueue", err: raft.ErrRaftShutdown, is: []error{ErrShutdown}, isNot: []error{ErrUnknownOutcome}},
		{name: "shutdown after append", err: raft.ErrRaftShutdown, index: 9, is: []error{ErrUnknownOutcome, raft.ErrRaftShutdown}, isNot: []error{ErrShutdown}},
		{name: "ctx done while waiting", err: fmt.Errorf("%w: %w", errAwaitCanceled, context.Canceled), is: []error{ErrUnknownOutcome, context.Canceled}},
		{name: "node stopping while waiting", err: fmt.Errorf("%w: %w", errAwaitCanceled, ErrShutdown), is: []error{ErrUnknownOutcome}, isNot: []error{ErrShutdown}},
		{name: "log store failure", err: errors.New("disk full"), index: 3, is: []error{ErrUnknownOutcome}},
		{name: "aborted by restore", err: raft.ErrAbortedByRestore, index: 3, is: []error{ErrUnknownOutcome}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := proposeError(tt.err, tt.index, timeout)
			for _, want := range tt.is {
				assert.ErrorIs(t, got, want)
			}
			for _, not := range tt.isNot {
				assert.NotErrorIs(t, got, not)
			}
			if errors.Is(got, ErrUnknownOutcome) {
				for _, not := range []error{ErrNotLeader, ErrNoLeader, ErrShutdown} {
					assert.NotErrorIs(t, got, not, "an unknown outcome must not look retryable")
				}
			}
		})
	}
}

// A command the leader's Raft never took stays "not accepted" when the
// answer crosses to the follower that forwarded it: a 503 the client may
// resend, never an unknown outcome.
func TestNotAcceptedCrossesTheForward(t *testing.T) {
	local := proposeError(raft.ErrEnqueueTimeout, 0, time.Second)
	got := fromRemote(toRemote(local), true)
	assert.ErrorIs(t, got, ErrNotAccepted)
	assert.NotErrorIs(t, got, ErrUnknownOutcome)
	// An outcome the leader could not know stays unknown: a lost
	// leadership, or a membership change whose wait ended after Raft took
	// it.
	for _, leaderErr := range []error{
		proposeError(raft.ErrLeadershipLost, 7, time.Second),
		fmt.Errorf("add voter: %w: %w", errAwaitCanceled, context.DeadlineExceeded),
		fmt.Errorf("remove server: %w: %w", errAwaitCanceled, ErrShutdown),
	} {
		got = fromRemote(toRemote(leaderErr), true)
		assert.ErrorIs(t, got, ErrUnknownOutcome, leaderErr)
		assert.NotErrorIs(t, got, ErrNotAccepted, leaderErr)
	}
	// A deadline that is not Raft's refusal says nothing was applied only
	// when it says so.
	got = fromRemote(toRemote(fmt.Errorf("transfer: %w", context.DeadlineExceeded)), true)
	assert.NotErrorIs(t, got, ErrNotAccepted)
}

// TestProposeContextEnded checks that a context already done proposes
// nothing, and that an unregistered command is refused before Raft.
func TestProposeContextEnded(t *testing.T) {
	cfg := testConfig(t, t.TempDir(), freeAddr(t))
	cfg.Bootstrap = true
	n := mustOpen(t, cfg)
	waitLeaderOf(t, n)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := n.Propose(ctx, createNS("never"))
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, ErrUnknownOutcome)
	assert.False(t, hasNamespace(t, linearRead(t, n), "never"))

	_, err = n.Propose(context.Background(), unknownCommand{})
	require.ErrorIs(t, err, fsm.ErrUnknownCommand)
}

type unknownCommand struct{}

func (unknownCommand) Type() fsm.CommandType { return 0x7d }

// Replication to followers is synchronous: hashicorp/raft's pipelined
// replication can deadlock once a follower answers Success=false or a newer
// term, leaving that follower without entries and Shutdown waiting forever
// (NewNetworkTransport).
func TestTransportDoesNotPipelineReplication(t *testing.T) {
	n := mustOpen(t, testConfig(t, t.TempDir(), freeAddr(t)))
	_, err := n.trans.AppendEntriesPipeline("peer", "127.0.0.1:1")
	require.ErrorIs(t, err, raft.ErrPipelineReplicationNotSupported)
}

// A log line names its component once: JSON logs with a key twice are
// ambiguous to the tools that read them.
func TestTransportLogsNameTheirComponentOnce(t *testing.T) {
	var buf testenv.LogBuffer
	cfg := testConfig(t, t.TempDir(), freeAddr(t))
	cfg.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Bootstrap = true
	n := mustOpen(t, cfg)
	waitLeaderOf(t, n)
	// A TLS ClientHello to the plaintext cluster port: the transport logs
	// a warning.
	c, err := net.Dial("tcp", cfg.ClusterAddr)
	require.NoError(t, err)
	_, _ = c.Write([]byte{0x16, 0x03, 0x01})
	_ = c.Close()
	require.Eventually(t, func() bool { return strings.Contains(buf.String(), "TLS connection to a plaintext cluster port") }, 5*time.Second, 10*time.Millisecond)
	for line := range strings.Lines(buf.String()) {
		if strings.Contains(line, `"transport`) {
			assert.Equal(t, 1, strings.Count(line, `"component":`), line)
		}
	}
}
