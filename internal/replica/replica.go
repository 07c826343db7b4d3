// Package replica names the failures of a replicated store that are not
// domain outcomes: the errors a Propose or a linearizable Read returns when
// the store could not decide, each saying what the caller can know about
// whether a command was applied.
//
// The Raft node (internal/raftnode) returns these values, wrapped; the
// layers above it (catalog, purge, the operator API) classify them with
// errors.Is without importing the node. The package has no dependencies.
package replica

import "errors"

// The messages keep the text the Raft node reports them with: clients see
// it in 503 bodies and operators on /readyz.
var (
	// ErrNotLeader: the node asked is not the leader. For a proposal,
	// nothing was appended to the log: the command will never be applied,
	// and it is safe to send it to another node. For a read, nothing was
	// read.
	ErrNotLeader = errors.New("raftnode: not the leader")
	// ErrNoLeader: no leader is known (an election is under way or the node
	// cannot reach a quorum). Nothing was appended or read.
	ErrNoLeader = errors.New("raftnode: no leader")
	// ErrUnknownOutcome: the command was handed to the log but the store
	// cannot tell whether it was committed: leadership was lost mid-commit,
	// the caller's context ended while waiting, or the node shut down. It
	// may or may not be applied, now or later. Do not retry blindly and
	// never report it as a conflict: the commit state is unknown.
	//
	// An error wrapping ErrUnknownOutcome never also wraps ErrNotLeader,
	// ErrNoLeader or ErrShutdown, so callers may test for those in any
	// order.
	ErrUnknownOutcome = errors.New("raftnode: outcome unknown")
	// ErrShutdown: the node is shut down or shutting down and, for a
	// proposal, nothing was appended to the log. (A command appended before
	// the shutdown gets ErrUnknownOutcome instead.)
	ErrShutdown = errors.New("raftnode: shut down")
	// ErrNotAccepted: the leader's log did not take the command within its
	// enqueue timeout (the leader is overloaded). Nothing was appended: the
	// command will never be applied, and it is safe to send it again.
	ErrNotAccepted = errors.New("raftnode: command not accepted in time")
	// ErrBehind: a read on a follower gave up because the follower's log
	// stopped advancing towards the leader's read index (it cannot append
	// or apply: a full disk, say). Nothing was read; another node may
	// answer.
	ErrBehind = errors.New("raftnode: this replica is not keeping up with the leader")
	// ErrClockSkew: the leader refused a keyed command this node forwarded
	// because the time it carries is too far from the leader's clock (an
	// Idempotency-Key record's expiry is judged by it), or refused a keyed
	// command or a prune because its own clock is far from the other
	// voters'. Nothing was appended; the request may be sent again (once
	// the clocks agree, or leadership has moved to a node whose clock
	// does).
	ErrClockSkew = errors.New("raftnode: clocks too far apart")
)
