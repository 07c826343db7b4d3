package raftnode

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A leader's epoch ends when another leader is known or none has been for
// the grace; a moment without a leader that ends with the same one does not
// end it.
func TestLeaderWatchEpochs(t *testing.T) {
	w := newLeaderWatch(100 * time.Millisecond)
	defer w.close()
	var news atomic.Int32
	fn := func() { news.Add(1) }
	w.onNew.Store(&fn)
	w.update("a:1", "a")
	assert.EqualValues(t, 1, news.Load(), "the first leader is new")
	addr, id, a := w.current()
	assert.Equal(t, "a:1", string(addr))
	assert.Equal(t, "a", string(id))

	// Lost for a moment, then back: the same epoch goes on.
	w.update("", "")
	_, id, e := w.current()
	assert.Empty(t, id)
	assert.Equal(t, a, e, "the last leader's epoch, while none is known")
	w.update("a:1", "a")
	time.Sleep(200 * time.Millisecond)
	_, _, e = w.current()
	require.NoError(t, a.Err())
	assert.Equal(t, a, e)
	assert.EqualValues(t, 1, news.Load(), "the same leader back is not new")

	// Another leader ends it at once.
	w.update("b:1", "b")
	require.Error(t, a.Err())
	assert.True(t, errors.Is(context.Cause(a), errLeaderChanged))
	_, id, b := w.current()
	assert.Equal(t, "b", string(id))
	require.NoError(t, b.Err())
	assert.EqualValues(t, 2, news.Load())

	// No leader for longer than the grace ends it too.
	w.update("", "")
	require.NoError(t, b.Err())
	require.Eventually(t, func() bool { return b.Err() != nil }, 5*time.Second, 5*time.Millisecond)
	assert.True(t, errors.Is(context.Cause(b), errLeaderChanged))
	// The same leader back after that starts a new epoch.
	w.update("b:1", "b")
	_, id, b2 := w.current()
	assert.Equal(t, "b", string(id))
	require.NoError(t, b2.Err())
	assert.EqualValues(t, 3, news.Load(), "a new epoch, though the same leader")
}
