package httpserve

import (
	"errors"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// stallChunk is the most an answer writes under one write deadline: a
// large answer is written in pieces of this size, each with a deadline of
// its own, so that the bound is on progress (a client that reads slowly
// still gets a large answer), not on the whole answer.
const stallChunk = 64 << 10

// stallWriter bounds how long an answer may stand still. Before each piece
// of the answer is written (and before the status line), the connection's
// write deadline is moved to now plus stall: a client that stops reading
// then fails the handler's write after stall, and the handler returns and
// gives back its in-flight slot. Without it a client that never read a
// large answer held its slot, and its goroutine, for as long as it kept
// the connection open: the write side of what rateBody bounds on the read
// side.
//
// The deadline is not moved past limit, the server's whole-answer
// WriteTimeout when one is set. A handler that sets a deadline of its own
// (http.ResponseController.SetWriteDeadline) keeps it: the change feed
// bounds each event its own way. A handler that clears the deadline (a
// backup, longer than any WriteTimeout) lifts the whole-answer limit but
// still gets the bound on progress.
type stallWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController // of the wrapped writer
	stall time.Duration
	limit time.Time // WriteTimeout's deadline; zero: none
	set   time.Time // the deadline last set
	own   bool      // the handler set a deadline of its own
	// stalled counts, once, an answer the bound cut off.
	stalled prometheus.Counter
	counted bool
}

func (s *stallWriter) WriteHeader(code int) {
	s.progress()
	s.ResponseWriter.WriteHeader(code)
}

// Write writes p in pieces of at most stallChunk bytes, each under a
// deadline of its own.
func (s *stallWriter) Write(p []byte) (int, error) {
	written := 0
	for {
		s.progress()
		piece := p[:min(len(p), stallChunk)]
		n, err := s.ResponseWriter.Write(piece)
		written += n
		p = p[n:]
		if err != nil && !s.own && !s.counted && errors.Is(err, os.ErrDeadlineExceeded) {
			s.counted = true
			s.stalled.Inc()
		}
		if err != nil || len(p) == 0 {
			return written, err
		}
	}
}

// SetWriteDeadline is what http.ResponseController calls on this writer:
// the handler's own deadline replaces the stall bound, and a zero one
// brings the stall bound back without the whole-answer limit.
func (s *stallWriter) SetWriteDeadline(t time.Time) error {
	s.own = !t.IsZero()
	s.limit, s.set = time.Time{}, time.Time{}
	return s.rc.SetWriteDeadline(t)
}

// Unwrap lets http.ResponseController reach the connection's writer
// (Flush, SetReadDeadline).
func (s *stallWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *stallWriter) progress() {
	if s.own {
		return
	}
	due := time.Now().Add(s.stall)
	if !s.limit.IsZero() && due.After(s.limit) {
		due = s.limit
	}
	// Moved only by a second or more (an eighth of a shorter bound), as
	// rateBody's read deadline: on HTTP/2 each move is a message to the
	// connection's loop.
	if s.set.IsZero() || due.Sub(s.set) >= min(time.Second, s.stall/8) {
		_ = s.rc.SetWriteDeadline(due)
		s.set = due
	}
}
