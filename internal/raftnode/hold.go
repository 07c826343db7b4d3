package raftnode

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// holdLayer wraps the Raft stream layer so that a node without state keeps
// Raft shut until it may take part (held, see Config.Join): inbound Raft
// connections are refused and dials fail, while RPC works, so the node can
// still ask the leader about itself.
type holdLayer struct {
	raft.StreamLayer
	held atomic.Bool
}

// errHeld is returned by the Raft dials of a node whose Raft port is still
// shut (see holdLayer).
var errHeld = errors.New("raftnode: raft is shut until the cluster admits this node")

func newHoldLayer(l raft.StreamLayer) *holdLayer {
	return &holdLayer{StreamLayer: l}
}

func (h *holdLayer) Accept() (net.Conn, error) {
	for {
		c, err := h.StreamLayer.Accept()
		if err != nil {
			return nil, err
		}
		if h.held.Load() {
			c.Close()
			continue
		}
		return c, nil
	}
}

func (h *holdLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if h.held.Load() {
		return nil, errHeld
	}
	return h.StreamLayer.Dial(addr, timeout)
}

// Faults injects network faults into a node's cluster traffic. It exists for
// tests that run whole clusters in one process (see package raftfault); a
// production node has none (Config.Faults nil).
type Faults interface {
	// WrapStreamLayer returns the stream layer Raft is to use instead of l:
	// the place to refuse, fail or cut Raft connections.
	WrapStreamLayer(l raft.StreamLayer) raft.StreamLayer
	// Cut returns a non-nil error while the node's cluster RPC must fail in
	// both directions, as if no peer could be reached: calls the node sends
	// fail with ErrNoLeader wrapping it, and calls it receives are answered
	// as by a node that knows no leader. While the node is to be silent (a
	// stopped process), Cut blocks until it may speak again or ctx ends, so
	// calls it sends or receives go unanswered for that long.
	Cut(ctx context.Context) error
}

// cut reports whether Config.Faults cuts cluster RPC now, after waiting out
// a pause.
func (n *Node) cut(ctx context.Context) error {
	if n.cfg.Faults == nil {
		return nil
	}
	return n.cfg.Faults.Cut(ctx)
}
