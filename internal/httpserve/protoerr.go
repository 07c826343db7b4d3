package httpserve

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strconv"

	"github.com/google/uuid"
)

// Reasons in floe_http_requests_rejected_total for the requests net/http
// refuses before any handler runs.
const (
	reasonMalformed        = "malformed"
	reasonHeadersTooLarge  = "headers_too_large"
	reasonTransferEncoding = "transfer_encoding"
	reasonProtocolVersion  = "protocol_version"
)

// netHTTPErrorHeaders is what net/http's server writes after the status
// line of an answer it gives by itself, to a request it could not read
// (http.Server.serve, Go 1.22 to 1.26): one Write on the connection, with
// the status line, these headers and a plain-text body. A response from a
// handler never has this shape: net/http adds a Date header to every
// handler's response (floe's handlers never suppress it) and writes the
// handler's headers sorted, Connection before Content-Type; and the
// catalog's bodies are JSON, in which CR LF cannot appear unescaped.
const netHTTPErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// errorModelListener wraps the accepted connections of a plain-HTTP server
// in errorModelConn.
type errorModelListener struct {
	net.Listener
	maxHeaderBytes int
	m              *metrics
}

func (l errorModelListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &errorModelConn{Conn: c, maxHeaderBytes: l.maxHeaderBytes, m: l.m}, nil
}

// errorModelConn rewrites net/http's own plain-text answers to requests it
// cannot read (a path with an invalid %-escape, a malformed header or Host,
// headers over the limit, an unsupported Transfer-Encoding or HTTP
// version) into the
// Iceberg error model, so that a client's error handler reads a message and
// a type instead of failing to parse the body. Every other write passes
// through unchanged.
type errorModelConn struct {
	net.Conn
	maxHeaderBytes int
	m              *metrics
	framing        framingSniffer // for guard (framing.go)
}

func (c *errorModelConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.framing.sniff(p[:n])
	}
	return n, err
}

// Write reports len(p) written when it wrote the rewritten answer whole.
func (c *errorModelConn) Write(p []byte) (int, error) {
	status, text, ok := parseNetHTTPError(p)
	if !ok && isExpectationFailed(p) {
		status, ok = http.StatusExpectationFailed, true
	}
	if !ok {
		return c.Conn.Write(p)
	}
	if _, err := c.Conn.Write(c.errorModelAnswer(status, text)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite is net/http's half-close after a 431 (closeWriteAndWait), so
// the client reads the answer before the connection resets.
func (c *errorModelConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// parseNetHTTPError recognises one of net/http's own error answers: its
// status code and the detail net/http gave ("" when none).
func parseNetHTTPError(p []byte) (status int, detail string, ok bool) {
	const proto = "HTTP/1.1 "
	if !bytes.HasPrefix(p, []byte(proto)) {
		return 0, "", false
	}
	line, body, found := bytes.Cut(p[len(proto):], []byte(netHTTPErrorHeaders))
	if !found || len(line) < 3 || bytes.ContainsAny(line, "\r\n") || bytes.ContainsAny(body, "\r\n") {
		return 0, "", false
	}
	status, err := strconv.Atoi(string(line[:3]))
	if err != nil || status < 400 || status > 599 {
		return 0, "", false
	}
	// "400 Bad Request: missing required Host header": the detail follows
	// the status text.
	if _, d, has := bytes.Cut(body, []byte(": ")); has {
		detail = string(d)
	}
	return status, detail, true
}

// isExpectationFailed recognises net/http's answer to an Expect header
// other than 100-continue (response.sendExpectationFailed): a 417 with no
// body, written as a handler's answer is (with a Date) but before any
// handler runs. No handler behind this server answers 417.
func isExpectationFailed(p []byte) bool {
	return (bytes.HasPrefix(p, []byte("HTTP/1.1 417 Expectation Failed\r\n")) ||
		bytes.HasPrefix(p, []byte("HTTP/1.0 417 Expectation Failed\r\n"))) &&
		bytes.HasSuffix(p, []byte("\r\nContent-Length: 0\r\n\r\n")) &&
		!bytes.Contains(p, []byte("\r\nContent-Type:"))
}

// errorModelAnswer is the whole HTTP answer for one of net/http's errors.
func (c *errorModelConn) errorModelAnswer(status int, detail string) []byte {
	typ, reason := "BadRequestException", reasonMalformed
	var msg string
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		reason = reasonHeadersTooLarge
		msg = "the request line and headers exceed this server's limit (--http-max-header-bytes " + strconv.Itoa(c.maxHeaderBytes) + ", and 4096 bytes net/http allows beyond it)"
	case http.StatusNotImplemented:
		typ, reason = "UnsupportedOperationException", reasonTransferEncoding
		msg = "unsupported Transfer-Encoding: only chunked is accepted"
	case http.StatusExpectationFailed:
		msg = "unsupported Expect header: only 100-continue is understood"
	case http.StatusHTTPVersionNotSupported:
		typ, reason = "UnsupportedOperationException", reasonProtocolVersion
		msg = "unsupported HTTP version: this port serves HTTP/1.1"
	default:
		msg = "malformed HTTP request: the request line, the URL (an invalid %-escape, say) or a header could not be parsed"
		if detail != "" {
			msg = "malformed HTTP request: " + detail
		}
	}
	c.m.rejected.WithLabelValues(reason).Inc()
	body, _ := json.Marshal(errorBody{Error: errorModel{Message: msg, Type: typ, Code: status}})
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n")
	b.WriteString("Content-Type: application/json\r\n")
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	b.WriteString("Cache-Control: no-store\r\n")
	if id, err := uuid.NewV7(); err == nil {
		// As every other answer carries one (the request's own id, if
		// it sent one, was in what could not be parsed).
		b.WriteString("X-Request-Id: " + id.String() + "\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	b.Write(body)
	return b.Bytes()
}
