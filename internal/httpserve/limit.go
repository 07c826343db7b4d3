package httpserve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
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
	// running counts every request in a handler, capped or not.
	running atomic.Int64
}

func newLimiter(next http.Handler, max int, uncapped []string, m *metrics) *limiter {
	l := &limiter{next: next, max: max, uncapped: slices.Clone(uncapped), m: m}
	if max > 0 {
		l.slots = make(chan struct{}, max)
	}
	return l
}

func (l *limiter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.running.Add(1)
	defer l.running.Add(-1)
	if l.slots == nil || slices.Contains(l.uncapped, r.URL.Path) {
		l.next.ServeHTTP(w, r)
		return
	}
	select {
	case l.slots <- struct{}{}:
	default:
		l.m.rejected.WithLabelValues(reasonInFlight).Inc()
		writeUnavailable(w, r, fmt.Sprintf("this node is serving its maximum of %d requests; retry shortly or on another node", l.max))
		return
	}
	l.m.inFlight.Inc()
	defer func() {
		l.m.inFlight.Dec()
		<-l.slots
	}()
	l.next.ServeHTTP(w, r)
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
