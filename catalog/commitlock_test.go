package catalog

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
)

// A commit waits for its turn at most commitTurnWait, then goes ahead
// without it; a context that ends first ends the wait holding nothing; a
// lock released is taken by the next one, and the table's entry goes away
// with its last user.
func TestCommitTurns(t *testing.T) {
	var l commitLocks
	a := fsm.Ident{Namespace: []string{"ns"}, Name: "a"}
	b := fsm.Ident{Namespace: []string{"ns"}, Name: "b"}
	release, timedOut, err := l.lock(context.Background(), b, a, a)
	require.NoError(t, err)
	require.False(t, timedOut)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, err = l.lock(ctx, a)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	other, timedOut, err := l.lock(context.Background(), a)
	require.NoError(t, err)
	assert.True(t, timedOut, "no turn within commitTurnWait: it goes ahead without")
	other()

	release()
	again, timedOut, err := l.lock(context.Background(), a, b)
	require.NoError(t, err)
	assert.False(t, timedOut)
	again()
	l.mu.Lock()
	assert.Empty(t, l.locks, "entries go with their last user")
	l.mu.Unlock()
}
