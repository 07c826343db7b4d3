package raftnode

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tcpLayer is a bare raft.StreamLayer over a loopback listener.
type tcpLayer struct{ net.Listener }

func (l tcpLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

// closeConns cuts an inbound connection whose reader is blocked (as Raft's
// loop is, reading a snapshot from a silent peer) and an outbound one (as a
// leader's, sending a snapshot to it), and refuses every connection
// accepted or dialed after it.
func TestCloseConnsCutsRaftConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h := newHoldLayer(tcpLayer{ln})
	t.Cleanup(func() { h.Close() })

	accepted := make(chan net.Conn, 1)
	go func() {
		for {
			c, err := h.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	// The dialed side is tracked too: h dials itself.
	client, err := h.Dial(raft.ServerAddress(ln.Addr().String()), 5*time.Second)
	require.NoError(t, err)
	defer client.Close()
	var server net.Conn
	select {
	case server = <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted")
	}
	blockedRead := func(c net.Conn) chan error {
		read := make(chan error, 1)
		go func() {
			_, err := c.Read(make([]byte, 1)) // nobody sends anything
			read <- err
		}()
		return read
	}
	reads := []chan error{blockedRead(server), blockedRead(client)}
	select {
	case err := <-reads[0]:
		t.Fatalf("inbound read ended before closeConns: %v", err)
	case err := <-reads[1]:
		t.Fatalf("outbound read ended before closeConns: %v", err)
	case <-time.After(100 * time.Millisecond):
	}

	h.closeConns()
	for i, read := range reads {
		select {
		case err := <-read:
			require.Error(t, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("closeConns left blocked read %d running", i)
		}
	}
	h.mu.Lock()
	assert.Empty(t, h.conns, "closed connections are forgotten")
	h.mu.Unlock()

	_, err = h.Dial(raft.ServerAddress(ln.Addr().String()), 5*time.Second)
	require.ErrorIs(t, err, errConnsClosed, "a dial after closeConns")

	// A connection arriving afterwards is closed at once, never handed on.
	late, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	require.NoError(t, err)
	defer late.Close()
	require.NoError(t, late.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = late.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	select {
	case c := <-accepted:
		t.Fatalf("a connection accepted after closeConns was handed on: %v", c.RemoteAddr())
	default:
	}
}
