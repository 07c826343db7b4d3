package raftnode

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// gatedTransport is raft's network transport with a gate on its heartbeat
// fast path. The transport runs heartbeats on its connection goroutines,
// straight into Raft, and Raft checks for shutdown only before it starts
// one: a heartbeat that began just before Raft shut down may still be
// saving the current term when the node closes its log store, and Raft
// panics on a failed save. stopHeartbeats waits for such a heartbeat to end
// and refuses every later one, so the log store can be closed safely.
type gatedTransport struct {
	*raft.NetworkTransport

	mu      sync.RWMutex
	stopped bool

	// stopping ends the waits for a peer that is down (see AppendEntries):
	// Raft's Shutdown waits for its replication goroutines.
	stopOnce sync.Once
	stopping chan struct{}
	// stillWanted, once set, says whether an append to id at target is
	// still this node's to send: it leads, and its latest membership has
	// id at target. A wait ends as soon as it is not (the peer moved to
	// another address, was removed, or leadership was lost).
	stillWanted atomic.Pointer[func(id raft.ServerID, target raft.ServerAddress) bool]
}

func newGatedTransport(nt *raft.NetworkTransport) *gatedTransport {
	return &gatedTransport{NetworkTransport: nt, stopping: make(chan struct{})}
}

// stopWaiting ends every wait for a peer to come back, now and later:
// called before Raft shuts down, whose Shutdown waits for the goroutines
// making those calls.
func (t *gatedTransport) stopWaiting() {
	t.stopOnce.Do(func() {
		if t.stopping != nil {
			close(t.stopping)
		}
	})
}

// Close implements raft.WithClose: it ends the waits for peers, then
// closes the transport.
func (t *gatedTransport) Close() error {
	t.stopWaiting()
	return t.NetworkTransport.Close()
}

// SetHeartbeatHandler implements raft.Transport. The handler runs only
// while the gate is open; after stopHeartbeats a heartbeat is answered with
// raft.ErrRaftShutdown.
func (t *gatedTransport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		t.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	t.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		t.mu.RLock()
		defer t.mu.RUnlock()
		if t.stopped {
			rpc.Respond(nil, raft.ErrRaftShutdown)
			return
		}
		cb(rpc)
	})
}

// stopHeartbeats closes the gate. It returns once no heartbeat handler is
// running, and none will run again.
func (t *gatedTransport) stopHeartbeats() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
}

// A peer that restarted leaves the connections pooled to it dead: the next
// call on each fails at once (EOF, reset, broken pipe) before a new one is
// dialled. Raft counted each such failure: a vote lost (a handover to a
// node holding such connections failed, and the cluster waited out an
// election instead), a heartbeat or an append that made the leader back
// off replicating to the restarted node for seconds. Votes, pre-votes and
// appends are safe to send again (a voter grants the same candidate again
// in the same term; a follower takes an append it already has as a match),
// so one that fails that way is sent again, on the next pooled connection
// or a new one, up to once per pooled connection plus a fresh dial.
const staleConnAttempts = transportMaxPool + 1

// RequestVote implements raft.Transport, sending again after a dead pooled
// connection.
func (t *gatedTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return retryStale(func() error { return t.NetworkTransport.RequestVote(id, target, args, resp) })
}

// RequestPreVote implements raft.WithPreVote, sending again after a dead
// pooled connection.
func (t *gatedTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return retryStale(func() error { return t.NetworkTransport.RequestPreVote(id, target, args, resp) })
}

// A leader replicating to a peer that is down (its cluster port refuses
// connections: the process is restarting) counts each failed append, and
// Raft waits before the next one for a time that doubles with every
// failure, up to 10.24 s (hashicorp/raft's replicateTo: 10 ms × 2^10). A
// follower restarted after some 20 s down waited that long, not ready and
// holding the reads sent to it, before the leader sent it anything: the
// wait was already running when it came back. So an append whose dial
// fails is tried again every peerDownPoll for up to peerDownWait before
// its failure is returned: a peer that comes back meanwhile gets the
// append at once, and Raft counts one failure per peerDownWait instead of
// one per attempt (its wait passes 1 s only after about 80 s down, and
// reaches 10 s after some two minutes, where it took 20 s). Appends are
// safe to send again (see staleConnAttempts), and Raft tolerates one
// delivered late. A wait ends as soon as the append is no longer wanted
// (stillWanted: the peer was removed or moved to another address, or
// leadership was lost). Only the one peer's replication goroutine waits;
// Shutdown ends the waits first (stopWaiting).
var peerDownWait = 10 * time.Second // a variable for tests

const peerDownPoll = 100 * time.Millisecond

// AppendEntries implements raft.Transport, sending again after a dead
// pooled connection, and waiting up to peerDownWait for a peer that
// refuses connections to come back. Heartbeats do not wait: Raft backs
// them off by at most half a heartbeat timeout, and reads the peer's
// address again before each, so a peer restarted at another address hears
// from the leader as soon as its new address is in the membership.
func (t *gatedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	call := func() error {
		return retryStale(func() error { return t.NetworkTransport.AppendEntries(id, target, args, resp) })
	}
	err := call()
	if err == nil || !dialFailed(err) || isHeartbeat(args) {
		return err
	}
	deadline := time.Now().Add(peerDownWait)
	poll := time.NewTimer(peerDownPoll)
	defer poll.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-t.stopping:
			return err
		case <-poll.C:
		}
		if wanted := t.stillWanted.Load(); wanted != nil && !(*wanted)(id, target) {
			return err
		}
		if err = call(); err == nil || !dialFailed(err) {
			return err
		}
		poll.Reset(peerDownPoll)
	}
	return err
}

// isHeartbeat reports whether args is one of Raft's heartbeats, which
// carry no entries, no previous entry and no commit index
// (hashicorp/raft's heartbeat); an append always carries the leader's
// commit index, which is above 0 once anything was committed.
func isHeartbeat(args *raft.AppendEntriesRequest) bool {
	return len(args.Entries) == 0 && args.PrevLogEntry == 0 && args.LeaderCommitIndex == 0
}

func retryStale(call func() error) error {
	var err error
	for range staleConnAttempts {
		if err = call(); err == nil || !deadConn(err) {
			return err
		}
	}
	return err
}

// dialFailed reports whether err is a failed dial: nothing was sent.
func dialFailed(err error) bool {
	op, ok := errors.AsType[*net.OpError](err)
	return ok && op.Op == "dial"
}

// deadConn reports whether err is the failure of a connection the peer had
// closed: not a timeout, and not a failed dial (a peer that is down).
func deadConn(err error) bool {
	if dialFailed(err) {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Raft finds pre-vote and close through these interfaces; the gate must
// keep them.
var (
	_ raft.WithPreVote = (*gatedTransport)(nil)
	_ raft.WithClose   = (*gatedTransport)(nil)
)
