package raftnode

import (
	"context"
	"sync"
	"time"
)

// indexBatcher coalesces concurrent read-index requests: all reads that
// arrive while one request is in flight share the next one. A read must use a
// read index obtained by a request that started after the read arrived, so a
// read never joins a request already in flight; it waits for the next.
// Under load this turns one leader round trip (and one quorum heartbeat) per
// read into one per batch.
type indexBatcher struct {
	fetch   func(ctx context.Context) (uint64, error)
	timeout time.Duration
	stop    context.Context

	mu      sync.Mutex
	next    *indexBatch
	running bool
}

type indexBatch struct {
	done    chan struct{}
	index   uint64
	err     error
	waiters int // reads sharing this batch (for tests and logs)
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

// get returns a read index fetched after the call began.
func (b *indexBatcher) get(ctx context.Context) (uint64, error) {
	b.mu.Lock()
	if b.next == nil {
		b.next = &indexBatch{done: make(chan struct{})}
	}
	my := b.next
	my.waiters++
	if !b.running {
		b.running = true
		go b.loop()
	}
	b.mu.Unlock()
	select {
	case <-my.done:
		return my.index, my.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (b *indexBatcher) loop() {
	for {
		b.mu.Lock()
		batch := b.next
		b.next = nil
		if batch == nil {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(b.stop, b.timeout)
		batch.index, batch.err = b.fetch(ctx)
		cancel()
		close(batch.done)
	}
}
