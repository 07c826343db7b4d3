package purge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// errUnrenewed fails a delete batch whose run could not show a recent
// heartbeat: the leader may have given its lease to another node.
var errUnrenewed = errors.New("no heartbeat of this node accepted recently; its leases may have been reassigned")

// renewals records when this node's last accepted heartbeat was sent, by
// this process's monotonic clock, and wakes those waiting for the next.
type renewals struct {
	mu   sync.Mutex
	sent time.Time     // zero until a heartbeat is accepted
	next chan struct{} // closed at the next accepted heartbeat
}

func newRenewals() *renewals { return &renewals{next: make(chan struct{})} }

// accepted records a heartbeat sent at sent that the log accepted.
func (rw *renewals) accepted(sent time.Time) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if sent.After(rw.sent) {
		rw.sent = sent
	}
	close(rw.next)
	rw.next = make(chan struct{})
}

func (rw *renewals) last() (time.Time, <-chan struct{}) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.sent, rw.next
}

// fence returns the context a delete batch of a run is sent under. The
// leader reassigns a node's leases only once it has seen no heartbeat of
// the node move for a whole heartbeat timeout, by its own clock, which
// starts no earlier than the heartbeat was sent here. So fence waits until
// a heartbeat the log accepted was sent less than half a timeout ago
// (asking for one at once; at most a timeout, then errUnrenewed), and the
// context it returns ends three quarters of a timeout after that
// heartbeat's sending. A batch is therefore sent while the lease still
// holds, even by a process that was paused (SIGSTOP, a long stall) with the
// batch queued or in hand: on waking it finds its heartbeat old and waits
// for a new one, which the log no longer accepts as a renewal of a lease
// taken from it (the run then stops as stale), and a request cut off by the
// deadline is never whole, so storage never acts on it. The time between
// the deadline and the reassignment is the margin for the request's
// transit.
//
// A service that was never started sends no heartbeats (a catalog's private
// one, for a catalog used alone): it has no fence, and its leases are
// renewed by nothing.
func (s *Service) fence(ctx context.Context) (context.Context, context.CancelFunc, error) {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if !started {
		fctx, cancel := context.WithCancel(ctx)
		return fctx, cancel, nil
	}
	timeout := s.cfg.HeartbeatTimeout
	wait := time.NewTimer(timeout)
	defer wait.Stop()
	asked := false
	for {
		sent, next := s.renewals.last()
		if !sent.IsZero() && time.Since(sent) < timeout/2 {
			fctx, cancel := context.WithDeadline(ctx, sent.Add(timeout*3/4))
			return fctx, cancel, nil
		}
		if !asked {
			asked = true
			select {
			case s.renew <- struct{}{}:
			default:
			}
		}
		select {
		case <-next:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-wait.C:
			s.m.unrenewed.Inc()
			return nil, nil, fmt.Errorf("%w (heartbeat timeout %s)", errUnrenewed, timeout)
		}
	}
}
