// Package httpserve runs the node's client-facing HTTP server: optional TLS
// with a certificate that is reloaded when its files change, the server's
// size and time limits, and a cap on requests in flight. It knows nothing of
// the routes it serves. See DESIGN.md.
package httpserve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for Config, and for the node's flags.
const (
	// DefaultMaxHeaderBytes bounds the request line and headers (431 beyond).
	DefaultMaxHeaderBytes = 1 << 20
	// DefaultReadHeaderTimeout bounds reading the request line and headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, body included: an
	// 8 MiB body (the catalog's default --max-body-bytes) over a 1 Mbit/s
	// link takes about 67 s. It does not bound the handler: the connection's
	// read deadline is lifted once the body has been read.
	DefaultReadTimeout = 2 * time.Minute
	// DefaultWriteTimeout is 0, none: a synchronous purge answers only when
	// the table's files are gone, which has no upper bound; a write
	// deadline would drop that answer after the drop took effect.
	DefaultWriteTimeout = time.Duration(0)
	// DefaultWriteStallTimeout is how long an answer may stand still: a
	// client that reads none of it for this long fails the write, and the
	// request gives back its in-flight slot (stallWriter). 64 KiB a
	// minute is far slower than any client on a working link.
	DefaultWriteStallTimeout = time.Minute
	// DefaultIdleTimeout is how long a keep-alive connection may sit idle.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxInFlight caps the requests one node serves at once.
	DefaultMaxInFlight = 1024
	// DefaultCertCheckInterval is how often, at most, the certificate files
	// are checked for changes.
	DefaultCertCheckInterval = time.Second
)

// ErrInvalidConfig is returned by New for a configuration it cannot serve
// with: one of CertFile and KeyFile without the other, or a negative limit.
var ErrInvalidConfig = errors.New("httpserve: invalid configuration")

// Config configures New. The limits are passed to http.Server as they are,
// with its meaning of zero: no read or write timeout, ReadTimeout for a zero
// ReadHeaderTimeout or IdleTimeout, 1 MiB for a zero MaxHeaderBytes. The
// node passes its flags, whose defaults are the Default constants.
type Config struct {
	// CertFile and KeyFile are the PEM certificate (optionally followed by
	// intermediates) and private key of the server. Both empty: plain HTTP.
	// The files are checked for changes at most every CertCheckInterval
	// (default DefaultCertCheckInterval), during TLS handshakes, and
	// reloaded when they changed.
	CertFile, KeyFile string
	CertCheckInterval time.Duration

	MaxHeaderBytes    int
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// WriteStallTimeout bounds how long an answer may stand still, each
	// 64 KiB of it written under a deadline of its own (0: no bound).
	WriteStallTimeout time.Duration

	// MaxInFlight caps the requests being served at once; beyond it a
	// request is answered 503 at once. 0: no cap. Requests for the exact
	// paths in Uncapped (health checks, metrics) are never refused and not
	// counted.
	MaxInFlight int
	Uncapped    []string

	// Outer, if set, wraps the handler outside the in-flight cap: what it
	// does to a request or its answer (a request id, say) happens to
	// requests the cap refuses too.
	Outer func(http.Handler) http.Handler

	Logger     *slog.Logger          // default slog.Default()
	Registerer prometheus.Registerer // nil: metrics are not registered

	// now is the clock of the certificate checks (tests); default time.Now.
	now func() time.Time
}

// Server is an http.Server with the limits, the in-flight cap and, when
// configured, TLS. Serve, Shutdown and Close behave as http.Server's.
type Server struct {
	srv   *http.Server
	certs *certReloader // nil without TLS
	m     *metrics
	limit *limiter
	// maxHeaderBytes is net/http's header limit as configured (its
	// default for 0), named in the 431 answer.
	maxHeaderBytes int
}

// New builds a Server around handler. With TLS configured it loads the
// certificate and key now: an error names the file that is missing or
// unreadable (wrapping the os error) or wraps ErrInvalidKeyPair. A
// configuration it cannot serve with wraps ErrInvalidConfig. Metrics are
// registered with cfg.Registerer, which panics if they already are.
func New(handler http.Handler, cfg Config) (*Server, error) {
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, fmt.Errorf("%w: the TLS certificate and key files must be set together", ErrInvalidConfig)
	}
	if cfg.MaxHeaderBytes < 0 || cfg.ReadHeaderTimeout < 0 || cfg.ReadTimeout < 0 || cfg.WriteTimeout < 0 ||
		cfg.WriteStallTimeout < 0 || cfg.IdleTimeout < 0 || cfg.MaxInFlight < 0 || cfg.CertCheckInterval < 0 {
		return nil, fmt.Errorf("%w: limits must not be negative", ErrInvalidConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CertCheckInterval == 0 {
		cfg.CertCheckInterval = DefaultCertCheckInterval
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	m := newMetrics(cfg.Registerer)
	limit := newLimiter(handler, cfg.MaxInFlight, cfg.Uncapped, cfg.ReadTimeout, cfg.WriteStallTimeout, cfg.WriteTimeout, m)
	maxHeaderBytes := cfg.MaxHeaderBytes
	if maxHeaderBytes == 0 {
		maxHeaderBytes = http.DefaultMaxHeaderBytes
	}
	var served http.Handler = guard{next: limit, m: m}
	if cfg.Outer != nil {
		served = cfg.Outer(served)
	}
	s := &Server{m: m, limit: limit, maxHeaderBytes: maxHeaderBytes, srv: &http.Server{
		Handler:           served,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		ConnContext:       connContext,
		ErrorLog:          log.New(errorLog{log: cfg.Logger.With("component", "http"), m: m}, "", 0),
	}}
	if cfg.CertFile != "" {
		certs, err := newCertReloader(cfg.CertFile, cfg.KeyFile, cfg.CertCheckInterval, cfg.now, cfg.Logger, m)
		if err != nil {
			return nil, err
		}
		s.certs = certs
		s.srv.TLSConfig = &tls.Config{
			// TLS 1.2 as well as 1.3: the catalog's clients (JVM engines
			// among them) are not all recent. The cluster port, between
			// floe nodes only, requires 1.3.
			MinVersion:     tls.VersionTLS12,
			GetCertificate: certs.getCertificate,
		}
	}
	return s, nil
}

// TLS reports whether the server serves HTTPS.
func (s *Server) TLS() bool { return s.certs != nil }

// Serve accepts connections on ln until Shutdown or Close, serving HTTPS
// (HTTP/2 and HTTP/1.1) when TLS is configured, plain HTTP/1.1 otherwise. It
// always returns a non-nil error: http.ErrServerClosed after Shutdown or
// Close.
//
// Over plain HTTP, the answers net/http gives by itself to a request it
// cannot read are rewritten into the Iceberg error model (errorModelConn).
// Over TLS they are net/http's plain text: the server must see the
// *tls.Conn itself to negotiate HTTP/2, so its connections cannot be
// wrapped.
func (s *Server) Serve(ln net.Listener) error {
	ln = lowatListener{ln}
	if s.certs != nil {
		// The certificate comes from TLSConfig.GetCertificate.
		return s.srv.ServeTLS(ln, "", "")
	}
	return s.srv.Serve(errorModelListener{Listener: ln, maxHeaderBytes: s.maxHeaderBytes, m: s.m})
}

// notSentLowat is how little of an answer may wait unsent in the kernel
// before a writer blocked on the connection is woken (setNotSentLowat):
// two of the 64 KiB pieces a write-stall or change-feed deadline covers.
const notSentLowat = 128 << 10

// lowatListener sets notSentLowat on each connection it accepts, so that
// the per-piece write deadlines bound a client's progress, not how fast
// the kernel's buffer drains.
type lowatListener struct{ net.Listener }

func (l lowatListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		setNotSentLowat(c)
	}
	return c, err
}

// Shutdown stops accepting connections and waits for the requests in
// flight until ctx ends, as http.Server.Shutdown.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close closes the listener and every connection at once. Handlers still
// running go on until they return (see Wait).
func (s *Server) Close() error { return s.srv.Close() }

// Wait waits until no handler is running, or ctx ends (its error). After
// Close it is how the caller learns that the handlers Close cut off have
// returned, before it closes what they use.
//
// It polls a counter: a shutdown-time wait does not justify a lock on
// every request's path.
func (s *Server) Wait(ctx context.Context) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for s.limit.running.Load() > 0 {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// errorLog receives net/http's own error lines. They are warnings, but
// for a failed TLS handshake: anyone can cause one per connection (connect
// and close, plain HTTP to the HTTPS port), thousands a second, so those
// are counted (floe_http_tls_handshake_errors_total) and logged at debug.
type errorLog struct {
	log *slog.Logger
	m   *metrics
}

func (e errorLog) Write(p []byte) (int, error) {
	msg := strings.TrimSuffix(string(p), "\n")
	if strings.HasPrefix(msg, "http: TLS handshake error") {
		e.m.tlsHandshakeErrors.Inc()
		e.log.Debug(msg)
		return len(p), nil
	}
	e.log.Warn(msg)
	return len(p), nil
}
