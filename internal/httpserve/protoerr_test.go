package httpserve

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawExchange writes req on a new connection to addr and reads one answer.
func rawExchange(t *testing.T, addr, req string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(c, req)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// TestRequestsNetHTTPCannotReadGetTheErrorModel sends what net/http refuses
// before any handler runs and checks each answer is the Iceberg error model
// with the status net/http chose, counted by reason.
func TestRequestsNetHTTPCannotReadGetTheErrorModel(t *testing.T) {
	s, err := New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A handler's own plain-text answer with Connection: close passes
		// through untouched.
		w.Header().Set("Connection", "close")
		http.Error(w, "handler says no", http.StatusBadRequest)
	}), Config{MaxHeaderBytes: 1024, Logger: discardLogger()})
	require.NoError(t, err)
	addr := serve(t, s)

	for _, tc := range []struct {
		name, req, typ, msg, reason string
		status                      int
	}{
		{"invalid escape in the path", "GET /v1/namespaces/a%zz/tables HTTP/1.1\r\nHost: x\r\n\r\n",
			"BadRequestException", "invalid %-escape", reasonMalformed, http.StatusBadRequest},
		{"header line without a colon", "GET /v1/config HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
			"BadRequestException", "malformed HTTP request", reasonMalformed, http.StatusBadRequest},
		{"no Host", "GET /v1/config HTTP/1.1\r\n\r\n",
			"BadRequestException", "missing required Host header", reasonMalformed, http.StatusBadRequest},
		{"headers over the limit", "GET /v1/config HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 16<<10) + "\r\n\r\n",
			"BadRequestException", "--http-max-header-bytes 1024", reasonHeadersTooLarge, http.StatusRequestHeaderFieldsTooLarge},
		{"unknown transfer encoding", "POST /v1/namespaces HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
			"UnsupportedOperationException", "Transfer-Encoding", reasonTransferEncoding, http.StatusNotImplemented},
		{"HTTP/2 in plain text", "GET /v1/config HTTP/2.0\r\nHost: x\r\n\r\n",
			"UnsupportedOperationException", "unsupported HTTP version", reasonProtocolVersion, http.StatusHTTPVersionNotSupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := value(s.m.rejected.WithLabelValues(tc.reason))
			resp, body := rawExchange(t, addr, tc.req)
			assert.Equal(t, tc.status, resp.StatusCode)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var e errorBody
			require.NoError(t, json.Unmarshal(body, &e), "body %q", body)
			assert.Equal(t, tc.status, e.Error.Code)
			assert.Equal(t, tc.typ, e.Error.Type)
			assert.Contains(t, e.Error.Message, tc.msg)
			assert.Equal(t, before+1, value(s.m.rejected.WithLabelValues(tc.reason)))
		})
	}

	resp, body := rawExchange(t, addr, "GET /v1/config HTTP/1.1\r\nHost: x\r\n\r\n")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"), "a handler's answer is its own")
	assert.Equal(t, "handler says no\n", string(body))
}

func TestParseNetHTTPErrorOnlyMatchesItsOwnShape(t *testing.T) {
	for _, p := range []string{
		"HTTP/1.1 200 OK" + netHTTPErrorHeaders + "fine",
		"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nDate: x\r\n\r\n400 Bad Request",
		"HTTP/1.1 400 Bad Request" + netHTTPErrorHeaders + "two\r\nlines",
		"400 Bad Request" + netHTTPErrorHeaders,
		"HTTP/1.1 4x0 Bad Request" + netHTTPErrorHeaders,
	} {
		_, _, ok := parseNetHTTPError([]byte(p))
		assert.False(t, ok, "%q", p)
	}
	status, detail, ok := parseNetHTTPError([]byte("HTTP/1.1 400 Bad Request: too many Host headers" + netHTTPErrorHeaders + "400 Bad Request: too many Host headers"))
	require.True(t, ok)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Equal(t, "too many Host headers", detail)
}
