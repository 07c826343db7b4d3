package httpserve

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// passThrough is an Outer such as cmd/node's (which adds request ids):
// what guard does must hold with one set.
func passThrough(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) })
}

// exchangeAll writes req on a new connection and reads every answer until
// the server closes it (or 5 s pass): the answers to the requests it ran.
func exchangeAll(t *testing.T, addr, req string) []*http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = io.WriteString(c, req)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	var out []*http.Response
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, resp)
	}
}

// TestSmuggledRequestsDoNotRun sends what a proxy in front could frame
// differently from net/http, each with a second request hidden where the
// proxy would see a body: the hidden request must never run (RFC 9112
// section 6.1).
func TestSmuggledRequestsDoNotRun(t *testing.T) {
	var ran atomic.Int64
	s, err := New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/smuggled" {
			ran.Add(1)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}), Config{Outer: passThrough, Logger: discardLogger(), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	addr := serve(t, s)
	hidden := "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"

	t.Run("HTTP/1.0 with Transfer-Encoding", func(t *testing.T) {
		// net/http ignores Transfer-Encoding on HTTP/1.0 and would read 4
		// bytes of body; a proxy reading the chunks sees one request.
		chunk := "88\r\n"
		req := "POST /v1/namespaces/demo/properties HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n" +
			"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk + hidden + "\r\n0\r\n\r\n"
		before := value(s.m.rejected.WithLabelValues(reasonTransferEncoding))
		answers := exchangeAll(t, addr, req)
		require.Len(t, answers, 1)
		assert.Equal(t, http.StatusBadRequest, answers[0].StatusCode)
		assert.True(t, answers[0].Close, "the connection is closed")
		assert.Equal(t, before+1, value(s.m.rejected.WithLabelValues(reasonTransferEncoding)))
	})
	t.Run("Content-Length and Transfer-Encoding", func(t *testing.T) {
		// net/http frames by the chunks; a proxy reading Content-Length
		// would take the rest as a second request of its own.
		req := "POST /v1/namespaces HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"2\r\n{}\r\n0\r\n\r\n" + hidden
		before := value(s.m.framingClosed)
		answers := exchangeAll(t, addr, req)
		require.Len(t, answers, 1, "served, then closed")
		assert.Equal(t, before+1, value(s.m.framingClosed))
		assert.Equal(t, http.StatusNoContent, answers[0].StatusCode)
		assert.True(t, answers[0].Close)
	})
	assert.Zero(t, ran.Load(), "no hidden request ran")

	// Framed one way only, requests keep their connection.
	answers := exchangeAll(t, addr, "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"+
		"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+hidden[:len(hidden)-2]+"Connection: close\r\n\r\n")
	require.Len(t, answers, 3)
	assert.Equal(t, int64(1), ran.Load(), "pipelined chunked requests all run")
}

// TestSniffingFindsHeaderNamesAcrossReads checks the seam between reads.
func TestSniffingFindsHeaderNamesAcrossReads(t *testing.T) {
	head := "POST / HTTP/1.1\r\nHost: x\r\ntRANSFER-Encoding: chunked\r\ncontent-length: 1\r\n\r\n"
	for cut := 1; cut < len(head); cut++ {
		var s framingSniffer
		s.sniff([]byte(head[:cut]))
		s.sniff([]byte(head[cut:]))
		assert.True(t, s.sawTE.Load(), "cut at %d", cut)
		assert.True(t, s.sawCL.Load(), "cut at %d", cut)
	}
	var s framingSniffer
	for _, b := range []byte(head) {
		s.sniff([]byte{b})
	}
	assert.True(t, s.sawTE.Load() && s.sawCL.Load(), "one byte a read")
	var none framingSniffer
	none.sniff([]byte("GET / HTTP/1.1\r\nHost: x\r\nX-Transfer-Encoding: y\r\n\r\n"))
	assert.False(t, none.sawTE.Load() || none.sawCL.Load())
}

// TestTargetsAndMethodsNoRouteServes checks the answers net/http's mux gave
// as an empty 400 or a plain-text 404, and the 417 net/http gives itself,
// are in the error model.
func TestTargetsAndMethodsNoRouteServes(t *testing.T) {
	s, err := New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}), Config{Outer: passThrough, Logger: discardLogger(), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	addr := serve(t, s)
	for _, tc := range []struct {
		name, req, typ string
		status         int
	}{
		{"asterisk target", "GET * HTTP/1.1\r\nHost: x\r\n\r\n", "BadRequestException", http.StatusBadRequest},
		{"HTTP/2 preface over plain HTTP", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "UnsupportedOperationException", http.StatusHTTPVersionNotSupported},
		{"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", "UnsupportedOperationException", http.StatusNotImplemented},
		{"an expectation other than 100-continue", "POST /v1/namespaces HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}",
			"BadRequestException", http.StatusExpectationFailed},
		{"the same over HTTP/1.0", "POST /v1/namespaces HTTP/1.0\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}",
			"BadRequestException", http.StatusExpectationFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawExchange(t, addr, tc.req)
			assert.Equal(t, tc.status, resp.StatusCode)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var e errorBody
			require.NoError(t, json.Unmarshal(body, &e), "body %q", body)
			assert.Equal(t, tc.status, e.Error.Code)
			assert.Equal(t, tc.typ, e.Error.Type)
			assert.NotEmpty(t, e.Error.Message)
		})
	}
}

// TestStalledReaderGivesUpItsSlot: a client that never reads a large
// answer holds its in-flight slot only until the write stall bound, while
// a client reading slowly but steadily gets the whole answer.
func TestStalledReaderGivesUpItsSlot(t *testing.T) {
	big := strings.Repeat("x", 16<<20) // beyond any socket buffers
	wrote := make(chan error, 4)
	s, err := New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/small" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		_, err := io.WriteString(w, big)
		wrote <- err
	}), Config{MaxInFlight: 1, WriteStallTimeout: time.Second, Logger: discardLogger(), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	addr := serve(t, s)

	stalled, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer stalled.Close()
	_, err = io.WriteString(stalled, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	select {
	case err := <-wrote:
		require.Error(t, err, "the write to a reader that reads nothing fails")
		assert.Equal(t, float64(1), value(s.m.stalled), "counted once")
	case <-time.After(30 * time.Second):
		t.Fatal("the handler's write never gave up")
	}
	status := statusOnceSlotFree(t, func() (*http.Response, error) { return http.Get("http://" + addr + "/small") })
	assert.Equal(t, http.StatusNoContent, status, "the slot is free again")

	// Slow but steady: 16 MiB read a chunk (64 KiB) at a time with pauses,
	// for longer than the bound in all, arrives whole. (The kernel wakes a
	// blocked writer only once a third of the socket's send buffer is
	// free, so the reader must drain that much within the bound.)
	slow, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer slow.Close()
	_, err = io.WriteString(slow, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReaderSize(slow, 1<<10), nil)
	require.NoError(t, err)
	got, buf := 0, make([]byte, 1<<20)
	for start := time.Now(); ; {
		n, err := resp.Body.Read(buf)
		got += n
		if err != nil {
			require.ErrorIs(t, err, io.EOF, "after %d bytes", got)
			break
		}
		if time.Since(start) < 3*time.Second {
			time.Sleep(10 * time.Millisecond)
		}
	}
	assert.Equal(t, len(big), got)
	assert.NoError(t, <-wrote)
}
