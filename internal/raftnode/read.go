package raftnode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/floe-catalog/floe/fsm"
)

// Read runs fn on the local state machine once it reflects every write
// acknowledged anywhere in the cluster before Read was called: a
// linearizable read, using Raft's ReadIndex protocol (Raft thesis §6.4)
// instead of a log entry per read.
//
// On a follower the leader confirms the read index and the follower serves
// the read from its own state machine. It returns ErrNotLeader or
// ErrNoLeader, wrapped, when leadership is lost or changes while the read
// waits or no leader is known; nothing was read and the caller may retry.
// A follower whose log stops advancing towards the read index for
// readStallLimit returns ErrBehind, wrapped: nothing was read, and another
// node may answer. ErrShutdown and ctx's error are the other failures
// before fn runs. fn's own error is returned unchanged.
func (n *Node) Read(ctx context.Context, fn func(*fsm.Reader) error) error {
	start := time.Now()
	if err := n.waitForLinearizableRead(ctx); err != nil {
		return err
	}
	n.metrics.readIndexWait.Observe(time.Since(start).Seconds())
	return n.view(fn)
}

// waitForLinearizableRead returns once the local state machine may serve a
// linearizable read, or with the reason it may not.
func (n *Node) waitForLinearizableRead(ctx context.Context) error {
	if n.closed.Load() {
		return ErrShutdown
	}
	// 1. Only the leader knows the cluster's commit index; a follower's may
	// lag by any amount. A follower asks the leader for a read index (steps
	// 2 to 6 run there) and waits until its own log has reached it.
	var (
		readIndex uint64
		err       error
	)
	if n.raft.State() == raft.Leader {
		readIndex, err = n.leaderBatch.get(ctx)
		if err != nil {
			return err
		}
	} else {
		// The whole batch shares one request to the leader; each read
		// then waits on its own for this node's log to reach the index,
		// while the next batch's request is already under way.
		if readIndex, err = n.followerBatch.get(ctx); err != nil {
			return err
		}
		if err := n.waitLogReaches(ctx, readIndex); err != nil {
			return err
		}
	}

	// 7. Wait until the local state machine has applied up to the read
	// index. raft.AppliedIndex is not enough: it moves when an entry is
	// handed to the state machine, before it is applied. The state machine
	// tracks its own applied index, and fsmTarget accounts for the entries
	// it never sees (no-ops, barriers).
	target, err := n.fsmTarget(readIndex)
	if err != nil {
		return err
	}
	return n.waitApplied(ctx, target)
}

// waitApplied waits until the state machine has applied target. Shutdown
// ends the wait with ErrShutdown: Raft may stop with entries it had already
// counted as applied still queued for the state machine, which would then
// never reach the target.
func (n *Node) waitApplied(ctx context.Context, target uint64) error {
	if n.fsm.AppliedIndex() >= target {
		return nil // the common case: nothing to wait for
	}
	waitCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(n.ctx, func() { cancel(ErrShutdown) })()
	if err := n.fsm.WaitApplied(waitCtx, target); err != nil {
		// Whichever ended first, the caller or the node, names the error.
		if errors.Is(context.Cause(waitCtx), ErrShutdown) {
			return ErrShutdown
		}
		return fmt.Errorf("raftnode: read: %w", err)
	}
	return nil
}

// termBarrier makes sure a barrier has completed in term while this node
// leads it. Concurrent callers share one barrier.
func (n *Node) termBarrier(ctx context.Context, term uint64) error {
	if n.barrierTerm.Load() == term {
		return nil
	}
	select {
	case n.barrierSem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("raftnode: read: %w", ctx.Err())
	case <-n.ctx.Done():
		return ErrShutdown
	}
	defer func() { <-n.barrierSem }()
	if n.barrierTerm.Load() == term {
		return nil // another caller's barrier, in this term, completed meanwhile
	}
	if err := n.await(ctx, n.raft.Barrier(n.enqueueTimeout(ctx))); err != nil {
		return readError(err)
	}
	// Terms only grow: if the term is still the one we started in, the
	// barrier was committed by this node as leader of that term.
	if now := n.raft.CurrentTerm(); now != term {
		return fmt.Errorf("%w: term changed from %d to %d during the barrier", ErrNotLeader, term, now)
	}
	n.barrierApplied.Store(n.fsm.AppliedIndex())
	n.barrierTerm.Store(term)
	return nil
}

// readError maps an error of a barrier or leadership check. Nothing is
// written by a read, so there is no unknown outcome: either leadership is in
// doubt (retry, possibly elsewhere) or the node or the caller gave up.
func readError(err error) error {
	switch {
	case errors.Is(err, ErrShutdown), errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w", ErrShutdown, err)
	case errors.Is(err, errAwaitCanceled):
		return fmt.Errorf("raftnode: read: %w", err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("raftnode: read: %w: %w", context.DeadlineExceeded, err)
	default:
		// raft.ErrNotLeader, raft.ErrLeadershipLost,
		// raft.ErrLeadershipTransferInProgress and anything else Raft
		// answers a barrier or VerifyLeader with: leadership is not
		// confirmed.
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
}
