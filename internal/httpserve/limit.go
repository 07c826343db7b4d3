package httpserve

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"time"
)

// limiter caps the requests served at once. A request beyond the cap is
// answered 503 with Retry-After: 1 and an Iceberg error body, without
// waiting: a client retries after a second, or on another node, instead of
// queueing on this one. Requests for the uncapped paths always pass and are
// not counted.
type limiter struct {
	next     http.Handler
	max      int           // 0: no cap
	slots    chan struct{} // one element per request being served
	uncapped []string
	m        *metrics
	// readTimeout is the server's whole-request ReadTimeout (0: none).
	readTimeout time.Duration
	// writeStall bounds how long an answer may stand still (stallWriter;
	// 0: no bound); writeTimeout is the server's whole-answer
	// WriteTimeout (0: none).
	writeStall, writeTimeout time.Duration
	// running counts every request in a handler, capped or not.
	running atomic.Int64
}

func newLimiter(next http.Handler, max int, uncapped []string, readTimeout, writeStall, writeTimeout time.Duration, m *metrics) *limiter {
	l := &limiter{next: next, max: max, uncapped: slices.Clone(uncapped), readTimeout: readTimeout,
		writeStall: writeStall, writeTimeout: writeTimeout, m: m}
	if max > 0 {
		l.slots = make(chan struct{}, max)
	}
	return l
}

func (l *limiter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.running.Add(1)
	defer l.running.Add(-1)
	w = l.stallBound(w)
	if l.slots == nil || slices.Contains(l.uncapped, r.URL.Path) {
		l.next.ServeHTTP(w, r)
		return
	}
	select {
	case l.slots <- struct{}{}:
	default:
		l.m.rejected.WithLabelValues(reasonInFlight).Inc()
		if r.ProtoMajor == 1 && r.Body != nil && r.Body != http.NoBody {
			// Unread, as closeUnread below: answered now, not after
			// waiting for a body that may never come.
			w.Header().Set("Connection", "close")
		}
		writeUnavailable(w, r, fmt.Sprintf("this node is serving its maximum of %d requests; retry shortly or on another node", l.max))
		if r.ProtoMajor == 1 && r.Body != nil && r.Body != http.NoBody {
			endUnreadBody(http.NewResponseController(w))
		}
		return
	}
	l.m.inFlight.Inc()
	defer func() {
		l.m.inFlight.Dec()
		<-l.slots
	}()
	if r.Body != nil && r.Body != http.NoBody {
		b := &rateBody{ReadCloser: r.Body, rc: http.NewResponseController(w)}
		if l.readTimeout > 0 {
			b.limit = time.Now().Add(l.readTimeout)
		}
		// On a copy: net/http looks at the body of the request it passed
		// in once the handler returns, by its type, to tell whether a
		// client waiting for "100 Continue" got it. Another body there
		// made it withhold the 100 and read up to 256 KiB of a body the
		// handler refused before answering, so a client sending
		// "Expect: 100-continue" waited for its own timeout.
		r = r.WithContext(r.Context())
		r.Body = b
		if r.ProtoMajor == 1 {
			cu := &closeUnread{ResponseWriter: w, body: b}
			defer func() {
				if !b.ended.Load() {
					// An answer not written yet (the handler wrote
					// nothing) closes the connection too.
					cu.answering(http.StatusOK)
					endUnreadBody(b.rc)
				}
			}()
			w = cu
		}
	}
	l.next.ServeHTTP(w, r)
}

// endUnreadBody ends, at once, the read net/http makes once a handler has
// returned of what is left of a request's body (up to 256 KiB of a
// declared length), which it makes even when the answer closes the
// connection: for a body declared but never sent, it held the connection
// and its goroutine until the whole-request ReadTimeout (minutes) after
// the answer had gone. Call it only once the handler has returned and the
// answer closes the connection (closeUnread), which then closes at once.
func endUnreadBody(conn *http.ResponseController) {
	_ = conn.SetReadDeadline(time.Now())
}

// stallBound wraps w in a stallWriter, unless the bound is off.
func (l *limiter) stallBound(w http.ResponseWriter) http.ResponseWriter {
	if l.writeStall <= 0 {
		return w
	}
	// The connection starts each request without a write deadline (net/http
	// lifts it after every answer; with a WriteTimeout it sets its own as
	// it reads the request), so what net/http writes before this answer's
	// first write (a "100 Continue") is not cut off by the previous one's.
	s := &stallWriter{ResponseWriter: w, rc: http.NewResponseController(w), stall: l.writeStall, stalled: l.m.stalled}
	if l.writeTimeout > 0 {
		s.limit = time.Now().Add(l.writeTimeout)
	}
	return s
}

// closeUnread closes the connection after an answer sent before the
// request's body was read to its end (a route that takes no body, a
// refusal before reading). net/http would otherwise read the rest of the
// body before sending the answer, to keep the connection: for a body
// declared but never sent, until the whole-request ReadTimeout (minutes),
// holding the answer, the connection and its goroutine all that time.
// Once the handler has returned, endUnreadBody ends the read net/http
// still makes after such an answer.
type closeUnread struct {
	http.ResponseWriter
	body  *rateBody
	wrote bool
}

func (c *closeUnread) WriteHeader(code int) {
	c.answering(code)
	c.ResponseWriter.WriteHeader(code)
}

func (c *closeUnread) Write(p []byte) (int, error) {
	c.answering(http.StatusOK)
	return c.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (c *closeUnread) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *closeUnread) answering(code int) {
	if c.wrote || code < 200 {
		return
	}
	c.wrote = true
	if !c.body.ended.Load() {
		c.Header().Set("Connection", "close")
	}
}

// A request holds its slot while its body arrives, so a client trickling
// a body (a byte every few seconds, within the whole-request ReadTimeout)
// held a slot for minutes, and about --http-max-in-flight such
// connections took every slot. Once it has a slot, a body must arrive at
// minBodyRate on average after a grace of bodyGrace: 8 MiB within about
// 9 minutes, far slower than any client on a working link. A body that
// falls behind fails the read with a timeout (HTTP/1.1 then closes the
// connection; HTTP/2 fails the stream's body). Variables for tests.
var (
	minBodyRate = 16 << 10 // bytes per second
	bodyGrace   = 10 * time.Second
)

// rateBody moves the connection's read deadline before each read of the
// body to the moment the bytes received so far stop being enough. The
// whole-request ReadTimeout still applies: the deadline is not moved past
// it (counted from when the request got its slot, a little after the
// server's own count began). The grace and the rate count from the
// handler's first read. Once the body has been read to its end, net/http lifts the
// read deadline itself.
type rateBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	start    time.Time // the handler's first read
	limit    time.Time // the ReadTimeout's deadline; zero: none
	set      time.Time // the deadline last set
	received int64
	// done: the body ended (or failed). net/http then lifts the read
	// deadline and reads on in the background to notice a closed
	// connection; a deadline set after that would fire there and cancel
	// the request's context mid-handler (a handler may read its body
	// again after the end, as a MultiReader replaying it does).
	done bool
	// ended is done for the answer's writer (closeUnread), which a
	// handler may use from another goroutine than its reads.
	ended atomic.Bool
}

func (b *rateBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	if b.start.IsZero() {
		// The grace runs from the handler's first read, not from the
		// slot: what the server does before it reads (a linearizable read
		// on a follower catching up, which waits as long as its log moves)
		// is not the client's time. Counted from the slot, a follower that
		// waited past the grace failed the first read at once and answered
		// 400 "the body did not arrive in time" to a client that had sent
		// it promptly.
		b.start = time.Now()
	}
	due := b.start.Add(bodyGrace + time.Duration(float64(b.received+1)/float64(minBodyRate)*float64(time.Second)))
	if !b.limit.IsZero() && due.After(b.limit) {
		due = b.limit
	}
	// Moved only by a second or more: on HTTP/2 each move is a message
	// to the connection's loop. A deadline up to a second early is the
	// cost.
	if b.set.IsZero() || due.Sub(b.set) >= time.Second {
		_ = b.rc.SetReadDeadline(due)
		b.set = due
	}
	n, err := b.ReadCloser.Read(p)
	b.received += int64(n)
	if err != nil {
		b.done = true
		b.ended.Store(true)
	}
	return n, err
}

// errorBody is the Iceberg REST error model.
type errorBody struct {
	Error errorModel `json:"error"`
}

type errorModel struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
}

// writeUnavailable answers 503 ServiceUnavailableException, Retry-After: 1.
// A HEAD request gets the status and headers only.
func writeUnavailable(w http.ResponseWriter, r *http.Request, msg string) {
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(errorBody{Error: errorModel{
		Message: msg, Type: "ServiceUnavailableException", Code: http.StatusServiceUnavailable,
	}})
}
