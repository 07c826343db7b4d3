package fsm

import (
	"bytes"
	"io"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustOpen(t *testing.T, path string) *FSM {
	t.Helper()
	f, err := Open(path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

func entry(t *testing.T, index uint64, c Command) *raft.Log {
	t.Helper()
	b, err := Encode(c)
	require.NoError(t, err)
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: b}
}

func result(t *testing.T, v any) Result {
	t.Helper()
	r, ok := v.(Result)
	require.True(t, ok, "result is %T", v)
	return r
}

var (
	nsA  = []string{"a"}
	tbl1 = Ident{Namespace: nsA, Name: "t1"}
)

func create(id Ident, loc string) CommitTables {
	return CommitTables{Changes: []TableChange{{Kind: ChangeCreate, Ident: id, MetadataLocation: loc, Location: "file:///w/" + id.Name, UUID: "u-" + id.Name}}}
}

func TestApplyDecidesDomainOutcomes(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))

	r := result(t, f.Apply(entry(t, 1, create(tbl1, "m0"))))
	assert.ErrorIs(t, r.Err(), ErrNoSuchNamespace)

	require.NoError(t, result(t, f.Apply(entry(t, 2, CreateNamespace{Namespace: nsA}))).Err())
	assert.ErrorIs(t, result(t, f.Apply(entry(t, 3, CreateNamespace{Namespace: nsA}))).Err(), ErrAlreadyExists)
	assert.ErrorIs(t, result(t, f.Apply(entry(t, 4, CreateNamespace{Namespace: []string{"x", "y"}}))).Err(), ErrNoSuchNamespace)

	require.NoError(t, result(t, f.Apply(entry(t, 5, create(tbl1, "m0")))).Err())
	assert.ErrorIs(t, result(t, f.Apply(entry(t, 6, create(tbl1, "m0")))).Err(), ErrAlreadyExists)

	upd := CommitTables{Changes: []TableChange{{Kind: ChangeUpdate, Ident: tbl1, ExpectedMetadataLocation: "m0", ExpectedUUID: "u-t1", MetadataLocation: "m1", UUID: "u-t1"}}}
	require.NoError(t, result(t, f.Apply(entry(t, 7, upd))).Err())
	// The same CAS again lost: the pointer moved on.
	assert.ErrorIs(t, result(t, f.Apply(entry(t, 8, upd))).Err(), ErrCommitFailed)

	assert.ErrorIs(t, result(t, f.Apply(entry(t, 9, DropNamespace{Namespace: nsA}))).Err(), ErrNamespaceNotEmpty)

	require.NoError(t, f.View(func(r *Reader) error {
		tb, ok := r.Table(tbl1)
		require.True(t, ok)
		assert.Equal(t, "m1", tb.MetadataLocation)
		assert.Equal(t, uint64(9), r.AppliedIndex())
		return nil
	}))
}

func TestCommitTablesIsAtomic(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	f.Apply(entry(t, 1, CreateNamespace{Namespace: nsA}))
	f.Apply(entry(t, 2, create(tbl1, "m0")))
	t2 := Ident{Namespace: nsA, Name: "t2"}
	cmd := CommitTables{Changes: []TableChange{
		{Kind: ChangeCreate, Ident: t2, MetadataLocation: "n0", UUID: "u2"},
		{Kind: ChangeUpdate, Ident: tbl1, ExpectedMetadataLocation: "stale", MetadataLocation: "m1"},
	}}
	assert.ErrorIs(t, result(t, f.Apply(entry(t, 3, cmd))).Err(), ErrCommitFailed)
	require.NoError(t, f.View(func(r *Reader) error {
		_, ok := r.Table(t2)
		assert.False(t, ok, "first change of a failed transaction must not be written")
		return nil
	}))
}

func TestApplyBatchAndReplayAfterRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	f := mustOpen(t, path)
	batch := []*raft.Log{
		entry(t, 1, CreateNamespace{Namespace: nsA}),
		{Index: 2, Term: 1, Type: raft.LogConfiguration},
		entry(t, 3, UpdateNamespace{Namespace: nsA, Set: map[string]string{"k": "v"}}),
		entry(t, 4, UpdateNamespace{Namespace: nsA, Remove: []string{"k", "gone"}}),
	}
	res := f.ApplyBatch(batch)
	require.Len(t, res, 4)
	assert.Nil(t, res[1])
	assert.Equal(t, []string{"k"}, result(t, res[3]).Properties.Removed)
	assert.Equal(t, []string{"gone"}, result(t, res[3]).Properties.Missing)
	assert.Equal(t, uint64(4), f.AppliedIndex())
	require.NoError(t, f.Close())

	// Raft replays entries after its last snapshot; those at or below the
	// stored applied index must not be applied twice.
	f = mustOpen(t, path)
	assert.Equal(t, uint64(4), f.AppliedIndex())
	res = f.ApplyBatch(append(batch[:3:3], entry(t, 5, CreateNamespace{Namespace: []string{"b"}})))
	assert.Nil(t, res[0], "already applied entry must be skipped")
	assert.Nil(t, res[2], "already applied entry must be skipped")
	require.NoError(t, result(t, res[3]).Err())
	require.NoError(t, f.View(func(r *Reader) error {
		ns, ok := r.Namespace(nsA)
		require.True(t, ok)
		assert.Empty(t, ns.Properties, "re-applying index 3 would have set k again")
		return nil
	}))
}

type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { return nil }

func TestSnapshotIsPointInTimeAndRestores(t *testing.T) {
	src := mustOpen(t, filepath.Join(t.TempDir(), "src.db"))
	src.Apply(entry(t, 1, CreateNamespace{Namespace: nsA}))
	src.Apply(entry(t, 2, create(tbl1, "m0")))
	snap, err := src.Snapshot()
	require.NoError(t, err)
	// Applied after the snapshot was taken: must not be in it.
	src.Apply(entry(t, 3, CreateNamespace{Namespace: []string{"later"}}))
	var sink memSink
	require.NoError(t, snap.Persist(&sink))
	snap.Release()

	dst := mustOpen(t, filepath.Join(t.TempDir(), "dst.db"))
	dst.Apply(entry(t, 1, CreateNamespace{Namespace: []string{"replaced"}}))
	require.NoError(t, dst.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))))
	assert.Equal(t, uint64(2), dst.AppliedIndex())
	require.NoError(t, dst.View(func(r *Reader) error {
		_, ok := r.Table(tbl1)
		assert.True(t, ok)
		_, ok = r.Namespace([]string{"later"})
		assert.False(t, ok, "snapshot must be point in time")
		_, ok = r.Namespace([]string{"replaced"})
		assert.False(t, ok, "restore must replace state")
		return nil
	}))

	require.Error(t, dst.Restore(io.NopCloser(bytes.NewReader([]byte("not a bbolt file")))))
	assert.Equal(t, uint64(2), dst.AppliedIndex(), "a failed restore leaves state untouched")
}

func TestUnknownCommands(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	ignorable := &raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte{byte(typeIgnorableForTest), 1, '{', '}'}}
	assert.Nil(t, f.Apply(ignorable))
	assert.Equal(t, uint64(1), f.AppliedIndex())

	unknown := &raft.Log{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte{byte(typeUnknownForTests), 1, '{', '}'}}
	assert.Panics(t, func() { f.Apply(unknown) })
	badBody := &raft.Log{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte{byte(TypeCreateNamespace), 1, '{'}}
	assert.Panics(t, func() { f.Apply(badBody) })
	newerVersion := &raft.Log{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte{byte(TypeCreateNamespace), 9, '{', '}'}}
	assert.Panics(t, func() { f.Apply(newerVersion) })
	assert.Equal(t, uint64(1), f.AppliedIndex())
}

func TestListingPaginates(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	var i uint64
	apply := func(c Command) { i++; require.NoError(t, result(t, f.Apply(entry(t, i, c))).Err()) }
	for _, n := range [][]string{{"a"}, {"b"}, {"c"}, {"a", "x"}, {"a", "y"}, {"a", "x", "deep"}} {
		apply(CreateNamespace{Namespace: n})
	}
	for _, n := range []string{"t1", "t2", "t3"} {
		apply(create(Ident{Namespace: []string{"a"}, Name: n}, "m"))
	}
	apply(create(Ident{Namespace: []string{"a", "x"}, Name: "t0"}, "m"))
	require.NoError(t, f.View(func(r *Reader) error {
		page, more := r.Namespaces(nil, "", 2)
		require.Len(t, page, 2)
		assert.True(t, more)
		assert.Equal(t, []string{"b"}, page[1].Levels)
		page, more = r.Namespaces(nil, "b", 2)
		assert.False(t, more)
		require.Len(t, page, 1)
		assert.Equal(t, []string{"c"}, page[0].Levels)
		children, _ := r.Namespaces([]string{"a"}, "", 0)
		require.Len(t, children, 2)
		assert.Equal(t, []string{"a", "y"}, children[1].Levels)
		// The levels alone, from the keys: the same pages.
		levels, more := r.NamespaceLevels(nil, "", 2)
		assert.Equal(t, [][]string{{"a"}, {"b"}}, levels)
		assert.True(t, more)
		levels, more = r.NamespaceLevels(nil, "b", 2)
		assert.Equal(t, [][]string{{"c"}}, levels)
		assert.False(t, more)
		levels, more = r.NamespaceLevels([]string{"a"}, "", 0)
		assert.Equal(t, [][]string{{"a", "x"}, {"a", "y"}}, levels, "children, not grandchildren")
		assert.False(t, more)
		levels, _ = r.NamespaceLevels([]string{"a", "x"}, "", 0)
		assert.Equal(t, [][]string{{"a", "x", "deep"}}, levels)
		tables, more := r.Tables([]string{"a"}, "t1", 1)
		require.Len(t, tables, 1)
		assert.True(t, more)
		assert.Equal(t, "t2", tables[0].Name)
		// The names alone, from the keys: the same pages, and no table of
		// a child namespace.
		names, more := r.TableNames([]string{"a"}, "", 0)
		assert.Equal(t, []string{"t1", "t2", "t3"}, names)
		assert.False(t, more)
		names, more = r.TableNames([]string{"a"}, "t1", 1)
		assert.Equal(t, []string{"t2"}, names)
		assert.True(t, more)
		names, more = r.TableNames([]string{"a"}, "t2", 5)
		assert.Equal(t, []string{"t3"}, names)
		assert.False(t, more)
		names, _ = r.TableNames([]string{"a", "x"}, "", 0)
		assert.Equal(t, []string{"t0"}, names)
		names, _ = r.TableNames([]string{"b"}, "", 0)
		assert.Empty(t, names)
		return nil
	}))
}
