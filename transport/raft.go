package transport

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// raftLayer is the raft.StreamLayer view of a Mux.
type raftLayer struct {
	m      *Mux
	ch     chan net.Conn // unbuffered: handshake goroutines wait for Accept
	closed chan struct{}
	once   sync.Once
}

var _ raft.StreamLayer = (*raftLayer)(nil)

// Accept returns the next inbound Raft connection, or an error wrapping
// net.ErrClosed once the layer or the Mux is closed.
func (l *raftLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, fmt.Errorf("transport: raft layer: %w", net.ErrClosed)
	}
}

// Close stops Raft accepts. It does not close the Mux or connections
// already accepted (NetworkTransport owns those).
func (l *raftLayer) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr returns the Mux's advertised address.
func (l *raftLayer) Addr() net.Addr { return l.m.Addr() }

// Dial connects to a peer's cluster port, runs the TLS handshake if
// configured and announces ProtoRaft, all within timeout (0: none). With TLS
// 1.3 a peer that rejects our client certificate is only noticed on the
// first read, which Raft treats as a failed RPC.
func (l *raftLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if l.m.isClosed() {
		return nil, ErrClosed
	}
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	raw, conn, err := dialProto(ctx, string(address), l.m.dialFrom, l.m.clientTLS, ProtoRaft, false)
	if err != nil {
		return nil, err
	}
	release, ok := l.m.track(raw)
	if !ok {
		_ = raw.Close()
		return nil, ErrClosed
	}
	return &trackedConn{Conn: conn, release: release}, nil
}
