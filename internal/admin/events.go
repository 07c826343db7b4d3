package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floe-catalog/floe/fsm"
)

// EventSource is the local replica the change feed reads: the node's
// *fsm.FSM. Reading it directly is correct on every node, leader or not:
// the state machine applies committed entries only, and every replica
// records the same events under the same log indexes.
type EventSource interface {
	View(fn func(*fsm.Reader) error) error
	// Advanced returns a channel closed the next time the applied index
	// changes.
	Advanced() <-chan struct{}
}

var _ EventSource = (*fsm.FSM)(nil)

// Change feed defaults and bounds.
const (
	// reauthorizeEvery spaces a stream's checks that its caller may still
	// follow it (Config.Reauthorize): each is a read of the grants.
	reauthorizeEvery = time.Second
	// reauthorizeGrace is how long a stream goes on while its caller
	// cannot be checked again (Config.Reauthorize answers ErrUnavailable).
	reauthorizeGrace = 30 * time.Second
	// DefaultEventsHeartbeat is how often an idle stream gets a comment
	// line, so that proxies and clients see it alive.
	DefaultEventsHeartbeat = 15 * time.Second
	// DefaultEventsWriteTimeout bounds each 64 KiB written to a client
	// (sseChunk): a client that reads nothing for this long is dropped,
	// one that reads slowly is not, however large a page or an event.
	DefaultEventsWriteTimeout = 30 * time.Second
	defaultEventsPage         = 100
	maxEventsPage             = 1000
)

// EventsConfig configures the change feed.
type EventsConfig struct {
	// Heartbeat is the interval of keep-alive comments on an idle stream.
	// Default DefaultEventsHeartbeat.
	Heartbeat time.Duration
	// WriteTimeout bounds each write to a client. Default
	// DefaultEventsWriteTimeout.
	WriteTimeout time.Duration
	// Done, when closed, ends every stream: the server is shutting down
	// and must not wait for feed clients. Nil: streams end only when
	// their client goes away.
	Done <-chan struct{}
	// Registerer receives floe_change_feed_clients and
	// floe_change_feed_events_sent_total; nil: none.
	Registerer prometheus.Registerer
	// Linearize, when set, returns once this node's replica has applied
	// every entry the cluster had committed when it was called (a
	// linearizable read's barrier). A stream asked to start after an index
	// the replica has not reached then tells a lagging replica (it waits)
	// from a cursor this cluster never issued (410). Nil: it always waits.
	Linearize func(ctx context.Context) error
}

// linearizeTimeout bounds the barrier a stream with a cursor takes.
const linearizeTimeout = 5 * time.Second

type eventsAPI struct {
	src     EventSource
	cfg     EventsConfig
	srv     *Server
	clients prometheus.Gauge
	sent    prometheus.Counter
}

// Events returns the change feed:
//
//	GET /management/v1/events?after=INDEX&limit=N
//
// It streams (Server-Sent Events, text/event-stream) the committed catalog
// changes recorded after log index INDEX, read from this node's replica:
// any node serves it, a follower's feed may lag its leader's but never
// shows an entry that is not committed. Each event's data line is one JSON
// fsm.Event; the events of one log entry share its index, and the id line
// (the log index) comes with the last event of each entry, so a client's
// Last-Event-ID names the last entry it received whole. A Last-Event-ID
// header takes precedence over after (a reconnecting browser sends both);
// with neither, the stream starts at the oldest event kept. limit (default
// 100, at most 1000) bounds the events of one write; a write always ends
// on an entry boundary. An idle stream gets a comment line every
// Heartbeat. A cursor older than the events kept, or past every entry the
// cluster has committed (with Linearize), is answered 410 Gone in the
// error model; if retention overtakes a slow stream, it gets a "gone"
// event (data: the same error body) and ends. Either way the client must
// resync from the catalog and follow from a newer index.
func (s *Server) Events(src EventSource, cfg EventsConfig) http.Handler {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultEventsHeartbeat
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultEventsWriteTimeout
	}
	e := &eventsAPI{
		src: src, cfg: cfg, srv: s,
		clients: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floe_change_feed_clients", Help: "Change feed streams being served.",
		}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_change_feed_events_sent_total", Help: "Change feed events written to clients.",
		}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(e.clients, e.sent)
	}
	r := mux.NewRouter()
	r.Handle("/management/v1/events", s.wrap(e.stream)).Methods("GET")
	r.NotFoundHandler = s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("%w: no such route %s %s", ErrNotFound, r.Method, r.URL.Path)
	})
	r.MethodNotAllowedHandler = s.methodNotAllowed(r)
	return r
}

// feedCursor is where a stream starts: after log index after, or, with
// fromStart, at the oldest event kept.
type feedCursor struct {
	after     uint64
	fromStart bool
}

// parseFeedRequest reads the cursor (Last-Event-ID, else after) and the
// page size.
func parseFeedRequest(r *http.Request) (feedCursor, int, error) {
	cur := feedCursor{fromStart: true}
	q := r.URL.Query()
	// A misspelt cursor would otherwise read as none: the feed from its
	// oldest event.
	if err := onlyParams(q, "after", "limit"); err != nil {
		return cur, 0, err
	}
	for _, name := range []string{"after", "limit"} {
		if n := len(q[name]); n > 1 {
			// Which one the caller meant is unknown, as for purge-jobs.
			return cur, 0, fmt.Errorf("%w: %s given %d times: give it once", ErrBadRequest, name, n)
		}
	}
	raw, from := strings.TrimSpace(r.Header.Get("Last-Event-ID")), "Last-Event-ID"
	if raw == "" && q.Has("after") {
		raw, from = q.Get("after"), "after"
	}
	if raw != "" {
		n, err := strconv.ParseUint(raw, 10, 64)
		if err != nil {
			return cur, 0, fmt.Errorf("%w: %s must be a log index (a non-negative integer), not %q", ErrBadRequest, from, raw)
		}
		cur = feedCursor{after: n}
	} else if from == "after" {
		return cur, 0, fmt.Errorf("%w: after must be a log index (a non-negative integer)", ErrBadRequest)
	}
	limit := defaultEventsPage
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > maxEventsPage {
			return cur, 0, fmt.Errorf("%w: limit must be between 1 and %d, not %q", ErrBadRequest, maxEventsPage, q.Get("limit"))
		}
		limit = n
	}
	return cur, limit, nil
}

// read returns the next page after the cursor, whether more events follow,
// and the cursor after the page.
func (e *eventsAPI) read(cur feedCursor, limit int) (page []fsm.Event, more bool, _ feedCursor, err error) {
	err = e.src.View(func(r *fsm.Reader) error {
		if cur.fromStart {
			cur = feedCursor{after: r.EventHorizon()}
		}
		page, more, err = r.Events(cur.after, limit)
		return err
	})
	if err != nil {
		return nil, false, cur, err
	}
	if len(page) > 0 {
		cur.after = page[len(page)-1].Index
	}
	return page, more, cur, nil
}

// checkCursor refuses (410) a cursor past every entry the cluster has
// committed: it comes from another history of the log (a cluster restored
// from a backup older than the cursor, or another cluster), and waiting
// for the index would skip the new history's events below it. A cursor
// past only what this replica has applied is fine: the stream waits. When
// the barrier cannot be taken (no leader), the cursor is not judged.
func (e *eventsAPI) checkCursor(ctx context.Context, cur feedCursor) error {
	if cur.fromStart || e.cfg.Linearize == nil {
		return nil
	}
	var applied uint64
	if err := e.src.View(func(r *fsm.Reader) error { applied = r.AppliedIndex(); return nil }); err != nil || cur.after <= applied {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, linearizeTimeout)
	defer cancel()
	if err := e.cfg.Linearize(lctx); err != nil {
		return nil
	}
	if err := e.src.View(func(r *fsm.Reader) error { applied = r.AppliedIndex(); return nil }); err != nil || cur.after <= applied {
		return nil
	}
	return &statusError{http.StatusGone, "GoneException", fmt.Sprintf(
		"the cursor (after %d) is past every entry this cluster has committed (%d): it comes from another history of the log, such as a cluster restored from an older backup; resync from the catalog and follow from a newer index",
		cur.after, applied)}
}

func goneError(err error) *statusError {
	return &statusError{http.StatusGone, "GoneException", err.Error()}
}

func (e *eventsAPI) stream(w http.ResponseWriter, r *http.Request) error {
	cur, limit, err := parseFeedRequest(r)
	if err != nil {
		return err
	}
	if err := e.checkCursor(r.Context(), cur); err != nil {
		return err
	}
	// Taken before each read: an apply after the read closes it.
	changed := e.src.Advanced()
	page, more, cur, err := e.read(cur, limit)
	switch {
	case errors.Is(err, fsm.ErrEventsPruned):
		return goneError(err)
	case errors.Is(err, fsm.ErrClosed):
		return fmt.Errorf("%w: the node is shutting down", ErrUnavailable)
	case err != nil:
		return err
	}

	rc := http.NewResponseController(w)
	// The server's read timeout bounds reading a request; it must not end
	// a stream that has read its request long ago.
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	e.clients.Inc()
	defer e.clients.Dec()
	w.WriteHeader(http.StatusOK)
	out := &sseWriter{w: w, rc: rc, timeout: e.cfg.WriteTimeout}
	if err := out.flush(); err != nil {
		return nil
	}
	e.srv.log.Debug("change feed client connected", "remote", r.RemoteAddr, "after", cur.after)
	defer func() { e.srv.log.Debug("change feed client gone", "remote", r.RemoteAddr, "after", cur.after) }()

	// The caller was let in when the stream began; a long stream checks
	// again, at most once a reauthorizeEvery, before it sends more.
	var checked, tried time.Time
	stillAllowed := func() bool {
		if e.srv.cfg.Reauthorize == nil || time.Since(tried) < reauthorizeEvery {
			return true
		}
		tried = time.Now()
		err := e.srv.cfg.Reauthorize(r)
		switch {
		case err == nil:
			checked = tried
			return true
		case errors.Is(err, ErrUnavailable) && time.Since(checked) < reauthorizeGrace:
			// Nothing is known to have changed (no leader to read the
			// grants from, say): go on, and check again.
			return true
		case errors.Is(err, ErrUnavailable):
			e.srv.log.Info("change feed ended: its caller could not be checked again", "remote", r.RemoteAddr, "principal", e.srv.principal(r), "error", err)
			_ = out.end("unavailable", &statusError{http.StatusServiceUnavailable, "ServiceUnavailableException",
				"the change feed ended: its caller could not be checked again for " + reauthorizeGrace.String() + " (" + err.Error() + "); reconnect with Last-Event-ID"})
			return false
		default:
			e.srv.log.Info("change feed ended: its caller may no longer follow it", "remote", r.RemoteAddr, "principal", e.srv.principal(r), "error", err)
			_ = out.end("denied", &statusError{http.StatusForbidden, "ForbiddenException", "the change feed ended: " + err.Error()})
			return false
		}
	}
	checked, tried = time.Now(), time.Now() // the request was authorized just now

	heartbeat := time.NewTicker(e.cfg.Heartbeat)
	defer heartbeat.Stop()
	for {
		if len(page) > 0 {
			if !stillAllowed() {
				return nil
			}
			if err := out.events(page); err != nil {
				return nil // the client went away
			}
			e.sent.Add(float64(len(page)))
		}
		for !more {
			select {
			case <-changed:
				more = true // read again; the page may still be empty
			case <-heartbeat.C:
				if !stillAllowed() {
					return nil
				}
				if err := out.comment("heartbeat"); err != nil {
					return nil
				}
			case <-r.Context().Done():
				return nil
			case <-e.cfg.Done:
				return nil
			}
		}
		changed = e.src.Advanced()
		page, more, cur, err = e.read(cur, limit)
		switch {
		case errors.Is(err, fsm.ErrEventsPruned):
			_ = out.end("gone", goneError(err))
			return nil
		case err != nil:
			// The state machine closed (the node is stopping): the client
			// reconnects, here or elsewhere, with its Last-Event-ID.
			e.srv.log.Debug("change feed ends", "remote", r.RemoteAddr, "error", err)
			return nil
		}
	}
}

// sseWriter writes Server-Sent Events, each write bounded by timeout and
// flushed.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     []byte
}

// sseChunk is the most written under one deadline: the bound is on
// progress, so a page of large events (a namespace's properties reach
// 1 MiB) reaches a slow reader instead of failing at the same event on
// every reconnect.
const sseChunk = 64 << 10

func (s *sseWriter) flush() error {
	for p := s.buf; ; {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
		if len(p) == 0 {
			break
		}
		piece := p[:min(len(p), sseChunk)]
		if _, err := s.w.Write(piece); err != nil {
			return err
		}
		p = p[len(piece):]
	}
	s.buf = s.buf[:0]
	return s.rc.Flush()
}

// events writes a page of events, which ends on an entry boundary: the id
// line goes with the last event of each entry.
func (s *sseWriter) events(page []fsm.Event) error {
	for i, ev := range page {
		raw, err := json.Marshal(clientEvent(ev))
		if err != nil {
			return err
		}
		if i == len(page)-1 || page[i+1].Index != ev.Index {
			s.buf = fmt.Appendf(s.buf, "id: %d\n", ev.Index)
		}
		s.buf = append(s.buf, "data: "...)
		s.buf = append(s.buf, raw...)
		s.buf = append(s.buf, "\n\n"...)
	}
	return s.flush()
}

func (s *sseWriter) comment(text string) error {
	s.buf = append(s.buf, ": "+text+"\n\n"...)
	return s.flush()
}

// end writes the last event of a stream, named event, holding se in the
// Iceberg error model.
func (s *sseWriter) end(event string, se *statusError) error {
	raw, err := json.Marshal(map[string]any{"error": map[string]any{"message": se.msg, "type": se.typ, "code": se.status}})
	if err != nil {
		return err
	}
	s.buf = append(s.buf, "event: "+event+"\ndata: "...)
	s.buf = append(s.buf, raw...)
	s.buf = append(s.buf, "\n\n"...)
	return s.flush()
}

// feedEvent is an event as the feed shows it: the names of a named
// warehouse's namespaces, tables and views as clients write them, with the
// warehouse beside them.
type feedEvent struct {
	fsm.Event
	Warehouse string `json:"warehouse,omitempty"`
}

func clientEvent(ev fsm.Event) feedEvent {
	out := feedEvent{Event: ev}
	if ev.Namespace != nil {
		out.Warehouse, out.Namespace = fsm.SplitWarehouse(ev.Namespace)
	}
	for _, id := range []**fsm.Ident{&out.Ident, &out.To} {
		if *id == nil {
			continue
		}
		cp := **id
		out.Warehouse, cp.Namespace = fsm.SplitWarehouse(cp.Namespace)
		*id = &cp
	}
	return out
}
