package raftnode

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
)

// A leader's epoch ends when another leader is known or none has been for
// the grace; a moment without a leader that ends with the same one does not
// end it.
func TestLeaderWatchEpochs(t *testing.T) {
	w := newLeaderWatch(100 * time.Millisecond)
	defer w.close()
	var news atomic.Int32
	fn := func() { news.Add(1) }
	w.onNew.Store(&fn)
	w.update("a:1", "a")
	assert.EqualValues(t, 1, news.Load(), "the first leader is new")
	addr, id, a := w.current()
	assert.Equal(t, "a:1", string(addr))
	assert.Equal(t, "a", string(id))

	// Lost for a moment, then back: the same epoch goes on.
	w.update("", "")
	_, id, e := w.current()
	assert.Empty(t, id)
	assert.Equal(t, a, e, "the last leader's epoch, while none is known")
	w.update("a:1", "a")
	time.Sleep(200 * time.Millisecond)
	_, _, e = w.current()
	require.NoError(t, a.Err())
	assert.Equal(t, a, e)
	assert.EqualValues(t, 1, news.Load(), "the same leader back is not new")

	// Another leader ends it at once.
	w.update("b:1", "b")
	require.Error(t, a.Err())
	assert.True(t, errors.Is(context.Cause(a), errLeaderChanged))
	_, id, b := w.current()
	assert.Equal(t, "b", string(id))
	require.NoError(t, b.Err())
	assert.EqualValues(t, 2, news.Load())

	// No leader for longer than the grace ends it too.
	w.update("", "")
	require.NoError(t, b.Err())
	require.Eventually(t, func() bool { return b.Err() != nil }, 5*time.Second, 5*time.Millisecond)
	assert.True(t, errors.Is(context.Cause(b), errLeaderChanged))
	// The same leader back after that starts a new epoch.
	w.update("b:1", "b")
	_, id, b2 := w.current()
	assert.Equal(t, "b", string(id))
	require.NoError(t, b2.Err())
	assert.EqualValues(t, 3, news.Load(), "a new epoch, though the same leader")
}

// A command proposed on a leader that is handing leadership over is refused
// by Raft before it has an index: nothing was appended, and it goes to the
// next leader, as a follower's would, instead of failing back to the
// client (a planned transfer made 503s of commits sent to the leader).
func TestProposeOnAHandingOverLeaderReachesTheNext(t *testing.T) {
	nodes, _ := openThree(t)
	for round := range 3 {
		leader := waitOneLeader(t, nodes)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var (
			stop    atomic.Bool
			done    = make(chan error, 8)
			applied atomic.Int64
		)
		for w := range 8 {
			go func() {
				var err error
				for i := 0; !stop.Load() && err == nil; i++ {
					var res fsm.Result
					res, err = leader.Propose(ctx, createNS(fmt.Sprintf("r%d-w%d-%d", round, w, i)))
					if err == nil {
						err = res.Err()
						applied.Add(1)
					}
				}
				done <- err
			}()
		}
		require.Eventually(t, func() bool { return applied.Load() > 20 }, 10*time.Second, time.Millisecond)
		require.NoError(t, leader.raft.LeadershipTransfer().Error())
		require.Eventually(t, func() bool { return !leader.IsLeader() }, 10*time.Second, time.Millisecond)
		time.Sleep(50 * time.Millisecond)
		stop.Store(true)
		for range 8 {
			// A command Raft had given an index when leadership went is
			// an unknown outcome (ErrLeadershipLost), rightly: only a
			// refusal before an index must not reach the caller.
			if err := <-done; !errors.Is(err, ErrUnknownOutcome) {
				assert.NoError(t, err, "round %d", round)
			}
		}
		cancel()
	}
}

// A forwarded command's call outlives the leader's epoch by a grace: a
// leader handing over answers it within that time (with its outcome, or
// "not the leader"); only then is it given up on, with the epoch's cause.
func TestLeaderCtxAfterGivesTheCallItsGrace(t *testing.T) {
	epoch, end := context.WithCancelCause(context.Background())
	ctx, done := leaderCtxAfter(context.Background(), epoch, 100*time.Millisecond)
	defer done()
	ended := time.Now()
	end(errLeaderChanged)
	select {
	case <-ctx.Done():
		t.Fatal("canceled at once")
	case <-time.After(50 * time.Millisecond):
	}
	<-ctx.Done()
	assert.GreaterOrEqual(t, time.Since(ended), 100*time.Millisecond)
	assert.ErrorIs(t, context.Cause(ctx), errLeaderChanged)

	// Without a grace: at once. A call that ended first: never.
	epoch, end = context.WithCancelCause(context.Background())
	now, doneNow := leaderCtx(context.Background(), epoch)
	defer doneNow()
	finished, doneFinished := leaderCtxAfter(context.Background(), epoch, time.Hour)
	doneFinished()
	end(errLeaderChanged)
	<-now.Done()
	assert.ErrorIs(t, context.Cause(now), errLeaderChanged)
	assert.ErrorIs(t, context.Cause(finished), context.Canceled, "a call that ended is not canceled again by the epoch")
}
