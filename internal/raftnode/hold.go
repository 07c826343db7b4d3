package raftnode

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// holdLayer wraps the Raft stream layer so that a node without state keeps
// Raft shut until it may take part (held, see Config.Join): inbound Raft
// connections are refused and dials fail, while RPC works, so the node can
// still ask the leader about itself.
//
// It also keeps the connections it accepted and dialed, so that Shutdown
// can cut them (closeConns): Raft's loop reads an installed snapshot
// straight off its connection with no deadline, and a leader sends one
// under a deadline that grows with its size; either would hold Shutdown for
// as long as a silent peer's connection stays open.
type holdLayer struct {
	raft.StreamLayer
	held atomic.Bool
	// inboundHeld refuses inbound Raft connections only: a node forming a
	// cluster of one keeps them out until it has its identity (see Open).
	inboundHeld atomic.Bool
	// checkPeer, when set, runs before every Raft dial; an error refuses
	// the dial (see Node.checkPeerCluster). Set before Raft starts.
	checkPeer func(addr string, timeout time.Duration) error

	mu     sync.Mutex
	closed bool
	conns  map[*trackedConn]struct{}
}

// trackedConn is a Raft connection; closing it forgets it.
type trackedConn struct {
	net.Conn
	h    *holdLayer
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.h.mu.Lock()
		delete(c.h.conns, c)
		c.h.mu.Unlock()
	})
	return c.Conn.Close()
}

// track keeps c, or closes it and returns false once closeConns has run.
func (h *holdLayer) track(c net.Conn) (*trackedConn, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		c.Close()
		return nil, false
	}
	tc := &trackedConn{Conn: c, h: h}
	if h.conns == nil {
		h.conns = make(map[*trackedConn]struct{})
	}
	h.conns[tc] = struct{}{}
	return tc, true
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
		if h.held.Load() || h.inboundHeld.Load() {
			c.Close()
			continue
		}
		if tc, ok := h.track(c); ok {
			return tc, nil
		}
	}
}

// closeConns closes every Raft connection, inbound and outbound, and every
// one accepted or dialed from now on.
func (h *holdLayer) closeConns() {
	h.mu.Lock()
	h.closed = true
	conns := make([]*trackedConn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// errConnsClosed is returned by a dial after closeConns.
var errConnsClosed = errors.New("raftnode: raft connections closed by shutdown")

func (h *holdLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if h.held.Load() {
		return nil, errHeld
	}
	if h.checkPeer != nil {
		if err := h.checkPeer(string(addr), timeout); err != nil {
			return nil, err
		}
	}
	c, err := h.StreamLayer.Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	tc, ok := h.track(c)
	if !ok {
		return nil, errConnsClosed
	}
	return tc, nil
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
