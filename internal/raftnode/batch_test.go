package raftnode

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
)

// A read joins only a fetch that starts after it arrived, and concurrent
// reads share fetches.
func TestIndexBatcherNeverReusesAnEarlierFetch(t *testing.T) {
	var fetches atomic.Uint64
	release := make(chan struct{})
	b := &indexBatcher{timeout: time.Second, stop: context.Background(), fetch: func(context.Context, func() bool) (uint64, error) {
		n := fetches.Add(1)
		if n == 1 {
			<-release // hold the first fetch in flight
		}
		return n, nil
	}}
	first := make(chan uint64)
	go func() {
		idx, err := b.get(context.Background())
		assert.NoError(t, err)
		first <- idx
	}()
	require.Eventually(t, func() bool { return fetches.Load() == 1 }, time.Second, time.Millisecond)

	// These arrive while fetch 1 is in flight: they must get fetch 2.
	var wg sync.WaitGroup
	got := make([]uint64, 20)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			idx, err := b.get(context.Background())
			assert.NoError(t, err)
			got[i] = idx
		}()
	}
	require.Eventually(t, func() bool { return b.pending() == len(got) }, 5*time.Second, time.Millisecond)
	close(release)
	assert.Equal(t, uint64(1), <-first)
	wg.Wait()
	for _, idx := range got {
		assert.Equal(t, uint64(2), idx)
	}
	assert.Equal(t, uint64(2), fetches.Load(), "twenty waiting reads share one fetch")
}

// A fetch that sends another request (the first one hung on a leader that
// fell silent) takes the reads queued meanwhile along: they share the new
// request instead of waiting behind the stuck one for a fetch of their own.
func TestIndexBatcherRenewTakesQueuedReadsAlong(t *testing.T) {
	var fetches, requests atomic.Uint64
	release := make(chan struct{})
	b := &indexBatcher{timeout: 5 * time.Second, stop: context.Background(), fetch: func(_ context.Context, renew func() bool) (uint64, error) {
		fetches.Add(1)
		requests.Add(1)
		<-release // the first request hangs, then is abandoned
		if !renew() {
			return 0, errors.New("no read waits")
		}
		return 100 + requests.Add(1), nil
	}}
	first := make(chan uint64)
	go func() {
		idx, err := b.get(context.Background())
		assert.NoError(t, err)
		first <- idx
	}()
	require.Eventually(t, func() bool { return fetches.Load() == 1 }, 5*time.Second, time.Millisecond)

	var wg sync.WaitGroup
	got := make([]uint64, 20)
	for i := range got {
		wg.Go(func() {
			idx, err := b.get(context.Background())
			assert.NoError(t, err)
			got[i] = idx
		})
	}
	require.Eventually(t, func() bool { return b.pending() == len(got) }, 5*time.Second, time.Millisecond)
	close(release)
	assert.Equal(t, uint64(102), <-first)
	wg.Wait()
	for _, idx := range got {
		assert.Equal(t, uint64(102), idx, "the queued reads share the second request")
	}
	assert.Equal(t, uint64(1), fetches.Load(), "no fetch of their own")
}

// Once every read waiting for a fetch has given up, renew says so and the
// fetch can stop asking.
func TestIndexBatcherRenewReportsNoReads(t *testing.T) {
	release := make(chan struct{})
	renewed := make(chan bool, 1)
	var inFetch atomic.Bool
	b := &indexBatcher{timeout: 5 * time.Second, stop: context.Background(), fetch: func(_ context.Context, renew func() bool) (uint64, error) {
		inFetch.Store(true)
		<-release
		renewed <- renew()
		return 0, errors.New("abandoned")
	}}
	ctx, cancel := context.WithCancel(context.Background())
	readErr := make(chan error, 1)
	go func() {
		_, err := b.get(ctx)
		readErr <- err
	}()
	require.Eventually(t, inFetch.Load, 5*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-readErr, context.Canceled)
	close(release)
	assert.False(t, <-renewed)
	b.close()
}

// close returns only once the fetching goroutine has returned, and a read
// after close fails at once without starting another.
func TestIndexBatcherCloseWaitsForItsGoroutine(t *testing.T) {
	stop, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	var inFetch, fetchReturned atomic.Bool
	b := &indexBatcher{timeout: time.Minute, stop: stop, fetch: func(ctx context.Context, _ func() bool) (uint64, error) {
		inFetch.Store(true)
		<-ctx.Done() // ended by stop
		<-release    // then held, to see that close waits
		fetchReturned.Store(true)
		return 0, ctx.Err()
	}}
	readErr := make(chan error, 1)
	go func() {
		_, err := b.get(context.Background())
		readErr <- err
	}()
	require.Eventually(t, inFetch.Load, 5*time.Second, time.Millisecond)

	cancel()
	closed := make(chan struct{})
	go func() {
		b.close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("close returned while the fetch was still running")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not return after the fetch ended")
	}
	assert.True(t, fetchReturned.Load())
	require.ErrorIs(t, <-readErr, context.Canceled, "the waiting read gets the fetch's error")

	_, err := b.get(context.Background())
	require.ErrorIs(t, err, ErrShutdown)
	b.mu.Lock()
	defer b.mu.Unlock()
	assert.False(t, b.running, "no goroutine started after close")
}

// Shutdown waits for a read-index fetch in flight: the batcher's goroutine
// has returned before Shutdown does.
func TestShutdownWaitsForReadIndexBatcher(t *testing.T) {
	cfg := testConfig(t, t.TempDir(), freeAddr(t))
	cfg.Bootstrap = true
	n := mustOpen(t, cfg)
	waitLeaderOf(t, n)

	release := make(chan struct{})
	var inFetch, fetchReturned atomic.Bool
	fetch := n.leaderBatch.fetch
	// Set before any read: the read's get, which starts the goroutine that
	// calls fetch, happens after it.
	n.leaderBatch.fetch = func(ctx context.Context, renew func() bool) (uint64, error) {
		inFetch.Store(true)
		idx, err := fetch(ctx, renew)
		<-ctx.Done() // ended by Shutdown
		<-release
		fetchReturned.Store(true)
		return idx, err
	}
	readErr := make(chan error, 1)
	go func() { readErr <- n.Read(context.Background(), func(*fsm.Reader) error { return nil }) }()
	require.Eventually(t, inFetch.Load, 10*time.Second, time.Millisecond)

	shutdown := make(chan error, 1)
	go func() { shutdown <- n.Shutdown() }()
	select {
	case <-shutdown:
		t.Fatal("Shutdown returned while a read-index fetch was running")
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-shutdown:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("Shutdown did not return after the fetch ended")
	}
	assert.True(t, fetchReturned.Load(), "the fetch returned before Shutdown did")
	// The read returns either way: its fetch may have confirmed the index
	// before Shutdown began (then it is served), or not (an error).
	select {
	case <-readErr:
	case <-time.After(5 * time.Second):
		t.Fatal("the read did not return")
	}
	_, err := n.leaderBatch.get(context.Background())
	require.ErrorIs(t, err, ErrShutdown)
}

// A read waiting for the state machine, and one reading the log after the
// log store closed, end with ErrShutdown when the node shuts down, not when
// their own deadline passes or with a bare storage error.
func TestShutdownEndsReadsWithErrShutdown(t *testing.T) {
	cfg := testConfig(t, t.TempDir(), freeAddr(t))
	cfg.Bootstrap = true
	n := mustOpen(t, cfg)
	waitLeaderOf(t, n)

	// An index the state machine will not reach: as when Raft stops with
	// entries it counted as applied still queued for the state machine.
	beyond := n.fsm.AppliedIndex() + 1000
	// Before Shutdown, the caller's own deadline ends the wait, as ever.
	require.ErrorIs(t, n.waitApplied(ctxTimeout(t, 50*time.Millisecond), beyond), context.DeadlineExceeded)
	waited := make(chan error, 1)
	go func() { waited <- n.waitApplied(ctxTimeout(t, time.Minute), beyond) }()
	select {
	case err := <-waited:
		t.Fatalf("the wait ended before Shutdown: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, n.Shutdown())
	select {
	case err := <-waited:
		require.ErrorIs(t, err, ErrShutdown)
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end with Shutdown")
	}

	_, _, err := n.lastVisible(n.fsm.AppliedIndex() + 1)
	require.ErrorIs(t, err, ErrShutdown, "a log read after the log store closed")
}
