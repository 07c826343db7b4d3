package purge

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floe-catalog/floe/fsm"
)

// errUnrenewed fails a delete batch whose run could not show a recent
// renewal of its lease: the leader may have given it to another node.
var errUnrenewed = errors.New("no heartbeat of this node renewed the job's lease recently; it may have been reassigned")

// renewals records, per lease token of a run on this node, when the last
// heartbeat that renewed it was sent (by this process's monotonic clock),
// and which tokens a heartbeat found taken away; it wakes those waiting
// for the next heartbeat.
type renewals struct {
	mu   sync.Mutex
	live map[uint64]bool // tokens of runs under way here (track, forget)
	sent map[uint64]time.Time
	lost map[uint64]bool
	next chan struct{} // closed at the next heartbeat checked
}

func newRenewals() *renewals {
	return &renewals{live: map[uint64]bool{}, sent: map[uint64]time.Time{}, lost: map[uint64]bool{}, next: make(chan struct{})}
}

// track starts recording renewals of a run's token; forget ends it. A
// heartbeat checked after its run ended records nothing for it.
func (rw *renewals) track(token uint64) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.live[token] = true
}

// checked records a heartbeat sent at sent that the log accepted, after
// which the tokens in held were still this node's and those in lost were
// not.
func (rw *renewals) checked(sent time.Time, held, lost []uint64) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	for _, t := range held {
		if rw.live[t] && sent.After(rw.sent[t]) {
			rw.sent[t] = sent
		}
	}
	for _, t := range lost {
		if rw.live[t] {
			rw.lost[t] = true
		}
	}
	close(rw.next)
	rw.next = make(chan struct{})
}

func (rw *renewals) of(token uint64) (sent time.Time, lost bool, next <-chan struct{}) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.sent[token], rw.lost[token], rw.next
}

// forget drops what is known of a token whose run ended.
func (rw *renewals) forget(token uint64) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	delete(rw.live, token)
	delete(rw.sent, token)
	delete(rw.lost, token)
}

// heldLeases returns, of leases, the tokens still leased to node in rd and
// those that are not.
func heldLeases(rd *fsm.Reader, node string, leases []fsm.LeaseRef) (held, lost []uint64) {
	for _, l := range leases {
		if j, ok := rd.PurgeJob(l.JobID); ok && j.State == fsm.JobRunning && j.Lease != nil && j.Lease.Node == node && j.Lease.Token == l.Token {
			held = append(held, l.Token)
		} else {
			lost = append(lost, l.Token)
		}
	}
	return held, lost
}

// fence returns the context a delete batch of the run holding token is
// sent under. The leader reassigns a lease only once it has seen no
// heartbeat of the node for a whole heartbeat timeout, by its own clock,
// and only if the node's heartbeat row has not moved since it saw it
// silent (fsm.AssignPurgeLease.SilentIndex); so a heartbeat that applied
// while this node still held the lease (checked by a linearizable read
// after it) keeps the lease this node's until a timeout after the
// heartbeat was sent. fence waits until such a heartbeat for token was sent
// less than half a timeout ago (asking for one at once; at most a timeout,
// then errUnrenewed), and the context it returns ends three quarters of a
// timeout after that heartbeat's sending. A process paused with batches
// queued or in hand (SIGSTOP, a long stall) finds its renewal old when it
// runs again and waits for a heartbeat, which finds the lease gone: the
// batch fails as stale, unsent. A heartbeat that found the token lost
// fails it at once.
//
// A service that was never started sends no heartbeats (a catalog's private
// one, for a catalog used alone): it has no fence, and its leases are
// renewed by nothing.
func (s *Service) fence(ctx context.Context, token uint64) (*fenced, context.CancelFunc, error) {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if !started {
		f := fencedUntil(ctx, time.Time{})
		return f, f.stop, nil
	}
	timeout := s.cfg.HeartbeatTimeout
	wait := time.NewTimer(timeout)
	defer wait.Stop()
	asked := false
	for {
		sent, lost, next := s.renewals.of(token)
		if lost {
			return nil, nil, fmt.Errorf("%w: a heartbeat found lease token %d no longer this node's", errStale, token)
		}
		if !sent.IsZero() && time.Since(sent) < timeout/2 {
			f := fencedUntil(ctx, sent.Add(timeout*3/4))
			return f, f.stop, nil
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

// fenced is the context of one fenced send. At its deadline it is cancelled
// unless a request sent under it has been written whole and awaits its
// answer: cutting that one off would delete nothing less (storage acts on
// a whole request), only fail a batch that succeeded, and a store slower
// than the margin would then fail every batch. A request not yet written
// whole is cut off (storage never acts on part of one), and so is any
// attempt begun after the deadline (GetConn: the SDK's retries).
type fenced struct {
	context.Context
	cancel   context.CancelFunc
	deadline time.Time   // zero: none
	timer    *time.Timer // nil: no deadline
	expired  atomic.Bool
	awaiting atomic.Int32 // requests written whole, their answers not begun
}

// fencedUntil returns a fenced context of parent with the deadline; a zero
// deadline is none.
func fencedUntil(parent context.Context, deadline time.Time) *fenced {
	f := &fenced{deadline: deadline}
	ctx, cancel := context.WithCancel(parent)
	f.cancel = cancel
	f.Context = ctx
	if deadline.IsZero() {
		return f
	}
	f.Context = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn: func(string) {
			if f.expired.Load() {
				cancel()
			}
		},
		WroteRequest:         func(httptrace.WroteRequestInfo) { f.awaiting.Add(1) },
		GotFirstResponseByte: func() { f.awaiting.Add(-1) },
	})
	f.timer = time.AfterFunc(time.Until(deadline), func() {
		f.expired.Store(true)
		if f.awaiting.Load() <= 0 {
			cancel()
		}
	})
	return f
}

// cutOff reports whether the deadline passed: an error of what was sent
// under f may be the deadline's.
func (f *fenced) cutOff() bool { return f.expired.Load() }

func (f *fenced) stop() {
	if f.timer != nil {
		f.timer.Stop()
	}
	f.cancel()
}
