package raftnode

import (
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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
