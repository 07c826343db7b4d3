package raftnode

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/floe-catalog/floe/fsm"
)

// The leader's clock stamps what the state machine keeps by time: the
// Idempotency-Key records of the commands it takes itself (their expiry)
// and the prunes of expired records and finished purge jobs. A follower
// whose clock is off has its keyed commands refused (checkProposerClock);
// a leader whose clock is off would stamp records that expire an hour
// early or late, and an hour ahead it would prune records clients may
// still replay. So the leader compares its clock with the other voters'
// (every clockCheckInterval, before every prune, and before a keyed command
// once its clock jumped): when a majority of all voters read times that
// agree with each other and lie more than maxProposerSkew from its own,
// its clock is taken to be the wrong one. It then refuses keyed commands
// and prunes (ErrClockSkew, a 503: nothing applied) and hands leadership
// to a voter whose clock agrees with the others.

// clockCheckInterval is how often a leader compares its clock with the
// other voters'.
var clockCheckInterval = 10 * time.Second

// clockTransferEvery bounds how often a leader whose clock is off hands
// leadership over, so that clocks that all disagree do not pass it around.
const clockTransferEvery = time.Minute

// watchClock runs while this node leads.
func (n *Node) watchClock(ctx context.Context) {
	t := time.NewTicker(clockCheckInterval)
	defer t.Stop()
	for {
		if off, to := n.checkClock(ctx); off && to != "" && time.Since(n.clockTransferAt) >= clockTransferEvery {
			n.clockTransferAt = time.Now()
			// A transfer that succeeds ends this leadership, and ctx with it.
			if err := n.transferLocal(ctx, to); err != nil && ctx.Err() == nil {
				n.logger.Warn("could not hand leadership over to a voter whose clock agrees with the others", "to", to, "error", err)
			}
		}
		select {
		case <-ctx.Done():
			n.setClockOff(false, "")
			return
		case <-t.C:
		}
	}
}

// checkClock asks the other voters what their clocks read and records
// whether this node's clock is off (see clockOffErr): whether a majority of
// all voters, this one included, read times that agree with each other and
// are more than maxProposerSkew from its own. to is the voter among those
// with the most of the log: the one to hand leadership to. Voters that do
// not answer, or answer without a clock (an older binary), count for this
// node's clock; clocks that all disagree judge none.
func (n *Node) checkClock(ctx context.Context) (off bool, to string) {
	n.clockCheckMu.Lock()
	defer n.clockCheckMu.Unlock()
	n.clockMu.Lock()
	n.checkedWall, n.checkedMono = n.cfg.Clock().Round(0), time.Now()
	n.clockMu.Unlock()
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return n.clockOff.Load(), ""
	}
	var voters []raft.Server
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == raft.Voter && s.ID != n.id {
			voters = append(voters, s)
		}
	}
	if len(voters) == 0 {
		n.setClockOff(false, "")
		return false, ""
	}
	before := n.cfg.Clock()
	infos, errs := n.askAll(ctx, voters, statusProbeTimeout)
	after := n.cfg.Clock()
	if ctx.Err() != nil {
		return n.clockOff.Load(), ""
	}
	mid := before.Add(after.Sub(before) / 2)
	var far []int
	for i := range voters {
		if errs[i] != nil || infos[i].ClockMs == 0 {
			continue
		}
		if skewed(infos[i].ClockMs, mid.UnixMilli()) {
			far = append(far, i)
		}
	}
	// The voters far from this clock that agree with each other: those
	// near the median of their clocks.
	if len(far) > 0 {
		clocks := make([]int64, len(far))
		for k, i := range far {
			clocks[k] = infos[i].ClockMs
		}
		slices.Sort(clocks)
		median := clocks[len(clocks)/2]
		far = slices.DeleteFunc(far, func(i int) bool { return skewed(infos[i].ClockMs, median) })
	}
	// Off only when they are a majority of all voters, this one included:
	// voters down, cut off or of an older release count against it, so one
	// follower off beside one that is down does not judge the leader.
	off = 2*len(far) > len(voters)+1
	detail := ""
	if off {
		slices.SortFunc(far, func(a, b int) int { return -cmpUint(infos[a].LastIndex, infos[b].LastIndex) })
		to = string(voters[far[0]].ID)
		detail = fmt.Sprintf("this leader's clock reads %s; %d of the %d voters read a time more than %s from it (%s reads %s)",
			mid.UTC().Format(time.RFC3339), len(far), len(voters)+1, maxProposerSkew, to, time.UnixMilli(infos[far[0]].ClockMs).UTC().Format(time.RFC3339))
	}
	n.setClockOff(off, detail)
	return off, to
}

// skewed reports whether two clock readings (Unix ms) are more than
// maxProposerSkew apart.
func skewed(a, b int64) bool {
	d := time.Duration(a-b) * time.Millisecond
	return d > maxProposerSkew || d < -maxProposerSkew
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// clockJump is how far this node's wall clock may move apart from its
// monotonic clock between two checks before a keyed command waits for a
// fresh check: a clock stepped by NTP or by hand.
const clockJump = time.Second

// clockMoved reports whether this node's wall clock moved apart from its
// monotonic clock since the last check by more than clockJump, or was
// never checked during this process (a leader just elected). The keyed
// commands a leader takes in the seconds between a clock jump and its next
// periodic check would otherwise be stamped by the jumped clock.
func (n *Node) clockMoved() bool {
	n.clockMu.Lock()
	wall, mono := n.checkedWall, n.checkedMono
	n.clockMu.Unlock()
	if mono.IsZero() {
		return true
	}
	d := n.cfg.Clock().Round(0).Sub(wall) - time.Since(mono)
	return d > clockJump || d < -clockJump
}

// checkClockIfMoved runs checkClock unless a check that ran while this one
// waited for its turn already saw the clock as it is: keyed commands that
// arrive together after a jump share one check.
func (n *Node) checkClockIfMoved(ctx context.Context) {
	n.clockCheckMu.Lock()
	moved := n.clockMoved()
	n.clockCheckMu.Unlock()
	if moved {
		n.checkClock(ctx)
	}
}

// setClockOff records the outcome of a clock check, logging a change. Only
// a leader's clock is judged: a check that ends after this node stepped
// down records nothing against it.
func (n *Node) setClockOff(off bool, detail string) {
	n.clockMu.Lock()
	defer n.clockMu.Unlock()
	if off && n.raft.State() != raft.Leader {
		off, detail = false, ""
	}
	was := n.clockOff.Swap(off)
	n.clockDetail = detail
	if off {
		n.metrics.clockOff.Set(1)
	} else {
		n.metrics.clockOff.Set(0)
	}
	switch {
	case off && !was:
		n.logger.Error("this leader's clock disagrees with the other voters': keyed changes and prunes are refused, and leadership is handed to a voter whose clock agrees (fix NTP on this node)",
			"detail", detail)
	case !off && was:
		n.logger.Info("this node's clock no longer disagrees with the other voters'")
	}
}

// clockOffErr returns ErrClockSkew, with what the last check saw, when the
// command data depends on this leader's clock and that clock is off. A
// prune is judged on a fresh check: a prune an hour early deletes records
// clients may still replay, and a clock that just jumped may not have been
// checked yet.
func (n *Node) clockOffErr(ctx context.Context, data []byte) error {
	switch {
	case fsm.IsKeyed(data):
		if n.clockMoved() {
			n.checkClockIfMoved(ctx)
		}
	case fsm.PrunesByTime(data):
		n.checkClock(ctx)
	default:
		return nil
	}
	if !n.clockOff.Load() {
		return nil
	}
	n.clockMu.Lock()
	detail := n.clockDetail
	n.clockMu.Unlock()
	return fmt.Errorf("%w: %s; nothing was applied", ErrClockSkew, detail)
}
