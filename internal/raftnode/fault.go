package raftnode

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// errIsolated is returned by every cluster call of an isolated node.
var errIsolated = errors.New("raftnode: node is isolated from the cluster")

// faultLayer wraps the Raft stream layer so that a node can be cut off from
// the network (Isolate) for fault tests inside one process: while isolated
// it refuses inbound Raft connections, fails its dials, and its open Raft
// connections are closed. RPC is cut in handleRPC and call.
//
// It also keeps Raft shut for a node without state until it may take part
// (held, see Config.Join): inbound Raft connections are refused and dials
// fail, while RPC works, so the node can still ask the leader about itself.
type faultLayer struct {
	raft.StreamLayer
	isolated atomic.Bool
	held     atomic.Bool
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
}

// errHeld is returned by the Raft dials of a node whose Raft port is still
// shut (see faultLayer).
var errHeld = errors.New("raftnode: raft is shut until the cluster admits this node")

func newFaultLayer(l raft.StreamLayer) *faultLayer {
	return &faultLayer{StreamLayer: l, conns: map[net.Conn]struct{}{}}
}

func (f *faultLayer) Accept() (net.Conn, error) {
	for {
		c, err := f.StreamLayer.Accept()
		if err != nil {
			return nil, err
		}
		if f.isolated.Load() || f.held.Load() {
			c.Close()
			continue
		}
		return f.track(c), nil
	}
}

func (f *faultLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if f.isolated.Load() {
		return nil, errIsolated
	}
	if f.held.Load() {
		return nil, errHeld
	}
	c, err := f.StreamLayer.Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	return f.track(c), nil
}

func (f *faultLayer) track(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, layer: f}
	f.mu.Lock()
	f.conns[tc] = struct{}{}
	f.mu.Unlock()
	return tc
}

func (f *faultLayer) setIsolated(on bool) {
	f.isolated.Store(on)
	if !on {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.(*trackedConn).Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	layer *faultLayer
	once  sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.layer.mu.Lock()
		delete(c.layer.conns, c)
		c.layer.mu.Unlock()
	})
	return c.Conn.Close()
}

// Isolate cuts this node off from the rest of the cluster (on) or
// reconnects it (off): Raft traffic and RPC in both directions fail while it
// is isolated. It exists for fault tests that run whole clusters in one
// process; the process-level harness uses real network faults instead.
func (n *Node) Isolate(on bool) {
	n.layer.setIsolated(on)
	n.logger.Warn("cluster isolation changed", "isolated", on)
}
