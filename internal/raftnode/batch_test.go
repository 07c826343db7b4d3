package raftnode

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A read joins only a fetch that starts after it arrived, and concurrent
// reads share fetches.
func TestIndexBatcherNeverReusesAnEarlierFetch(t *testing.T) {
	var fetches atomic.Uint64
	release := make(chan struct{})
	b := &indexBatcher{timeout: time.Second, stop: context.Background(), fetch: func(context.Context) (uint64, error) {
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
