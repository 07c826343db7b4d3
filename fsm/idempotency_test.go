package fsm

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func keyed(t *testing.T, key string, b Binding, atMs int64, inner Command) Keyed {
	t.Helper()
	raw, err := Encode(inner)
	require.NoError(t, err)
	return Keyed{Key: key, Binding: b, AtMs: atMs, ExpiresMs: atMs + 1000, Command: raw}
}

func TestKeyedCommandsApplyOnce(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	var i uint64
	apply := func(c Command) Result { i++; return result(t, f.Apply(entry(t, i, c))) }
	b := Binding{Operation: "createNamespace", Route: "", Principal: "p", BodyDigest: "d1"}

	first := apply(keyed(t, "k1", b, 100, CreateNamespace{Namespace: nsA}))
	require.NoError(t, first.Err())
	assert.True(t, first.Recorded)
	assert.False(t, first.Replayed)

	// The same key and binding: nothing applied again, the outcome replayed.
	again := apply(keyed(t, "k1", b, 200, CreateNamespace{Namespace: nsA}))
	require.NoError(t, again.Err(), "a replay of a success is a success, not AlreadyExists")
	assert.True(t, again.Replayed)

	// Another body under the same key: refused, nothing changes.
	other := b
	other.BodyDigest = "d2"
	reused := apply(keyed(t, "k1", other, 300, CreateNamespace{Namespace: []string{"b"}}))
	assert.ErrorIs(t, reused.Err(), ErrKeyReused)
	assert.Contains(t, reused.Message, "a different request body")

	// A deterministic failure is recorded and replayed as the same failure.
	dup := apply(keyed(t, "k2", b, 300, CreateNamespace{Namespace: nsA}))
	assert.ErrorIs(t, dup.Err(), ErrAlreadyExists)
	assert.True(t, dup.Recorded)
	dup2 := apply(keyed(t, "k2", b, 400, DropNamespace{Namespace: nsA}))
	assert.ErrorIs(t, dup2.Err(), ErrAlreadyExists)
	assert.True(t, dup2.Replayed)

	// A lost compare-and-set is not recorded: the proposer retries.
	apply(create(tbl1, "m0"))
	cas := apply(keyed(t, "k3", b, 400, CommitTables{Changes: []TableChange{{Kind: ChangeUpdate, Ident: tbl1, ExpectedMetadataLocation: "stale", MetadataLocation: "m1"}}}))
	assert.ErrorIs(t, cas.Err(), ErrCommitFailed)
	assert.False(t, cas.Recorded)
	ok := apply(keyed(t, "k3", b, 450, CommitTables{Changes: []TableChange{{Kind: ChangeUpdate, Ident: tbl1, ExpectedMetadataLocation: "m0", MetadataLocation: "m1"}}}))
	require.NoError(t, ok.Err())
	assert.True(t, ok.Recorded)

	// RecordOutcome stores a failure decided before proposing; a live
	// record wins over it.
	rec := apply(RecordOutcome{Key: "k4", Binding: b, AtMs: 500, ExpiresMs: 1500, Result: Result{Status: StatusNoSuchTable, Message: "gone"}})
	assert.ErrorIs(t, rec.Err(), ErrNoSuchTable)
	rec = apply(RecordOutcome{Key: "k1", Binding: b, AtMs: 500, ExpiresMs: 1500, Result: Result{Status: StatusNoSuchTable}})
	require.NoError(t, rec.Err())
	assert.True(t, rec.Replayed)

	// An expired key is new again.
	fresh := apply(keyed(t, "k1", other, 5000, CreateNamespace{Namespace: []string{"b"}}))
	require.NoError(t, fresh.Err())
	assert.False(t, fresh.Replayed)

	// Pruning removes what expired by the proposer's time, and only that.
	pruned := apply(PruneIdempotency{NowMs: 1500})
	assert.Equal(t, 3, pruned.Count, "k2, k3 and k4 expired at 1300, 1450 and 1500")
	require.NoError(t, f.View(func(r *Reader) error {
		assert.Equal(t, 1, r.IdempotencyRecords())
		_, ok := r.IdempotencyRecord("k1")
		assert.True(t, ok)
		return nil
	}))
	assert.Equal(t, 1, apply(PruneIdempotency{NowMs: 10000}).Count)
}
