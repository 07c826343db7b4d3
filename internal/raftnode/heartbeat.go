package raftnode

import (
	"sync"

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

// Raft finds pre-vote and close through these interfaces; the gate must
// keep them.
var (
	_ raft.WithPreVote = (*gatedTransport)(nil)
	_ raft.WithClose   = (*gatedTransport)(nil)
)
