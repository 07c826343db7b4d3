package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRoundTrip(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := mustListen(t, Config{Registerer: reg})
	m.Serve(echo)
	c := mustClient(t, ClientConfig{Registerer: reg})
	addr := m.Addr().String()

	for i := range 3 {
		resp, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "Echo", fmt.Appendf(nil, "hello %d", i))
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("Echo:hello %d", i), string(resp))
	}
	// Sequential calls share one pooled connection.
	assert.Equal(t, 1.0, counter(t, reg, "floe_transport_pool_connections_total", map[string]string{"result": "dial"}))
	assert.Equal(t, 2.0, counter(t, reg, "floe_transport_pool_connections_total", map[string]string{"result": "reuse"}))
	assert.Equal(t, 3.0, counter(t, reg, "floe_transport_rpc_calls_total", map[string]string{"method": "Echo", "outcome": "ok"}))
	assert.Equal(t, 3.0, counter(t, reg, "floe_transport_rpc_duration_seconds", map[string]string{"method": "Echo"}))
	assert.Equal(t, 1.0, counter(t, reg, "floe_transport_connections_accepted_total", map[string]string{"protocol": "rpc"}))

	// Concurrent calls, empty and large bodies.
	big := make([]byte, 2<<20)
	for i := range big {
		big[i] = byte(i)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			body := big
			if i%2 == 0 {
				body = nil
			}
			resp, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "Big", body)
			if assert.NoError(t, err) {
				assert.Equal(t, append([]byte("Big:"), body...), resp)
			}
		})
	}
	wg.Wait()
}

func TestHandlerErrors(t *testing.T) {
	m := mustListen(t, Config{})
	m.Serve(func(ctx context.Context, method string, body []byte) ([]byte, error) {
		switch method {
		case "Typed":
			return nil, fmt.Errorf("wrapped: %w", &RemoteError{Code: "not_leader", Message: "leader is node-2"})
		case "Plain":
			return nil, errors.New("disk on fire")
		case "Panic":
			panic("boom")
		}
		return []byte("ok"), nil
	})
	c := mustClient(t, ClientConfig{})
	addr := m.Addr().String()

	_, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "Typed", nil)
	var re *RemoteError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, &RemoteError{Code: "not_leader", Message: "leader is node-2"}, re)
	assert.NotErrorIs(t, err, ErrOutcomeUnknown)

	_, err = c.Call(ctxTimeout(t, 5*time.Second), addr, "Plain", nil)
	require.ErrorAs(t, err, &re)
	assert.Equal(t, CodeInternal, re.Code)
	assert.Equal(t, "disk on fire", re.Message)

	_, err = c.Call(ctxTimeout(t, 5*time.Second), addr, "Panic", nil)
	require.ErrorAs(t, err, &re)
	assert.Equal(t, CodeInternal, re.Code)
	assert.Contains(t, re.Message, "boom")

	// The server survives the panic, on the same pooled connection.
	resp, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "Fine", nil)
	require.NoError(t, err)
	assert.Equal(t, "ok", string(resp))
}

func TestDeadlinePropagated(t *testing.T) {
	m := mustListen(t, Config{})
	seen := make(chan time.Time, 1)
	m.Serve(func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
		dl, _ := ctx.Deadline() // zero if none
		seen <- dl
		return nil, nil
	})
	c := mustClient(t, ClientConfig{})

	want := time.Now().Add(30 * time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), want)
	defer cancel()
	_, err := c.Call(ctx, m.Addr().String(), "Deadline", nil)
	require.NoError(t, err)
	assert.WithinDuration(t, want, <-seen, time.Millisecond)

	_, err = c.Call(context.Background(), m.Addr().String(), "NoDeadline", nil)
	require.NoError(t, err)
	assert.True(t, (<-seen).IsZero(), "no deadline sent means none on the server")
}

// A caller's deadline is read on the server's clock: a caller whose clock
// is behind (its deadline looks past, or near) still gets its handler run,
// and one whose clock is ahead cannot hold a handler for as long as it is
// off.
func TestDeadlineFromAnotherClock(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name string
		sent time.Duration // the deadline, from now on the server's clock
		want time.Duration
	}{
		{"past: the caller's clock is behind", -time.Hour, minHandlerTime},
		{"just past", -time.Second, minHandlerTime},
		{"too near", 100 * time.Millisecond, minHandlerTime},
		{"as sent", 30 * time.Second, 30 * time.Second},
		{"far: the caller's clock is ahead", time.Hour, maxHandlerTime},
	} {
		assert.Equal(t, now.Add(c.want), handlerDeadline(now, now.Add(c.sent).UnixNano()), c.name)
	}

	m := mustListen(t, Config{})
	var got atomic.Pointer[time.Time]
	m.Serve(func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
		dl, _ := ctx.Deadline()
		got.Store(&dl)
		return []byte("ran"), ctx.Err()
	})
	before := time.Now()
	s := m.dispatch(request{ID: 7, Deadline: time.Now().Add(-2 * time.Second).UnixNano(), Method: "Late"})
	after := time.Now()
	require.Nil(t, s.Err, "a request that arrives after its deadline by the server's clock is still run")
	assert.Equal(t, uint64(7), s.ID)
	assert.Equal(t, "ran", string(s.Body))
	dl := *got.Load()
	assert.False(t, dl.Before(before.Add(minHandlerTime)) || dl.After(after.Add(minHandlerTime)),
		"the handler's deadline is minHandlerTime from the request's arrival")
}

// A server that idles out a pooled connection must not cost the caller an
// error: the client notices the close before writing and dials again.
func TestServerClosedPooledConnIsReplaced(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := mustListen(t, Config{IdleTimeout: 50 * time.Millisecond})
	var calls atomic.Int32
	m.Serve(func(context.Context, string, []byte) ([]byte, error) { calls.Add(1); return []byte("ok"), nil })
	c := mustClient(t, ClientConfig{Registerer: reg})
	addr := m.Addr().String()

	_, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "A", nil)
	require.NoError(t, err)
	time.Sleep(250 * time.Millisecond) // server closes the idle connection

	resp, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "B", nil)
	require.NoError(t, err)
	assert.Equal(t, "ok", string(resp))
	assert.Equal(t, int32(2), calls.Load())
	assert.Equal(t, 2.0, counter(t, reg, "floe_transport_pool_connections_total", map[string]string{"result": "dial"}))

	// Same when the server side is severed abruptly (a restart).
	m.dropConns()
	time.Sleep(20 * time.Millisecond)
	_, err = c.Call(ctxTimeout(t, 5*time.Second), addr, "C", nil)
	require.NoError(t, err)
	assert.Equal(t, int32(3), calls.Load())
}

// failingConn passes the liveness probe but fails every write, as a pooled
// connection whose peer vanished between probe and write would.
type failingConn struct {
	net.Conn
	writes atomic.Int32
}

func (f *failingConn) Write([]byte) (int, error) {
	f.writes.Add(1)
	return 0, errors.New("connection reset by peer")
}
func (f *failingConn) SetDeadline(time.Time) error { return nil }
func (f *failingConn) Close() error                { return nil }

func TestWriteFailureOnPooledConnIsRetried(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := mustListen(t, Config{})
	var calls atomic.Int32
	m.Serve(func(context.Context, string, []byte) ([]byte, error) { calls.Add(1); return []byte("ok"), nil })
	c := mustClient(t, ClientConfig{Registerer: reg})
	addr := m.Addr().String()

	fc := &failingConn{}
	c.idle[addr] = []*clientConn{{addr: addr, raw: fc, conn: fc, idleSince: time.Now()}}

	resp, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "M", nil)
	require.NoError(t, err)
	assert.Equal(t, "ok", string(resp))
	assert.Equal(t, int32(1), fc.writes.Load())
	assert.Equal(t, int32(1), calls.Load())
	assert.Equal(t, 1.0, counter(t, reg, "floe_transport_pool_connections_total", map[string]string{"result": "reuse"}))
	assert.Equal(t, 1.0, counter(t, reg, "floe_transport_pool_connections_total", map[string]string{"result": "dial"}))
}

// Once the request is written, losing the response is reported, not retried:
// the handler ran, and a retry would run it again.
func TestResponseLostIsOutcomeUnknown(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := mustListen(t, Config{})
	var calls atomic.Int32
	m.Serve(func(_ context.Context, method string, _ []byte) ([]byte, error) {
		if method == "Crash" {
			calls.Add(1)
			m.dropConns() // the response cannot be written
		}
		return []byte("ok"), nil
	})
	c := mustClient(t, ClientConfig{Registerer: reg})
	addr := m.Addr().String()

	_, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "Crash", nil)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.Equal(t, int32(1), calls.Load(), "the handler ran exactly once")
	assert.Equal(t, 1.0, counter(t, reg, "floe_transport_rpc_calls_total", map[string]string{"method": "Crash", "outcome": "unknown"}))

	_, err = c.Call(ctxTimeout(t, 5*time.Second), addr, "Other", nil)
	require.NoError(t, err)
}

func TestDeadlineAfterSendIsOutcomeUnknown(t *testing.T) {
	m := mustListen(t, Config{})
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	m.Serve(func(context.Context, string, []byte) ([]byte, error) {
		entered <- struct{}{}
		<-release // ignores ctx, like a handler stuck in a commit
		return nil, nil
	})
	c := mustClient(t, ClientConfig{})

	_, err := c.Call(ctxTimeout(t, 200*time.Millisecond), m.Addr().String(), "Slow", nil)
	<-entered
	close(release)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestDialFailureIsNotOutcomeUnknown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens here now

	c := mustClient(t, ClientConfig{})
	_, err = c.Call(ctxTimeout(t, 5*time.Second), addr, "M", nil)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrOutcomeUnknown)

	require.NoError(t, c.Close())
	_, err = c.Call(ctxTimeout(t, 5*time.Second), addr, "M", nil)
	require.ErrorIs(t, err, ErrClosed)
}

func TestUnknownProtocolRejected(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := mustListen(t, Config{Registerer: reg, HandshakeTimeout: 200 * time.Millisecond})
	m.Serve(echo)
	addr := m.Addr().String()

	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = conn.Read(make([]byte, 1))
	require.Error(t, err, "the server closes the connection") // EOF or reset

	// A silent connection is closed after the handshake timeout.
	idle, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer idle.Close()
	require.NoError(t, idle.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = idle.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)

	resp, err := mustClient(t, ClientConfig{}).Call(ctxTimeout(t, 5*time.Second), addr, "Still", []byte("up"))
	require.NoError(t, err)
	assert.Equal(t, "Still:up", string(resp))
	assert.Equal(t, 1.0, counter(t, reg, "floe_transport_handshakes_rejected_total", map[string]string{"reason": rejectProtocol}))
	assert.Equal(t, 1.0, counter(t, reg, "floe_transport_handshakes_rejected_total", map[string]string{"reason": rejectTimeout}))
}

func TestRPCWaitsForServe(t *testing.T) {
	m := mustListen(t, Config{})
	c := mustClient(t, ClientConfig{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Call(ctxTimeout(t, 5*time.Second), m.Addr().String(), "Early", nil)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	m.Serve(echo)
	require.NoError(t, <-done)
	assert.Panics(t, func() { m.Serve(echo) })
}

func TestCloseCancelsHandlersAndWaits(t *testing.T) {
	m, err := Listen(Config{BindAddr: "127.0.0.1:0", Logger: testLogger()})
	require.NoError(t, err)
	entered := make(chan struct{})
	var finished atomic.Bool
	m.Serve(func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
		close(entered)
		<-ctx.Done()
		finished.Store(true)
		return nil, ctx.Err()
	})
	c := mustClient(t, ClientConfig{})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), m.Addr().String(), "Block", nil)
		errc <- err
	}()
	<-entered
	require.NoError(t, m.Close())
	assert.True(t, finished.Load(), "Close waits for running handlers")
	// Depending on which wins, the cancelled handler's answer or the closed
	// connection reaches the caller; never a success.
	err = <-errc
	var re *RemoteError
	if !errors.Is(err, ErrOutcomeUnknown) {
		require.ErrorAs(t, err, &re)
		assert.Equal(t, CodeCanceled, re.Code)
	}
	require.NoError(t, m.Close(), "Close is idempotent")
}

func TestAdvertiseAddr(t *testing.T) {
	m := mustListen(t, Config{AdvertiseAddr: "node-1.floe.internal:8182"})
	assert.Equal(t, "node-1.floe.internal:8182", m.Addr().String())
	assert.Equal(t, m.Addr(), m.RaftLayer().Addr())

	_, err := Listen(Config{BindAddr: "0.0.0.0:0", Logger: testLogger()})
	require.Error(t, err, "an unspecified bound address is not advertisable")
}

func TestClientRetiresIdleConns(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := mustListen(t, Config{})
	m.Serve(echo)
	c := mustClient(t, ClientConfig{Registerer: reg, IdleTimeout: 20 * time.Millisecond})
	addr := m.Addr().String()

	_, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "A", nil)
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	_, err = c.Call(ctxTimeout(t, 5*time.Second), addr, "B", nil)
	require.NoError(t, err)
	assert.Equal(t, 2.0, counter(t, reg, "floe_transport_pool_connections_total", map[string]string{"result": "dial"}))
	assert.Equal(t, 0.0, counter(t, reg, "floe_transport_pool_connections_total", map[string]string{"result": "reuse"}))
}
