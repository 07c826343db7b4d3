package raftnode

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// tcpLayer is a bare raft.StreamLayer over a loopback listener.
type tcpLayer struct{ net.Listener }

func (l tcpLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

// closeAccepted cuts an inbound connection whose reader is blocked (as
// Raft's loop is, reading a snapshot from a silent peer), and every
// connection accepted after it.
func TestCloseAcceptedCutsInboundConnections(t *testing.T) {
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
	client, err := h.Dial(raft.ServerAddress(ln.Addr().String()), 5*time.Second)
	require.NoError(t, err)
	defer client.Close()
	server := <-accepted
	read := make(chan error, 1)
	go func() {
		_, err := server.Read(make([]byte, 1)) // the peer sends nothing
		read <- err
	}()
	select {
	case err := <-read:
		t.Fatalf("read ended before closeAccepted: %v", err)
	case <-time.After(100 * time.Millisecond):
	}

	h.closeAccepted()
	select {
	case err := <-read:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("closeAccepted left the blocked read running")
	}

	// A connection arriving afterwards is closed at once, never handed on.
	late, err := h.Dial(raft.ServerAddress(ln.Addr().String()), 5*time.Second)
	require.NoError(t, err)
	defer late.Close()
	require.NoError(t, late.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = late.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	select {
	case c := <-accepted:
		t.Fatalf("a connection accepted after closeAccepted was handed on: %v", c.RemoteAddr())
	default:
	}
}
