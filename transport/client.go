package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ClientConfig configures a [Client].
type ClientConfig struct {
	// TLS enables mutual TLS; nil means plaintext. It must match the
	// servers' setting.
	TLS *TLSFiles
	// LocalIP, when set, is the source address of every connection dialled
	// (see Config.DialFromBindIP).
	LocalIP string
	// MaxIdlePerAddr caps idle pooled connections per address. Default 4.
	MaxIdlePerAddr int
	// IdleTimeout retires a pooled connection idle this long. Default 30s;
	// keep it below the servers' IdleTimeout (90s by default) so the client,
	// not the server, ends idle connections.
	IdleTimeout time.Duration
	// DialTimeout bounds one dial: TCP connect, TLS handshake and protocol
	// acknowledgement. Default 5s; the call's context may cut it shorter.
	DialTimeout time.Duration
	// MaxAttempts bounds the attempts of one Call (see Call). Default 3.
	MaxAttempts int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the floe_transport_ client metrics; nil disables
	// them.
	Registerer prometheus.Registerer
}

// Client calls [Handler]s on other nodes. It keeps a pool of idle
// connections per address; each connection carries one request at a time,
// so concurrent calls to one address use several connections. A Client is
// safe for concurrent use.
type Client struct {
	localIP     string
	tls         *tls.Config
	maxIdle     int
	idleTimeout time.Duration
	dialTimeout time.Duration
	maxAttempts int
	log         *slog.Logger
	metrics     *clientMetrics
	nextID      atomic.Uint64

	mu     sync.Mutex
	idle   map[string][]*clientConn // per address, most recently used last
	active map[*clientConn]struct{}
	closed bool
}

type clientConn struct {
	addr      string
	raw       net.Conn // TCP: liveness probe, hard close
	conn      net.Conn // TLS or raw
	br        *bufio.Reader
	idleSince time.Time
	noReuse   bool
}

// NewClient returns a Client. It loads the TLS files, if any.
func NewClient(cfg ClientConfig) (*Client, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	c := &Client{
		localIP:     cfg.LocalIP,
		maxIdle:     cfg.MaxIdlePerAddr,
		idleTimeout: orDefault(cfg.IdleTimeout, DefaultClientIdleTimeout),
		dialTimeout: orDefault(cfg.DialTimeout, DefaultDialTimeout),
		maxAttempts: cfg.MaxAttempts,
		log:         log.With("component", "transport-client"),
		metrics:     newClientMetrics(cfg.Registerer),
		idle:        make(map[string][]*clientConn),
		active:      make(map[*clientConn]struct{}),
	}
	if c.maxIdle <= 0 {
		c.maxIdle = DefaultMaxIdlePerAddr
	}
	if c.maxAttempts <= 0 {
		c.maxAttempts = DefaultMaxAttempts
	}
	if cfg.TLS != nil {
		_, client, err := cfg.TLS.Load()
		if err != nil {
			return nil, err
		}
		c.tls = client
	}
	return c, nil
}

// Call sends one request to the node at addr and waits for its response.
//
// The ctx deadline, if any, is sent with the request as an absolute time and
// the handler runs under that same deadline (clocks on one LAN are assumed to
// agree within milliseconds). Without a deadline Call waits until the
// response arrives or ctx is cancelled; callers should set one.
//
// Retries: the request is sent again, on another connection, only when it
// certainly did not reach a handler — the dial failed (connect, TLS
// handshake or the server's acknowledgement), or writing it to a pooled,
// previously used connection failed. Up to MaxAttempts attempts are made
// and the last one always dials a fresh connection. Pooled connections are
// also probed for a peer close before use, so one the server idled out is
// replaced without an attempt being spent.
//
// Once the request has been completely written, any failure (EOF or reset
// while reading the response, timeout, cancellation, a malformed response)
// is not retried and the error wraps [ErrOutcomeUnknown] — and the context
// error, if ctx ended: the handler may have run to completion. Errors that
// do not wrap ErrOutcomeUnknown mean the handler did not run on this call's
// behalf. A *RemoteError means it ran and answered with an error.
func (c *Client) Call(ctx context.Context, addr, method string, req []byte) ([]byte, error) {
	start := time.Now()
	resp, outcome, err := c.call(ctx, addr, method, req)
	c.metrics.calls.WithLabelValues(method, outcome).Inc()
	c.metrics.duration.WithLabelValues(method).Observe(time.Since(start).Seconds())
	return resp, err
}

func (c *Client) call(ctx context.Context, addr, method string, body []byte) ([]byte, string, error) {
	if c.isClosed() {
		return nil, outcomeNotSent, ErrClosed
	}
	q := request{ID: c.nextID.Add(1), Method: method, Body: body}
	if dl, ok := ctx.Deadline(); ok {
		q.Deadline = dl.UnixNano()
	}
	frame, err := encodeRequest(q)
	if err != nil {
		return nil, outcomeNotSent, fmt.Errorf("transport: call %s: %w", method, err)
	}
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, outcomeNotSent, fmt.Errorf("transport: call %s on %s: %w", method, addr, err)
		}
		last := attempt >= c.maxAttempts
		cc, reused, err := c.acquire(ctx, addr, !last)
		if err != nil {
			if last || ctx.Err() != nil || c.isClosed() {
				return nil, outcomeNotSent, fmt.Errorf("transport: call %s on %s: %w", method, addr, err)
			}
			c.log.Debug("dial failed; retrying", "addr", addr, "method", method, "attempt", attempt, "error", err)
			continue
		}
		written, s, err := c.roundTrip(ctx, cc, frame, q.ID)
		if err == nil {
			c.release(cc)
			if s.Err != nil {
				return nil, outcomeRemoteError, s.Err
			}
			return s.Body, outcomeOK, nil
		}
		c.discard(cc)
		if written {
			if c.isClosed() {
				err = fmt.Errorf("%w (%w)", ErrClosed, err)
			}
			return nil, outcomeUnknown, fmt.Errorf("transport: call %s on %s: %w: %w", method, addr, ErrOutcomeUnknown, err)
		}
		if reused && !last && ctx.Err() == nil {
			// The peer probably restarted: its other idle connections are
			// as dead as this one.
			c.dropIdle(addr)
			c.log.Debug("write on pooled connection failed; retrying", "addr", addr, "method", method, "attempt", attempt, "error", err)
			continue
		}
		return nil, outcomeNotSent, fmt.Errorf("transport: call %s on %s: request not sent: %w", method, addr, err)
	}
}

// roundTrip writes frame and reads the response. written reports whether
// the whole request reached the socket: a failed Write means a truncated
// frame, which the server never dispatches.
func (c *Client) roundTrip(ctx context.Context, cc *clientConn, frame []byte, id uint64) (written bool, s response, err error) {
	dl, _ := ctx.Deadline() // zero: no deadline
	_ = cc.conn.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = cc.raw.SetDeadline(aLongTimeAgo) })
	defer func() {
		if !stop() {
			cc.noReuse = true // the abort may land after we reset the deadline
		}
	}()
	if _, err := cc.conn.Write(frame); err != nil {
		return false, s, withCtx(ctx, err)
	}
	p, err := readFrame(cc.br)
	if err != nil {
		return true, s, withCtx(ctx, err)
	}
	if s, err = decodeResponse(p); err != nil {
		return true, s, err
	}
	if s.ID != id {
		return true, s, fmt.Errorf("%w: response id %d for request %d", errMalformed, s.ID, id)
	}
	_ = cc.conn.SetDeadline(time.Time{})
	return true, s, nil
}

// acquire returns a live pooled connection (reused=true) if allowPooled and
// one exists, else dials.
func (c *Client) acquire(ctx context.Context, addr string, allowPooled bool) (cc *clientConn, reused bool, err error) {
	if allowPooled {
		for {
			cc = c.popIdle(addr)
			if cc == nil {
				break
			}
			if alive(cc.raw) {
				c.metrics.pool.WithLabelValues("reuse").Inc()
				return cc, true, nil
			}
			c.discard(cc)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, c.dialTimeout)
	defer cancel()
	raw, conn, err := dialProto(dctx, addr, c.localIP, c.tls, ProtoRPC, true)
	if err != nil {
		return nil, false, err
	}
	c.metrics.pool.WithLabelValues("dial").Inc()
	cc = &clientConn{addr: addr, raw: raw, conn: conn, br: bufio.NewReader(conn)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = raw.Close()
		return nil, false, ErrClosed
	}
	c.active[cc] = struct{}{}
	c.mu.Unlock()
	return cc, false, nil
}

// popIdle removes and returns the most recently used idle connection to
// addr, or nil.
func (c *Client) popIdle(addr string) *clientConn {
	c.mu.Lock()
	expired := c.pruneLocked()
	list := c.idle[addr]
	var cc *clientConn
	if n := len(list); n > 0 {
		cc = list[n-1]
		list[n-1] = nil
		if n == 1 {
			delete(c.idle, addr)
		} else {
			c.idle[addr] = list[:n-1]
		}
		c.active[cc] = struct{}{}
	}
	c.mu.Unlock()
	closeAll(expired)
	return cc
}

// release returns a healthy connection to the pool, or closes it if the
// pool is full or the client closed.
func (c *Client) release(cc *clientConn) {
	c.mu.Lock()
	expired := c.pruneLocked()
	delete(c.active, cc)
	if c.closed || cc.noReuse || len(c.idle[cc.addr]) >= c.maxIdle {
		expired = append(expired, cc)
	} else {
		cc.idleSince = time.Now()
		c.idle[cc.addr] = append(c.idle[cc.addr], cc)
	}
	c.mu.Unlock()
	closeAll(expired)
}

// pruneLocked removes connections idle longer than IdleTimeout, for every
// address (so a peer that is never called again does not keep sockets open)
// and returns them for closing outside the lock. Lists are ordered oldest
// first. There is no background reaper: pruning happens on every pool
// operation.
func (c *Client) pruneLocked() []*clientConn {
	var expired []*clientConn
	cutoff := time.Now().Add(-c.idleTimeout)
	for addr, list := range c.idle {
		i := 0
		for i < len(list) && list[i].idleSince.Before(cutoff) {
			i++
		}
		if i == 0 {
			continue
		}
		expired = append(expired, list[:i]...)
		if i == len(list) {
			delete(c.idle, addr)
		} else {
			c.idle[addr] = append(list[:0:0], list[i:]...)
		}
	}
	return expired
}

func closeAll(list []*clientConn) {
	for _, cc := range list {
		_ = cc.raw.Close()
	}
}

func (c *Client) discard(cc *clientConn) {
	c.mu.Lock()
	delete(c.active, cc)
	c.mu.Unlock()
	_ = cc.raw.Close()
}

func (c *Client) dropIdle(addr string) {
	c.mu.Lock()
	list := c.idle[addr]
	delete(c.idle, addr)
	c.mu.Unlock()
	closeAll(list)
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Close closes every pooled connection and those in use; calls in flight
// fail (with ErrOutcomeUnknown if their request was already written) and
// later calls return ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	var all []*clientConn
	for _, list := range c.idle {
		all = append(all, list...)
	}
	for cc := range c.active {
		all = append(all, cc)
	}
	c.idle, c.active = nil, nil
	c.mu.Unlock()
	closeAll(all)
	return nil
}
