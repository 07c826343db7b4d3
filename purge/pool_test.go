package purge

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeletePoolRunsInlineWhenFull: with the thread busy and the queue
// full, the producer runs the batch itself; nothing is dropped.
func TestDeletePoolRunsInlineWhenFull(t *testing.T) {
	p := newDeletePool(1)
	release := make(chan struct{})
	started := make(chan struct{})
	ran := make(chan string, 4)
	assert.False(t, p.submit(func() { close(started); <-release; ran <- "first" }))
	<-started
	assert.False(t, p.submit(func() { ran <- "queued" }), "the queue holds one batch")
	assert.True(t, p.submit(func() { ran <- "inline" }), "queue full: the caller runs it")
	assert.Equal(t, "inline", <-ran, "ran on the caller before submit returned")
	close(release)
	p.close()
	require.Len(t, ran, 2)
	assert.Equal(t, "first", <-ran)
	assert.Equal(t, "queued", <-ran)
}

func TestBackoffDoublesUpToTheCap(t *testing.T) {
	s := &Service{cfg: Config{RetryBackoff: time.Second, MaxRetryBackoff: 5 * time.Second}}
	assert.Equal(t, time.Second, s.backoff(0))
	assert.Equal(t, 2*time.Second, s.backoff(1))
	assert.Equal(t, 4*time.Second, s.backoff(2))
	assert.Equal(t, 5*time.Second, s.backoff(3))
	assert.Equal(t, 5*time.Second, s.backoff(100))
}
