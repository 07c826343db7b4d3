// Package raftfault cuts Raft nodes off from each other inside one process,
// for tests that run whole clusters in one test binary. A Network is set as
// a node's raftnode.Config.Faults; Isolate then partitions that node: it
// refuses inbound Raft connections, fails its Raft dials, closes its open
// Raft connections, and its cluster RPC fails in both directions.
//
// Only tests import this package. The process-level harnesses (jepsen-lite,
// cmd/node's process tests) use real network faults instead.
package raftfault

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// ErrIsolated is what every cluster call of an isolated node fails with
// (wrapped in raftnode.ErrNoLeader by the node).
var ErrIsolated = errors.New("raftfault: node is isolated from the cluster")

// Network is the fault switch of one node. Give each node its own; the zero
// value is not usable, call New. Its methods are safe for concurrent use.
type Network struct {
	isolated atomic.Bool

	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

// New returns a Network that lets everything through until Isolate(true).
func New() *Network {
	return &Network{conns: map[*trackedConn]struct{}{}}
}

// Isolate cuts the node off from the rest of the cluster (on) or reconnects
// it (off): Raft traffic and RPC in both directions fail while it is
// isolated. Turning it on also closes the node's open Raft connections.
func (n *Network) Isolate(on bool) {
	n.isolated.Store(on)
	if !on {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for c := range n.conns {
		c.Conn.Close()
	}
}

// Cut returns ErrIsolated while the node is isolated (raftnode.Faults).
func (n *Network) Cut() error {
	if n.isolated.Load() {
		return ErrIsolated
	}
	return nil
}

// WrapStreamLayer returns l wrapped so that Isolate governs it
// (raftnode.Faults).
func (n *Network) WrapStreamLayer(l raft.StreamLayer) raft.StreamLayer {
	return &layer{StreamLayer: l, net: n}
}

type layer struct {
	raft.StreamLayer
	net *Network
}

func (l *layer) Accept() (net.Conn, error) {
	for {
		c, err := l.StreamLayer.Accept()
		if err != nil {
			return nil, err
		}
		if l.net.isolated.Load() {
			c.Close()
			continue
		}
		return l.net.track(c), nil
	}
}

func (l *layer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if l.net.isolated.Load() {
		return nil, ErrIsolated
	}
	c, err := l.StreamLayer.Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	return l.net.track(c), nil
}

func (n *Network) track(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, net: n}
	n.mu.Lock()
	n.conns[tc] = struct{}{}
	n.mu.Unlock()
	return tc
}

// trackedConn is a Raft connection Isolate can close.
type trackedConn struct {
	net.Conn
	net  *Network
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.net.mu.Lock()
		delete(c.net.conns, c)
		c.net.mu.Unlock()
	})
	return c.Conn.Close()
}
