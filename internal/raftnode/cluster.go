package raftnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/raft"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/transport"
)

// RPC methods served on the cluster port. The set is fixed (method names
// are metric labels).
const (
	rpcPropose   = "propose"
	rpcReadIndex = "read_index"
	rpcInfo      = "info"
	rpcJoin      = "join"
	rpcAdmit     = "admit"
	rpcFormed    = "formed"
	rpcRemove    = "remove"
	rpcTransfer  = "transfer"
)

// RemoteError codes, mapped back to this package's errors by the caller.
const (
	codeNotLeader      = "not_leader"
	codeNoLeader       = "no_leader"
	codeUnknownOutcome = "unknown_outcome"
	codeShutdown       = "shutdown"
	codeNotAccepted    = "not_accepted"
	codeBadRequest     = "bad_request"
	codeNotFound       = "not_found"
	codeRejoinRefused  = "rejoin_refused"
	codeClockSkew      = "clock_skew"
	codeNotMember      = "not_member"
)

// toRemote turns a local error into a RemoteError whose code says what the
// caller can know.
func toRemote(err error) error {
	code := transport.CodeInternal
	switch {
	case errors.Is(err, ErrRejoinRefused):
		code = codeRejoinRefused
	case errors.Is(err, ErrUnknownOutcome), errors.Is(err, errAwaitCanceled):
		// errAwaitCanceled: a membership change handed to Raft whose wait
		// ended (deadline, shutdown) may still be applied.
		code = codeUnknownOutcome
	case errors.Is(err, ErrNotLeader):
		code = codeNotLeader
	case errors.Is(err, ErrNoLeader):
		code = codeNoLeader
	case errors.Is(err, ErrShutdown):
		code = codeShutdown
	case errors.Is(err, ErrNotAccepted):
		// Only proposeError says this, for a command Raft never took.
		code = codeNotAccepted
	case errors.Is(err, context.DeadlineExceeded):
		code = transport.CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = transport.CodeCanceled
	case errors.Is(err, ErrInvalidMember):
		code = codeBadRequest
	case errors.Is(err, ErrNoSuchMember):
		code = codeNotFound
	case errors.Is(err, ErrClockSkew):
		code = codeClockSkew
	case errors.Is(err, ErrNotMember):
		code = codeNotMember
	}
	return &transport.RemoteError{Code: code, Message: err.Error()}
}

// fromRemote maps the error of a call to the leader. write says whether the
// call carried a command: then a lost answer is an unknown outcome.
func fromRemote(err error, write bool) error {
	var re *transport.RemoteError
	if errors.As(err, &re) {
		switch re.Code {
		case codeNotLeader:
			return fmt.Errorf("%w: leader changed: %s", ErrNotLeader, re.Message)
		case codeNoLeader:
			return fmt.Errorf("%w: %s", ErrNoLeader, re.Message)
		case codeShutdown:
			return fmt.Errorf("%w: leader is shutting down: %s", ErrNotLeader, re.Message)
		case codeUnknownOutcome:
			return fmt.Errorf("%w: %s", ErrUnknownOutcome, re.Message)
		case codeNotAccepted:
			return fmt.Errorf("%w: by the leader: %w: %s", ErrNotAccepted, context.DeadlineExceeded, re.Message)
		case codeBadRequest:
			return &remoteErr{sentinel: ErrInvalidMember, msg: re.Message}
		case codeNotFound:
			return &remoteErr{sentinel: ErrNoSuchMember, msg: re.Message}
		case codeRejoinRefused:
			return &remoteErr{sentinel: ErrRejoinRefused, msg: re.Message}
		case codeClockSkew:
			return &remoteErr{sentinel: ErrClockSkew, msg: re.Message}
		case codeNotMember:
			return fmt.Errorf("%w: %w: %s", ErrNoLeader, ErrNotMember, strings.TrimPrefix(re.Message, ErrNotMember.Error()+": "))
		case transport.CodeDeadlineExceeded, transport.CodeCanceled:
			return fmt.Errorf("raftnode: leader gave up: %w: %s", context.DeadlineExceeded, re.Message)
		}
		if write {
			return fmt.Errorf("%w: leader failed: %s", ErrUnknownOutcome, re.Message)
		}
		return fmt.Errorf("raftnode: leader failed: %s", re.Message)
	}
	if errors.Is(err, transport.ErrOutcomeUnknown) {
		if write {
			return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
		}
		return fmt.Errorf("%w: %w", ErrNoLeader, err)
	}
	// The request certainly did not reach the leader (dial failed).
	return fmt.Errorf("%w: %w", ErrNoLeader, err)
}

// remoteErr is an operator error the leader reported: its message already
// names the kind, so it is shown as is while still matching the sentinel.
type remoteErr struct {
	sentinel error
	msg      string
}

func (e *remoteErr) Error() string { return e.msg }
func (e *remoteErr) Unwrap() error { return e.sentinel }

// call sends one RPC to addr, unless Config.Faults cuts it.
func (n *Node) call(ctx context.Context, addr, method string, req, resp any) error {
	if err := n.cut(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrNoLeader, err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	out, err := n.rpc.Call(ctx, addr, method, body)
	if err != nil {
		return err
	}
	if resp == nil {
		return nil
	}
	return json.Unmarshal(out, resp)
}

// leaderAddr returns the leader's cluster address, or ErrNoLeader.
func (n *Node) leaderAddr() (string, error) {
	addr, id := n.raft.LeaderWithID()
	if id == "" || addr == "" {
		return "", ErrNoLeader
	}
	return string(addr), nil
}

type proposeRequest struct {
	Command []byte `json:"command"`
	// SentMs is the forwarding node's clock when it sent a keyed command
	// (0 otherwise, and from binaries that predate it): the leader
	// compares it with its own (checkProposerClock).
	SentMs int64 `json:"sent-ms,omitempty"`
}

// forward sends an encoded command to the leader: one hop. The caller's
// deadline travels with it (ApplyTimeout when it has none). If the leader
// turns out not to be the leader any more, nothing was appended
// (ErrNotLeader); a lost answer is ErrUnknownOutcome.
//
// It follows the leader through a failover. A call in flight is abandoned
// as soon as this node knows another leader, or has known none for
// electionBound (see leaderWatch), instead of waiting for an answer from a
// leader that may be stopped: it is sent to the new leader when it
// certainly never reached the old one (still dialing), and is
// ErrUnknownOutcome otherwise. A call the leader certainly did not act on
// (the dial failed, or it answered that it does not lead) is sent again once
// this node knows another leader, waiting at most electionBound for one.
func (n *Node) forward(ctx context.Context, data []byte) (fsm.Result, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.ApplyTimeout)
		defer cancel()
	}
	n.metrics.forwarded.Inc()
	var (
		failed  raft.ServerID // the leader the last call failed on
		lastErr error         = ErrNoLeader
		waited  bool          // waited once for a hand-over of this node's
	)
	for {
		if n.raft.State() == raft.Leader {
			res, err := n.proposeLocal(ctx, data)
			if !errors.Is(err, ErrNotLeader) || waited {
				return res, err
			}
			// Leading, but handing over or stepping down: nothing was
			// appended. Wait for the next leader, then send it there;
			// if the hand-over failed and this node still leads, it
			// proposes once more.
			failed, lastErr, waited = n.id, err, true
			n.metrics.leaderRetries.WithLabelValues(rpcPropose).Inc()
			if got := n.awaitLeader(ctx, failed, n.electionBound()); got == "" {
				if err := ctx.Err(); err != nil && !errors.Is(lastErr, err) {
					return fsm.Result{}, fmt.Errorf("%w: %w", lastErr, err)
				}
				return fsm.Result{}, lastErr
			}
			continue
		}
		addr, id, epoch := n.leaderNow()
		if id == "" || id == failed {
			if got := n.awaitLeader(ctx, failed, n.electionBound()); got == "" || got == failed {
				if err := ctx.Err(); err != nil && !errors.Is(lastErr, err) {
					return fsm.Result{}, fmt.Errorf("%w: %w", lastErr, err)
				}
				return fsm.Result{}, lastErr
			}
			continue // the new leader may be this node
		}
		res, err := n.forwardTo(ctx, epoch, string(addr), data)
		if err == nil {
			return res, nil
		}
		if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrNoLeader) {
			return fsm.Result{}, err
		}
		// Nothing was appended: send it again, to the next leader.
		failed, lastErr = id, err
		if errors.Is(err, errLeaderChanged) {
			failed = "" // the leader is another one already, or none
		}
		n.metrics.leaderRetries.WithLabelValues(rpcPropose).Inc()
	}
}

// forwardAbandonGrace is how long a forwarded command's call may still be
// answered once this node knows another leader (or none). A leader that
// hands over (a planned stop, a transfer) answers its calls in flight within
// milliseconds, each with its outcome or "not the leader" (then the command
// goes to the next leader): abandoning the call at once answered such a
// command as of unknown outcome (500) though it had not been applied, or
// had been. A leader that fell silent (paused, cut off) is given up on after
// the grace.
const forwardAbandonGrace = 250 * time.Millisecond

// forwardTo sends the command to the leader at addr, abandoning the call
// forwardAbandonGrace after epoch ends (the leader changed).
func (n *Node) forwardTo(ctx, epoch context.Context, addr string, data []byte) (fsm.Result, error) {
	cctx, done := leaderCtxAfter(ctx, epoch, forwardAbandonGrace)
	defer done()
	var res fsm.Result
	req := proposeRequest{Command: data}
	if fsm.IsKeyed(data) {
		req.SentMs = n.cfg.Clock().UnixMilli()
	}
	err := n.call(cctx, addr, rpcPropose, req, &res)
	if err == nil {
		return res, nil
	}
	if cause := context.Cause(cctx); ctx.Err() == nil && errors.Is(cause, errLeaderChanged) && errors.Is(err, context.Canceled) {
		n.metrics.leaderAbandoned.WithLabelValues(rpcPropose).Inc()
		if errors.Is(err, transport.ErrOutcomeUnknown) {
			return fsm.Result{}, fmt.Errorf("%w: gave up on %s, which was sent the command: %w", ErrUnknownOutcome, addr, cause)
		}
		return fsm.Result{}, fmt.Errorf("%w: %w before the command reached %s", ErrNotLeader, cause, addr)
	}
	return fsm.Result{}, fromRemote(err, true)
}

// readIndexRequest asks the leader for a read index. ID is the asking
// node's: the leader refuses a node its membership no longer holds
// (ErrNotMember), which it no longer sends the log, so that such a node's
// reads fail at once instead of waiting readStallLimit for entries that
// never come. An older follower sends no ID and is not checked.
type readIndexRequest struct {
	ID string `json:"id,omitempty"`
}

type readIndexResponse struct {
	Index uint64 `json:"index"`
}

// leaderReadIndex runs the leader's part of ReadIndex and returns the read
// index: every write acknowledged before the call is at or below it.
func (n *Node) leaderReadIndex(ctx context.Context) (uint64, error) {
	if n.raft.State() != raft.Leader {
		return 0, ErrNotLeader
	}
	// 2. Note the term: every later step must happen within this one
	// leadership, or its conclusions do not combine.
	term := n.raft.CurrentTerm()

	// 3. A new leader has every committed entry in its log but does not know
	// which of its entries are committed until it commits one of its own
	// term (Raft §5.4.2): until then its commit index can be below writes
	// an earlier leader acknowledged. A barrier is such an entry, and Raft
	// answers it only after the state machine has applied everything before
	// it. Once per term is enough: the commit index never goes back.
	if err := n.termBarrier(ctx, term); err != nil {
		return 0, err
	}

	// 4. The read index: every write acknowledged before this call is at or
	// below the commit index now, provided we are still the leader now
	// (step 5) in the same term (step 6).
	readIndex := n.raft.CommitIndex()

	// 5. Confirm leadership with a quorum (a heartbeat round started after
	// step 4). A leader cut off from the others keeps believing it leads
	// until its lease runs out, while a new leader on the other side may
	// already acknowledge writes; a quorum answering us means no other
	// leader of a higher term existed when it answered.
	n.metrics.readIndexRounds.WithLabelValues(roleLeader).Inc()
	if err := n.await(ctx, n.raft.VerifyLeader()); err != nil {
		return 0, readError(err)
	}

	// 6. If the term moved, steps 3 to 5 may describe different
	// leaderships (lost and regained in between): the read index could
	// predate another leader's writes.
	if now := n.raft.CurrentTerm(); now != term {
		return 0, fmt.Errorf("%w: term changed from %d to %d during the read", ErrNotLeader, term, now)
	}
	return readIndex, nil
}

// errReadIndexTimeout ends a read-index call the leader did not answer
// within electionBound.
var errReadIndexTimeout = errors.New("the leader did not answer in time")

// followerReadIndex asks the leader for a read index: the fetch of the
// follower's indexBatcher, shared by every read in its batch. It returns as
// soon as the leader answers; each read then waits on its own until this
// node's log reaches the index (waitLogReaches), so that the next batch's
// request is not held behind this one's catch-up.
//
// It follows the leader through a failover: a call is abandoned when the
// leader changes (see leaderWatch) or does not answer within
// electionBound, and asked again of the leader known then; after an answer
// that the leader does not lead, or no leader known, it waits at most
// electionBound for another leader, and then fails with the last call's
// error (wrapping ErrNotLeader or ErrNoLeader). Before each new request
// renew lets the reads queued meanwhile join it (see indexBatcher); when no
// read waits any more it gives up with the last error. ErrShutdown and
// ctx's error end it at once.
func (n *Node) followerReadIndex(ctx context.Context, renew func() bool) (uint64, error) {
	var (
		failed  raft.ServerID // the leader the last call failed on
		lastErr error         = ErrNoLeader
	)
	for attempt := 0; ; attempt++ {
		if _, id, _ := n.leaderNow(); id == "" || id == failed {
			if got := n.awaitLeader(ctx, failed, n.electionBound()); got == "" || got == failed {
				if err := ctx.Err(); err != nil && !errors.Is(lastErr, err) {
					return 0, fmt.Errorf("%w: %w", lastErr, err)
				}
				return 0, lastErr
			}
		}
		if attempt > 0 {
			if !renew() {
				return 0, lastErr // every read waiting for it gave up
			}
			n.metrics.leaderRetries.WithLabelValues(rpcReadIndex).Inc()
			n.logger.Debug("asking for the read index again", "attempt", attempt+1, "previous_error", lastErr)
		}
		if n.raft.State() == raft.Leader {
			// This node leads now: steps 2 to 6 run here.
			return n.leaderBatch.get(ctx)
		}
		addr, id, epoch := n.leaderNow()
		if id == "" {
			continue
		}
		index, err := n.askReadIndex(ctx, epoch, string(addr))
		if err == nil {
			return index, nil
		}
		lastErr = err
		switch {
		case ctx.Err() != nil, errors.Is(err, ErrShutdown):
			return 0, err
		case errors.Is(err, errLeaderChanged), errors.Is(err, errReadIndexTimeout), errors.Is(err, context.DeadlineExceeded):
			// Abandoned, or the leader gave up at the call's deadline: ask
			// the leader known now at once.
			failed = ""
		case errors.Is(err, ErrNotMember):
			// The leader no longer holds this node: no leader will
			// send it the log, so no read here can be served.
			return 0, err
		case errors.Is(err, ErrNotLeader), errors.Is(err, ErrNoLeader):
			failed = id // ask another leader, once there is one
		default:
			return 0, err
		}
	}
}

// checkAsker returns ErrNotMember when id, a node asking this leader for a
// read index, is not in the latest membership this leader knows: it was
// removed (or has not been added yet), so this leader does not replicate to
// it. An empty id (a node of an older release) passes.
func (n *Node) checkAsker(id string) error {
	if id == "" || n.raft.State() != raft.Leader {
		return nil
	}
	members := n.memberIDs()
	if members == nil || slices.Contains(members, id) {
		return nil
	}
	return fmt.Errorf("%w: the membership of the leader, %s, lists %d nodes, not %s: it was removed from the cluster (or is not yet added)",
		ErrNotMember, n.id, len(members), id)
}

// askReadIndex asks the leader at addr for a read index, abandoning the call
// when epoch ends (the leader changed) or after electionBound.
func (n *Node) askReadIndex(ctx, epoch context.Context, addr string) (uint64, error) {
	lctx, done := leaderCtx(ctx, epoch)
	defer done()
	cctx, cancel := context.WithTimeoutCause(lctx, n.electionBound(), errReadIndexTimeout)
	defer cancel()
	var resp readIndexResponse
	n.metrics.readIndexRounds.WithLabelValues(roleFollower).Inc()
	err := n.call(cctx, addr, rpcReadIndex, readIndexRequest{ID: string(n.id)}, &resp)
	if err == nil {
		return resp.Index, nil
	}
	if cause := context.Cause(cctx); ctx.Err() == nil && cctx.Err() != nil &&
		(errors.Is(cause, errLeaderChanged) || errors.Is(cause, errReadIndexTimeout)) {
		// Nothing is written by a read: asking again is always safe.
		n.metrics.leaderAbandoned.WithLabelValues(rpcReadIndex).Inc()
		n.logger.Debug("read-index call abandoned", "leader_addr", addr, "cause", cause)
		// Returned as the read's error when no leader answers in the
		// end: a read that found no leader, which a client may resend
		// (503), not a failure of unknown outcome.
		kind := ErrNoLeader
		if errors.Is(cause, errLeaderChanged) {
			kind = ErrNotLeader
		}
		return 0, fmt.Errorf("raftnode: read index from %s: %w: %w", addr, kind, cause)
	}
	return 0, fromRemote(err, false)
}

// waitLogReaches waits until Raft has handed every entry up to index to the
// state machine. It fails only with ctx's error (wrapped), ErrShutdown, or
// ErrBehind (wrapped) when the log stood still for readStallLimit.
func (n *Node) waitLogReaches(ctx context.Context, index uint64) error {
	resp := readIndexResponse{Index: index}
	// raft.AppliedIndex passes an entry once Raft has handed it to the state
	// machine, so every entry up to the read index is then in the local log
	// (or compacted into a snapshot this node already applied). A log that
	// stops advancing for readStallLimit (it cannot append: a full disk)
	// ends the wait with ErrBehind rather than holding the read, and marks
	// the node not ready until its log reaches the index.
	last, progressed := n.raft.AppliedIndex(), time.Now()
	for wait := time.Millisecond; n.raft.AppliedIndex() < resp.Index; wait = min(2*wait, 20*time.Millisecond) {
		if a := n.raft.AppliedIndex(); a != last {
			last, progressed = a, time.Now()
		} else if time.Since(progressed) > readStallLimit {
			n.behindAt.Store(resp.Index)
			n.logger.Warn("read gave up: this node's log is not advancing", "applied_index", a, "read_index", resp.Index, "stalled_for", readStallLimit)
			return fmt.Errorf("%w: its log has stayed at index %d for %s, below the read index %d", ErrBehind, a, readStallLimit, resp.Index)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("raftnode: read: waiting for index %d: %w", resp.Index, ctx.Err())
		case <-n.ctx.Done():
			return ErrShutdown
		case <-time.After(wait):
		}
	}
	return nil
}

// maxProposerSkew bounds how far the clock of a node forwarding a keyed
// command may be from the leader's. Idempotency-Key records expire by the
// proposer's time (Apply reads no clock), with a 5-minute grace for clocks
// that differ; a node whose clock is further off would let a retry within
// the advertised lifetime run twice (ahead) or keep records too long
// (behind).
const maxProposerSkew = 5 * time.Minute

// checkProposerClock returns ErrClockSkew when sentMs, the forwarding
// node's clock when it sent a keyed command, is more than maxProposerSkew
// from now, the leader's clock. It judges the clocks, not the command's
// own time, which is when the request arrived and may be minutes old for
// a slow request. 0 (not keyed, or an older sender) passes.
func checkProposerClock(sentMs int64, now time.Time) error {
	if sentMs == 0 {
		return nil
	}
	if d := time.UnixMilli(sentMs).Sub(now); d > maxProposerSkew || d < -maxProposerSkew {
		return fmt.Errorf("%w: the forwarding node's clock reads %s, the leader's %s (%s apart, at most %s); one of them is wrong (NTP)",
			ErrClockSkew, time.UnixMilli(sentMs).UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), d.Abs().Round(time.Second), maxProposerSkew)
	}
	return nil
}

// readStallLimit is how long a follower's read waits for its log to move
// at all towards the read index before giving up (ErrBehind). A follower
// that is merely behind keeps applying and is waited for however long it
// takes; only one whose log stands still this long is given up on.
var readStallLimit = 10 * time.Second

// nodeInfo is what a node reports about itself.
type nodeInfo struct {
	ID          string `json:"id"`
	ClusterAddr string `json:"cluster-addr"`
	HTTPAddr    string `json:"http-addr"`
	HasState    bool   `json:"has-state"`
	LeaderID    string `json:"leader-id"`
	LeaderAddr  string `json:"leader-addr"`
	State       string `json:"state"`
	Term        uint64 `json:"term"`
	CommitIndex uint64 `json:"commit-index"`
	Applied     uint64 `json:"applied-index"`
	LastContact string `json:"last-contact"`
	// ClusterID is the identity of the cluster whose state the node
	// holds (fsm.SetClusterID); "" before a leader stamped one.
	ClusterID string `json:"cluster-id,omitempty"`
	// ClusterIDAware: the node's binary reports its cluster id (an older
	// one omits both fields), so an empty ClusterID means it holds none.
	ClusterIDAware bool `json:"cluster-id-aware,omitempty"`
	// LeaderReady, on a leader, reports whether it has applied the
	// entries of earlier terms (its term barrier): only then is its
	// commit index the cluster's. nil from a binary that predates it.
	LeaderReady *bool `json:"leader-ready,omitempty"`
	// LastIndex is the index of the last entry in the node's log or
	// snapshot: 1 after a bootstrap until a first leader appends (see
	// stillForming).
	LastIndex uint64 `json:"last-index"`
	// Members are the ids in the node's latest configuration (nil from a
	// binary that predates it): how a node removed while it was down, or
	// that never received the entry removing it, learns of its removal
	// from the leader (see askMembership).
	Members []string `json:"members,omitempty"`
	// ClockMs is the node's wall clock when it answered (0 from a binary
	// that does not report it): the leader compares its own with it
	// (checkClock).
	ClockMs int64 `json:"clock-ms,omitempty"`
}

func (n *Node) info() nodeInfo {
	leaderReady := n.raft.State() == raft.Leader && n.barrierTerm.Load() == n.raft.CurrentTerm()
	leaderAddr, leaderID := n.raft.LeaderWithID()
	has, _ := raft.HasExistingState(n.logs, n.logs, n.snaps)
	lc := "0s"
	if n.raft.State() != raft.Leader {
		if t := n.raft.LastContact(); t.IsZero() {
			lc = "never"
		} else {
			lc = time.Since(t).Round(time.Millisecond).String()
		}
	}
	return nodeInfo{
		ID: string(n.id), ClusterAddr: n.Addr(), HTTPAddr: n.cfg.HTTPAddr, HasState: has,
		LeaderID: string(leaderID), LeaderAddr: string(leaderAddr), State: stateLabel(n.raft.State()),
		Term: n.raft.CurrentTerm(), CommitIndex: n.raft.CommitIndex(), Applied: n.fsm.AppliedIndex(), LastContact: lc,
		LastIndex: n.raft.LastIndex(), ClusterID: n.ClusterID(), ClusterIDAware: true,
		LeaderReady: &leaderReady, Members: n.memberIDs(), ClockMs: n.cfg.Clock().UnixMilli(),
	}
}

// memberIDs returns the ids in this node's latest configuration, nil when
// it cannot read one.
func (n *Node) memberIDs() []string {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	ids := make([]string, 0, len(f.Configuration().Servers))
	for _, s := range f.Configuration().Servers {
		ids = append(ids, string(s.ID))
	}
	return ids
}

type memberRequest struct {
	ID    string `json:"id"`
	Addr  string `json:"addr"`
	Voter bool   `json:"voter"`
	// AsNonvoter, on an admission request, asks the leader to demote a
	// voter entry under ID to a non-voter instead of refusing (see
	// Config.RejoinAsNonvoter).
	AsNonvoter bool `json:"as-nonvoter,omitempty"`
	// Readdress, on a join request, asks only to move a member's address
	// (a node restarted at another): refused with ErrNoSuchMember for an
	// id the leader's membership does not hold, so a removed node
	// restarted elsewhere does not add itself back. An older leader
	// ignores it.
	Readdress bool `json:"readdress,omitempty"`
	// Forwarded marks a request a follower sent on to the leader: it is
	// not forwarded again (one hop).
	Forwarded bool `json:"forwarded,omitempty"`
}

// handleRPC serves the cluster RPC methods.
func (n *Node) handleRPC(ctx context.Context, method string, body []byte) ([]byte, error) {
	if err := n.cut(ctx); err != nil {
		return nil, &transport.RemoteError{Code: codeNoLeader, Message: err.Error()}
	}
	var (
		out any
		err error
	)
	switch method {
	case rpcPropose:
		var req proposeRequest
		if err = json.Unmarshal(body, &req); err != nil {
			return nil, &transport.RemoteError{Code: codeBadRequest, Message: err.Error()}
		}
		if n.raft.State() != raft.Leader {
			return nil, toRemote(ErrNotLeader)
		}
		if err := checkProposerClock(req.SentMs, n.cfg.Clock()); err != nil {
			n.logger.Warn("forwarded keyed command refused: the clocks of the forwarding node and this leader differ", "error", err)
			return nil, toRemote(err)
		}
		out, err = n.proposeLocal(ctx, req.Command)
	case rpcReadIndex:
		var req readIndexRequest
		if err = json.Unmarshal(body, &req); err != nil {
			return nil, &transport.RemoteError{Code: codeBadRequest, Message: err.Error()}
		}
		if err = n.checkAsker(req.ID); err != nil {
			break
		}
		var idx uint64
		idx, err = n.leaderBatch.get(ctx)
		out = readIndexResponse{Index: idx}
	case rpcInfo:
		out = n.info()
	case rpcJoin:
		var req memberRequest
		if err = json.Unmarshal(body, &req); err != nil {
			return nil, &transport.RemoteError{Code: codeBadRequest, Message: err.Error()}
		}
		err = n.addServer(ctx, memberRequest{ID: req.ID, Addr: req.Addr, Voter: req.Voter, Readdress: req.Readdress}, !req.Forwarded)
	case rpcAdmit:
		var req memberRequest
		if err = json.Unmarshal(body, &req); err != nil {
			return nil, &transport.RemoteError{Code: codeBadRequest, Message: err.Error()}
		}
		out, err = n.admit(ctx, req, !req.Forwarded)
	case rpcFormed:
		var req formedRequest
		if err = json.Unmarshal(body, &req); err != nil {
			return nil, &transport.RemoteError{Code: codeBadRequest, Message: err.Error()}
		}
		n.formed(req)
	case rpcRemove:
		var req memberRequest
		if err = json.Unmarshal(body, &req); err != nil {
			return nil, &transport.RemoteError{Code: codeBadRequest, Message: err.Error()}
		}
		if req.Forwarded {
			err = n.removeLocal(ctx, req.ID)
		} else {
			err = n.Remove(ctx, req.ID)
		}
	case rpcTransfer:
		var req memberRequest
		if err = json.Unmarshal(body, &req); err != nil {
			return nil, &transport.RemoteError{Code: codeBadRequest, Message: err.Error()}
		}
		if req.Forwarded {
			err = n.transferLocal(ctx, req.ID)
		} else {
			err = n.TransferLeadership(ctx, req.ID)
		}
	default:
		return nil, &transport.RemoteError{Code: codeBadRequest, Message: unknownMethod + method}
	}
	if err != nil {
		return nil, toRemote(err)
	}
	return json.Marshal(out)
}

// onLeader runs op locally when this node leads, else sends method to the
// leader (one hop) and decodes its answer into resp (nil: none).
func (n *Node) onLeader(ctx context.Context, method string, req memberRequest, resp any, local func() error) error {
	if n.raft.State() == raft.Leader {
		return local()
	}
	addr, err := n.leaderAddr()
	if err != nil {
		if removed := n.notMember(); removed != nil {
			// Say why no leader will come: send the change to a member.
			return fmt.Errorf("%w: %w", ErrUnavailable, removed)
		}
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	req.Forwarded = true
	if err := n.call(ctx, addr, method, req, resp); err != nil {
		err = fromRemote(err, true)
		if errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNotLeader) {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	}
	return nil
}

// AddVoter adds (or re-adds) a voting member. See addServer. The node must
// already answer at addr as id (checkAnswersAs), else ErrInvalidMember and
// nothing changes.
func (n *Node) AddVoter(ctx context.Context, id, addr string) error {
	return n.addServer(ctx, memberRequest{ID: id, Addr: addr, Voter: true}, true)
}

// AddNonvoter adds a member that replicates the log but does not vote.
func (n *Node) AddNonvoter(ctx context.Context, id, addr string) error {
	return n.addServer(ctx, memberRequest{ID: id, Addr: addr}, true)
}

// addServer adds a member on the leader. An existing member with the same ID
// and address is left as is (a node that lost its data and rejoins is caught
// up by the leader). A member holding the address under another ID is
// removed first, once the node at the address has answered as id (so that
// member is no longer there); a member with the ID under another address is
// re-addressed. A voter is never turned into a non-voter (ErrInvalidMember
// at its own address; at another, it is re-addressed as a voter). A change
// that makes id a voter at addr is made only once
// the node there has answered as id (checkAnswersAs). A request marked
// Readdress is refused with ErrNoSuchMember when id is not a member.
// forward sends the request on to the leader when this node is not it.
func (n *Node) addServer(ctx context.Context, req memberRequest, forward bool) error {
	id, addr, voter := req.ID, req.Addr, req.Voter
	if id == "" || addr == "" {
		return fmt.Errorf("%w: id and address are required", ErrInvalidMember)
	}
	if err := CheckMemberID(id); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidMember, err)
	}
	if err := CheckClusterAddr(addr); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidMember, err)
	}
	if n.raft.State() != raft.Leader {
		if !forward {
			return ErrNotLeader
		}
		return n.onLeader(ctx, rpcJoin, req, nil, func() error {
			return n.addServer(ctx, req, false)
		})
	}
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return err
	}
	prev := cf.Index()
	if req.Readdress && !slices.ContainsFunc(cf.Configuration().Servers, func(s raft.Server) bool { return string(s.ID) == id }) {
		return fmt.Errorf("%w: %s is not a member (it was removed): its address is not updated", ErrNoSuchMember, id)
	}
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == id && string(s.Address) == addr && (s.Suffrage == raft.Voter) == voter {
			return nil
		}
	}
	// Raft's AddNonvoter keeps a voter a voter and only moves its address.
	// A voter is never made a non-voter here; one at another address (a
	// node re-addressing itself whose replica has not yet applied its
	// promotion asks as a non-voter) is re-addressed as the voter it is,
	// after the check a voter's address gets.
	for _, s := range cf.Configuration().Servers {
		if !voter && string(s.ID) == id && s.Suffrage == raft.Voter {
			if string(s.Address) == addr {
				return fmt.Errorf("%w: %s is a voter; a voter cannot be made a non-voter (remove it, then add it back as a non-voter)", ErrInvalidMember, id)
			}
			voter = true
		}
	}
	// Another member holding addr is removed below: only once addr answers
	// as id, which proves that member is no longer there. A voter is asked
	// in any case (see checkAnswersAs).
	holder := slices.IndexFunc(cf.Configuration().Servers, func(s raft.Server) bool {
		return string(s.ID) != id && string(s.Address) == addr
	})
	taken := holder >= 0
	if (voter || taken) && (raft.ServerID(id) != n.id || addr != n.Addr()) {
		advice := "start it there first, or add it as a non-voter"
		if taken {
			advice = fmt.Sprintf("member %q holds that address: start %q there first (it then replaces %q), or remove %q",
				cf.Configuration().Servers[holder].ID, id, cf.Configuration().Servers[holder].ID, cf.Configuration().Servers[holder].ID)
		}
		if err := n.checkAnswersAs(ctx, id, addr, advice); err != nil {
			return err
		}
	} else if raft.ServerID(id) != n.id || addr != n.Addr() {
		// A non-voter need not be running yet; one that answers must be
		// id (another member's address in another spelling would make a
		// phantom member that sends that node a second log stream) and
		// must not belong to another cluster.
		if info, err := n.probe(ctx, addr); err == nil {
			if info.ID != "" && info.ID != id {
				return fmt.Errorf("%w: the node at %s is %q, not %q", ErrInvalidMember, addr, info.ID, id)
			}
			if err := n.checkSameCluster(addr, info); err != nil {
				return err
			}
		} else if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	for _, s := range cf.Configuration().Servers {
		switch {
		case string(s.ID) != id && string(s.Address) == addr:
			n.logger.Info("removing member that held the joining node's address", "old_id", string(s.ID), "address", addr)
			var err error
			if prev, err = n.configChange(ctx, prev, n.raft.RemoveServer(s.ID, prev, n.enqueueTimeout(ctx))); err != nil {
				return fmt.Errorf("remove %s: %w", s.ID, err)
			}
		}
	}
	var f raft.IndexFuture
	if voter {
		f = n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), prev, n.enqueueTimeout(ctx))
	} else {
		f = n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), prev, n.enqueueTimeout(ctx))
	}
	if _, err := n.configChange(ctx, prev, f); err != nil {
		return fmt.Errorf("add %s at %s: %w", id, addr, err)
	}
	n.logger.Info("cluster member added", "id", id, "address", addr, "voter", voter)
	return nil
}

// voterProbeTimeout bounds how long the leader waits for a would-be voter
// to answer checkAnswersAs.
const voterProbeTimeout = 3 * time.Second

// checkAnswersAs asks the node at addr who it is, and returns
// ErrInvalidMember unless it answers, within voterProbeTimeout, as id.
// A voter counts towards the quorum from the moment its configuration
// entry is appended, so one that cannot be reached (a wrong advertised
// address, a node not yet started, a typo in an operator's request) would
// leave a one-node cluster, or any cluster already one failure from its
// quorum, without a leader, and the change could then not be undone. A
// non-voter needs no such check: it never counts.
// It also refuses a node of another cluster (checkSameCluster).
// advice ends the error when nothing answers: what the operator can do.
func (n *Node) checkAnswersAs(ctx context.Context, id, addr, advice string) error {
	info, err := n.probe(ctx, addr)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: no floe node answers at %s (%v); %s", ErrInvalidMember, addr, err, advice)
	}
	if info.ID != id {
		return fmt.Errorf("%w: the node at %s is %q, not %q", ErrInvalidMember, addr, info.ID, id)
	}
	return n.checkSameCluster(addr, info)
}

// probe asks the node at addr who it is, within voterProbeTimeout.
func (n *Node) probe(ctx context.Context, addr string) (nodeInfo, error) {
	pctx, cancel := context.WithTimeout(ctx, voterProbeTimeout)
	defer cancel()
	var info nodeInfo
	err := n.call(pctx, addr, rpcInfo, struct{}{}, &info)
	return info, err
}

// checkSameCluster returns ErrInvalidMember when the node that answered at
// addr belongs to another cluster: its state machine holds another
// cluster's identity (fsm.SetClusterID). Added, it would append this
// cluster's log after entries it has already applied, and serve a state
// no other member has. A node without an identity (no state yet, or a
// binary that predates it) and a cluster not yet stamped are not judged.
func (n *Node) checkSameCluster(addr string, info nodeInfo) error {
	ours := n.ClusterID()
	if info.ClusterID == "" || ours == "" || info.ClusterID == ours {
		return nil
	}
	return fmt.Errorf("%w: the node at %s belongs to another cluster (cluster id %s, not this cluster's %s); "+
		"start it with an empty data directory to join this one", ErrInvalidMember, addr, info.ClusterID, ours)
}

// errForeignPeer is the error of a Raft dial refused by checkPeerCluster.
var errForeignPeer = errors.New("raftnode: not connecting Raft to a node of another cluster")

// foreignProbeTimeout bounds the probe checkPeerCluster makes before a
// Raft dial.
const foreignProbeTimeout = 2 * time.Second

// checkPeerCluster runs before each Raft dial (holdLayer.checkPeer): it
// asks the node at addr who it is and refuses to connect when it holds
// another cluster's identity. A member that lost its data directory and
// was started without --join forms a cluster of one and stamps its own
// identity; without this check this cluster's leader reached it at its
// old address, and Raft, which has no notion of cluster identity (both
// logs start with a bootstrap entry at index 1, term 1), made it a
// follower again over the entries it had applied on its own: it served
// writes the others never had. A node from a binary that reports no
// identity (it answers without one, or does not know the method), one
// without an identity yet (a node joining) and a cluster not yet stamped
// are not judged: Raft's own dial decides. A node that does not answer the
// probe, or answers it with any other error (down, cut off, too slow) is
// not dialled either: it may be exactly such a node, reached the moment a
// partition heals, and Raft dials again later, probing again.
func (n *Node) checkPeerCluster(addr string, timeout time.Duration) error {
	if n.ClusterID() == "" {
		return nil
	}
	if timeout <= 0 || timeout > foreignProbeTimeout {
		timeout = foreignProbeTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var info nodeInfo
	if err := n.call(ctx, addr, rpcInfo, struct{}{}, &info); err != nil {
		if re, answered := errors.AsType[*transport.RemoteError](err); answered && isUnknownMethod(re) {
			return nil
		}
		return fmt.Errorf("raftnode: asking %s which cluster it holds before connecting Raft: %w", addr, err)
	}
	err := n.checkSameCluster(addr, info)
	if err != nil {
		err = fmt.Errorf("%w: %w", errForeignPeer, err)
		n.metrics.foreignDials.Inc()
		n.foreignLog.Do(addr, func() {
			n.logger.Error("not connecting Raft to a member that holds another cluster's state; remove it (floe members remove) and add it back with an empty data directory and --join",
				"addr", addr, "peer_id", info.ID, "peer_cluster_id", info.ClusterID, "cluster_id", n.ClusterID())
		})
	}
	return err
}

// isUnknownMethod reports whether re is a node's answer to a method it
// does not serve: a binary from before the cluster identity probe. Any
// other error answer (the node is shutting down, say) says nothing of
// which cluster the node holds.
func isUnknownMethod(re *transport.RemoteError) bool {
	return re.Code == codeBadRequest && strings.HasPrefix(re.Message, unknownMethod)
}

// unknownMethod starts handleRPC's answer to a method it does not serve.
const unknownMethod = "unknown method "

// throttle runs a function at most once per interval for each key (a log
// line that would otherwise repeat at every Raft redial).
type throttle struct {
	mu   sync.Mutex
	last map[string]time.Time
}

const throttleInterval = time.Minute

func (t *throttle) Do(key string, f func()) {
	now := time.Now()
	t.mu.Lock()
	if t.last == nil {
		t.last = map[string]time.Time{}
	}
	due := now.Sub(t.last[key]) >= throttleInterval
	if due {
		t.last[key] = now
	}
	t.mu.Unlock()
	if due {
		f()
	}
}

// admitResponse is the leader's answer to an admission request.
type admitResponse struct {
	// Suffrage is what the leader's configuration holds for the ID after
	// the request: "Nonvoter", or empty when the ID is not a member.
	Suffrage string `json:"suffrage,omitempty"`
}

// admit answers an admission request from a node without Raft state (see
// askAdmission), on the leader: forwarded there when forward is set and this
// node does not lead, else ErrNotLeader.
func (n *Node) admit(ctx context.Context, req memberRequest, forward bool) (admitResponse, error) {
	if n.raft.State() == raft.Leader || !forward {
		return n.admitLocal(ctx, req)
	}
	var resp admitResponse
	err := n.onLeader(ctx, rpcAdmit, req, &resp, func() error {
		var err error
		resp, err = n.admitLocal(ctx, req)
		return err
	})
	return resp, err
}

// admitLocal decides, on the leader, whether a node without Raft state that
// wants to join under req.ID at req.Addr may open its Raft port:
//
//   - ID not a member: yes; the node then asks to be added as a voter
//     (addServer). Nothing changes here.
//   - ID a voter: the node lost its data directory, and with it the record
//     of the votes its ID cast, so as that voter it could vote twice in one
//     term. Refused with ErrRejoinRefused, and nothing changes, unless
//     req.AsNonvoter: then the entry is demoted to a non-voter, which an
//     operator promotes once the node has caught up.
//   - ID a non-voter: yes, as that non-voter.
//
// A member with the ID is re-addressed to req.Addr, and another member
// holding req.Addr is removed (its address is this node's now). The answer
// for a member is given only once the configuration that makes it a
// non-voter is committed. On an error other than ErrRejoinRefused some of
// these changes may have been made; the node asks again.
func (n *Node) admitLocal(ctx context.Context, req memberRequest) (admitResponse, error) {
	if req.ID == "" || req.Addr == "" {
		return admitResponse{}, fmt.Errorf("%w: id and address are required", ErrInvalidMember)
	}
	if err := CheckMemberID(req.ID); err != nil {
		return admitResponse{}, fmt.Errorf("%w: %v", ErrInvalidMember, err)
	}
	if err := CheckClusterAddr(req.Addr); err != nil {
		return admitResponse{}, fmt.Errorf("%w: %v", ErrInvalidMember, err)
	}
	if n.raft.State() != raft.Leader {
		return admitResponse{}, ErrNotLeader
	}
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return admitResponse{}, err
	}
	prev := cf.Index()
	servers := cf.Configuration().Servers
	log := n.logger.With("id", req.ID, "address", req.Addr)
	i := slices.IndexFunc(servers, func(s raft.Server) bool { return string(s.ID) == req.ID })
	if i >= 0 && servers[i].Suffrage == raft.Voter {
		switch {
		case servers[i].ID == n.id:
			return admitResponse{}, fmt.Errorf("%w: %q is the ID of the leader itself; two nodes cannot share an ID", ErrRejoinRefused, req.ID)
		case !req.AsNonvoter:
			log.Warn("refused a node without Raft state whose ID is a voter: it no longer knows how it voted")
			return admitResponse{}, fmt.Errorf("%w: %q is a voter in the cluster and the node asking to join under it has no Raft state, "+
				"so it no longer knows how it voted and could vote twice in one term", ErrRejoinRefused, req.ID)
		}
	}
	if slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.ID) != req.ID && string(s.Address) == req.Addr }) {
		// That member is removed below: only once the address answers
		// as the joining node (it answers RPCs while its Raft port is
		// still shut), which proves the member is no longer there.
		if err := n.checkAnswersAs(ctx, req.ID, req.Addr, "start it there first, or add it as a non-voter"); err != nil {
			return admitResponse{}, err
		}
	}
	for _, s := range servers {
		if string(s.ID) != req.ID && string(s.Address) == req.Addr {
			log.Info("removing member that held the joining node's address", "old_id", string(s.ID))
			var err error
			if prev, err = n.configChange(ctx, prev, n.raft.RemoveServer(s.ID, prev, n.enqueueTimeout(ctx))); err != nil {
				return admitResponse{}, fmt.Errorf("remove %s: %w", s.ID, err)
			}
		}
	}
	if i < 0 {
		return admitResponse{}, nil
	}
	self := servers[i]
	if self.Suffrage == raft.Voter {
		var err error
		if prev, err = n.configChange(ctx, prev, n.raft.DemoteVoter(self.ID, prev, n.enqueueTimeout(ctx))); err != nil {
			return admitResponse{}, fmt.Errorf("demote %s: %w", self.ID, err)
		}
		log.Warn("voter without Raft state rejoins as a non-voter; promote it with POST /management/v1/cluster/voters once it has caught up")
	}
	if string(self.Address) != req.Addr {
		// On a non-voter, AddNonvoter replaces the entry: a new address.
		if _, err := n.configChange(ctx, prev, n.raft.AddNonvoter(self.ID, raft.ServerAddress(req.Addr), prev, n.enqueueTimeout(ctx))); err != nil {
			return admitResponse{}, fmt.Errorf("re-address %s: %w", self.ID, err)
		}
	}
	// The configuration read above, or a change made here, may not be
	// committed yet; a new leader could still drop it and with it the
	// demotion. A barrier commits only after every entry before it.
	if err := n.await(ctx, n.raft.Barrier(n.enqueueTimeout(ctx))); err != nil {
		return admitResponse{}, fmt.Errorf("commit the configuration: %w", err)
	}
	return admitResponse{Suffrage: raft.Nonvoter.String()}, nil
}

// Remove removes a member.
func (n *Node) Remove(ctx context.Context, id string) error {
	return n.onLeader(ctx, rpcRemove, memberRequest{ID: id}, nil, func() error { return n.removeLocal(ctx, id) })
}

func (n *Node) removeLocal(ctx context.Context, id string) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return err
	}
	servers := cf.Configuration().Servers
	i := slices.IndexFunc(servers, func(s raft.Server) bool { return string(s.ID) == id })
	if i < 0 {
		return fmt.Errorf("%w: no member with id %q", ErrNoSuchMember, id)
	}
	if servers[i].Suffrage == raft.Voter && !slices.ContainsFunc(servers, func(s raft.Server) bool {
		return s.Suffrage == raft.Voter && string(s.ID) != id
	}) {
		return fmt.Errorf("%w: %s is the last voter; a cluster needs one", ErrInvalidMember, id)
	}
	if servers[i].Suffrage == raft.Voter {
		if err := n.checkQuorumWithout(ctx, servers, id); err != nil {
			return err
		}
	}
	// Applied only to the configuration checked above: a change appended
	// since (by a leader before this one) fails it instead.
	if _, err := n.configChange(ctx, cf.Index(), n.raft.RemoveServer(raft.ServerID(id), cf.Index(), n.enqueueTimeout(ctx))); err != nil {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	n.logger.Info("cluster member removed", "id", id)
	return nil
}

// configChange waits for f, a membership change proposed on the
// configuration at index prev (raft's prevIndex: the change applies to that
// configuration only), and returns the index of the configuration it made.
// Every change is checked against the configuration it reads (a removal
// against the quorum that would remain), so two changes must not both be
// checked against one configuration and then both applied: memberMu
// serialises them on this node, and prevIndex refuses one whose
// configuration another leader changed meanwhile. That refusal is
// ErrUnavailable: nothing changed, and a retry is checked afresh.
func (n *Node) configChange(ctx context.Context, prev uint64, f raft.IndexFuture) (uint64, error) {
	if err := n.await(ctx, f); err != nil {
		if strings.HasPrefix(err.Error(), fmt.Sprintf("configuration changed since %d ", prev)) {
			return 0, fmt.Errorf("%w: the cluster's membership changed while this change was being checked; retry: %v", ErrUnavailable, err)
		}
		return 0, err
	}
	return f.Index(), nil
}

// checkQuorumWithout returns ErrInvalidMember when the voters that would
// remain once id is removed cannot form a majority among those that answer
// now (this node, and each other one asked in parallel within
// voterProbeTimeout). Removing a healthy voter while another is down would
// otherwise commit, and leave a cluster that cannot elect a leader until
// the one that is down comes back.
func (n *Node) checkQuorumWithout(ctx context.Context, servers []raft.Server, id string) error {
	var rest []raft.Server
	for _, s := range servers {
		if s.Suffrage == raft.Voter && string(s.ID) != id {
			rest = append(rest, s)
		}
	}
	infos, errs := n.askAll(ctx, rest, voterProbeTimeout)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var up, down []string
	for i, s := range rest {
		if errs[i] == nil && infos[i].ID == string(s.ID) {
			up = append(up, string(s.ID))
		} else {
			down = append(down, string(s.ID))
		}
	}
	if need := len(rest)/2 + 1; len(up) < need {
		verb := "does"
		if len(down) > 1 {
			verb = "do"
		}
		return fmt.Errorf("%w: removing %s would leave %d voters, of which only %d answer now (%s %s not), fewer than the %d a quorum needs: "+
			"bring them back, or remove them first", ErrInvalidMember, id, len(rest), len(up), strings.Join(down, ", "), verb, need)
	}
	return nil
}

// TransferLeadership hands leadership to the member id, or to any
// up-to-date voter when id is empty.
func (n *Node) TransferLeadership(ctx context.Context, id string) error {
	return n.onLeader(ctx, rpcTransfer, memberRequest{ID: id}, nil, func() error { return n.transferLocal(ctx, id) })
}

// HandOver, on a leader, gives leadership to the most up-to-date other
// voter before a planned stop, within ctx; elsewhere, or without another
// voter, it does nothing. Without it a leader stopping at once failed every
// command in flight on it, its own and those followers forwarded, as an
// unknown outcome (500), though most of them committed; during the
// transfer new commands are refused as by a node that does not lead, and
// the followers send them again to the new leader.
//
// The target is the voter that answers with the most of the log: Raft's
// own pick (the highest next index) may be a voter that is down, which
// would refuse writes until the transfer timed out and hand nothing over.
func (n *Node) HandOver(ctx context.Context) error {
	if n.raft.State() != raft.Leader {
		return nil
	}
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return err
	}
	var voters []raft.Server
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == raft.Voter && s.ID != n.id {
			voters = append(voters, s)
		}
	}
	if len(voters) == 0 {
		return nil
	}
	infos, errs := n.askAll(ctx, voters, statusProbeTimeout)
	best := -1
	for i := range voters {
		if errs[i] == nil && infos[i].ID == string(voters[i].ID) && (best < 0 || infos[i].LastIndex > infos[best].LastIndex) {
			best = i
		}
	}
	if best < 0 {
		return fmt.Errorf("%w: no other voter answers", ErrUnavailable)
	}
	if err := n.transferLocal(ctx, string(voters[best].ID)); err != nil {
		return err
	}
	// Followers forward to this node until they hear from the new leader;
	// a call that reaches it as it closes its cluster port is cut off and
	// answered as of unknown outcome. So it stays, answering "not the
	// leader" (the caller sends the command on), until it knows the new
	// leader itself and a little longer, for the others to know it too.
	if got := n.awaitLeader(ctx, n.id, n.electionBound()); got != "" && got != n.id {
		select {
		case <-time.After(handOverLinger):
		case <-ctx.Done():
		}
	}
	return nil
}

// handOverLinger is how long a node that handed leadership over before a
// stop keeps serving once it knows the new leader (see HandOver): the new
// leader's first heartbeat reaches every follower within it.
const handOverLinger = 100 * time.Millisecond

func (n *Node) transferLocal(ctx context.Context, id string) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	var f raft.Future
	if id == "" {
		cf := n.raft.GetConfiguration()
		if err := cf.Error(); err != nil {
			return err
		}
		if !slices.ContainsFunc(cf.Configuration().Servers, func(s raft.Server) bool { return s.Suffrage == raft.Voter && s.ID != n.id }) {
			// Raft would answer "cannot find peer", which reads as a
			// failure worth retrying; no retry will find one.
			return fmt.Errorf("%w: there is no other voter to take leadership", ErrInvalidMember)
		}
		f = n.raft.LeadershipTransfer()
	} else {
		cf := n.raft.GetConfiguration()
		if err := cf.Error(); err != nil {
			return err
		}
		i := slices.IndexFunc(cf.Configuration().Servers, func(s raft.Server) bool { return string(s.ID) == id })
		if i < 0 {
			return fmt.Errorf("%w: no member with id %q", ErrNoSuchMember, id)
		}
		s := cf.Configuration().Servers[i]
		if s.ID == n.id {
			return nil
		}
		if s.Suffrage != raft.Voter {
			// Raft would start the election anyway, which a non-voter
			// cannot win: a term lost for nothing.
			return fmt.Errorf("%w: %s is not a voter and cannot lead", ErrInvalidMember, id)
		}
		// A member that does not answer cannot take over: Raft would
		// wait out its transfer timeout, refusing every write meanwhile,
		// and report a timeout that does not say why.
		info, err := n.probe(ctx, string(s.Address))
		if err == nil && info.ID != id {
			err = fmt.Errorf("the node there is %q", info.ID)
		}
		if err != nil {
			return fmt.Errorf("%w: %s (%s) does not answer, so it cannot take leadership: %v", ErrInvalidMember, id, s.Address, err)
		}
		f = n.raft.LeadershipTransferToServer(s.ID, s.Address)
	}
	if err := n.await(ctx, f); err != nil {
		return fmt.Errorf("%w: leadership transfer: %w", ErrUnavailable, err)
	}
	to := id
	if to == "" {
		_, l := n.raft.LeaderWithID()
		to = string(l) // "" until this node has heard from the new leader
	}
	n.logger.Info("leadership transferred", "to", to)
	return nil
}

// readdress runs at start on a node that has Raft state. If the
// configuration records this node under another address (it was
// rescheduled with a new IP, or given --cluster-advertise), the leader can
// no longer reach it, so it cannot learn who leads from Raft itself: it asks
// the other members and the Join nodes for the leader and asks it to update
// its address. It gives up when a leader reaches it or it shuts down.
func (n *Node) readdress() {
	for attempt := 0; ; attempt++ {
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(2 * n.cfg.HeartbeatTimeout):
		}
		cf := n.raft.GetConfiguration()
		if cf.Error() != nil {
			continue
		}
		var recorded string
		voter := false
		candidates := append([]string{}, n.cfg.Join...)
		for _, s := range cf.Configuration().Servers {
			if s.ID == n.id {
				recorded = string(s.Address)
				voter = s.Suffrage == raft.Voter
			} else {
				candidates = append(candidates, string(s.Address))
			}
		}
		if recorded == "" || recorded == n.Addr() {
			return // not a member (removed), or the address is right
		}
		if _, id := n.raft.LeaderWithID(); id != "" && n.raft.LastContact().After(n.openedAt) {
			return // the leader reaches us: the address was updated
		}
		for _, addr := range candidates {
			ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
			// The recorded suffrage, so that a non-voter is not promoted.
			err := n.call(ctx, addr, rpcJoin, memberRequest{ID: string(n.id), Addr: n.Addr(), Voter: voter, Readdress: true}, nil)
			cancel()
			if err == nil {
				n.logger.Info("asked the leader to update this node's address", "old", recorded, "new", n.Addr(), "via", addr)
				break
			}
			if errors.Is(fromRemote(err, true), ErrNoSuchMember) {
				// Removed: askMembership finds it and Ready says so.
				n.logger.Info("the leader refused to update this node's address: it is not a member", "via", addr, "error", err)
				return
			}
			n.logger.Debug("address update request failed", "via", addr, "error", err)
		}
	}
}

// statusProbeTimeout bounds how long Status waits for one member's answer
// about itself. A member on a LAN answers within milliseconds; one that has
// not answered by then (stopped, cut off, overloaded) is listed unreachable.
const statusProbeTimeout = 500 * time.Millisecond

// Status reports the configuration as this node knows it, with what each
// reachable member says about itself. Members are asked all at once, each
// for at most statusProbeTimeout (or until ctx ends), so a silent member
// costs one short wait, not one per member; it is listed with what this
// node knows of it (address, suffrage, whether it leads) and the error.
func (n *Node) Status(ctx context.Context) (Status, error) {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return Status{}, err
	}
	leaderAddr, leaderID := n.raft.LeaderWithID()
	st := Status{
		Self: string(n.id), LeaderID: string(leaderID), LeaderAddr: string(leaderAddr),
		Term: n.raft.CurrentTerm(), CommitIndex: n.raft.CommitIndex(), AppliedIndex: n.fsm.AppliedIndex(),
		ClusterID: n.ClusterID(), Members: []Member{},
	}
	servers := cf.Configuration().Servers
	infos, errs := n.askAll(ctx, servers, statusProbeTimeout)
	for i, s := range servers {
		m := Member{ID: string(s.ID), ClusterAddr: string(s.Address), Suffrage: s.Suffrage.String(), Leader: s.ID == leaderID}
		if err := errs[i]; err != nil {
			m.Error = err.Error()
		} else {
			info := infos[i]
			m.Reachable = true
			m.HTTPAddr, m.State, m.Term, m.CommitIndex, m.AppliedIndex, m.LastContact, m.ClusterID =
				info.HTTPAddr, info.State, info.Term, info.CommitIndex, info.Applied, info.LastContact, info.ClusterID
			if info.ClusterID != "" && st.ClusterID != "" && info.ClusterID != st.ClusterID {
				// Raft does not connect to it (checkPeerCluster): it is
				// a member only in name until replaced.
				m.Error = fmt.Sprintf("holds another cluster's state (cluster id %s): remove it and add it back with an empty data directory", info.ClusterID)
			}
		}
		st.Members = append(st.Members, m)
	}
	return st, nil
}

// askAll asks every server who it is, in parallel, each within timeout;
// this node answers from itself. errs[i] is set for one that did not
// answer.
func (n *Node) askAll(ctx context.Context, servers []raft.Server, timeout time.Duration) ([]nodeInfo, []error) {
	infos := make([]nodeInfo, len(servers))
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		if s.ID == n.id {
			infos[i] = n.info()
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			errs[i] = n.call(cctx, string(s.Address), rpcInfo, struct{}{}, &infos[i])
			if errs[i] != nil && cctx.Err() != nil && ctx.Err() == nil {
				errs[i] = fmt.Errorf("no answer within %s: %w", timeout, errs[i])
			}
		})
	}
	wg.Wait()
	return infos, errs
}

// joinSilenceWarn is how many join rounds (about a second each) pass
// between warnings that no join address answers.
const joinSilenceWarn = 10

// formCluster runs at start. A node with Raft state is already a member:
// it only makes sure its recorded address is current (readdress).
// Otherwise, given Join addresses, until it is a member (it has known a
// leader, even if it knows none now), it is refused, or it shuts down, it
// asks the Join nodes about themselves:
//
//   - If one knows a leader, it first asks the leader for admission (its
//     Raft port is shut until then, see Config.Join): refused when its ID
//     is a voter (ErrRejoinRefused; Failed is closed and it stops trying),
//     rejoining as a non-voter when its ID is one (or was demoted to one,
//     with RejoinAsNonvoter), else admitted as a new member, and then it
//     asks to be added as a voter.
//   - With BootstrapExpect, once it reaches enough nodes and none has
//     state, it bootstraps them all (every node computes the same
//     configuration, so several bootstrapping is safe) and tells the others
//     (announceFormed), which open their Raft ports. A node that sees a
//     peer that bootstrapped but never had a leader opens its Raft port
//     without bootstrapping, so that it can vote in the first election and
//     receive the configuration from the first leader.
func (n *Node) formCluster() {
	defer n.wg.Done()
	if has, err := raft.HasExistingState(n.logs, n.logs, n.snaps); err != nil || has {
		n.readdress()
		return
	}
	if len(n.cfg.Join) == 0 {
		return
	}
	log := n.logger.With("join", n.cfg.Join, "bootstrap_expect", n.cfg.BootstrapExpect)
	log.Info("joining cluster")
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-n.ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		// Once a leader has been known, the node is a member and this
		// loop's work is done. Checking only for a leader now would be
		// wrong: a member removed early, which knows no leader any more,
		// would ask to join again and be re-added.
		if _, id, _ := n.leaderNow(); id != "" || n.leader.seen() {
			log.Info("cluster joined", "leader_id", string(id))
			return
		}
		peers := map[string]nodeInfo{}
		var leader string
		unreachable := map[string]string{}
		for _, addr := range n.cfg.Join {
			if addr == n.Addr() {
				continue
			}
			ctx, cancel := context.WithTimeout(n.ctx, time.Second)
			var info nodeInfo
			err := n.call(ctx, addr, rpcInfo, struct{}{}, &info)
			cancel()
			if err != nil {
				log.Debug("join address not reachable", "address", addr, "error", err)
				unreachable[addr] = err.Error()
				continue
			}
			if info.ID == string(n.id) {
				continue
			}
			peers[info.ID] = info
			if info.LeaderID != "" {
				leader = addr
			}
		}
		// Said at Warn every joinSilenceWarn rounds while no join address
		// answers (a mistyped --join, the others not started yet): the
		// operator otherwise sees only "no leader".
		if len(peers) == 0 && len(unreachable) > 0 && attempt%joinSilenceWarn == joinSilenceWarn-1 {
			log.Warn("no --join address answers; check the addresses and that those nodes run",
				"unreachable", unreachable, "waited", time.Duration(attempt+1)*time.Second)
		}
		if leader != "" {
			if n.hold.held.Load() {
				member, err := n.askAdmission(leader)
				switch {
				case errors.Is(err, ErrRejoinRefused):
					log.Error("rejoin refused; this node stays out of the cluster", "error", err)
					n.fail(err)
					return
				case err != nil:
					log.Warn("admission request failed; retrying", "via", leader, "error", err)
					continue
				}
				n.openRaft(log, "admitted by the leader")
				if member {
					log.Warn("rejoining as a non-voter; an operator promotes it with POST /management/v1/cluster/voters once it has caught up")
					continue // returns once the leader reaches us
				}
			}
			if n.leader.seen() {
				continue // a member now: the check above returns
			}
			ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
			err := n.call(ctx, leader, rpcJoin, memberRequest{ID: string(n.id), Addr: n.Addr(), Voter: true}, nil)
			cancel()
			if err != nil {
				log.Warn("join request failed; retrying", "via", leader, "error", err)
				continue
			}
			log.Info("join request accepted", "via", leader)
			continue // returns once a leader is seen
		}
		if n.cfg.BootstrapExpect <= 0 {
			continue
		}
		if n.hold.held.Load() && stillForming(peers) {
			n.openRaft(log, "a cluster is forming")
		}
		if len(peers)+1 < n.cfg.BootstrapExpect {
			continue
		}
		servers := []raft.Server{{ID: n.id, Address: raft.ServerAddress(n.Addr()), Suffrage: raft.Voter}}
		fresh := true
		for _, p := range peers {
			fresh = fresh && !p.HasState
			servers = append(servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.ClusterAddr), Suffrage: raft.Voter})
		}
		if !fresh {
			continue // a cluster is forming or electing: wait for its leader
		}
		sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
		if err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			log.Warn("bootstrap failed; retrying", "error", err)
			continue
		}
		log.Info("bootstrapped new cluster", "servers", len(servers))
		n.openRaft(log, "bootstrapped")
		n.announceFormed(log, servers)
	}
}

// formedRequest tells a node that the sender bootstrapped a new cluster
// with it as a voter.
type formedRequest struct {
	By      string   `json:"by"`
	Servers []string `json:"servers"` // IDs in the bootstrap configuration
}

// announceFormed tells the other servers of a configuration this node just
// bootstrapped that the cluster is new, so that they open their Raft ports
// at once. Without it, a peer whose next look at the Join nodes comes after
// the first leader was elected without it would find its ID a voter of an
// established cluster and be refused. A peer not reached here opens when it
// sees the cluster still forming (stillForming), or is refused once it has
// a leader.
func (n *Node) announceFormed(log *slog.Logger, servers []raft.Server) {
	req := formedRequest{By: string(n.id)}
	for _, s := range servers {
		req.Servers = append(req.Servers, string(s.ID))
	}
	for _, s := range servers {
		if s.ID == n.id {
			continue
		}
		ctx, cancel := context.WithTimeout(n.ctx, time.Second)
		err := n.call(ctx, string(s.Address), rpcFormed, req, nil)
		cancel()
		if err != nil {
			log.Warn("could not tell a peer the cluster was bootstrapped", "peer", string(s.ID), "address", string(s.Address), "error", err)
		}
	}
}

// formed opens this node's Raft port when it has no state and a peer
// bootstrapped a new cluster with it: in a cluster that did not exist before,
// this node's ID has cast no vote to forget.
func (n *Node) formed(req formedRequest) {
	// A held node has no state: it is opened before it can get any.
	if !n.hold.held.Load() || !slices.Contains(req.Servers, string(n.id)) {
		return
	}
	n.openRaft(n.logger, "bootstrapped by "+req.By)
}

// askAdmission asks the leader, through the Join node at via, whether this
// node, which has no Raft state, may open its Raft port (see admitLocal).
// member reports that the leader's configuration holds this node's ID, as a
// non-voter; otherwise the node is new and asks to be added. The error wraps
// ErrRejoinRefused when the leader refused it; any other error means no
// answer, and the node asks again.
func (n *Node) askAdmission(via string) (member bool, err error) {
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	var resp admitResponse
	req := memberRequest{ID: string(n.id), Addr: n.Addr(), AsNonvoter: n.cfg.RejoinAsNonvoter}
	if err := n.call(ctx, via, rpcAdmit, req, &resp); err != nil {
		return false, fromRemote(err, true)
	}
	return resp.Suffrage != "", nil
}

// openRaft opens this node's Raft port (see Config.Join).
func (n *Node) openRaft(log *slog.Logger, why string) {
	if n.hold.held.Swap(false) {
		log.Info("raft port open", "reason", why)
	}
}

// stillForming reports whether peers show a cluster that was bootstrapped
// but has never had a leader: at least one has state, and none has an entry
// beyond the bootstrap configuration (index 1), which the first leader's
// no-op would be. Such a cluster has no past votes of this node's ID to
// forget; an established cluster has a leader's entries on a majority.
func stillForming(peers map[string]nodeInfo) bool {
	bootstrapped := false
	for _, p := range peers {
		if p.HasState {
			if p.LastIndex > 1 {
				return false
			}
			bootstrapped = true
		}
	}
	return bootstrapped
}

// maxMemberIDBytes bounds a member's ID.
const maxMemberIDBytes = 255

// CheckMemberID refuses an ID a member could not be managed by: empty, over
// 255 bytes, not UTF-8, "." or "..", or holding a space, a control
// character or a '/'.
// The ID is a path segment of the operator API
// (DELETE /management/v1/cluster/members/{id}), and it is printed by
// `floe status` and the logs.
func CheckMemberID(id string) error {
	switch {
	case id == "":
		return errors.New("a member id must not be empty")
	case len(id) > maxMemberIDBytes:
		return fmt.Errorf("a member id is at most %d bytes, got %d", maxMemberIDBytes, len(id))
	case !utf8.ValidString(id):
		return fmt.Errorf("member id %q is not UTF-8", id)
	}
	if id == "." || id == ".." {
		return fmt.Errorf("member id %q is a path segment the operator API cannot address", id)
	}
	for _, r := range id {
		if r == '/' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("member id %q holds %q: ids may not hold spaces, control characters or '/'", id, r)
		}
	}
	return nil
}

// CheckClusterAddr refuses a member address Raft could never dial: it
// must be host:port with a host free of spaces and control characters and
// a port from 1 to 65535 in plain decimal. A voter at such an address would count towards
// the quorum and never answer.
func CheckClusterAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q is not host:port: %v", addr, err)
	}
	if host == "" {
		return fmt.Errorf("address %q has no host", addr)
	}
	if i := strings.IndexFunc(host, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return fmt.Errorf("address %q has a host holding spaces or control characters", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("address %q has no port from 1 to 65535", addr)
	} else if port != strconv.Itoa(p) {
		// "+44312" or "044312": one port under another spelling, which a
		// node's own address (as it advertises it) never matches.
		return fmt.Errorf("address %q spells its port %q; write it as %d", addr, port, p)
	}
	return nil
}
