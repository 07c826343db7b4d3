package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logFSM records applied commands.
type logFSM struct {
	mu      sync.Mutex
	applied []string
}

func (f *logFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, string(l.Data))
	return len(f.applied)
}

func (f *logFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, fmt.Errorf("not supported") }
func (f *logFSM) Restore(io.ReadCloser) error         { return fmt.Errorf("not supported") }

func (f *logFSM) contains(s string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.applied {
		if a == s {
			return true
		}
	}
	return false
}

type testNode struct {
	mux  *Mux
	raft *raft.Raft
	fsm  *logFSM
}

// startCluster runs three Raft nodes whose transports ride on Muxes that
// also serve RPC on the same ports. tlsFiles is nil or one per node.
func startCluster(t *testing.T, tlsFiles []*TLSFiles) []*testNode {
	t.Helper()
	nodes := make([]*testNode, 3)
	var servers []raft.Server
	for i := range nodes {
		cfg := Config{}
		if tlsFiles != nil {
			cfg.TLS = tlsFiles[i]
		}
		m := mustListen(t, cfg)
		id := fmt.Sprintf("node-%d", i)
		m.Serve(func(_ context.Context, method string, body []byte) ([]byte, error) {
			return []byte(id + ":" + method + ":" + string(body)), nil
		})
		nodes[i] = &testNode{mux: m, fsm: &logFSM{}}
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(m.Addr().String())})
	}
	for i, n := range nodes {
		conf := raft.DefaultConfig()
		conf.LocalID = servers[i].ID
		conf.HeartbeatTimeout = 100 * time.Millisecond
		conf.ElectionTimeout = 100 * time.Millisecond
		conf.LeaderLeaseTimeout = 50 * time.Millisecond
		conf.CommitTimeout = 5 * time.Millisecond
		conf.Logger = hclog.New(&hclog.LoggerOptions{Output: io.Discard})

		// No pipelined replication, as a node runs (raftnode.NewNetworkTransport):
		// hashicorp/raft's pipeline can deadlock and hang Shutdown.
		trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: n.mux.RaftLayer(), MaxPool: 3, Timeout: 2 * time.Second,
			Logger: hclog.New(&hclog.LoggerOptions{Output: io.Discard}), MaxRPCsInFlight: 1,
		})
		logs := raft.NewInmemStore()
		r, err := raft.NewRaft(conf, n.fsm, logs, logs, raft.NewInmemSnapshotStore(), trans)
		require.NoError(t, err)
		n.raft = r
		// Cleanups run last-in first-out: Raft, then its transport, then
		// (registered earlier) the Mux.
		t.Cleanup(func() {
			assert.NoError(t, r.Shutdown().Error())
			assert.NoError(t, trans.Close())
		})
	}
	require.NoError(t, nodes[0].raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error())
	return nodes
}

func waitLeader(t *testing.T, nodes []*testNode) *testNode {
	t.Helper()
	var leader *testNode
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if n.raft.State() == raft.Leader {
				leader = n
				return true
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond, "no leader elected")
	return leader
}

func exerciseCluster(t *testing.T, nodes []*testNode, client *Client) {
	t.Helper()
	// RPC traffic on the Raft ports while the election runs.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			want := fmt.Sprintf("node-%d:Ping:x", i)
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Call(ctxTimeout(t, 5*time.Second), n.mux.Addr().String(), "Ping", []byte("x"))
				if !assert.NoError(t, err) {
					return
				}
				assert.Equal(t, want, string(resp))
				time.Sleep(5 * time.Millisecond)
			}
		})
	}

	leader := waitLeader(t, nodes)
	f := leader.raft.Apply([]byte("create ns1"), 5*time.Second)
	require.NoError(t, f.Error())
	for _, n := range nodes {
		require.Eventually(t, func() bool { return n.fsm.contains("create ns1") },
			5*time.Second, 10*time.Millisecond, "entry not replicated to %s", n.mux.Addr())
	}
	close(stop)
	wg.Wait()
}

func TestRaftClusterSharesPortWithRPC(t *testing.T) {
	nodes := startCluster(t, nil)
	exerciseCluster(t, nodes, mustClient(t, ClientConfig{}))
}

func TestRaftClusterOverMutualTLS(t *testing.T) {
	ca := newCA(t, "floe")
	var files []*TLSFiles
	for i := range 3 {
		f := ca.issue(t, fmt.Sprintf("node-%d", i))
		files = append(files, &f)
	}
	nodes := startCluster(t, files)
	clientFiles := ca.issue(t, "client")
	exerciseCluster(t, nodes, mustClient(t, ClientConfig{TLS: &clientFiles}))

	// A peer outside the CA can neither call RPC nor speak Raft.
	evilFiles := newCA(t, "evil").issue(t, "intruder")
	_, evilTLS, err := evilFiles.Load()
	require.NoError(t, err)
	_, trusted, err := clientFiles.Load()
	require.NoError(t, err)
	evilTLS.RootCAs = trusted.RootCAs
	evilTLS.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &evilTLS.Certificates[0], nil
	}
	evil := mustClient(t, ClientConfig{DialTimeout: time.Second})
	evil.tls = evilTLS
	_, err = evil.Call(ctxTimeout(t, 5*time.Second), nodes[0].mux.Addr().String(), "Ping", nil)
	require.Error(t, err)

	evilMux := mustListen(t, Config{TLS: &evilFiles})
	evilMux.clientTLS = evilTLS
	conn, err := evilMux.RaftLayer().Dial(raft.ServerAddress(nodes[0].mux.Addr().String()), time.Second)
	if err == nil { // TLS 1.3: the refusal shows on the first read
		defer conn.Close()
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(2*time.Second)))
		_, err = conn.Read(make([]byte, 1))
	}
	require.Error(t, err)
}

func TestRaftLayerLifecycle(t *testing.T) {
	a := mustListen(t, Config{})
	b, err := Listen(Config{BindAddr: "127.0.0.1:0", Logger: testLogger()})
	require.NoError(t, err)

	// Dial announces ProtoRaft; Accept on the other side consumes it.
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := b.RaftLayer().Accept()
		if assert.NoError(t, err) {
			accepted <- c
		}
	}()
	out, err := a.RaftLayer().Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	require.NoError(t, err)
	defer out.Close()
	_, err = out.Write([]byte("hi"))
	require.NoError(t, err)
	in := <-accepted
	buf := make([]byte, 2)
	_, err = io.ReadFull(in, buf)
	require.NoError(t, err)
	assert.Equal(t, "hi", string(buf))

	// Closing the Mux severs the accepted Raft connection too.
	require.NoError(t, b.Close())
	require.NoError(t, out.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = out.Read(buf)
	require.Error(t, err)
	_, err = b.RaftLayer().Accept()
	require.ErrorIs(t, err, net.ErrClosed)
	_, err = b.RaftLayer().Dial(raft.ServerAddress(a.Addr().String()), time.Second)
	require.ErrorIs(t, err, ErrClosed)

	// Closing only the Raft layer leaves RPC running.
	require.NoError(t, a.RaftLayer().Close())
	_, err = a.RaftLayer().Accept()
	require.ErrorIs(t, err, net.ErrClosed)
	a.Serve(echo)
	_, err = mustClient(t, ClientConfig{}).Call(ctxTimeout(t, 5*time.Second), a.Addr().String(), "M", nil)
	require.NoError(t, err)
}

// A Raft connection that sends nothing after its protocol byte is not a
// peer's (Raft dials to send a request at once): it is closed after the
// handshake timeout instead of holding a goroutine and a descriptor. One
// that sent its first request idles as long as it likes.
func TestSilentRaftConnectionIsClosed(t *testing.T) {
	m := mustListen(t, Config{HandshakeTimeout: 200 * time.Millisecond})
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := m.RaftLayer().Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	read := func(c net.Conn) error {
		done := make(chan error, 1)
		go func() {
			buf := make([]byte, 16)
			_, err := c.Read(buf)
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			c.Close()
			return errors.New("the read still waits after 10s")
		}
	}

	// Silent: the Raft side's read fails once the timeout passes.
	silent, err := net.Dial("tcp", m.Addr().String())
	require.NoError(t, err)
	defer silent.Close()
	_, err = silent.Write([]byte{ProtoRaft})
	require.NoError(t, err)
	in := <-accepted
	require.ErrorIs(t, read(in), os.ErrDeadlineExceeded)

	// A peer: its first bytes clear the deadline, and it may idle.
	peer, err := m.RaftLayer().Dial(raft.ServerAddress(m.Addr().String()), time.Second)
	require.NoError(t, err)
	defer peer.Close()
	_, err = peer.Write([]byte("request"))
	require.NoError(t, err)
	in = <-accepted
	require.NoError(t, read(in))
	time.Sleep(400 * time.Millisecond)
	_, err = peer.Write([]byte("next"))
	require.NoError(t, err)
	require.NoError(t, read(in), "no deadline once the first request came")
}
