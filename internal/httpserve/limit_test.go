package httpserve

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// blockingHandler answers /healthz at once and holds every other request
// until release is closed, announcing each on entered.
type blockingHandler struct {
	entered chan string
	release chan struct{}
}

func (h *blockingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		w.WriteHeader(http.StatusOK)
		return
	}
	h.entered <- r.URL.Path
	<-h.release
	w.WriteHeader(http.StatusOK)
}

func TestInFlightCapRefusesBeyondItAndSparesUncappedPaths(t *testing.T) {
	const max = 3
	h := &blockingHandler{entered: make(chan string, max), release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	s, err := New(h, Config{MaxInFlight: max, Uncapped: []string{"/healthz"}, Logger: discardLogger(), Registerer: reg})
	require.NoError(t, err)
	base := "http://" + serve(t, s)
	client := &http.Client{Timeout: 10 * time.Second}

	// Fill every slot with a request held in the handler.
	statuses := make(chan int, max)
	for range max {
		go func() {
			resp, err := client.Get(base + "/v1/held")
			if err != nil {
				statuses <- 0
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	for range max {
		<-h.entered
	}
	assert.Equal(t, float64(max), value(s.m.inFlight))

	// One more is refused at once, in the Iceberg error model.
	resp, err := client.Post(base+"/v1/namespaces", "application/json", strings.NewReader(`{"namespace":["db"]}`))
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var body struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(raw, &body), string(raw))
	assert.Equal(t, "ServiceUnavailableException", body.Error.Type)
	assert.Equal(t, http.StatusServiceUnavailable, body.Error.Code)
	assert.Contains(t, body.Error.Message, "maximum of 3 requests")

	// A HEAD gets the status without a body.
	head, err := client.Head(base + "/v1/namespaces/db")
	require.NoError(t, err)
	head.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, head.StatusCode)
	assert.Equal(t, "1", head.Header.Get("Retry-After"))

	// Health checks still pass, and are not counted.
	health, err := client.Get(base + "/healthz")
	require.NoError(t, err)
	health.Body.Close()
	assert.Equal(t, http.StatusOK, health.StatusCode)
	assert.Equal(t, float64(2), value(s.m.rejected.WithLabelValues(reasonInFlight)))
	assert.Equal(t, float64(max), value(s.m.inFlight))

	// Released, the held requests succeed and free their slots.
	close(h.release)
	for range max {
		assert.Equal(t, http.StatusOK, <-statuses)
	}
	resp, err = client.Get(base + "/v1/after")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "/v1/after", <-h.entered)
	assert.Equal(t, float64(0), value(s.m.inFlight))
	assert.Equal(t, float64(2), value(s.m.rejected.WithLabelValues(reasonInFlight)))
}

func TestNoCapWhenMaxInFlightIsZero(t *testing.T) {
	h := &blockingHandler{entered: make(chan string, 1), release: make(chan struct{})}
	close(h.release)
	s, err := New(h, Config{Logger: discardLogger()})
	require.NoError(t, err)
	resp, err := http.Get("http://" + serve(t, s) + "/v1/x")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, float64(0), value(s.m.inFlight), "uncounted without a cap")
}

func TestHeadersBeyondMaxHeaderBytesAre431(t *testing.T) {
	s, err := New(http.NotFoundHandler(), Config{MaxHeaderBytes: 1024, Logger: discardLogger()})
	require.NoError(t, err)
	addr := serve(t, s)

	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/config", nil)
	require.NoError(t, err)
	// net/http allows 4 KiB above MaxHeaderBytes; go well beyond.
	req.Header.Set("X-Big", strings.Repeat("a", 16<<10))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)

	small, err := http.Get("http://" + addr + "/v1/config")
	require.NoError(t, err)
	small.Body.Close()
	assert.Equal(t, http.StatusNotFound, small.StatusCode, "a request within the limit reaches the handler")
}

// TestReadTimeoutDoesNotBoundTheHandler pins down what DefaultReadTimeout's
// comment relies on: once the body has been read, the read deadline no
// longer applies, so a long handler (a synchronous purge) keeps its context.
func TestReadTimeoutDoesNotBoundTheHandler(t *testing.T) {
	const readTimeout = 50 * time.Millisecond
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		select {
		case <-r.Context().Done():
			w.WriteHeader(http.StatusGatewayTimeout) // the client would not see it
		case <-time.After(10 * readTimeout):
			w.WriteHeader(http.StatusNoContent)
		}
	})
	s, err := New(handler, Config{ReadTimeout: readTimeout, Logger: discardLogger()})
	require.NoError(t, err)
	addr := serve(t, s)

	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "DELETE /v1/t HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	line := make([]byte, len("HTTP/1.1 204"))
	_, err = io.ReadFull(conn, line)
	require.NoError(t, err)
	assert.Equal(t, "HTTP/1.1 204", string(line))
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"cert without key":     {CertFile: "c.pem"},
		"key without cert":     {KeyFile: "k.pem"},
		"negative timeout":     {ReadTimeout: -time.Second},
		"negative in-flight":   {MaxInFlight: -1},
		"negative header size": {MaxHeaderBytes: -1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(http.NotFoundHandler(), cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
}

// Wait reports handlers still running after Close cut their connections,
// capped or not, and returns once they have.
func TestWaitOutlastsCloseUntilHandlersReturn(t *testing.T) {
	for _, max := range []int{0, 4} {
		h := &blockingHandler{entered: make(chan string, 1), release: make(chan struct{})}
		s, err := New(h, Config{MaxInFlight: max, Logger: discardLogger(), Registerer: prometheus.NewRegistry()})
		require.NoError(t, err)
		base := "http://" + serve(t, s)
		go func() {
			if resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(base + "/v1/held"); err == nil {
				resp.Body.Close()
			}
		}()
		select {
		case <-h.entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("max %d: the request never reached the handler", max)
		}
		require.NoError(t, s.Close())

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		assert.ErrorIs(t, s.Wait(ctx), context.DeadlineExceeded, "max %d: the handler is still running", max)
		cancel()
		close(h.release)
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		assert.NoError(t, s.Wait(ctx), "max %d", max)
		cancel()
	}
}

// A client trickling its body loses the connection once the body falls
// behind the minimum rate, and its slot is free again; a body sent at
// once is read as before.
func TestTricklingBodyGivesUpItsSlot(t *testing.T) {
	oldRate, oldGrace := minBodyRate, bodyGrace
	minBodyRate, bodyGrace = 100, 300*time.Millisecond
	t.Cleanup(func() { minBodyRate, bodyGrace = oldRate, oldGrace })
	reads := make(chan error, 2)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		reads <- err
		w.WriteHeader(http.StatusNoContent)
	})
	s, err := New(h, Config{MaxInFlight: 1, ReadTimeout: time.Minute, Logger: discardLogger(), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	addr := serve(t, s)

	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /v1/namespaces HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
	require.NoError(t, err)
	var readErr error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if _, err := io.WriteString(conn, "x"); err != nil {
			break
		}
		select {
		case readErr = <-reads:
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	require.Error(t, readErr, "the trickled body was cut off (the whole-request limit is a minute)")

	// The handler frees its slot a moment after it reports the read.
	status := statusOnceSlotFree(t, func() (*http.Response, error) {
		return http.Post("http://"+addr+"/v1/namespaces", "application/json", strings.NewReader(`{"namespace":["a"]}`))
	})
	assert.Equal(t, http.StatusNoContent, status, "the slot is free again")
	assert.NoError(t, <-reads)
}

// The grace runs from the handler's first read: a handler that works
// longer than the grace before it reads (a follower catching up before
// its linearizable read) still reads a body its client sent promptly.
// Counted from the slot, the first read failed at once and the client got
// 400 "the body did not arrive in time".
func TestServerWaitBeforeReadingIsNotTheClients(t *testing.T) {
	oldRate, oldGrace := minBodyRate, bodyGrace
	minBodyRate, bodyGrace = 100, 300*time.Millisecond
	t.Cleanup(func() { minBodyRate, bodyGrace = oldRate, oldGrace })
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(4 * bodyGrace) // the server's own wait
		if _, err := io.ReadAll(r.Body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	s, err := New(h, Config{MaxInFlight: 4, ReadTimeout: time.Minute, Logger: discardLogger(), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	addr := serve(t, s)

	// Headers first, the body a moment later (as a client waiting for
	// "100 Continue" does): not yet buffered when the handler reads.
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\n")
	require.NoError(t, err)
	time.Sleep(2 * bodyGrace)
	_, err = io.WriteString(conn, `{"a":1}`)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
}

// Once the body has ended, reading it again (as a handler replaying it
// through a MultiReader does) sets no deadline: net/http reads on in the
// background then, and a deadline firing there would cancel the request's
// context while the handler still works.
func TestReadingPastTheBodyEndKeepsTheRequestAlive(t *testing.T) {
	oldRate, oldGrace := minBodyRate, bodyGrace
	// A body of 1500 bytes read at once: the deadline for the next
	// read, were one set, lies 1.6 s after the start.
	minBodyRate, bodyGrace = 1000, 100*time.Millisecond
	t.Cleanup(func() { minBodyRate, bodyGrace = oldRate, oldGrace })
	ctxErr := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		_, _ = io.ReadAll(r.Body) // again, after the end
		time.Sleep(2 * time.Second)
		ctxErr <- r.Context().Err()
		w.WriteHeader(http.StatusNoContent)
	})
	s, err := New(h, Config{MaxInFlight: 4, ReadTimeout: time.Minute, Logger: discardLogger(), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	addr := serve(t, s)
	resp, err := http.Post("http://"+addr+"/x", "application/json", strings.NewReader(strings.Repeat(" ", 1490)+`{"a":1}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.NoError(t, <-ctxErr, "the request's context was not cancelled")
}

// A request sent with "Expect: 100-continue" that the handler refuses
// without reading its body gets the refusal at once, and no 100: the
// client never has to send the body.
func TestExpectContinueRefusedAtOnce(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	})
	s, err := New(h, Config{MaxInFlight: 4, ReadTimeout: time.Minute, Logger: discardLogger(), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	addr := serve(t, s)
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /v1/namespaces HTTP/1.1\r\nHost: x\r\nContent-Length: 9000000\r\nExpect: 100-continue\r\n\r\n")
	require.NoError(t, err)
	// Bounds a hang only: the answer is due without any body sent.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)))
	line, err := bufio.NewReader(conn).ReadString('\n')
	require.NoError(t, err, "no answer before any body was sent")
	assert.Equal(t, "HTTP/1.1 403 Forbidden\r\n", line)
}

// A request declaring a body it never sends, to a handler that answers
// without reading it, gets the answer at once on a connection then closed:
// net/http would otherwise wait for the body (to keep the connection)
// until the whole-request ReadTimeout before answering. A body read to its
// end keeps the connection.
func TestAnswerBeforeTheBodyClosesInsteadOfWaiting(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/read" {
			_, _ = io.Copy(io.Discard, r.Body)
		}
		if r.URL.Path != "/silent" { // answered by net/http: an empty 200
			w.WriteHeader(http.StatusOK)
		}
	})
	s, err := New(h, Config{MaxInFlight: 4, ReadTimeout: 5 * time.Minute, Logger: discardLogger(), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	addr := serve(t, s)
	for _, path := range []string{"/v1/config", "/silent"} {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
		require.NoError(t, err)
		// Bounds a hang only: the answer is due without the body.
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err, "no answer without the body")
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.True(t, resp.Close, "the connection is closed after it: %s", path)
		// Closed at once, not once the ReadTimeout has passed.
		_, err = br.ReadByte()
		assert.ErrorIs(t, err, io.EOF, "the server kept the connection open: %s", path)
	}

	conn2, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn2.Close()
	_, err = io.WriteString(conn2, "POST /read HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
	require.NoError(t, err)
	require.NoError(t, conn2.SetReadDeadline(time.Now().Add(20*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn2), nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.False(t, resp.Close, "a body read to its end keeps the connection")
}

// The cap's own 503 to a request declaring a body it never sends comes at
// once, on a connection then closed, not after waiting for the body.
func TestCapRefusalDoesNotWaitForTheBody(t *testing.T) {
	h := &blockingHandler{entered: make(chan string, 1), release: make(chan struct{})}
	s, err := New(h, Config{MaxInFlight: 1, ReadTimeout: 5 * time.Minute, Logger: discardLogger(), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	addr := serve(t, s)
	defer close(h.release)
	go func() {
		if resp, err := http.Get("http://" + addr + "/v1/held"); err == nil {
			resp.Body.Close()
		}
	}()
	<-h.entered
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /v1/namespaces HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second))) // bounds a hang only
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err, "no answer without the body")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.True(t, resp.Close)
	// Closed at once, not once the ReadTimeout has passed.
	_, err = br.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "the server kept the connection open")
}
