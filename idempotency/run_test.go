package idempotency

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/fsmtest"
)

// The same request sent twice under one key, the second while the first
// still runs: the second found no record when it began, then failed
// because the first took effect (a second add of one snapshot is a 400).
// It is answered with the first one's outcome, not its own failure.
func TestRetryThatFailsBecauseTheFirstTookEffectReplaysIt(t *testing.T) {
	store := fsmtest.Open(t)
	keys := New(store, Config{})
	key := uuid.Must(uuid.NewV7()).String()
	body := []byte(`{"namespace":["a"]}`)
	first, second := keys.Bind(key, "createNamespace", nil, "p", body), keys.Bind(key, "createNamespace", nil, "p", body)

	var replayed fsm.Result
	replay := func(_ context.Context, res fsm.Result) error { replayed = res; return nil }
	out, err := keys.Run(context.Background(), second, func(ctx context.Context) error {
		// The first request runs to its end while this one runs.
		o, err := keys.Run(context.Background(), first, func(ctx context.Context) error {
			res, err := Propose(ctx, store, fsm.CreateNamespace{Namespace: []string{"a"}})
			if err == nil {
				err = res.Err()
			}
			return err
		}, replay, nil)
		require.NoError(t, err)
		require.Equal(t, Recorded, o)
		// This one then fails on the state the first left.
		return errors.New("namespace already exists, decided before proposing")
	}, replay, nil)
	require.NoError(t, err, "the first one's answer, not this run's failure")
	assert.Equal(t, Replayed, out)
	assert.NoError(t, replayed.Err())

	// A failure with no record stored meanwhile stays the failure.
	other := keys.Bind(uuid.Must(uuid.NewV7()).String(), "createNamespace", nil, "p", []byte(`{"namespace":["b"]}`))
	out, err = keys.Run(context.Background(), other, func(context.Context) error { return errors.New("bad input") }, replay, nil)
	assert.EqualError(t, err, "bad input")
	assert.Equal(t, Unrecorded, out)
}
