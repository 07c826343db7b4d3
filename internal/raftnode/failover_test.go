package raftnode

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/raftnode/raftfault"
)

// pause silences n as if its process were stopped (on) or lets it run
// again (off); n must have been opened with a testConfig.
func pause(n *Node, on bool) {
	n.cfg.Faults.(*raftfault.Network).Pause(on)
}

// A leader that falls silent (a stopped process: its connections stay open,
// nothing is answered) is replaced, and each surviving node, the one that
// loses the election too, serves linearizable reads and acknowledges writes
// soon after: the calls it had in flight to the old leader are abandoned
// once it learns the leader changed, and reads queued behind them do not
// wait for them. The old leader is only resumed long after.
func TestSilentLeaderFailoverThroughEveryFollower(t *testing.T) {
	nodes, _ := startJoinedCluster(t, 3)
	old := waitOneLeader(t, nodes)
	require.NoError(t, mustPropose(t, old, createNS("before")).Err())
	rest := others(nodes, old)
	for _, n := range rest {
		// Warm the connections to the leader, as a busy follower has them.
		assert.True(t, hasNamespace(t, linearRead(t, n), "before"))
	}

	start := time.Now()
	pause(old, true)
	healed := make(chan struct{})
	heal := time.AfterFunc(20*time.Second, func() {
		pause(old, false)
		close(healed)
	})
	t.Cleanup(func() {
		if heal.Stop() {
			pause(old, false) // before the nodes shut down
		}
	})

	type outcome struct {
		what string
		err  error
		at   time.Duration // since the pause
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		wg       sync.WaitGroup
	)
	record := func(what string, err error) {
		at := time.Since(start)
		select {
		case <-healed:
			err = errors.Join(err, fmt.Errorf("completed only after the old leader was resumed"))
		default:
		}
		mu.Lock()
		outcomes = append(outcomes, outcome{what, err, at})
		mu.Unlock()
	}
	for _, n := range rest {
		// Reads arriving before, during and after the election, through
		// each survivor. Each is one Read call: no retries by the caller.
		for i, delay := range []time.Duration{0, 100 * time.Millisecond, 400 * time.Millisecond, time.Second} {
			wg.Go(func() {
				time.Sleep(delay)
				var saw bool
				err := n.Read(ctxTimeout(t, 30*time.Second), func(r *fsm.Reader) error {
					_, saw = r.Namespace([]string{"before"})
					return nil
				})
				if err == nil && !saw {
					err = errors.New("read misses an acknowledged write")
				}
				record(fmt.Sprintf("read %d via %s", i, n.ID()), err)
			})
		}
		// A client writing through each survivor: it retries answers that
		// say nothing was applied, or that the outcome is unknown (a write
		// forwarded to the old leader before it fell silent), as
		// mustPropose does.
		wg.Go(func() {
			name := "after-" + n.ID()
			ctx := ctxTimeout(t, 30*time.Second)
			unknown := false
			for {
				res, err := n.Propose(ctx, createNS(name))
				if err == nil {
					if res.Err() != nil && !(unknown && errors.Is(res.Err(), fsm.ErrAlreadyExists)) {
						err = res.Err()
					}
					record("write via "+n.ID(), err)
					return
				}
				retry := errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader) || errors.Is(err, ErrUnknownOutcome)
				if !retry || ctx.Err() != nil {
					record("write via "+n.ID(), err)
					return
				}
				unknown = unknown || errors.Is(err, ErrUnknownOutcome)
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wg.Wait()

	for _, o := range outcomes {
		t.Logf("%s: %s after the pause, error %v", o.what, o.at.Round(time.Millisecond), o.err)
		// Served while the old leader is still silent (record fails an
		// outcome that came after it was resumed): how fast is measured by
		// jepsen-lite's failover fault, not asserted here.
		assert.NoError(t, o.err, o.what)
	}
	leader := waitOneLeader(t, rest)
	assert.NotEqual(t, old.ID(), leader.ID())
	for _, n := range rest {
		assert.True(t, hasNamespace(t, linearRead(t, n), "after-"+n.ID()), "via %s", n.ID())
	}
}

// Status answers although members are silent: it asks every member
// at the same time, each for a short while, and reports the silent ones as
// unreachable.
func TestStatusWithSilentMembersAnswersFromWhatItKnows(t *testing.T) {
	nodes, _ := startJoinedCluster(t, 3)
	leader := waitOneLeader(t, nodes)
	rest := others(nodes, leader)
	asker, silent := rest[0], rest[1]
	require.Eventually(t, func() bool {
		st, err := asker.Status(ctxTimeout(t, 10*time.Second))
		if err != nil || len(st.Members) != 3 {
			return false
		}
		for _, m := range st.Members {
			if !m.Reachable {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "the asker never saw every member")

	// Silence the leader and the other follower: the asker is left alone,
	// with two members that never answer.
	pause(leader, true)
	pause(silent, true)
	t.Cleanup(func() {
		pause(leader, false)
		pause(silent, false)
	})
	begin := time.Now()
	st, err := asker.Status(ctxTimeout(t, 10*time.Second))
	took := time.Since(begin)
	require.NoError(t, err)
	// How long it took is logged, not asserted (machines here are noisy);
	// what is checked is that it answers at all, from what it knows.
	t.Logf("Status with two silent members took %s", took.Round(time.Millisecond))
	require.Len(t, st.Members, 3)
	for _, m := range st.Members {
		if m.ID == asker.ID() {
			assert.True(t, m.Reachable, "%+v", m)
			continue
		}
		assert.False(t, m.Reachable, "%+v", m)
		assert.NotEmpty(t, m.Error, "%+v", m)
		assert.NotEmpty(t, m.ClusterAddr, "%+v", m)
	}
}

// A follower left alone (the leader and the other follower silent) answers
// a linearizable read with "no leader", which a client may resend (503),
// never with an error of unknown outcome: a read writes nothing.
func TestReadWithNoLeaderLeftIsNoLeader(t *testing.T) {
	nodes, _ := startJoinedCluster(t, 3)
	leader := waitOneLeader(t, nodes)
	rest := others(nodes, leader)
	asker, silent := rest[0], rest[1]
	require.Eventually(t, func() bool { return asker.Ready() == nil }, 10*time.Second, 10*time.Millisecond)
	pause(leader, true)
	pause(silent, true)
	t.Cleanup(func() {
		pause(leader, false)
		pause(silent, false)
	})
	for range 3 {
		err := asker.Read(ctxTimeout(t, 30*time.Second), func(*fsm.Reader) error { return nil })
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrNoLeader, "%v", err)
		assert.NotErrorIs(t, err, ErrUnknownOutcome)
	}
}

// A node stopping lets the proposals waiting on it be answered first: a
// command its log holds but the cluster has not yet committed is answered
// once it commits, not cut off as of unknown outcome. Here the followers
// are silent while the leader stops, and speak again before proposalDrain
// is over.
func TestShutdownLetsProposalsInFlightFinish(t *testing.T) {
	nodes, _ := startJoinedClusterWith(t, 3, func(_ int, cfg *Config) {
		// The leader keeps leading while its followers are silent.
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 3*time.Second, 3*time.Second, 3*time.Second
	})
	leader := waitOneLeader(t, nodes)
	require.NoError(t, mustPropose(t, leader, createNS("before")).Err())
	followers := others(nodes, leader)
	for _, f := range followers {
		pause(f, true)
	}
	last := leader.raft.LastIndex()
	proposed := make(chan error, 1)
	go func() {
		res, err := leader.Propose(ctxTimeout(t, 20*time.Second), createNS("in-flight"))
		if err == nil {
			err = res.Err()
		}
		proposed <- err
	}()
	require.Eventually(t, func() bool { return leader.raft.LastIndex() > last }, 10*time.Second, 5*time.Millisecond,
		"the command is in the leader's log")
	stopped := make(chan error, 1)
	go func() { stopped <- leader.Shutdown() }()
	require.Eventually(t, leader.closed.Load, 10*time.Second, 5*time.Millisecond, "the stop began")
	for _, f := range followers {
		pause(f, false)
	}
	select {
	case err := <-proposed:
		require.NoError(t, err, "a command the cluster commits while its leader stops is answered as applied")
	case <-time.After(15 * time.Second):
		t.Fatal("the proposal was never answered")
	}
	require.NoError(t, <-stopped)
	assert.True(t, hasNamespace(t, linearRead(t, followers[0]), "in-flight"))
}
