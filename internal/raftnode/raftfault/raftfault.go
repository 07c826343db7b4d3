// Package raftfault cuts Raft nodes off from each other inside one process,
// for tests that run whole clusters in one test binary. A Network is set as
// a node's raftnode.Config.Faults. Isolate then partitions that node: it
// refuses inbound Raft connections, fails its Raft dials, closes its open
// Raft connections, and its cluster RPC fails in both directions. Pause
// silences it instead, as if its process were stopped (SIGSTOP): nothing it
// is sent is answered and it sends nothing, yet its connections stay open
// and peers see no error, only silence.
//
// Only tests import this package. The process-level harnesses (jepsen-lite,
// cmd/node's process tests) use real network faults instead.
package raftfault

import (
	"context"
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

// errPaused fails a Raft dial of a paused node once its timeout passed.
var errPaused = errors.New("raftfault: node is paused")

// Network is the fault switch of one node. Give each node its own; the zero
// value is not usable, call New. Its methods are safe for concurrent use.
type Network struct {
	isolated atomic.Bool

	mu    sync.Mutex
	conns map[*trackedConn]struct{}
	// resumed is closed while the node runs; while it is paused it is an
	// open channel, closed by Pause(false).
	resumed chan struct{}
}

// New returns a Network that lets everything through until Isolate(true)
// or Pause(true).
func New() *Network {
	resumed := make(chan struct{})
	close(resumed)
	return &Network{conns: map[*trackedConn]struct{}{}, resumed: resumed}
}

// Isolate cuts the node off from the rest of the cluster (on) or reconnects
// it (off): Raft traffic and RPC in both directions fail while it is
// isolated. Turning it on also closes the node's open Raft connections.
func (n *Network) Isolate(on bool) {
	// The flag is set under mu, as track checks it under mu: a connection
	// accepted or dialled while Isolate runs is either closed here or
	// refused by track, never left open.
	n.mu.Lock()
	defer n.mu.Unlock()
	n.isolated.Store(on)
	if !on {
		return
	}
	for c := range n.conns {
		c.Conn.Close()
	}
}

// Pause silences the node (on) or lets it run again (off), like SIGSTOP and
// SIGCONT of its process. While it is paused its Raft connections neither
// deliver what peers send nor send anything (reads and writes block; peers
// time out), its Raft dials wait until it is resumed or their timeout
// passes, cluster RPC it is sent waits unanswered until it is resumed or the
// caller gives up, and RPC it would send waits too. Nothing is closed or
// refused: to its peers the node is merely silent.
func (n *Network) Pause(on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.resumed: // running
		if on {
			n.resumed = make(chan struct{})
		}
	default: // paused
		if !on {
			close(n.resumed)
		}
	}
}

// running returns a channel closed once the node is not paused.
func (n *Network) running() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.resumed
}

// Cut returns ErrIsolated while the node is isolated (raftnode.Faults).
// While the node is paused it first waits until it is resumed, or returns
// ctx's error when ctx ends first.
func (n *Network) Cut(ctx context.Context) error {
	select {
	case <-n.running():
	default:
		select {
		case <-n.running():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if n.isolated.Load() {
		return ErrIsolated
	}
	return nil
}

// WrapStreamLayer returns l wrapped so that Isolate and Pause govern it
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
		if tc, ok := l.net.track(c); ok {
			return tc, nil
		}
	}
}

func (l *layer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	select {
	case <-l.net.running():
	default:
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-l.net.running():
		case <-t.C:
			return nil, errPaused
		}
	}
	if l.net.isolated.Load() {
		return nil, ErrIsolated
	}
	c, err := l.StreamLayer.Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	tc, ok := l.net.track(c)
	if !ok {
		return nil, ErrIsolated
	}
	return tc, nil
}

// track registers c so that Isolate can close it. It closes c and reports
// false when the node is isolated.
func (n *Network) track(c net.Conn) (net.Conn, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.isolated.Load() {
		c.Close()
		return nil, false
	}
	tc := &trackedConn{Conn: c, net: n, closed: make(chan struct{})}
	n.conns[tc] = struct{}{}
	return tc, true
}

// trackedConn is a Raft connection Isolate can close and Pause can hold.
type trackedConn struct {
	net.Conn
	net    *Network
	once   sync.Once
	closed chan struct{}
}

// hold waits while the node is paused, or until the connection is closed.
func (c *trackedConn) hold() {
	select {
	case <-c.net.running():
	case <-c.closed:
	}
}

func (c *trackedConn) Read(p []byte) (int, error) {
	c.hold()
	k, err := c.Conn.Read(p)
	// What arrived while the node was paused is not acted upon before it
	// is resumed.
	c.hold()
	return k, err
}

func (c *trackedConn) Write(p []byte) (int, error) {
	c.hold()
	return c.Conn.Write(p)
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.net.mu.Lock()
		delete(c.net.conns, c)
		c.net.mu.Unlock()
		close(c.closed)
	})
	return c.Conn.Close()
}
