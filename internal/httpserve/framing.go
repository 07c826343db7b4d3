package httpserve

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync/atomic"
)

// Request smuggling. net/http frames a request by its Transfer-Encoding
// when it has one and deletes both that header and Content-Length before a
// handler runs, and it ignores Transfer-Encoding altogether on HTTP/1.0.
// A proxy in front that frames the same bytes the other way sees a
// different set of requests, and the bytes it took for a body run here as
// a request of their own. RFC 9112 §6.1 closes both gaps: a server MUST
// treat an HTTP/1.0 message with Transfer-Encoding as faulty framing, and
// MUST close the connection after answering a request that had both
// headers. Since no handler can see the headers, the connection notes them
// as its bytes arrive (framingSniffer) and guard acts on the notes.

// connKey is the context key of the request's *errorModelConn.
type connKey struct{}

// connContext is http.Server.ConnContext: it lets guard find the
// connection a request came on (plain HTTP only; over TLS the server sees
// the *tls.Conn).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if ec, ok := c.(*errorModelConn); ok {
		return context.WithValue(ctx, connKey{}, ec)
	}
	return ctx
}

// framingSniffer notes whether a Transfer-Encoding or a Content-Length
// header line has passed on a connection, for guard. It matches the names
// at the start of any line, bodies included, and across reads: a match in
// a body only closes the connection after its answer (or refuses an
// HTTP/1.0 request), never lets a request through that should not pass.
// Reads on one connection never run concurrently (net/http reads a
// connection from one goroutine at a time), so tail needs no lock; the
// flags are read by the handler's goroutine.
type framingSniffer struct {
	tail         []byte // the last len(teLine)-1 bytes read
	sawTE, sawCL atomic.Bool
}

var (
	teLine = []byte("\ntransfer-encoding")
	clLine = []byte("\ncontent-length")
)

func (s *framingSniffer) sniff(p []byte) {
	if s.sawTE.Load() && s.sawCL.Load() {
		return
	}
	// A name split across two reads: search the seam with the tail.
	if len(s.tail) > 0 {
		s.scan(append(s.tail, p[:min(len(p), len(teLine))]...))
	}
	s.scan(p)
	keep := len(teLine) - 1
	if len(p) >= keep {
		s.tail = append(s.tail[:0], p[len(p)-keep:]...)
		return
	}
	s.tail = append(s.tail, p...)
	if len(s.tail) > keep {
		s.tail = s.tail[:copy(s.tail, s.tail[len(s.tail)-keep:])]
	}
}

// scan notes the header names that start a line in p.
func (s *framingSniffer) scan(p []byte) {
	for i := bytes.IndexByte(p, '\n'); i >= 0; {
		rest := p[i:]
		if hasPrefixFold(rest, teLine) {
			s.sawTE.Store(true)
		} else if hasPrefixFold(rest, clLine) {
			s.sawCL.Store(true)
		}
		j := bytes.IndexByte(rest[1:], '\n')
		if j < 0 {
			return
		}
		i += 1 + j
	}
}

func hasPrefixFold(p, prefix []byte) bool {
	return len(p) >= len(prefix) && bytes.EqualFold(p[:len(prefix)], prefix)
}

// guard answers, before the in-flight cap and any route, the requests
// whose framing or target floe cannot trust or serve:
//
//   - an HTTP/1.0 request on a connection that carried Transfer-Encoding:
//     400, connection closed (RFC 9112 §6.1: faulty framing);
//   - a chunked request on a connection that carried Content-Length too:
//     served, then the connection is closed (RFC 9112 §6.1);
//   - the "*" target (net/http answers OPTIONS * itself, before any
//     handler) and the HTTP/2 preface "PRI *" sent over plain HTTP: 400,
//     or 505 for the preface;
//   - CONNECT: 501, this is not a proxy.
//
// Each refusal is in the Iceberg error model and counted in
// floe_http_requests_rejected_total. net/http's own answers to these were
// an empty 400 or a plain-text 404.
type guard struct {
	next http.Handler
	m    *metrics
}

func (g guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 {
		if c, ok := r.Context().Value(connKey{}).(*errorModelConn); ok {
			if r.ProtoMinor == 0 && c.framing.sawTE.Load() {
				g.refuse(w, r, http.StatusBadRequest, "BadRequestException", reasonTransferEncoding,
					"an HTTP/1.0 request with Transfer-Encoding has no trustworthy framing (RFC 9112 section 6.1): send HTTP/1.1")
				return
			}
			if len(r.TransferEncoding) > 0 && c.framing.sawCL.Load() {
				// Served, but the bytes after it are not read as a
				// request: a proxy that framed this one by its
				// Content-Length would have sent them as another.
				g.m.framingClosed.Inc()
				w.Header().Set("Connection", "close")
			}
		}
	}
	switch {
	case r.Method == "PRI" && r.RequestURI == "*":
		g.refuse(w, r, http.StatusHTTPVersionNotSupported, "UnsupportedOperationException", reasonProtocolVersion,
			"HTTP/2 without TLS is not served on this port: use HTTP/1.1, or HTTPS (which negotiates HTTP/2)")
		return
	case r.RequestURI == "*":
		g.refuse(w, r, http.StatusBadRequest, "BadRequestException", reasonMalformed,
			"the request target * names no resource here: send a path")
		return
	case r.Method == http.MethodConnect:
		g.refuse(w, r, http.StatusNotImplemented, "UnsupportedOperationException", reasonMalformed,
			"CONNECT is not served: this is not a proxy")
		return
	}
	g.next.ServeHTTP(w, r)
}

func (g guard) refuse(w http.ResponseWriter, r *http.Request, status int, typ, reason, msg string) {
	g.m.rejected.WithLabelValues(reason).Inc()
	w.Header().Set("Connection", "close")
	w.Header().Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorBody{Error: errorModel{Message: msg, Type: typ, Code: status}})
}
