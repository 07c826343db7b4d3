package raftnode

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHeartbeatGateWaitsAndRefuses checks the gate that lets Shutdown close
// the log store: stopHeartbeats waits for a heartbeat in flight, and later
// heartbeats never reach the handler.
func TestHeartbeatGateWaitsAndRefuses(t *testing.T) {
	newTrans := func() *raft.NetworkTransport {
		tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	recv := &gatedTransport{NetworkTransport: newTrans()}
	send := newTrans()

	entered := make(chan struct{}, 2)
	release := make(chan struct{})
	recv.SetHeartbeatHandler(func(rpc raft.RPC) {
		entered <- struct{}{}
		<-release
		rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
	})

	heartbeat := func() (*raft.AppendEntriesResponse, error) {
		req := &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, Addr: []byte(send.LocalAddr())},
			Term:      1,
		}
		var resp raft.AppendEntriesResponse
		err := send.AppendEntries("receiver", recv.LocalAddr(), req, &resp)
		return &resp, err
	}

	first := make(chan error, 1)
	go func() {
		resp, err := heartbeat()
		if err == nil && !resp.Success {
			err = io.ErrUnexpectedEOF
		}
		first <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the heartbeat never reached the handler")
	}

	stopped := make(chan struct{})
	go func() {
		recv.stopHeartbeats()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("stopHeartbeats returned while a heartbeat was still in the handler")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stopHeartbeats did not return once the heartbeat ended")
	}
	if err := <-first; err != nil {
		t.Fatalf("heartbeat in flight at stop: %v, want it answered", err)
	}

	if _, err := heartbeat(); err == nil || err.Error() != raft.ErrRaftShutdown.Error() {
		t.Fatalf("heartbeat after stop: err %v, want %v", err, raft.ErrRaftShutdown)
	}
	select {
	case <-entered:
		t.Fatal("a heartbeat after stopHeartbeats reached the handler")
	default:
	}
}

// trackingLayer is a raft.StreamLayer over a TCP listener that can close
// every connection it accepted, as a peer's process exit does.
type trackingLayer struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
	dials atomic.Int32 // dials made through the layer
}

func (l *trackingLayer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *trackingLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	l.dials.Add(1)
	return net.DialTimeout("tcp", string(addr), timeout)
}

func (l *trackingLayer) exit() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
	_ = l.Listener.Close()
}

// A peer that restarted left the connection pooled to it dead: a vote, a
// pre-vote or an append sent on it is sent again on a new connection, not
// lost (a lost vote failed a handover; a lost append made the leader back
// off from the restarted node).
func TestCallsOnAConnectionToARestartedPeerAreSentAgain(t *testing.T) {
	peer := func(addr string) *trackingLayer { return answeringPeer(t, addr) }
	first := peer("127.0.0.1:0")
	addr := raft.ServerAddress(first.Addr().String())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sendLayer := &trackingLayer{Listener: ln}
	send := raft.NewNetworkTransport(sendLayer, transportMaxPool, 5*time.Second, io.Discard)
	t.Cleanup(func() { _ = send.Close() })
	tr := &gatedTransport{NetworkTransport: send}
	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("sender"), Addr: []byte(send.LocalAddr())}
	calls := map[string]func() error{
		"vote": func() error {
			var resp raft.RequestVoteResponse
			return tr.RequestVote("peer", addr, &raft.RequestVoteRequest{RPCHeader: header, Term: 2}, &resp)
		},
		"pre-vote": func() error {
			var resp raft.RequestPreVoteResponse
			return tr.RequestPreVote("peer", addr, &raft.RequestPreVoteRequest{RPCHeader: header, Term: 2}, &resp)
		},
		"append": func() error {
			var resp raft.AppendEntriesResponse
			return tr.AppendEntries("peer", addr, &raft.AppendEntriesRequest{RPCHeader: header, Term: 2}, &resp)
		},
	}
	current := first
	for name, call := range calls {
		require.NoError(t, call(), "%s: a healthy peer", name)
		// The peer restarts on the same address: the pooled connection is dead.
		current.exit()
		current = peer(string(addr))
		require.NoError(t, call(), "%s: sent again on a new connection", name)
	}

	// A peer that is down is dialled once, not over and over: the pooled
	// connection fails, the fresh dial is refused, and that is the error.
	current.exit()
	dials := sendLayer.dials.Load()
	var resp raft.RequestVoteResponse
	require.Error(t, tr.RequestVote("peer", addr, &raft.RequestVoteRequest{RPCHeader: header, Term: 3}, &resp))
	assert.Equal(t, dials+1, sendLayer.dials.Load())
}

// answeringPeer is a Raft peer listening at addr that grants every vote and
// takes every append.
func answeringPeer(t *testing.T, addr string) *trackingLayer {
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	l := &trackingLayer{Listener: ln}
	tr := raft.NewNetworkTransport(l, 2, 5*time.Second, io.Discard)
	t.Cleanup(func() { _ = tr.Close() })
	go func() {
		for rpc := range tr.Consumer() {
			switch rpc.Command.(type) {
			case *raft.RequestVoteRequest:
				rpc.Respond(&raft.RequestVoteResponse{Granted: true}, nil)
			case *raft.RequestPreVoteRequest:
				rpc.Respond(&raft.RequestPreVoteResponse{Granted: true}, nil)
			case *raft.AppendEntriesRequest:
				rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
			}
		}
	}()
	return l
}

// An append to a peer whose port refuses connections (restarting) waits
// for it to come back, dialling again, instead of failing at once: each
// failure made Raft wait longer before the next append (up to 10 s), so a
// follower back after some 20 s down waited that long for the log. The
// wait ends when the transport is stopping.
func TestAppendToAPeerThatIsDownWaitsForItToComeBack(t *testing.T) {
	// Only the peer's return, the append no longer being wanted, or the
	// stop end a wait here.
	old := peerDownWait
	peerDownWait = time.Hour
	t.Cleanup(func() { peerDownWait = old })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // down

	sln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sendLayer := &trackingLayer{Listener: sln}
	send := raft.NewNetworkTransport(sendLayer, transportMaxPool, 5*time.Second, io.Discard)
	tr := newGatedTransport(send)
	t.Cleanup(func() { _ = tr.Close() })
	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("sender"), Addr: []byte(send.LocalAddr())}
	appendAsync := func() <-chan error {
		done := make(chan error, 1)
		go func() {
			var resp raft.AppendEntriesResponse
			done <- tr.AppendEntries("peer", raft.ServerAddress(addr), &raft.AppendEntriesRequest{RPCHeader: header, Term: 2, LeaderCommitIndex: 1}, &resp)
		}()
		return done
	}

	done := appendAsync()
	require.Eventually(t, func() bool { return sendLayer.dials.Load() >= 2 }, 10*time.Second, 5*time.Millisecond,
		"the refused dial is tried again")
	select {
	case err := <-done:
		t.Fatalf("the append returned (%v) before the peer came back", err)
	default:
	}
	up := answeringPeer(t, addr)
	select {
	case err := <-done:
		require.NoError(t, err, "the append reaches the peer once it is back")
	case <-time.After(20 * time.Second):
		t.Fatal("the append did not return once the peer was back")
	}

	// Down again. A heartbeat does not wait: Raft reads the peer's
	// address again before each (it may have moved).
	up.exit()
	var hb raft.AppendEntriesResponse
	require.NoError(t, func() error {
		before := sendLayer.dials.Load()
		err := tr.AppendEntries("peer", raft.ServerAddress(addr), &raft.AppendEntriesRequest{RPCHeader: header, Term: 2}, &hb)
		if err == nil || !dialFailed(err) {
			return fmt.Errorf("heartbeat to a peer that is down: %v, want the dial's error", err)
		}
		if d := sendLayer.dials.Load() - before; d != 1 {
			return fmt.Errorf("heartbeat dialled %d times, want once", d)
		}
		return nil
	}())

	// An append no longer wanted (the peer moved, was removed, or this
	// node no longer leads) ends its wait.
	wanted := atomic.Bool{}
	wanted.Store(true)
	still := func(id raft.ServerID, target raft.ServerAddress) bool {
		return wanted.Load() && id == "peer" && target == raft.ServerAddress(addr)
	}
	tr.stillWanted.Store(&still)
	before := sendLayer.dials.Load()
	done = appendAsync()
	require.Eventually(t, func() bool { return sendLayer.dials.Load() >= before+3 }, 10*time.Second, 5*time.Millisecond)
	wanted.Store(false)
	select {
	case err := <-done:
		require.Error(t, err)
		assert.True(t, dialFailed(err), "%v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("an append no longer wanted kept waiting")
	}

	// Stopping ends the wait with the dial's error.
	wanted.Store(true)
	before = sendLayer.dials.Load()
	done = appendAsync()
	require.Eventually(t, func() bool { return sendLayer.dials.Load() >= before+3 }, 10*time.Second, 5*time.Millisecond)
	tr.stopWaiting()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.True(t, dialFailed(err), "%v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("stopWaiting did not end the wait")
	}
}
