package raftnode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// errLeaderChanged ends a call to a leader that is no longer the leader this
// node knows: another one was elected, or none has been known for a while.
var errLeaderChanged = errors.New("the leader changed")

// leaderWatch follows the leader this node knows of, so that calls sent to
// a leader can be abandoned once it is no longer the one (see forwardTo and
// askReadIndex).
//
// Each leader known in turn has an epoch, a context that ends when another
// leader becomes known, or when none has been known for lostGrace. A
// moment without a leader that ends with the same one (a missed heartbeat
// on a busy machine) does not end its epoch: calls to it stand.
type leaderWatch struct {
	lostGrace time.Duration

	// onNew, if set, is called (outside mu) each time a leader other than
	// the epoch's becomes known.
	onNew atomic.Pointer[func()]

	mu     sync.Mutex
	addr   raft.ServerAddress // the leader of the epoch; "" before any
	id     raft.ServerID
	known  bool // the leader is known now (false: lost, within the grace)
	epoch  context.Context
	end    context.CancelCauseFunc
	expiry *time.Timer // ends the epoch when the leader stays unknown
}

func newLeaderWatch(lostGrace time.Duration) *leaderWatch {
	w := &leaderWatch{lostGrace: lostGrace}
	w.epoch, w.end = context.WithCancelCause(context.Background())
	return w
}

// update records the leader Raft reports now.
func (w *leaderWatch) update(addr raft.ServerAddress, id raft.ServerID) {
	if w.updateLocked(addr, id) {
		if fn := w.onNew.Load(); fn != nil {
			(*fn)()
		}
	}
}

// updateLocked is update under mu; it reports whether a new epoch began.
func (w *leaderWatch) updateLocked(addr raft.ServerAddress, id raft.ServerID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case id == "" || addr == "":
		if !w.known {
			return false
		}
		w.known = false
		if w.expiry != nil {
			w.expiry.Stop()
		}
		end := w.end
		w.expiry = time.AfterFunc(w.lostGrace, func() {
			end(fmt.Errorf("%w: no leader known for %s", errLeaderChanged, w.lostGrace))
		})
		return false
	case id == w.id && addr == w.addr && w.epoch.Err() == nil:
		// The same leader, back after a moment without one: its epoch
		// goes on.
		if !w.known && w.expiry != nil {
			w.expiry.Stop()
		}
		w.known = true
		return false
	default:
		if w.expiry != nil {
			w.expiry.Stop()
			w.expiry = nil
		}
		w.end(fmt.Errorf("%w: %s is the leader now", errLeaderChanged, id))
		w.addr, w.id, w.known = addr, id, true
		w.epoch, w.end = context.WithCancelCause(context.Background())
		return true
	}
}

// current returns the leader known now ("" when none) and the context of
// its epoch (of the last leader known, when none is known now).
func (w *leaderWatch) current() (raft.ServerAddress, raft.ServerID, context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.known {
		return "", "", w.epoch
	}
	return w.addr, w.id, w.epoch
}

// seen reports whether any leader has been known since the node started.
func (w *leaderWatch) seen() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.id != ""
}

// close ends the current epoch and stops its timer.
func (w *leaderWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.expiry != nil {
		w.expiry.Stop()
	}
	w.end(ErrShutdown)
}

// leaderNow returns the leader this node knows of now ("" when none) and a
// context that ends when that changes (see leaderWatch).
func (n *Node) leaderNow() (raft.ServerAddress, raft.ServerID, context.Context) {
	n.leader.update(n.raft.LeaderWithID())
	return n.leader.current()
}

// OnNewLeader registers fn (nil: none; a later call replaces an earlier
// one), called each time this node learns of a leader other than the last
// one it knew, the first one included, whether that leader is this node or
// another; and once at registration when a leader is known already. It
// runs on the goroutine that noticed, which may be serving a request: fn
// must return at once (signal a channel, say) and must not call back into
// the node.
func (n *Node) OnNewLeader(fn func()) {
	if fn == nil {
		n.leader.onNew.Store(nil)
		return
	}
	// Bring the watch up to date first, so that the leader known now is
	// announced once, below, rather than also by this refresh.
	n.leader.update(n.raft.LeaderWithID())
	n.leader.onNew.Store(&fn)
	if addr, _, _ := n.leader.current(); addr != "" {
		fn()
	}
}

// watchLeader keeps the leader watch current: Raft reports every change of
// leader to an observer; the watch reads the leader from Raft itself
// rather than from the observation, so that an observation delivered late
// cannot undo a newer one. The monitor also refreshes it, in case an
// observation was dropped.
func (n *Node) watchLeader(ch <-chan raft.Observation) {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-ch:
			n.leader.update(n.raft.LeaderWithID())
		}
	}
}

// electionBound is about the longest a failover takes: a follower notices
// the leader's silence after one to two HeartbeatTimeouts, and an election
// takes one to two ElectionTimeouts (2s with the defaults). It bounds one
// read-index call to the leader, how long a call waits for a (new) leader
// to be known, and how long a call to a leader stands once no leader is
// known.
func (n *Node) electionBound() time.Duration {
	return 2 * (n.cfg.HeartbeatTimeout + n.cfg.ElectionTimeout)
}

// leaderCtx returns ctx, canceled also when epoch ends (with
// errLeaderChanged as the cause).
func leaderCtx(ctx, epoch context.Context) (context.Context, func()) {
	return leaderCtxAfter(ctx, epoch, 0)
}

// leaderCtxAfter is leaderCtx, canceled grace after epoch ends.
func leaderCtxAfter(ctx, epoch context.Context, grace time.Duration) (context.Context, func()) {
	cctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(epoch, func() {
		if grace <= 0 {
			cancel(context.Cause(epoch))
			return
		}
		t := time.AfterFunc(grace, func() { cancel(context.Cause(epoch)) })
		context.AfterFunc(cctx, func() { t.Stop() })
	})
	return cctx, func() {
		stop()
		cancel(nil)
	}
}

// awaitLeader waits until a leader other than not is known (any leader
// when not is empty), at most wait, or until ctx or the node ends. It
// returns the leader known then ("" when none), which may still be not once
// wait has passed.
func (n *Node) awaitLeader(ctx context.Context, not raft.ServerID, wait time.Duration) raft.ServerID {
	t := time.NewTimer(wait)
	defer t.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		_, id, _ := n.leaderNow()
		if id != "" && id != not {
			return id
		}
		select {
		case <-tick.C:
		case <-t.C:
			_, id, _ := n.leaderNow()
			return id
		case <-ctx.Done():
			return ""
		case <-n.ctx.Done():
			return ""
		}
	}
}
