package raftnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/raftnode/raftfault"
	"github.com/floe-catalog/floe/internal/testenv"
	"github.com/floe-catalog/floe/transport"
)

// startJoinedCluster starts size nodes that form a cluster through Join and
// BootstrapExpect, the way operators start them.
func startJoinedCluster(t *testing.T, size int) ([]*Node, []Config) {
	t.Helper()
	return startJoinedClusterWith(t, size, nil)
}

// startJoinedClusterWith is startJoinedCluster with each node's Config
// passed through adjust (nil: none) before it is opened.
func startJoinedClusterWith(t *testing.T, size int, adjust func(i int, cfg *Config)) ([]*Node, []Config) {
	t.Helper()
	addrs := make([]string, size)
	for i := range addrs {
		addrs[i] = freeAddr(t)
	}
	nodes := make([]*Node, size)
	cfgs := make([]Config, size)
	for i := range nodes {
		cfg := testConfig(t, t.TempDir(), addrs[i])
		cfg.NodeID = fmt.Sprintf("node%d", i)
		cfg.Join = addrs
		cfg.BootstrapExpect = size
		cfg.SnapshotThreshold = 16
		cfg.TrailingLogs = 4
		cfg.SnapshotInterval = 200 * time.Millisecond
		if adjust != nil {
			adjust(i, &cfg)
		}
		cfgs[i] = cfg
		nodes[i] = mustOpen(t, cfg)
	}
	waitOneLeader(t, nodes)
	return nodes, cfgs
}

func others(nodes []*Node, not *Node) []*Node {
	var out []*Node
	for _, n := range nodes {
		if n != not && !n.closed.Load() {
			out = append(out, n)
		}
	}
	return out
}

func TestJoinFormsClusterAndFollowersServeEverything(t *testing.T) {
	nodes, _ := startJoinedCluster(t, 3)
	for i, n := range nodes {
		res := mustPropose(t, n, createNS(fmt.Sprintf("w%d", i)))
		require.NoError(t, res.Err())
		for _, m := range nodes {
			assert.True(t, hasNamespace(t, linearRead(t, m), fmt.Sprintf("w%d", i)), "node %s", m.ID())
		}
	}
	st, err := nodes[1].Status(context.Background())
	require.NoError(t, err)
	require.Len(t, st.Members, 3)
	for _, m := range st.Members {
		assert.True(t, m.Reachable, "%+v", m)
		assert.Equal(t, "Voter", m.Suffrage)
	}
}

func TestPartitionedLeaderCannotAckOrRead(t *testing.T) {
	nodes, _ := startJoinedCluster(t, 3)
	old := waitOneLeader(t, nodes)
	require.NoError(t, mustPropose(t, old, createNS("before")).Err())

	isolate(old, true)
	rest := others(nodes, old)
	leader := waitOneLeader(t, rest)
	require.NoError(t, mustPropose(t, leader, createNS("after")).Err())

	// The isolated old leader acknowledges no write and serves no
	// linearizable read, whatever it still believes.
	res, err := old.Propose(ctxTimeout(t, 2*time.Second), createNS("lost"))
	if err == nil {
		t.Fatalf("isolated node acknowledged a write: %+v", res)
	}
	err = old.Read(ctxTimeout(t, 2*time.Second), func(*fsm.Reader) error { return nil })
	require.Error(t, err)

	isolate(old, false)
	require.Eventually(t, func() bool {
		return old.Read(ctxTimeout(t, time.Second), func(*fsm.Reader) error { return nil }) == nil
	}, 15*time.Second, 50*time.Millisecond)
	assert.True(t, hasNamespace(t, linearRead(t, old), "after"))
	assert.False(t, hasNamespace(t, linearRead(t, leader), "lost"))
}

func TestNewNodeCatchesUpBySnapshotAndRestartKeepsState(t *testing.T) {
	nodes, cfgs := startJoinedCluster(t, 3)
	leader := waitOneLeader(t, nodes)
	for i := range 60 {
		require.NoError(t, mustPropose(t, nodes[i%3], createNS(fmt.Sprintf("n%02d", i))).Err())
	}
	// Make sure the log was compacted, so the newcomer must take a snapshot.
	require.NoError(t, leader.raft.Snapshot().Error())

	cfg := testConfig(t, t.TempDir(), freeAddr(t))
	cfg.NodeID = "node3"
	cfg.Join = []string{cfgs[0].ClusterAddr}
	newcomer := mustOpen(t, cfg)
	require.Eventually(t, func() bool { return newcomer.Ready() == nil }, 20*time.Second, 20*time.Millisecond)
	assert.True(t, hasNamespace(t, linearRead(t, newcomer), "n59"))
	assert.True(t, hasNamespace(t, linearRead(t, newcomer), "n00"))
	st, err := newcomer.Status(context.Background())
	require.NoError(t, err)
	assert.Len(t, st.Members, 4)

	// Every node restarted: state intact, cluster serves again.
	all := append(nodes, newcomer)
	allCfgs := append(cfgs, cfg)
	for _, n := range all {
		require.NoError(t, n.Shutdown())
	}
	for i := range all {
		all[i] = mustOpen(t, allCfgs[i])
	}
	waitOneLeader(t, all)
	for _, n := range all {
		assert.True(t, hasNamespace(t, linearRead(t, n), "n42"), "node %s", n.ID())
	}
	require.NoError(t, mustPropose(t, all[3], createNS("after-restart")).Err())
}

func TestMembershipChanges(t *testing.T) {
	nodes, _ := startJoinedCluster(t, 3)
	leader := waitOneLeader(t, nodes)
	follower := others(nodes, leader)[0]
	ctx := ctxTimeout(t, 20*time.Second)

	// A non-voter added through a follower (forwarded to the leader).
	cfg := testConfig(t, t.TempDir(), freeAddr(t))
	cfg.NodeID = "learner"
	learner := mustOpen(t, cfg)
	require.NoError(t, follower.AddNonvoter(ctx, "learner", learner.Addr()))
	require.NoError(t, mustPropose(t, leader, createNS("seen-by-learner")).Err())
	require.Eventually(t, func() bool { return hasNamespace(t, learner.StaleRead, "seen-by-learner") }, 10*time.Second, 20*time.Millisecond)
	st, err := learner.Status(ctx)
	require.NoError(t, err)
	require.Len(t, st.Members, 4)

	// Re-adding the same ID and address is a no-op; removing works.
	require.NoError(t, follower.AddNonvoter(ctx, "learner", learner.Addr()))
	require.NoError(t, follower.Remove(ctx, "learner"))
	require.Error(t, follower.Remove(ctx, "nobody"))

	// Leadership transfer to a named member.
	target := others(nodes, leader)[1]
	require.NoError(t, follower.TransferLeadership(ctx, target.ID()))
	require.Equal(t, target, waitOneLeader(t, nodes))

	// To a voter that does not answer: refused at once, naming it, and
	// the cluster takes writes right after.
	down := others(nodes, target)[0]
	require.NoError(t, down.Shutdown())
	err = target.TransferLeadership(ctx, down.ID())
	require.ErrorIs(t, err, ErrInvalidMember)
	assert.Contains(t, err.Error(), "does not answer")
	require.NoError(t, mustPropose(t, target, createNS("after-refused-transfer")).Err())
}

func TestLeaderTasksFollowLeadership(t *testing.T) {
	nodes, _ := startJoinedCluster(t, 3)
	running := map[string]*atomicBool{}
	for _, n := range nodes {
		flag := &atomicBool{}
		running[n.ID()] = flag
		n.OnLeadership(func(ctx context.Context) {
			flag.set(true)
			<-ctx.Done()
			flag.set(false)
		})
	}
	leader := waitOneLeader(t, nodes)
	require.Eventually(t, running[leader.ID()].get, 5*time.Second, 10*time.Millisecond)
	// Registered once a leader is known: told at once, then at each change.
	news := make([]*atomic.Int32, len(nodes))
	for i, n := range nodes {
		news[i] = &atomic.Int32{}
		n.OnNewLeader(func() { news[i].Add(1) })
		assert.EqualValues(t, 1, news[i].Load(), "a leader is known already")
	}
	firstLeadership := leader.LeadershipStartIndex()
	assert.NotZero(t, firstLeadership)
	mustPropose(t, leader, createNS("grown")) // appended above it
	target := others(nodes, leader)[0]
	require.NoError(t, leader.TransferLeadership(ctxTimeout(t, 10*time.Second), target.ID()))
	waitOneLeader(t, nodes)
	require.Eventually(t, func() bool { return running[target.ID()].get() && !running[leader.ID()].get() }, 5*time.Second, 10*time.Millisecond)
	for i := range nodes {
		require.Eventually(t, func() bool { return news[i].Load() >= 2 }, 5*time.Second, 10*time.Millisecond, "every node learns of the new leader")
		nodes[i].OnNewLeader(nil)
	}
	assert.Greater(t, target.LeadershipStartIndex(), firstLeadership, "the new leader's log holds the entry proposed since")
}

type atomicBool struct {
	mu sync.Mutex
	v  bool
}

func (a *atomicBool) set(v bool) { a.mu.Lock(); a.v = v; a.mu.Unlock() }
func (a *atomicBool) get() bool  { a.mu.Lock(); defer a.mu.Unlock(); return a.v }

// A node restarted on a new address with its data asks the leader to
// update its address and rejoins.
func TestRestartOnNewAddressReaddresses(t *testing.T) {
	nodes, cfgs := startJoinedCluster(t, 3)
	leader := waitOneLeader(t, nodes)
	moved := others(nodes, leader)[0]
	// Move a node that holds the cluster's state (a node without state
	// joins through --join instead).
	require.NoError(t, mustPropose(t, leader, createNS("before-move")).Err())
	require.Eventually(t, func() bool { return hasNamespace(t, moved.StaleRead, "before-move") }, 20*time.Second, 20*time.Millisecond)
	i := 0
	for j, n := range nodes {
		if n == moved {
			i = j
		}
	}
	require.NoError(t, moved.Shutdown())
	cfg := cfgs[i]
	cfg.ClusterAddr = freeAddr(t)
	cfg.Join = nil
	moved = mustOpen(t, cfg)
	require.NoError(t, mustPropose(t, leader, createNS("after-move")).Err())
	require.Eventually(t, func() bool { return hasNamespace(t, moved.StaleRead, "after-move") }, 45*time.Second, 50*time.Millisecond, "moved node never caught up")
	st, err := leader.Status(context.Background())
	require.NoError(t, err)
	for _, m := range st.Members {
		if m.ID == moved.ID() {
			assert.Equal(t, cfg.ClusterAddr, m.ClusterAddr)
		}
	}
}

// loseData shuts down a follower that holds the cluster's state, deletes its
// data directory, and writes once more without it. It returns the leader,
// the follower's config (same ID, address and Join) and the follower's index.
func loseData(t *testing.T, nodes []*Node, cfgs []Config) (*Node, Config, int) {
	t.Helper()
	leader := waitOneLeader(t, nodes)
	lost := others(nodes, leader)[0]
	require.NoError(t, mustPropose(t, leader, createNS("before-loss")).Err())
	require.Eventually(t, func() bool { return hasNamespace(t, lost.StaleRead, "before-loss") }, 20*time.Second, 20*time.Millisecond)
	i := slices.Index(nodes, lost)
	require.NoError(t, lost.Shutdown())
	require.NoError(t, os.RemoveAll(cfgs[i].DataDir))
	require.NoError(t, mustPropose(t, leader, createNS("while-lost")).Err())
	return leader, cfgs[i], i
}

// suffrages returns each member's suffrage in n's configuration.
func suffrages(t *testing.T, n *Node) map[string]raft.ServerSuffrage {
	t.Helper()
	cf := n.raft.GetConfiguration()
	require.NoError(t, cf.Error())
	out := map[string]raft.ServerSuffrage{}
	for _, s := range cf.Configuration().Servers {
		out[string(s.ID)] = s.Suffrage
	}
	return out
}

// awaitRefused waits until n gave up with ErrRejoinRefused and checks that it
// took no part in Raft.
func awaitRefused(t *testing.T, n *Node) {
	t.Helper()
	select {
	case <-n.Failed():
	case <-time.After(30 * time.Second):
		t.Fatal("a voter without state was not refused")
	}
	require.ErrorIs(t, n.Err(), ErrRejoinRefused)
	assert.Contains(t, n.Err().Error(), n.ID())
	assert.Zero(t, n.raft.LastIndex(), "the refused node received no log")
	assert.Zero(t, n.raft.CurrentTerm(), "the refused node learned no term, so it cannot have voted")
	has, err := raft.HasExistingState(n.logs, n.logs, n.snaps)
	require.NoError(t, err)
	assert.False(t, has)
}

// A node that lost its data directory and starts again under its old ID,
// address and Join is refused: its ID is a voter and it no longer knows how
// it voted. The cluster is unchanged. Once an operator removes the old
// member, the same node joins as a new voter.
func TestRejoinAfterDataLossIsRefused(t *testing.T) {
	nodes, cfgs := startJoinedCluster(t, 3)
	leader, cfg, i := loseData(t, nodes, cfgs)
	before := suffrages(t, leader)

	refused := mustOpen(t, cfg)
	awaitRefused(t, refused)
	// Not admitted after a while either: the answer is final.
	time.Sleep(time.Second)
	assert.Zero(t, refused.raft.LastIndex())
	assert.Equal(t, before, suffrages(t, leader), "the cluster's configuration is unchanged")
	assert.Equal(t, raft.Voter, before[cfg.NodeID])
	require.NoError(t, refused.Shutdown())

	// Way out: remove the old member, then start the node again.
	require.NoError(t, leader.Remove(ctxTimeout(t, 10*time.Second), cfg.NodeID))
	nodes[i] = mustOpen(t, cfg)
	require.Eventually(t, func() bool { return nodes[i].Ready() == nil }, 30*time.Second, 20*time.Millisecond)
	assert.True(t, hasNamespace(t, linearRead(t, nodes[i]), "before-loss"))
	assert.True(t, hasNamespace(t, linearRead(t, nodes[i]), "while-lost"))
	require.Eventually(t, func() bool { return suffrages(t, leader)[cfg.NodeID] == raft.Voter }, 10*time.Second, 20*time.Millisecond)
	assert.Len(t, suffrages(t, leader), 3)
}

// With RejoinAsNonvoter, a node that lost its data directory rejoins as a
// non-voter, catches up, and is a voter again once an operator promotes it.
func TestRejoinAfterDataLossAsNonvoter(t *testing.T) {
	nodes, cfgs := startJoinedCluster(t, 3)
	leader, cfg, i := loseData(t, nodes, cfgs)

	cfg.RejoinAsNonvoter = true
	rejoined := mustOpen(t, cfg) // same ID, same address, same Join
	nodes[i] = rejoined
	require.Eventually(t, func() bool { return rejoined.Ready() == nil }, 30*time.Second, 20*time.Millisecond)
	assert.True(t, hasNamespace(t, linearRead(t, rejoined), "before-loss"))
	assert.True(t, hasNamespace(t, linearRead(t, rejoined), "while-lost"))
	select {
	case <-rejoined.Failed():
		t.Fatalf("rejoin as a non-voter failed: %v", rejoined.Err())
	default:
	}
	got := suffrages(t, leader)
	assert.Equal(t, raft.Nonvoter, got[cfg.NodeID], "demoted, not rejoined as a voter")
	assert.Len(t, got, 3)
	// It stays a non-voter until promoted.
	time.Sleep(time.Second)
	assert.Equal(t, raft.Nonvoter, suffrages(t, leader)[cfg.NodeID])

	// The operator promotes it (forwarded through the node itself).
	require.NoError(t, rejoined.AddVoter(ctxTimeout(t, 10*time.Second), cfg.NodeID, rejoined.Addr()))
	for _, n := range nodes {
		require.Eventually(t, func() bool {
			s := suffrages(t, n)
			return len(s) == 3 && s["node0"] == raft.Voter && s["node1"] == raft.Voter && s["node2"] == raft.Voter
		}, 10*time.Second, 20*time.Millisecond, "node %s does not see three voters", n.ID())
	}
	require.NoError(t, mustPropose(t, rejoined, createNS("after-promotion")).Err())
	assert.True(t, hasNamespace(t, linearRead(t, leader), "after-promotion"))
}

// A leader that removes itself steps down and keeps running, out of the
// configuration, like a removed follower: Raft does not shut itself down
// under the node, whose own Shutdown must wait for Raft's goroutines before
// closing the stores they use. The others elect a leader and go on.
func TestLeaderRemovingItselfStepsDown(t *testing.T) {
	nodes, _ := startJoinedCluster(t, 3)
	leader := waitOneLeader(t, nodes)
	require.NoError(t, leader.Remove(ctxTimeout(t, 10*time.Second), leader.ID()))
	rest := others(nodes, leader)
	next := waitOneLeader(t, rest)
	require.NoError(t, mustPropose(t, next, createNS("after-removal")).Err())
	assert.Equal(t, raft.Follower, leader.raft.State(), "the removed leader's Raft is still running")
	assert.NotContains(t, suffrages(t, next), leader.ID())
	// The removed node does not ask to join again, even when the cluster
	// formed so recently that its start-up join loop is still running
	// (it retries every second).
	time.Sleep(1500 * time.Millisecond)
	assert.NotContains(t, suffrages(t, next), leader.ID(), "the removed node joined again")
	require.NoError(t, leader.Shutdown())
}

// A voter must answer at its address as itself before it joins the
// configuration: a typo, a wrong advertised address or a node not yet
// started would otherwise count towards the quorum at once, and a one-node
// cluster would lose its leader for good. Non-voters never count, so they
// are not asked; promoting one is.
func TestAddVoterRefusesAnAddressThatDoesNotAnswerAsIt(t *testing.T) {
	cfg := testConfig(t, t.TempDir(), freeAddr(t))
	cfg.Bootstrap = true
	n := mustOpen(t, cfg)
	waitLeaderOf(t, n)
	ocfg := testConfig(t, t.TempDir(), freeAddr(t))
	ocfg.NodeID = "other"
	other := mustOpen(t, ocfg) // not a member: no bootstrap, no join
	before := suffrages(t, n)

	silent := freeAddr(t)
	err := n.AddVoter(ctxTimeout(t, 10*time.Second), "x", silent)
	require.ErrorIs(t, err, ErrInvalidMember)
	assert.Contains(t, err.Error(), "no floe node answers at "+silent)
	err = n.AddVoter(ctxTimeout(t, 10*time.Second), "x", other.Addr())
	require.ErrorIs(t, err, ErrInvalidMember)
	assert.Contains(t, err.Error(), `is "other", not "x"`)
	assert.Equal(t, before, suffrages(t, n))

	require.NoError(t, n.AddNonvoter(ctxTimeout(t, 10*time.Second), "x", silent))
	assert.Equal(t, raft.Nonvoter, suffrages(t, n)["x"])
	err = n.AddVoter(ctxTimeout(t, 10*time.Second), "x", silent)
	require.ErrorIs(t, err, ErrInvalidMember, "promotion of a silent non-voter")
	assert.Equal(t, raft.Nonvoter, suffrages(t, n)["x"])
	require.NoError(t, mustPropose(t, n, createNS("still-leading")).Err())

	// A non-voter cannot lead: no transfer to it, and no election for it.
	err = n.TransferLeadership(ctxTimeout(t, 10*time.Second), "x")
	require.ErrorIs(t, err, ErrInvalidMember)
	assert.True(t, n.IsLeader())

	// A non-voter need not answer yet, but one that does must answer as
	// the id it is added as: another node's address (in any spelling)
	// would make a phantom member streaming that node a second log.
	err = n.AddNonvoter(ctxTimeout(t, 10*time.Second), "phantom", other.Addr())
	require.ErrorIs(t, err, ErrInvalidMember)
	assert.Contains(t, err.Error(), `is "other", not "phantom"`)
	assert.NotContains(t, suffrages(t, n), "phantom")

	// The node that does answer as itself is added.
	require.NoError(t, n.AddVoter(ctxTimeout(t, 10*time.Second), "other", other.Addr()))
	assert.Equal(t, raft.Voter, suffrages(t, n)["other"])

	// Another id at a member's address would remove that member: refused
	// while the member still answers there, voter or not.
	err = n.AddNonvoter(ctxTimeout(t, 10*time.Second), "imposter", other.Addr())
	require.ErrorIs(t, err, ErrInvalidMember)
	assert.Contains(t, err.Error(), `is "other", not "imposter"`)
	assert.Equal(t, raft.Voter, suffrages(t, n)["other"])
	assert.NotContains(t, suffrages(t, n), "imposter")

	// A voter is not made a non-voter: at its own address that is refused;
	// at another, it is re-addressed as a voter, once the node there
	// answers as it (Raft's AddNonvoter would keep it a voter and move it
	// where nothing may answer).
	addrs := func() map[string]string {
		out := map[string]string{}
		for _, s := range n.raft.GetConfiguration().Configuration().Servers {
			out[string(s.ID)] = string(s.Address)
		}
		return out
	}
	beforeAddrs := addrs()
	err = n.AddNonvoter(ctxTimeout(t, 10*time.Second), "other", other.Addr())
	require.ErrorIs(t, err, ErrInvalidMember)
	assert.Contains(t, err.Error(), "is a voter")
	silentAddr := freeAddr(t)
	err = n.AddNonvoter(ctxTimeout(t, 10*time.Second), "other", silentAddr)
	require.ErrorIs(t, err, ErrInvalidMember)
	assert.Contains(t, err.Error(), "no floe node answers at "+silentAddr)
	assert.Equal(t, raft.Voter, suffrages(t, n)["other"])
	assert.Equal(t, beforeAddrs, addrs())

	// Ids a member could not be managed by.
	for _, id := range []string{"a/b", "a b", "x\x1b[2J", strings.Repeat("i", 256), ".."} {
		err = n.AddNonvoter(ctxTimeout(t, 10*time.Second), id, freeAddr(t))
		require.ErrorIs(t, err, ErrInvalidMember, id)
	}
}

// A node of another cluster (a mistyped address) is never added: it would
// append this cluster's log after entries it had applied, and serve a
// state no other member has. Its identity gives it away, as a voter or a
// non-voter; a node that left this cluster keeps this cluster's identity
// and may come back.
func TestAddMemberRefusesANodeOfAnotherCluster(t *testing.T) {
	open := func(id string) *Node {
		cfg := testConfig(t, t.TempDir(), freeAddr(t))
		cfg.NodeID, cfg.Bootstrap = id, true
		n := mustOpen(t, cfg)
		waitLeaderOf(t, n)
		require.Eventually(t, func() bool { return n.ClusterID() != "" }, 10*time.Second, 10*time.Millisecond)
		return n
	}
	a, b := open("a"), open("b")
	require.NotEqual(t, a.ClusterID(), b.ClusterID())
	require.NoError(t, mustPropose(t, b, createNS("only-in-b")).Err())
	before := suffrages(t, a)
	for _, add := range []func(context.Context, string, string) error{a.AddVoter, a.AddNonvoter} {
		err := add(ctxTimeout(t, 10*time.Second), "b", b.Addr())
		require.ErrorIs(t, err, ErrInvalidMember)
		assert.Contains(t, err.Error(), "belongs to another cluster")
	}
	assert.Equal(t, before, suffrages(t, a))

	// A node that was this cluster's member keeps its identity.
	ccfg := testConfig(t, t.TempDir(), freeAddr(t))
	ccfg.NodeID = "c"
	c := mustOpen(t, ccfg)
	require.NoError(t, a.AddVoter(ctxTimeout(t, 10*time.Second), "c", c.Addr()))
	require.Eventually(t, func() bool { return c.ClusterID() == a.ClusterID() }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, a.Remove(ctxTimeout(t, 10*time.Second), "c"))
	require.NoError(t, a.AddNonvoter(ctxTimeout(t, 10*time.Second), "c", c.Addr()))
}

// A member address Raft could never dial is refused before it joins the
// configuration: as a voter it would count towards the quorum and never
// answer, and a one-node cluster would lose its leader.
func TestAddMemberRefusesUndialableAddresses(t *testing.T) {
	cfg := testConfig(t, t.TempDir(), freeAddr(t))
	cfg.Bootstrap = true
	n := mustOpen(t, cfg)
	waitLeaderOf(t, n)
	before := suffrages(t, n)
	for _, addr := range []string{"not-an-addr", "127.0.0.1", ":8080", "127.0.0.1:0", "127.0.0.1:70000", "127.0.0.1:http", "127.0.0.1:044312", "127.0.0.1:+44312", "[::1", "a b:1", "x\ty:5"} {
		err := n.AddVoter(ctxTimeout(t, 5*time.Second), "x", addr)
		require.ErrorIs(t, err, ErrInvalidMember, addr)
		err = n.AddNonvoter(ctxTimeout(t, 5*time.Second), "x", addr)
		require.ErrorIs(t, err, ErrInvalidMember, addr)
	}
	assert.Equal(t, before, suffrages(t, n))
	// Nor may the last voter go: Raft refuses it, and it is the caller's
	// mistake, not the server's.
	require.ErrorIs(t, n.Remove(ctxTimeout(t, 5*time.Second), n.ID()), ErrInvalidMember)
	require.ErrorIs(t, n.TransferLeadership(ctxTimeout(t, 5*time.Second), ""), ErrInvalidMember, "no other voter")
	assert.Equal(t, before, suffrages(t, n))
	require.NoError(t, mustPropose(t, n, createNS("still-leading")).Err())
	require.NoError(t, CheckClusterAddr("[::1]:9000"))
	require.NoError(t, CheckClusterAddr("node-2.floe.svc:8381"))
}

// A node that joins while advertising another member's address (a
// copy-pasted --cluster-advertise, say) does not take that address: the
// member still answers there as itself, so the admission (forwarded to
// the leader from any node, as the joining node asks for it) is refused,
// and the member stays.
func TestJoinUnderAnotherMembersAddressIsRefused(t *testing.T) {
	nodes, cfgs := startJoinedCluster(t, 3)
	before := map[string]raft.ServerSuffrage{"node0": raft.Voter, "node1": raft.Voter, "node2": raft.Voter}
	for _, n := range nodes {
		require.Eventually(t, func() bool { return maps.Equal(before, suffrages(t, n)) }, 10*time.Second, 20*time.Millisecond,
			"node %s never saw the three voters", n.ID())
	}
	for _, via := range nodes {
		_, err := via.admit(ctxTimeout(t, 10*time.Second), memberRequest{ID: "copycat", Addr: cfgs[2].ClusterAddr}, true)
		require.ErrorIs(t, err, ErrInvalidMember, "via %s", via.ID())
		assert.Contains(t, err.Error(), `is "node2", not "copycat"`)
	}
	for _, n := range nodes {
		assert.Equal(t, before, suffrages(t, n), "node %s", n.ID())
	}
}

// A restarted follower is ready only once it has applied what the leader
// had committed when the follower asked, not as soon as it hears from the
// leader: heartbeats carry no commit index, and the leader's replication
// to a peer that was down backs off for a while, so the follower's own
// commit index lags. An operator's rolling restart waits for /readyz
// before stopping the next node.
func TestRestartedFollowerIsReadyOnlyOnceCaughtUp(t *testing.T) {
	nodes, cfgs := startJoinedCluster(t, 3)
	leader := waitOneLeader(t, nodes)
	f := others(nodes, leader)[0]
	i := slices.Index(nodes, f)
	require.NoError(t, f.Shutdown())
	const writes = 200
	for k := range writes {
		require.NoError(t, mustPropose(t, leader, createNS(fmt.Sprintf("down%d", k))).Err())
	}
	time.Sleep(2 * time.Second) // the leader backs off from the silent peer
	nodes[i] = mustOpen(t, cfgs[i])
	require.Eventually(t, func() bool { return nodes[i].Ready() == nil }, 30*time.Second, time.Millisecond)
	assert.True(t, hasNamespace(t, nodes[i].StaleRead, fmt.Sprintf("down%d", writes-1)),
		"ready before applying what the leader had committed")
}

// Removing a healthy voter while another is down would leave voters that
// cannot elect a leader until the one that is down comes back: refused,
// naming the one that does not answer. Removing the one that is down is
// the way out.
func TestRemoveRefusesToLeaveNoQuorum(t *testing.T) {
	nodes, _ := startJoinedCluster(t, 3)
	leader := waitOneLeader(t, nodes)
	down, healthy := others(nodes, leader)[0], others(nodes, leader)[1]
	require.NoError(t, down.Shutdown())
	before := suffrages(t, leader)
	err := leader.Remove(ctxTimeout(t, 20*time.Second), healthy.ID())
	require.ErrorIs(t, err, ErrInvalidMember)
	assert.Contains(t, err.Error(), down.ID()+" does not")
	assert.Equal(t, before, suffrages(t, leader))
	require.NoError(t, mustPropose(t, leader, createNS("still-writable")).Err())

	require.NoError(t, leader.Remove(ctxTimeout(t, 20*time.Second), down.ID()))
	assert.Len(t, suffrages(t, leader), 2)
	require.NoError(t, mustPropose(t, leader, createNS("after-removal")).Err())
}

// Two removals sent at once are each checked against the configuration
// the other leaves: with 4 voters and one down, either removal alone
// leaves 3 voters of which 2 answer, but both would leave 2 with one
// down, a cluster without a quorum. One succeeds; the other is refused
// (or, if it raced a change another leader made, told to retry), and the
// cluster keeps its leader.
func TestConcurrentRemovalsKeepTheQuorum(t *testing.T) {
	nodes, _ := startJoinedCluster(t, 4)
	leader := waitOneLeader(t, nodes)
	rest := others(nodes, leader)
	down, a, b := rest[0], rest[1], rest[2]
	require.NoError(t, down.Shutdown())
	errs := make(chan error, 2)
	for _, n := range []*Node{a, b} {
		go func() { errs <- leader.Remove(ctxTimeout(t, 20*time.Second), n.ID()) }()
	}
	var ok, refused int
	for range 2 {
		err := <-errs
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrInvalidMember), errors.Is(err, ErrUnavailable):
			refused++
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	assert.Equal(t, 1, ok)
	assert.Equal(t, 1, refused)
	assert.Len(t, suffrages(t, leader), 3)
	require.NoError(t, mustPropose(t, leader, createNS("still-writable")).Err())
}

// A leader without a cluster id (its replica skipped the entry on an older
// binary) adopts the id the other members hold, and mints one only when
// every member answers, on a binary that reports its id, that it has
// none: replicas never end up with different ids.
func TestClusterIDFromMembers(t *testing.T) {
	aware := func(id string) nodeInfo { return nodeInfo{ClusterID: id, ClusterIDAware: true, Applied: 10} }
	silent := errors.New("no answer")
	for _, c := range []struct {
		name   string
		infos  []nodeInfo
		errs   []error
		id     string
		mint   bool
		failed bool
	}{
		{"a one-node cluster mints", nil, nil, "", true, false},
		{"every member answers with none: mint", []nodeInfo{aware(""), aware("")}, []error{nil, nil}, "", true, false},
		{"a member holds one: adopt it", []nodeInfo{aware(""), aware("X")}, []error{nil, nil}, "X", false, false},
		{"adopt even when another is silent", []nodeInfo{aware("X"), {}}, []error{nil, silent}, "X", false, false},
		{"a silent member may hold one: wait", []nodeInfo{aware(""), {}}, []error{nil, silent}, "", false, false},
		{"an older binary may hold one: wait", []nodeInfo{aware(""), {}}, []error{nil, nil}, "", false, false},
		{"two ids: refuse", []nodeInfo{aware("X"), aware("Y")}, []error{nil, nil}, "", false, true},
		{"a member behind may yet apply one: wait", []nodeInfo{aware(""), {ClusterIDAware: true, Applied: 9}}, []error{nil, nil}, "", false, false},
		{"an older binary's id counts", []nodeInfo{{ClusterID: "X"}, aware("")}, []error{nil, nil}, "X", false, false},
	} {
		id, mint, err := clusterIDFrom(c.infos, c.errs, 10)
		assert.Equal(t, c.id, id, c.name)
		assert.Equal(t, c.mint, mint, c.name)
		assert.Equal(t, c.failed, err != nil, c.name)
	}
}

// A follower whose log stops advancing (it cannot append: a full disk)
// gives up on a read after readStallLimit with ErrBehind instead of
// holding it, and reports itself not ready until its log reaches the
// read index it gave up on.
func TestFollowerReadGivesUpWhenItsLogStandsStill(t *testing.T) {
	old := readStallLimit
	readStallLimit = 300 * time.Millisecond
	t.Cleanup(func() { readStallLimit = old })

	nodes, _ := startJoinedCluster(t, 3)
	leader := waitOneLeader(t, nodes)
	follower := others(nodes, leader)[0]
	require.NoError(t, mustPropose(t, leader, createNS("a")).Err())
	require.Eventually(t, func() bool { return follower.Ready() == nil }, 10*time.Second, 10*time.Millisecond)

	// A read index well beyond the leader's log: the follower's log does
	// not reach it (an entry the leader adds by itself, such as its
	// cluster identity record, moves it one step, not five).
	const ahead = 5
	target := leader.raft.LastIndex() + ahead
	err := follower.waitLogReaches(ctxTimeout(t, 30*time.Second), target)
	require.ErrorIs(t, err, ErrBehind)
	require.ErrorIs(t, follower.Ready(), ErrCatchingUp, "not ready while its log is below the index it gave up on")

	// Once its log reaches that index it is ready again.
	for i := range ahead {
		require.NoError(t, mustPropose(t, leader, createNS(fmt.Sprintf("b%d", i))).Err())
	}
	require.Eventually(t, func() bool { return follower.Ready() == nil }, 10*time.Second, 10*time.Millisecond)
}

// A leader whose clock is far from a majority of the other voters' is the
// one that is wrong: it refuses keyed commands and prunes (whose records
// and cut-offs its clock would stamp), and hands leadership to a voter
// whose clock agrees with the others. One follower off does not make the
// leader's clock wrong.
func TestLeaderWithAClockOffRefusesKeyedCommandsAndHandsOver(t *testing.T) {
	old := clockCheckInterval
	clockCheckInterval = 50 * time.Millisecond
	t.Cleanup(func() { clockCheckInterval = old })
	offsets := make([]atomic.Int64, 3)
	nodes, _ := startJoinedClusterWith(t, 3, func(i int, cfg *Config) {
		cfg.Clock = func() time.Time { return time.Now().Add(time.Duration(offsets[i].Load())) }
	})
	leader := waitOneLeader(t, nodes)
	li := slices.Index(nodes, leader)
	ctx := ctxTimeout(t, 30*time.Second)
	outcome := func(key string, at time.Time) fsm.RecordOutcome {
		return fsm.RecordOutcome{Key: key, Binding: fsm.Binding{Operation: "createNamespace"}, AtMs: at.UnixMilli(),
			ExpiresMs: at.Add(time.Hour).UnixMilli(), Result: fsm.Result{Status: fsm.StatusNotFound}}
	}

	// One follower an hour ahead: the leader's clock is not the wrong one;
	// nor with the other follower silent (down, paused, an older release),
	// nor with the followers' clocks disagreeing with each other too.
	followers := others(nodes, leader)
	fi, gi := slices.Index(nodes, followers[0]), slices.Index(nodes, followers[1])
	offsets[fi].Store(int64(time.Hour))
	off, _ := leader.checkClock(ctx)
	assert.False(t, off, "one follower off")
	pause(followers[1], true)
	off, _ = leader.checkClock(ctx)
	assert.False(t, off, "one follower off, the other silent")
	pause(followers[1], false)
	offsets[gi].Store(int64(-time.Hour))
	off, _ = leader.checkClock(ctx)
	assert.False(t, off, "the followers two hours apart")
	offsets[gi].Store(0)
	_, err := leader.Propose(ctx, outcome("k-one-off", time.Now()))
	require.NoError(t, err)
	offsets[fi].Store(0)

	// The leader an hour behind both followers. Checked at once here (the
	// watch also runs on its own).
	offsets[li].Store(int64(-time.Hour))
	off, to := leader.checkClock(ctx)
	require.True(t, off)
	assert.NotEqual(t, leader.ID(), to)
	if leader.IsLeader() {
		_, err = leader.Propose(ctx, outcome("k-leader-off", time.Now().Add(-time.Hour)))
		if !errors.Is(err, ErrNotLeader) { // it may have handed over already
			require.ErrorIs(t, err, ErrClockSkew)
			assert.Contains(t, err.Error(), "nothing was applied")
		}
		_, err = leader.Propose(ctx, fsm.PruneIdempotency{NowMs: time.Now().Add(-time.Hour).UnixMilli(), Limit: 10})
		if !errors.Is(err, ErrNotLeader) {
			require.ErrorIs(t, err, ErrClockSkew)
		}
	}
	require.Eventually(t, func() bool {
		l := waitOneLeader(t, nodes)
		return l != leader
	}, 20*time.Second, 50*time.Millisecond, "leadership handed to a voter whose clock agrees")
	require.Eventually(t, func() bool { return testutil.ToFloat64(leader.metrics.clockOff) == 0 }, 10*time.Second, 10*time.Millisecond,
		"the gauge is the leader's: 0 once it no longer leads")

	// Keyed commands pass through the new leader; the node whose clock is
	// off has its own refused by it.
	next := waitOneLeader(t, nodes)
	_, err = next.Propose(ctx, outcome("k-after", time.Now()))
	require.NoError(t, err)
	_, err = leader.Propose(ctx, outcome("k-from-off", time.Now().Add(-time.Hour)))
	require.ErrorIs(t, err, ErrClockSkew, "the node whose clock is off forwards: the new leader refuses it")
	require.NoError(t, next.Read(ctx, func(r *fsm.Reader) error {
		_, ok := r.IdempotencyRecord("k-leader-off")
		assert.False(t, ok, "nothing of the refused command was applied")
		return nil
	}))
}

// A leader whose clock jumps is checked again before its next keyed
// command, not at its next periodic check: the commands it took in
// between would be stamped by the jumped clock.
func TestLeaderClockJumpIsCheckedBeforeTheNextKeyedCommand(t *testing.T) {
	old := clockCheckInterval
	clockCheckInterval = time.Hour // only the check at the start of a leadership
	t.Cleanup(func() { clockCheckInterval = old })
	offsets := make([]atomic.Int64, 3)
	nodes, _ := startJoinedClusterWith(t, 3, func(i int, cfg *Config) {
		cfg.Clock = func() time.Time { return time.Now().Add(time.Duration(offsets[i].Load())) }
	})
	leader := waitOneLeader(t, nodes)
	require.Eventually(t, func() bool { return !leader.clockMoved() }, 10*time.Second, 10*time.Millisecond, "the first check")
	ctx := ctxTimeout(t, 20*time.Second)
	record := func(key string) fsm.RecordOutcome {
		at := leader.cfg.Clock()
		return fsm.RecordOutcome{Key: key, Binding: fsm.Binding{Operation: "createNamespace"}, AtMs: at.UnixMilli(),
			ExpiresMs: at.Add(time.Hour).UnixMilli(), Result: fsm.Result{Status: fsm.StatusNotFound}}
	}
	_, err := leader.Propose(ctx, record("k-before"))
	require.NoError(t, err)

	offsets[slices.Index(nodes, leader)].Store(int64(time.Hour))
	_, err = leader.Propose(ctx, record("k-after-jump"))
	require.ErrorIs(t, err, ErrClockSkew, "refused at once, not after the next periodic check")
}

// A keyed command forwarded by a node whose clock is far from the
// leader's is refused before anything is appended: its Idempotency-Key
// record would expire by that clock, and a retry within the advertised
// lifetime could run twice. The clocks are judged, not the command's own
// time (when its request arrived, which may be minutes old); other
// commands are not judged.
func TestLeaderRefusesForwardedKeyedCommandsFromASkewedClock(t *testing.T) {
	offsets := make([]atomic.Int64, 3)
	nodes, _ := startJoinedClusterWith(t, 3, func(i int, cfg *Config) {
		cfg.Clock = func() time.Time { return time.Now().Add(time.Duration(offsets[i].Load())) }
	})
	leader := waitOneLeader(t, nodes)
	follower := others(nodes, leader)[0]
	fi := slices.Index(nodes, follower)
	ctx := ctxTimeout(t, 20*time.Second)
	outcome := func(key string, at time.Time) fsm.RecordOutcome {
		return fsm.RecordOutcome{Key: key, Binding: fsm.Binding{Operation: "createNamespace"}, AtMs: at.UnixMilli(),
			ExpiresMs: at.Add(time.Hour).UnixMilli(), Result: fsm.Result{Status: fsm.StatusNotFound}}
	}
	// A slow request: its time is ten minutes old, the clocks agree.
	_, err := follower.Propose(ctx, outcome("k-slow", time.Now().Add(-10*time.Minute)))
	require.NoError(t, err, "a request's age is not a clock's skew")

	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		offsets[fi].Store(int64(skew))
		_, err := follower.Propose(ctx, outcome("k-skewed", time.Now().Add(skew)))
		require.ErrorIs(t, err, ErrClockSkew, "skew %s", skew)
		assert.Contains(t, err.Error(), "one of them is wrong")
		assert.Equal(t, 1, strings.Count(err.Error(), ErrClockSkew.Error()), "said once: %v", err)
		require.NoError(t, mustPropose(t, follower, createNS(fmt.Sprintf("unkeyed%d", skew/time.Hour+1))).Err(), "unkeyed commands pass")
	}
	offsets[fi].Store(int64(time.Minute))
	_, err = follower.Propose(ctx, outcome("k-near", time.Now()))
	require.NoError(t, err, "a minute apart passes")
	require.NoError(t, leader.Read(ctx, func(r *fsm.Reader) error {
		_, skewed := r.IdempotencyRecord("k-skewed")
		assert.False(t, skewed, "nothing of the refused commands was applied")
		_, near := r.IdempotencyRecord("k-near")
		assert.True(t, near)
		return nil
	}))
	// The leader's own keyed commands are judged by the other voters'
	// clocks (TestLeaderWithAClockOffRefusesKeyedCommandsAndHandsOver):
	// with both followers an hour from it, its clock is the wrong one.
	offsets[slices.Index(nodes, leader)].Store(int64(time.Hour))
	_, err = leader.Propose(ctx, outcome("k-leader", time.Now().Add(time.Hour)))
	if !errors.Is(err, ErrNotLeader) { // it may have handed over already
		require.ErrorIs(t, err, ErrClockSkew)
	}
}

// A member that lost its data directory and was started without --join
// forms a cluster of one and stamps its own identity. The cluster's leader
// still has its address, and Raft alone would make it a follower again
// over the entries it had applied on its own (both logs start with a
// bootstrap entry at index 1, term 1). The leader does not connect Raft to
// it, and the cluster's status says why.
func TestRaftDoesNotReachAMemberThatFormedItsOwnCluster(t *testing.T) {
	// Started again at once, while the cluster's leader still sends it
	// heartbeats: it keeps them out until it has its own identity.
	t.Run("restarted at once", func(t *testing.T) { testFormedItsOwnCluster(t, false) })
	// Cut off until it has its identity (the cluster was down, say), then
	// reached by a leader at a later term.
	t.Run("reached later", func(t *testing.T) { testFormedItsOwnCluster(t, true) })
}

func testFormedItsOwnCluster(t *testing.T, cutOff bool) {
	nodes, peers := openThree(t)
	leader := waitOneLeader(t, nodes)
	for _, n := range nodes {
		require.Eventually(t, func() bool { return n.ClusterID() != "" && n.ClusterID() == leader.ClusterID() }, 10*time.Second, 10*time.Millisecond)
	}
	victim := 0
	for nodes[victim] == leader {
		victim++
	}
	require.NoError(t, nodes[victim].Shutdown())

	cfg := testConfig(t, t.TempDir(), string(peers[victim].Address))
	cfg.NodeID, cfg.Bootstrap = string(peers[victim].ID), true
	cfg.Faults.(*raftfault.Network).Isolate(cutOff)
	lone := mustOpen(t, cfg)
	waitLeaderOf(t, lone)
	require.Eventually(t, func() bool { return lone.ClusterID() != "" }, 10*time.Second, 10*time.Millisecond)
	own := lone.ClusterID()
	require.NotEqual(t, leader.ClusterID(), own)
	require.NoError(t, mustPropose(t, lone, createNS("only-lone")).Err())
	// The cluster moves to a later term than the lone node's, as a
	// cluster in use has: Raft then makes the lone node step down for
	// its leader.
	var rest []*Node
	for i, n := range nodes {
		if i != victim {
			rest = append(rest, n)
		}
	}
	for cutOff && leader.raft.CurrentTerm() <= lone.raft.CurrentTerm() {
		to := rest[0]
		if to == leader {
			to = rest[1]
		}
		// On a busy machine leadership may move by itself meanwhile:
		// the next round finds the new leader.
		if err := leader.raft.LeadershipTransferToServer(to.id, raft.ServerAddress(to.Addr())).Error(); !errors.Is(err, raft.ErrNotLeader) {
			require.NoError(t, err)
		}
		leader = waitOneLeader(t, rest)
	}
	cfg.Faults.(*raftfault.Network).Isolate(false)

	require.NoError(t, mustPropose(t, leader, createNS("after")).Err())
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(leader.metrics.foreignDials) > 0 || hasNamespace(t, lone.StaleRead, "after")
	}, 30*time.Second, 10*time.Millisecond, "the leader never tried to reach the address")
	assert.False(t, hasNamespace(t, lone.StaleRead, "after"), "the cluster's entries never reach it")
	assert.True(t, lone.IsLeader(), "still the leader of its own cluster")
	assert.Equal(t, own, lone.ClusterID())
	assert.True(t, hasNamespace(t, linearRead(t, lone), "only-lone"))
	assert.False(t, hasNamespace(t, linearRead(t, lone), "after"), "the cluster's entries never reach it")

	st, err := leader.Status(ctxTimeout(t, 10*time.Second))
	require.NoError(t, err)
	var flagged bool
	for _, m := range st.Members {
		if m.ID == string(peers[victim].ID) {
			flagged = strings.Contains(m.Error, "another cluster's state")
		}
	}
	assert.True(t, flagged, "status: %+v", st.Members)
}

// The identity probe before a Raft dial judges only what the peer said of
// itself: an error answer (the probe reached a busy node after its
// deadline, say) is no answer, and the peer is not dialled; only a binary
// that does not know the probe is left to Raft's own dial.
func TestPeerClusterProbeErrorAnswers(t *testing.T) {
	cfg := testConfig(t, t.TempDir(), freeAddr(t))
	cfg.Bootstrap = true
	n := mustOpen(t, cfg)
	waitLeaderOf(t, n)
	require.Eventually(t, func() bool { return n.ClusterID() != "" }, 10*time.Second, 10*time.Millisecond)

	for _, c := range []struct {
		name   string
		answer *transport.RemoteError
		dial   bool
	}{
		{"after its deadline", &transport.RemoteError{Code: transport.CodeDeadlineExceeded, Message: "request arrived after its deadline; handler not run"}, false},
		{"shutting down", &transport.RemoteError{Code: codeShutdown, Message: "raft is shutdown"}, false},
		{"internal", &transport.RemoteError{Code: transport.CodeInternal, Message: "handler panic"}, false},
		{"unknown method", &transport.RemoteError{Code: codeBadRequest, Message: unknownMethod + rpcInfo}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			peer, err := transport.Listen(transport.Config{BindAddr: freeAddr(t)})
			require.NoError(t, err)
			t.Cleanup(func() { peer.Close() })
			peer.Serve(func(context.Context, string, []byte) ([]byte, error) { return nil, c.answer })
			err = n.checkPeerCluster(peer.Addr().String(), time.Second)
			if c.dial {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err, "an error answer says nothing of the peer's cluster")
			}
		})
	}
}

// A stopping leader hands leadership over first: another voter leads, and
// the old leader forwards what it is sent. On a follower, or alone, it
// does nothing.
func TestHandOverBeforeStopping(t *testing.T) {
	alone := testConfig(t, t.TempDir(), freeAddr(t))
	alone.Bootstrap = true
	one := mustOpen(t, alone)
	waitLeaderOf(t, one)
	require.NoError(t, one.HandOver(ctxTimeout(t, 5*time.Second)))
	assert.True(t, one.IsLeader(), "no other voter: it stays the leader")

	nodes, _ := openThree(t)
	leader := waitOneLeader(t, nodes)
	for _, n := range nodes {
		if n != leader {
			require.NoError(t, n.HandOver(ctxTimeout(t, 5*time.Second)))
		}
	}
	assert.True(t, leader.IsLeader(), "a follower's hand-over changes nothing")
	// With a voter down, leadership goes to the one that answers, not to
	// the one Raft would pick first among equals.
	var rest []*Node
	for _, n := range nodes {
		if n != leader {
			rest = append(rest, n)
		}
	}
	require.NoError(t, rest[0].Shutdown())
	require.NoError(t, leader.HandOver(ctxTimeout(t, 10*time.Second)))
	assert.False(t, leader.IsLeader())
	// It returns once it knows the new leader (it then lingers, answering
	// forwarded calls "not the leader", before its stop closes its port).
	_, known, _ := leader.leaderNow()
	assert.Equal(t, rest[1].ID(), string(known), "the old leader knows the new one when HandOver returns")
	waitOneLeader(t, []*Node{leader, rest[1]})
	assert.True(t, rest[1].IsLeader())
	res, err := leader.Propose(ctxTimeout(t, 10*time.Second), createNS("after-hand-over"))
	require.NoError(t, err)
	require.NoError(t, res.Err())
}

// aFollower returns a node of nodes other than leader, and its Config.
func aFollower(nodes []*Node, cfgs []Config, leader *Node) (*Node, Config) {
	for i, n := range nodes {
		if n != leader {
			return n, cfgs[i]
		}
	}
	return nil, Config{}
}

// A node removed from the cluster says so in Ready (wrapping ErrNoLeader
// and ErrNotMember, with the way back), also after a restart on its data
// directory, rather than only "no leader".
func TestRemovedNodeSaysSo(t *testing.T) {
	nodes, cfgs := startJoinedCluster(t, 3)
	leader := waitOneLeader(t, nodes)
	gone, cfg := aFollower(nodes, cfgs, leader)
	require.NoError(t, leader.Remove(ctxTimeout(t, 10*time.Second), gone.ID()))
	require.Eventually(t, func() bool { return errors.Is(gone.Ready(), ErrNotMember) }, 20*time.Second, 20*time.Millisecond)
	err := gone.Ready()
	require.ErrorIs(t, err, ErrNoLeader)
	assert.Contains(t, err.Error(), "floe members add-voter "+gone.ID())
	require.NoError(t, gone.Shutdown())

	again := mustOpen(t, cfg)
	require.Eventually(t, func() bool { return errors.Is(again.Ready(), ErrNotMember) }, 20*time.Second, 20*time.Millisecond)
	for _, n := range others(nodes, gone) {
		assert.NoError(t, n.Ready(), n.ID())
	}
}

// A node cut off when it was removed, then restarted at another address,
// never receives the entry removing it (the leader stops replicating to
// it, and only ever tried its old address), so its own log still lists
// it. Its request to move its address is refused (it does not add itself
// back), and once it has known no leader for a while it asks the others
// and says it was removed, and how to come back.
func TestNodeRemovedWhileCutOffSaysSo(t *testing.T) {
	testRemovedWhileCutOff(t, false)
}

// The same when the leader is a node added after the removal: none of the
// members the removed node knows leads, so it asks the leader they name.
func TestNodeRemovedWhileCutOffAsksTheLeaderNamed(t *testing.T) {
	testRemovedWhileCutOff(t, true)
}

func testRemovedWhileCutOff(t *testing.T, replaced bool) {
	nodes, cfgs := startJoinedCluster(t, 3)
	leader := waitOneLeader(t, nodes)
	gone, cfg := aFollower(nodes, cfgs, leader)
	// It holds the membership in its own log before it is cut off (a node
	// that never had it restarts as one joining afresh).
	require.Eventually(t, func() bool { return gone.Ready() == nil && len(gone.memberIDs()) == 3 }, 20*time.Second, 10*time.Millisecond)
	isolate(gone, true)
	require.NoError(t, leader.Remove(ctxTimeout(t, 10*time.Second), gone.ID()))
	require.NoError(t, gone.Shutdown())
	isolate(gone, false)
	rest := others(nodes, gone)
	if replaced {
		ncfg := testConfig(t, t.TempDir(), freeAddr(t))
		ncfg.NodeID = "node9"
		ncfg.Join = []string{leader.Addr()}
		newcomer := mustOpen(t, ncfg)
		require.Eventually(t, func() bool { return newcomer.Ready() == nil }, 20*time.Second, 20*time.Millisecond)
		require.NoError(t, leader.TransferLeadership(ctxTimeout(t, 10*time.Second), newcomer.ID()))
		rest = append(rest, newcomer)
		leader = waitOneLeader(t, rest)
		require.Equal(t, newcomer, leader)
	}

	cfg.ClusterAddr = freeAddr(t)
	again := mustOpen(t, cfg)
	require.Contains(t, again.memberIDs(), gone.ID(), "the removed node must not have learned of it through Raft")
	var last error
	if !assert.Eventually(t, func() bool {
		last = again.Ready()
		return errors.Is(last, ErrNotMember) && errors.Is(last, ErrNoLeader) &&
			strings.Contains(last.Error(), "the membership of the leader, "+leader.ID()) &&
			strings.Contains(last.Error(), "floe members add-voter "+gone.ID())
	}, 30*time.Second, 20*time.Millisecond) {
		t.Fatalf("last Ready: %v", last)
	}
	assert.NotContains(t, leader.memberIDs(), gone.ID(), "the removed node added itself back")
	// A membership change sent to it says why it cannot be made there.
	err := again.Remove(ctxTimeout(t, 5*time.Second), leader.ID())
	require.ErrorIs(t, err, ErrUnavailable)
	assert.ErrorIs(t, err, ErrNotMember)
	for _, n := range rest {
		assert.NoError(t, n.Ready(), n.ID())
	}
}

// A node whose --join addresses never answer (mistyped, or the others not
// started) says so at Warn, naming them, instead of only "no leader".
func TestJoinNobodyAnswersIsWarned(t *testing.T) {
	logs := &testenv.LogBuffer{}
	cfg := testConfig(t, t.TempDir(), freeAddr(t))
	cfg.NodeID = "lonely"
	nobody := freeAddr(t)
	cfg.Join = []string{nobody}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	mustOpen(t, cfg)
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "no --join address answers") && strings.Contains(logs.String(), nobody)
	}, 30*time.Second, 100*time.Millisecond, "logs: %s", logs.String())
}

// A follower removed from the cluster no longer receives the log, so a read
// index the leader gave it would never be reached: its reads waited
// readStallLimit (10 s) and then failed. The leader now refuses such a node
// a read index, and its reads fail at once saying it is not a member.
func TestRemovedFollowerIsRefusedAReadIndex(t *testing.T) {
	nodes, _ := startJoinedCluster(t, 3)
	leader := waitOneLeader(t, nodes)
	gone := others(nodes, leader)[0]
	require.NoError(t, mustPropose(t, leader, createNS("a")).Err())
	require.Eventually(t, func() bool { return gone.Ready() == nil }, 10*time.Second, 10*time.Millisecond)

	// A member is given its read index.
	_, err := gone.askReadIndex(ctxTimeout(t, 10*time.Second), context.Background(), leader.Addr())
	require.NoError(t, err)

	require.NoError(t, leader.Remove(ctxTimeout(t, 10*time.Second), gone.ID()))
	require.NoError(t, mustPropose(t, leader, createNS("b")).Err())
	// Asked directly of the leader, whatever the removed node has learned
	// of its removal meanwhile.
	_, err = gone.askReadIndex(ctxTimeout(t, 10*time.Second), context.Background(), leader.Addr())
	require.ErrorIs(t, err, ErrNotMember)
	require.ErrorIs(t, err, ErrNoLeader, "a client may send the read to another node (503)")
	assert.Contains(t, err.Error(), "the membership of the leader, "+leader.ID())
	assert.Equal(t, 1, strings.Count(err.Error(), ErrNotMember.Error()), err.Error())

	// Through the follower's read path, when it still knows a leader: at
	// once, not after waiting for its log.
	if _, id := gone.raft.LeaderWithID(); id != "" {
		_, err = gone.followerReadIndex(ctxTimeout(t, 10*time.Second), func() bool { return true })
		require.ErrorIs(t, err, ErrNotMember)
	}

	// An asker without an ID (an older release) is not checked.
	res, err := leader.handleRPC(ctxTimeout(t, 10*time.Second), rpcReadIndex, []byte(`{}`))
	require.NoError(t, err)
	assert.Contains(t, string(res), `"index"`)
}
