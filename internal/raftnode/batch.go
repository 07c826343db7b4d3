package raftnode

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// indexBatcher coalesces concurrent read-index requests: all reads that
// arrive while one request is in flight share the next one. A read must use a
// read index obtained by a request that started after the read arrived, so a
// read never joins a request already in flight; it waits for the next.
// Under load this turns one leader round trip (and one quorum heartbeat) per
// read into one per batch. There is no timed window: a read that finds no
// request in flight starts one at once, so an idle node adds no latency, and
// the round trip in flight is the window in which the next batch gathers.
//
// A fetch may send more than one request (a follower asks again when the
// leader changed or did not answer in time). Before each new request it
// calls renew, which moves the reads waiting for the next fetch into the one
// in flight: that request starts after they arrived, so they may share it,
// and none of them waits behind a request stuck on a silent leader.
//
// The fetching goroutine runs only while reads wait. close stops it: the
// node's Shutdown cancels stop (which ends a fetch in flight) and then calls
// close, which returns only once the goroutine has returned, so no fetch
// touches Raft or the transport after Shutdown has moved past it.
type indexBatcher struct {
	// fetch obtains a read index. A fetch that sends another request calls
	// renew right before it (see above); renew reports false when no read
	// waits for the fetch any more, and the fetch then gives up.
	fetch   func(ctx context.Context, renew func() bool) (uint64, error)
	timeout time.Duration
	// stop ends every fetch when canceled (the node's context).
	stop context.Context
	// role names the batcher in logs ("leader" or "follower"); log, when
	// set, receives a debug line per fetch.
	role string
	log  *slog.Logger
	// served, when set, is called after each fetch with the number of
	// reads that joined it (reads that gave up meanwhile included): the
	// reads one fetch answered.
	served func(reads int)

	mu      sync.Mutex
	next    *indexBatch
	running bool
	closed  bool
	// loops counts the fetching goroutine (zero or one); close waits for it.
	loops sync.WaitGroup
}

type indexBatch struct {
	done    chan struct{}
	index   uint64
	err     error
	waiters int // reads waiting for this batch (a read that gives up leaves)
	joined  int // reads that joined this batch, including those that left
}

// pending reports how many reads wait for the next fetch.
func (b *indexBatcher) pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next == nil {
		return 0
	}
	return b.next.waiters
}

// get returns a read index fetched after the call began. After close it
// returns ErrShutdown at once; a read waiting when close is called gets the
// fetch's error (the fetch ends with stop) or ErrShutdown.
func (b *indexBatcher) get(ctx context.Context) (uint64, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, ErrShutdown
	}
	if b.next == nil {
		b.next = &indexBatch{done: make(chan struct{})}
	}
	my := b.next
	my.waiters++
	my.joined++
	if !b.running {
		b.running = true
		// Added under mu while not closed: close sets closed under mu
		// before it waits, so no Add races with the Wait.
		b.loops.Add(1)
		go b.loop()
	}
	b.mu.Unlock()
	select {
	case <-my.done:
		return my.index, my.err
	case <-ctx.Done():
		b.mu.Lock()
		my.waiters--
		b.mu.Unlock()
		return 0, ctx.Err()
	}
}

// loop fetches for one batch after another until none waits. Batches still
// waiting once the batcher is closed are answered with ErrShutdown without a
// fetch.
func (b *indexBatcher) loop() {
	defer b.loops.Done()
	for {
		b.mu.Lock()
		batch := b.next
		b.next = nil
		if batch == nil {
			b.running = false
			b.mu.Unlock()
			return
		}
		closed := b.closed
		b.mu.Unlock()
		if closed {
			batch.err = ErrShutdown
			close(batch.done)
			continue
		}
		group := []*indexBatch{batch}
		attempts := 1
		renew := func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			attempts++
			if b.next != nil && !b.closed {
				group = append(group, b.next)
				b.next = nil
			}
			for _, g := range group {
				if g.waiters > 0 {
					return true
				}
			}
			return false
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(b.stop, b.timeout)
		index, err := b.fetch(ctx, renew)
		cancel()
		// The group is final (renew runs only inside fetch) and no read
		// joins a batch once it left b.next.
		reads := 0
		b.mu.Lock()
		for _, g := range group {
			reads += g.joined
		}
		b.mu.Unlock()
		for _, g := range group {
			g.index, g.err = index, err
			close(g.done)
		}
		if b.served != nil {
			b.served(reads)
		}
		if b.log != nil {
			b.log.Debug("read index fetched", "role", b.role, "reads", reads, "attempts", attempts,
				"index", index, "took", time.Since(start), "error", err)
		}
	}
}

// close makes every later get fail with ErrShutdown and waits until the
// fetching goroutine has returned. The caller cancels stop first: close
// waits for a fetch in flight to end, and only stop ends it early.
func (b *indexBatcher) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.loops.Wait()
}
