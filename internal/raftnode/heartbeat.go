package raftnode

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"

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

// AppendEntries implements raft.Transport, sending again after a dead
// pooled connection.
func (t *gatedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return retryStale(func() error { return t.NetworkTransport.AppendEntries(id, target, args, resp) })
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

// deadConn reports whether err is the failure of a connection the peer had
// closed: not a timeout, and not a failed dial (a peer that is down).
func deadConn(err error) bool {
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
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
