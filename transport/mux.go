package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// Protocol bytes: the first byte of every inbound connection (after TLS).
const (
	ProtoRaft byte = 'R'
	ProtoRPC  byte = 'C'
)

// ackRPC is the server's one-byte reply to ProtoRPC. It tells the client the
// server accepted the connection (TLS client certificate included, which in
// TLS 1.3 the client cannot learn from its own handshake) and is serving RPC,
// so everything before it counts as a dial failure: safe to retry.
const ackRPC = ProtoRPC

// Defaults for [Config] and [ClientConfig].
const (
	DefaultHandshakeTimeout  = 5 * time.Second
	DefaultServerIdleTimeout = 90 * time.Second
	DefaultClientIdleTimeout = 30 * time.Second
	DefaultDialTimeout       = 5 * time.Second
	DefaultMaxIdlePerAddr    = 4
	DefaultMaxAttempts       = 3
)

// responseWriteTimeout bounds writing one response to a client that stopped
// reading.
const responseWriteTimeout = 30 * time.Second

// Config configures a [Mux].
type Config struct {
	// BindAddr is the TCP address to listen on, e.g. 127.0.0.1:8182.
	BindAddr string
	// AdvertiseAddr is the host:port peers dial to reach this node; it is
	// what Raft records as this server's address. Default: the bound
	// address. A hostname is kept as is (not resolved), so TLS certificates
	// can name it. It must not be an unspecified address (0.0.0.0, ::).
	AdvertiseAddr string
	// TLS enables mutual TLS on accepted and dialled connections; nil means
	// plaintext.
	TLS *TLSFiles
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the floe_transport_ metrics; nil disables them.
	Registerer prometheus.Registerer
	// HandshakeTimeout bounds the TLS handshake plus the protocol byte of an
	// inbound connection (slowloris protection). Default 5s.
	HandshakeTimeout time.Duration
	// IdleTimeout closes an RPC connection that has not started a request
	// for this long. Default 90s; keep it above the clients' IdleTimeout so
	// clients retire connections before servers close them.
	IdleTimeout time.Duration
	// DialFromBindIP makes Raft connections this Mux dials leave from the
	// bind address's IP (when it is a specific IP, not 0.0.0.0 or ::).
	// Nodes on distinct loopback addresses can then tell each other apart
	// by source address, which the fault-injection proxies rely on.
	DialFromBindIP bool
}

// BindIP returns the IP of addr when it is a specific address, else "".
func BindIP(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsUnspecified() {
		return ""
	}
	return ip.String()
}

// Handler serves one RPC. ctx carries the caller's deadline and is cancelled
// when the Mux closes. A returned error reaches the caller as a
// *RemoteError (see [RemoteError] for the codes). A panic is recovered and
// reported as CodeInternal.
type Handler func(ctx context.Context, method string, body []byte) ([]byte, error)

// Mux owns a node's cluster port: it accepts connections, runs the TLS and
// protocol handshakes, feeds Raft connections to [Mux.RaftLayer] and serves
// RPC connections with the [Handler] given to [Mux.Serve].
type Mux struct {
	ln        net.Listener
	advertise net.Addr
	serverTLS *tls.Config
	clientTLS *tls.Config
	dialFrom  string // source IP of dialled Raft connections, "" = any

	handshakeTimeout time.Duration
	idleTimeout      time.Duration
	log              *slog.Logger
	metrics          *muxMetrics
	raft             *raftLayer

	ctx    context.Context // parent of every handler context
	cancel context.CancelFunc

	served  atomic.Bool
	handler Handler       // set once, before serving is closed
	serving chan struct{} // closed by Serve

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // raw TCP conns, inbound and Raft-dialled
	closed bool

	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup // accept loop and per-connection goroutines
}

// Listen binds cfg.BindAddr and starts accepting. Raft connections are
// available from RaftLayer at once; RPC connections wait (up to the
// handshake timeout) for Serve.
func Listen(cfg Config) (*Mux, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	m := &Mux{
		handshakeTimeout: orDefault(cfg.HandshakeTimeout, DefaultHandshakeTimeout),
		idleTimeout:      orDefault(cfg.IdleTimeout, DefaultServerIdleTimeout),
		log:              log.With("component", "transport"),
		metrics:          newMuxMetrics(cfg.Registerer),
		serving:          make(chan struct{}),
		conns:            make(map[net.Conn]struct{}),
		done:             make(chan struct{}),
	}
	if cfg.DialFromBindIP {
		m.dialFrom = BindIP(cfg.BindAddr)
	}
	if cfg.TLS != nil {
		var err error
		if m.serverTLS, m.clientTLS, err = cfg.TLS.Load(); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen on %s: %w", cfg.BindAddr, err)
	}
	adv := cfg.AdvertiseAddr
	if adv == "" {
		adv = ln.Addr().String()
	}
	if m.advertise, err = advertiseAddr(adv); err != nil {
		_ = ln.Close()
		return nil, err
	}
	m.ln = ln
	m.raft = &raftLayer{m: m, ch: make(chan net.Conn), closed: make(chan struct{})}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

func orDefault(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}

// advertised is an advertised address; the host is kept verbatim.
type advertised string

func (a advertised) Network() string { return "tcp" }
func (a advertised) String() string  { return string(a) }

func advertiseAddr(s string) (net.Addr, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return nil, fmt.Errorf("transport: advertise address %q: %w", s, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return nil, fmt.Errorf("transport: advertise address %q: bad port", s)
	}
	if host == "" {
		return nil, fmt.Errorf("transport: advertise address %q: empty host; set AdvertiseAddr", s)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return nil, fmt.Errorf("transport: advertise address %q is not reachable by peers; set AdvertiseAddr", s)
	}
	return advertised(s), nil
}

// Addr returns the advertised address.
func (m *Mux) Addr() net.Addr { return m.advertise }

// ListenAddr returns the address actually bound (useful with port 0).
func (m *Mux) ListenAddr() net.Addr { return m.ln.Addr() }

// RaftLayer returns the stream layer for raft.NewNetworkTransport. Its
// Accept yields connections that arrived with ProtoRaft (the byte already
// consumed); its Dial connects, runs TLS if configured and writes ProtoRaft.
// Closing it (NetworkTransport.Close does) stops Raft accepts only; the Mux
// keeps serving RPC until Mux.Close. Close the Raft transport before the Mux.
func (m *Mux) RaftLayer() raft.StreamLayer { return m.raft }

// Serve starts serving RPC connections with h. It returns immediately and
// must be called exactly once; a second call panics.
func (m *Mux) Serve(h Handler) {
	if h == nil {
		panic("transport: Serve with nil handler")
	}
	if !m.served.CompareAndSwap(false, true) {
		panic("transport: Serve called twice")
	}
	m.handler = h
	close(m.serving)
}

// Close stops accepting, closes the listener, the Raft layer and every
// connection the Mux accepted or dialled for Raft, cancels handler contexts
// and waits for all its goroutines, including running handlers (so a
// handler that ignores its context delays Close). Safe to call more than
// once.
func (m *Mux) Close() error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		conns := m.conns
		m.conns = nil
		m.mu.Unlock()

		close(m.done)
		m.cancel()
		if err := m.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			m.closeErr = fmt.Errorf("transport: close listener: %w", err)
		}
		_ = m.raft.Close()
		for c := range conns {
			_ = c.Close()
		}
		m.wg.Wait()
	})
	return m.closeErr
}

// track registers a raw connection so Close can sever it. It returns the
// function that unregisters it, or ok=false if the Mux is closed.
func (m *Mux) track(c net.Conn) (release func(), ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, false
	}
	m.conns[c] = struct{}{}
	return func() {
		m.mu.Lock()
		delete(m.conns, c)
		m.mu.Unlock()
	}, true
}

func (m *Mux) isClosed() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	var delay time.Duration
	for {
		raw, err := m.ln.Accept()
		if err != nil {
			if m.isClosed() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Probably out of file descriptors: back off like net/http.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			m.log.Warn("accept failed", "error", err, "retry_in", delay)
			select {
			case <-m.done:
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		release, ok := m.track(raw)
		if !ok {
			_ = raw.Close()
			return
		}
		m.wg.Add(1)
		go m.handshake(raw, release)
	}
}

// handshake runs TLS (if configured) and reads the protocol byte, all under
// one deadline, then hands the connection to Raft or serves RPC on it.
func (m *Mux) handshake(raw net.Conn, release func()) {
	defer m.wg.Done()
	conn := raw
	handedOff := false
	defer func() {
		if !handedOff {
			_ = conn.Close()
			release()
		}
	}()
	remote := raw.RemoteAddr().String()
	deadline := time.Now().Add(m.handshakeTimeout)
	_ = raw.SetDeadline(deadline)

	if m.serverTLS != nil {
		// A TLS connection opens with a handshake record (0x16). Refuse a
		// plaintext peer at once instead of waiting for a record header.
		var first [1]byte
		if _, err := io.ReadFull(raw, first[:]); err != nil {
			m.noProtocolByte(remote, err)
			return
		}
		if first[0] != tlsRecordHandshake {
			m.reject(rejectTLS)
			m.log.Warn("plaintext connection to a TLS cluster port; closed", "remote", remote, "byte", first[0])
			return
		}
		tc := tls.Server(&prefixConn{Conn: raw, prefix: first[0]}, m.serverTLS)
		conn = tc
		if err := tc.HandshakeContext(m.ctx); err != nil {
			if m.isClosed() {
				return
			}
			lvl := slog.LevelWarn
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				m.reject(rejectTimeout)
			case errors.Is(err, io.EOF):
				m.reject(rejectTLS)
				lvl = slog.LevelDebug // e.g. a TCP health check
			default:
				m.reject(rejectTLS)
			}
			m.log.Log(m.ctx, lvl, "TLS handshake failed", "remote", remote, "error", err)
			return
		}
	}

	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		m.noProtocolByte(remote, err)
		return
	}

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	switch b[0] {
	case ProtoRaft:
		_ = raw.SetDeadline(time.Time{})
		// Raft sets no read deadline: a peer's connection carries its
		// first request at once (Raft dials to send one), so one that
		// sends nothing within the handshake timeout is not a peer's and
		// is closed instead of holding a goroutine and a descriptor for
		// as long as its client likes.
		_ = conn.SetReadDeadline(time.Now().Add(m.handshakeTimeout))
		select {
		case m.raft.ch <- &trackedConn{Conn: conn, release: release, firstRead: true}:
			handedOff = true
			m.metrics.accepted.WithLabelValues("raft").Inc()
		case <-m.raft.closed:
			m.reject(rejectNoHandler)
		case <-timer.C:
			m.reject(rejectNoHandler)
			m.log.Warn("raft connection not accepted in time; is the raft transport running?", "remote", remote)
		}
	case ProtoRPC:
		select {
		case <-m.serving:
		case <-m.done:
			return
		case <-timer.C:
			m.reject(rejectNoHandler)
			m.log.Warn("RPC connection before Serve; closed", "remote", remote)
			return
		}
		if _, err := conn.Write([]byte{ackRPC}); err != nil {
			m.log.Debug("RPC acknowledgement failed", "remote", remote, "error", err)
			return
		}
		_ = raw.SetDeadline(time.Time{})
		m.metrics.accepted.WithLabelValues("rpc").Inc()
		m.serveRPC(conn, remote)
	default:
		m.reject(rejectProtocol)
		if b[0] == tlsRecordHandshake && m.serverTLS == nil {
			m.log.Warn("TLS connection to a plaintext cluster port; closed", "remote", remote)
		} else {
			m.log.Debug("unknown protocol byte; closed", "remote", remote, "byte", b[0])
		}
	}
}

// tlsRecordHandshake is the first byte of a TLS ClientHello record.
const tlsRecordHandshake = 0x16

func (m *Mux) noProtocolByte(remote string, err error) {
	if m.isClosed() {
		return
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		m.reject(rejectTimeout)
	}
	m.log.Debug("connection closed before the protocol byte", "remote", remote, "error", err)
}

// prefixConn gives back one byte already read from Conn.
type prefixConn struct {
	net.Conn
	prefix byte
	used   bool
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if !c.used && len(p) > 0 {
		c.used = true
		p[0] = c.prefix
		return 1, nil
	}
	return c.Conn.Read(p)
}

func (m *Mux) reject(reason string) {
	m.metrics.rejected.WithLabelValues(reason).Inc()
}

// serveRPC answers requests on conn one at a time until the peer closes,
// the connection idles out, a frame is malformed or the Mux closes.
func (m *Mux) serveRPC(conn net.Conn, remote string) {
	br := bufio.NewReader(conn)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(m.idleTimeout))
		p, err := readFrame(br)
		if err != nil {
			if !m.isClosed() && !errors.Is(err, io.EOF) {
				m.log.Debug("RPC connection closed", "remote", remote, "error", err)
			}
			return
		}
		q, err := decodeRequest(p)
		if err != nil {
			m.log.Warn("malformed RPC request; closing connection", "remote", remote, "error", err)
			return
		}
		frame, err := encodeResponse(m.dispatch(q))
		if err != nil { // the handler's body exceeded MaxFrameSize
			frame, _ = encodeResponse(response{ID: q.ID, Err: &RemoteError{
				Code: CodeInternal, Message: fmt.Sprintf("%s: response: %v", q.Method, err),
			}})
		}
		_ = conn.SetWriteDeadline(time.Now().Add(responseWriteTimeout))
		if _, err := conn.Write(frame); err != nil {
			if !m.isClosed() {
				m.log.Debug("RPC response write failed", "remote", remote, "method", q.Method, "error", err)
			}
			return
		}
	}
}

// The caller's deadline is read on this node's clock, which may not agree
// with the caller's. A handler gets at least minHandlerTime and at most
// maxHandlerTime from the request's arrival, whatever the deadline says:
// a caller whose clock is behind this one's (its deadline looks past on
// arrival, or too near) still gets an answer, and one whose clock is ahead
// cannot hold a handler for as long as its clock is off. The caller stops
// waiting at its own deadline in any case; the bounds only limit what this
// node spends on a call it may no longer wait for.
const (
	minHandlerTime = 5 * time.Second
	maxHandlerTime = 2 * time.Minute
)

// handlerDeadline is the deadline a handler runs under for a request
// carrying deadline (Unix nanoseconds, not 0) that arrived at now.
func handlerDeadline(now time.Time, deadline int64) time.Time {
	left := time.Unix(0, deadline).Sub(now)
	return now.Add(min(max(left, minHandlerTime), maxHandlerTime))
}

// dispatch runs the handler under the caller's deadline, bounded as
// handlerDeadline says.
func (m *Mux) dispatch(q request) response {
	var ctx context.Context
	var cancel context.CancelFunc
	if q.Deadline == 0 {
		ctx, cancel = context.WithCancel(m.ctx)
	} else {
		ctx, cancel = context.WithDeadline(m.ctx, handlerDeadline(time.Now(), q.Deadline))
	}
	defer cancel()
	body, err := m.runHandler(ctx, q.Method, q.Body)
	if err != nil {
		return response{ID: q.ID, Err: toRemoteError(err)}
	}
	return response{ID: q.ID, Body: body}
}

func (m *Mux) runHandler(ctx context.Context, method string, body []byte) (resp []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			m.log.Error("RPC handler panicked", "method", method, "panic", r, "stack", string(debug.Stack()))
			resp, err = nil, &RemoteError{Code: CodeInternal, Message: fmt.Sprintf("handler panic: %v", r)}
		}
	}()
	return m.handler(ctx, method, body)
}

// trackedConn is a connection handed to Raft; closing it unregisters it
// from the Mux.
type trackedConn struct {
	net.Conn
	release func()
	once    sync.Once
	// firstRead: the read deadline set at the handshake is still on; the
	// first read that returns data clears it. Only Raft's reading
	// goroutine reads.
	firstRead bool
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.firstRead && n > 0 {
		c.firstRead = false
		_ = c.Conn.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
