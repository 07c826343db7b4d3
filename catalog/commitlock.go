package catalog

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/floe-catalog/floe/fsm"
)

// commitLocks serialises, on one node, the commits to each table or view:
// a commit holds its names' locks from reading the current metadata to the
// answer of its proposal. Concurrent commits to one table through one node
// otherwise all build on the same version, all but one lose the
// compare-and-set, and a burst of them used up every retry within
// milliseconds (409 for commits without requirements). Commits through
// other nodes still race; they back off between attempts (retryWait).
type commitLocks struct {
	mu    sync.Mutex
	locks map[string]*commitLock
}

type commitLock struct {
	held chan struct{} // one element while the lock is held
	refs int           // holders and waiters
}

// lockKey names a table or view by its levels and name, as one string no
// two identifiers share.
func lockKey(id fsm.Ident) string {
	return strings.Join(id.Namespace, "\x1f") + "\x00" + id.Name
}

// commitTurnWait bounds how long a commit waits for its turn. Turns only
// spare attempts bound to lose (the compare-and-set keeps commits
// correct), so a commit that has waited this long goes ahead without its
// turn: when the one before it is slow (no leader, storage stalling), the
// commits queued behind it each wait at most this long, not one such wait
// per commit ahead of it.
const commitTurnWait = 2 * time.Second

// lock takes the locks of ids, in one order for every caller (so two
// transactions over the same tables cannot deadlock), and returns the
// function that releases them. A lock not taken within commitTurnWait is
// gone without (timedOut), as are the ones after it. It gives up with
// ctx's error, holding nothing.
func (l *commitLocks) lock(ctx context.Context, ids ...fsm.Ident) (release func(), timedOut bool, err error) {
	keys := make([]string, 0, len(ids))
	for _, id := range ids {
		keys = append(keys, lockKey(id))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	var held []string
	release = func() {
		for _, k := range held {
			l.release(k)
		}
	}
	turn := time.NewTimer(commitTurnWait)
	defer turn.Stop()
	for _, k := range keys {
		cl := l.ref(k)
		select {
		case cl.held <- struct{}{}:
			held = append(held, k)
		case <-turn.C:
			l.unref(k)
			return release, true, nil
		case <-ctx.Done():
			l.unref(k)
			release()
			return nil, false, ctx.Err()
		}
	}
	return release, false, nil
}

func (l *commitLocks) ref(k string) *commitLock {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.locks == nil {
		l.locks = map[string]*commitLock{}
	}
	cl := l.locks[k]
	if cl == nil {
		cl = &commitLock{held: make(chan struct{}, 1)}
		l.locks[k] = cl
	}
	cl.refs++
	return cl
}

func (l *commitLocks) unref(k string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cl := l.locks[k]; cl != nil {
		if cl.refs--; cl.refs == 0 {
			delete(l.locks, k)
		}
	}
}

func (l *commitLocks) release(k string) {
	l.mu.Lock()
	cl := l.locks[k]
	l.mu.Unlock()
	<-cl.held
	l.unref(k)
}

// Backoff between the attempts of a commit that lost its compare-and-set to
// a commit through another node: a random wait below a bound that doubles
// from retryWaitMin up to retryWaitMax ("full jitter"), so that racing
// nodes spread out instead of meeting again. With the default 10 retries
// the waits add up to at most about 1 s.
const (
	retryWaitMin = 2 * time.Millisecond
	retryWaitMax = 250 * time.Millisecond
)

// retryWait waits before retry attempt+1, or returns ctx's error.
func retryWait(ctx context.Context, attempt int) error {
	bound := retryWaitMax
	if attempt < 8 {
		bound = min(retryWaitMax, retryWaitMin<<attempt)
	}
	t := time.NewTimer(rand.N(bound) + 1)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
