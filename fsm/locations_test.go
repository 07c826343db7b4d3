package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// ownFSM is a state machine with namespace "a" and helpers for location
// ownership tests.
type ownFSM struct {
	t     *testing.T
	f     *FSM
	index uint64
}

func newOwnFSM(t *testing.T) *ownFSM {
	o := &ownFSM{t: t, f: mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))}
	require.NoError(t, o.apply(CreateNamespace{Namespace: nsA}).Err())
	return o
}

func (o *ownFSM) apply(c Command) Result {
	o.index++
	return result(o.t, o.f.Apply(entry(o.t, o.index, c)))
}

func (o *ownFSM) applyRaw(data []byte) Result {
	o.index++
	return result(o.t, o.f.Apply(&raft.Log{Index: o.index, Term: 1, Type: raft.LogCommand, Data: data}))
}

func change(kind, name, loc string) TableChange {
	return TableChange{Kind: kind, Ident: Ident{Namespace: nsA, Name: name}, MetadataLocation: loc + "/metadata/00000-x.metadata.json",
		Location: loc, LocationKey: LocationKey(loc), UUID: "u-" + name}
}

func (o *ownFSM) create(name, loc string) Result {
	return o.apply(CommitTables{Changes: []TableChange{change(ChangeCreate, name, loc)}})
}

func (o *ownFSM) table(name string) (Table, bool) {
	var (
		tb Table
		ok bool
	)
	require.NoError(o.t, o.f.View(func(r *Reader) error {
		tb, ok = r.Table(Ident{Namespace: nsA, Name: name})
		return nil
	}))
	return tb, ok
}

func TestLocationKeyNormalises(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"s3://b/w/t", "s3://b/w/t/"},
		{"s3a://b/w/t/", "s3://b/w/t/"},
		{"s3n://b/w//t", "s3://b/w//t/"},
		{"s3://b", "s3://b/"},
		{"file:///w/t", "file:///w/t/"},
		{"file:/w/t/", "file:///w/t/"},
		{"file://localhost/w//t", "file:///w/t/"},
		{"/w/t", "file:///w/t/"},
		{"", ""},
	} {
		assert.Equal(t, tc.want, LocationKey(tc.in), tc.in)
	}
	// An unparseable location matches only itself, with NUL escaped.
	assert.Equal(t, "raw:gs://b/t/", LocationKey("gs://b/t"))
	assert.NotContains(t, LocationKey("s3://b/\x00x"), "\x00")
}

func TestLocationBelongsToOneTable(t *testing.T) {
	o := newOwnFSM(t)
	require.NoError(t, o.create("a", "s3://b/w/a").Err())

	for _, loc := range []string{
		"s3://b/w/a",    // equal
		"s3a://b/w/a/",  // equal, other spelling
		"s3://b/w/a/x",  // inside
		"s3://b/w",      // around
		"s3n://b",       // the bucket root is around everything in it
		"s3://b/w/a/x/", // inside, trailing slash
	} {
		res := o.create("n", loc)
		assert.ErrorIs(t, res.Err(), ErrLocationInUse, loc)
		assert.Contains(t, res.Message, "table a.a", loc)
		_, exists := o.table("n")
		assert.False(t, exists, "nothing written for %s", loc)
	}
	// Segment-aware: a sibling whose name extends a's is its own location.
	require.NoError(t, o.create("ab", "s3://b/w/ab").Err())
	require.NoError(t, o.create("other", "s3://c/w/a").Err(), "another bucket")
	require.NoError(t, o.create("local", "file:///w/a").Err(), "another scheme")

	// Register: onto a's location refused; overwriting a itself in place is fine.
	reg := change(ChangeRegister, "r", "s3://b/w/a")
	assert.ErrorIs(t, o.apply(CommitTables{Changes: []TableChange{reg}}).Err(), ErrLocationInUse)
	self := change(ChangeRegister, "a", "s3://b/w/a")
	self.Overwrite = true
	require.NoError(t, o.apply(CommitTables{Changes: []TableChange{self}}).Err())

	// set-location onto another table's location is refused; a commit that
	// keeps the location is not.
	cur, _ := o.table("ab")
	move := change(ChangeUpdate, "ab", "s3://b/w/a/inner")
	move.ExpectedMetadataLocation, move.ExpectedUUID = cur.MetadataLocation, cur.UUID
	res := o.apply(CommitTables{Changes: []TableChange{move}})
	assert.ErrorIs(t, res.Err(), ErrLocationInUse)
	stay := change(ChangeUpdate, "ab", "s3://b/w/ab")
	stay.MetadataLocation = "s3://b/w/ab/metadata/00001-y.metadata.json"
	stay.ExpectedMetadataLocation, stay.ExpectedUUID = cur.MetadataLocation, cur.UUID
	require.NoError(t, o.apply(CommitTables{Changes: []TableChange{stay}}).Err())

}

// move commits a set-location of table name to loc.
func (o *ownFSM) move(name, loc string) Result {
	cur, ok := o.table(name)
	require.True(o.t, ok, name)
	ch := change(ChangeUpdate, name, loc)
	ch.ExpectedMetadataLocation, ch.ExpectedUUID, ch.UUID = cur.MetadataLocation, cur.UUID, cur.UUID
	ch.Moves = true
	return o.apply(CommitTables{Changes: []TableChange{ch}})
}

// A table that moves (set-location) keeps the location it leaves until it
// is dropped: its snapshots may still reference files there, and another
// table there could be purged with them.
func TestMovedTableKeepsItsFormerLocation(t *testing.T) {
	o := newOwnFSM(t)
	require.NoError(t, o.create("x", "s3://b/w/x").Err())
	res := o.move("x", "s3://b/w/x2")
	require.NoError(t, res.Err())
	assert.Empty(t, res.Tables[0].FormerLocations, "results carry no bookkeeping")

	for _, loc := range []string{"s3://b/w/x", "s3a://b/w/x/", "s3://b/w/x/data", "s3://b/w"} {
		res := o.create("n", loc)
		require.ErrorIs(t, res.Err(), ErrLocationInUse, loc)
		assert.Contains(t, res.Message, "moved away from", loc)
		assert.Contains(t, res.Message, "a.x", loc)
	}
	reg := change(ChangeRegister, "c", "s3://b/w/x")
	require.ErrorIs(t, o.apply(CommitTables{Changes: []TableChange{reg}}).Err(), ErrLocationInUse)
	require.NoError(t, o.f.View(func(r *Reader) error {
		owner, ok := r.LocationOwner("s3://b/w/x/data/f.parquet")
		assert.True(t, ok, "the purge worker's guard sees the former location as the table's")
		assert.Equal(t, "x", owner.Name)
		require.NoError(t, r.CheckClaim(Ident{Namespace: nsA, Name: "x"}, "s3://b/w/x"), "a table may move back")
		assert.ErrorIs(t, r.CheckClaim(Ident{Namespace: nsA, Name: "n"}, "s3://b/w/x"), ErrLocationInUse)
		return nil
	}))

	// Moving inside a location it left, then back: still one table's.
	require.NoError(t, o.move("x", "s3://b/w/x/inner").Err())
	require.NoError(t, o.move("x", "s3://b/w/x").Err())
	tb, _ := o.table("x")
	assert.Equal(t, []string{"s3://b/w/x2/", "s3://b/w/x/inner/"}, formerKeys(tb))
	require.ErrorIs(t, o.create("n", "s3://b/w/x2").Err(), ErrLocationInUse)
	require.NoError(t, o.f.View(func(r *Reader) error {
		conflicts, _ := r.LocationConflicts(0)
		assert.Empty(t, conflicts, "a table never conflicts with itself")
		return nil
	}))

	// A rename carries them; a drop frees every one.
	require.NoError(t, o.apply(RenameTable{From: Ident{Namespace: nsA, Name: "x"}, To: Ident{Namespace: nsA, Name: "y"}}).Err())
	res = o.create("n", "s3://b/w/x2")
	require.ErrorIs(t, res.Err(), ErrLocationInUse)
	assert.Contains(t, res.Message, "a.y")
	require.NoError(t, o.apply(DropTable{Ident: Ident{Namespace: nsA, Name: "y"}}).Err())
	for _, loc := range []string{"s3://b/w/x", "s3://b/w/x2", "s3://b/w/x/inner"} {
		require.NoError(t, o.create("n-"+loc[len("s3://b/w/"):], loc).Err(), loc)
		require.NoError(t, o.apply(DropTable{Ident: Ident{Namespace: nsA, Name: "n-" + loc[len("s3://b/w/"):]}}).Err())
	}

	// Registering the same table again (same UUID) keeps them, and a
	// register that moves it adds the location it leaves; replacing it by
	// a register-overwrite of another table frees them all, with its
	// location: the catalog no longer references their files.
	require.NoError(t, o.create("z", "s3://b/w/z").Err())
	require.NoError(t, o.move("z", "s3://b/w/z2").Err())
	again := change(ChangeRegister, "z", "s3://b/w/z2")
	again.Overwrite = true
	require.NoError(t, o.apply(CommitTables{Changes: []TableChange{again}}).Err())
	require.ErrorIs(t, o.create("zz", "s3://b/w/z").Err(), ErrLocationInUse)
	again = change(ChangeRegister, "z", "s3://b/w/z3")
	again.Overwrite, again.Moves = true, true
	require.NoError(t, o.apply(CommitTables{Changes: []TableChange{again}}).Err())
	tb, _ = o.table("z")
	assert.Equal(t, []string{"s3://b/w/z/", "s3://b/w/z2/"}, formerKeys(tb))
	other := change(ChangeRegister, "z", "s3://b/w/z4")
	other.Overwrite, other.UUID = true, "u-another-table"
	require.NoError(t, o.apply(CommitTables{Changes: []TableChange{other}}).Err())
	for _, loc := range []string{"s3://b/w/z", "s3://b/w/z2", "s3://b/w/z3"} {
		require.NoError(t, o.create("n-"+loc[len("s3://b/w/"):], loc).Err(), loc)
	}
}

// A table may own at most maxFormerLocations locations it left; moving
// back to one of them is always allowed.
func TestFormerLocationsAreBounded(t *testing.T) {
	o := newOwnFSM(t)
	require.NoError(t, o.create("x", "s3://b/w/x0").Err())
	for i := 1; i <= maxFormerLocations; i++ {
		require.NoError(t, o.move("x", fmt.Sprintf("s3://b/w/x%d", i)).Err(), i)
	}
	before, _ := o.table("x")
	res := o.move("x", "s3://b/w/one-more")
	require.ErrorIs(t, res.Err(), ErrInvalidCommand)
	assert.Contains(t, res.Message, "the limit is")
	after, _ := o.table("x")
	assert.Equal(t, before, after, "nothing written")
	require.NoError(t, o.move("x", "s3://b/w/x0").Err(), "back to a location it left")
}

// A table with several index entries (its location inside one it left) is
// listed once per overlapping table, and the index of a file without one is
// built with every table's former locations.
func TestFormerLocationsInConflictsAndRebuiltIndex(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fsm.db")
	o := &ownFSM{t: t, f: mustOpen(t, path)}
	require.NoError(t, o.apply(CreateNamespace{Namespace: nsA}).Err())
	require.NoError(t, o.create("a", "s3://b/w/x").Err())
	require.NoError(t, o.move("a", "s3://b/w/x/inner").Err())
	body := `{"changes":[{"kind":"register","ident":{"namespace":["a"],"name":"old"},"metadata-location":"s3://b/w/x/inner/z/metadata/1.json","location":"s3://b/w/x/inner/z","uuid":"u-old"}],"at-ms":1}`
	require.NoError(t, o.applyRaw(append([]byte{byte(TypeCommitTables), 1}, body...)).Err())
	require.NoError(t, o.f.View(func(r *Reader) error {
		c, _ := r.LocationConflicts(0)
		require.Len(t, c, 1)
		assert.Equal(t, []string{"a", "old"}, []string{c[0].Outer.Name, c[0].Inner.Name})
		return nil
	}))
	require.NoError(t, o.f.Close())

	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketTableLocs) }))
	require.NoError(t, db.Close())
	o.f = mustOpen(t, path)
	res := o.create("n", "s3://b/w/x")
	require.ErrorIs(t, res.Err(), ErrLocationInUse)
	assert.Contains(t, res.Message, "moved away from")
}

func formerKeys(tb Table) []string {
	var out []string
	for _, f := range tb.FormerLocations {
		out = append(out, f.Key)
	}
	return out
}

// A version-2 CommitTables entry, written before moved tables kept their
// former locations, replays as it was applied: the move frees it.
func TestVersion2MovesFreeTheLocationTheyLeave(t *testing.T) {
	o := newOwnFSM(t)
	require.NoError(t, o.create("x", "s3://b/w/x").Err())
	cur, _ := o.table("x")
	body := fmt.Sprintf(`{"changes":[{"kind":"update","ident":{"namespace":["a"],"name":"x"},"metadata-location":"s3://b/w/x2/metadata/1.json","location":"s3://b/w/x2","location-key":"s3://b/w/x2/","uuid":%q,"expected-metadata-location":%q,"expected-uuid":%q}],"at-ms":1}`,
		cur.UUID, cur.MetadataLocation, cur.UUID)
	require.NoError(t, o.applyRaw(append([]byte{byte(TypeCommitTables), 2}, body...)).Err())
	tb, _ := o.table("x")
	require.Equal(t, "s3://b/w/x2", tb.Location)
	assert.Empty(t, tb.FormerLocations)
	require.NoError(t, o.create("n", "s3://b/w/x").Err())
}

func TestOwnershipFollowsRenameAndDrop(t *testing.T) {
	o := newOwnFSM(t)
	require.NoError(t, o.create("a", "s3://b/w/a").Err())
	require.NoError(t, o.apply(RenameTable{From: Ident{Namespace: nsA, Name: "a"}, To: Ident{Namespace: nsA, Name: "c"}}).Err())
	res := o.create("n", "s3://b/w/a")
	require.ErrorIs(t, res.Err(), ErrLocationInUse)
	assert.Contains(t, res.Message, "a.c", "the message names the table under its new name")

	require.NoError(t, o.apply(DropTable{Ident: Ident{Namespace: nsA, Name: "c"}}).Err())
	require.NoError(t, o.create("n", "s3://b/w/a").Err(), "a dropped table owns nothing")
}

func TestOneCommitCannotClaimOverlappingLocations(t *testing.T) {
	o := newOwnFSM(t)
	res := o.apply(CommitTables{Changes: []TableChange{
		change(ChangeCreate, "x", "s3://b/w/x"),
		change(ChangeCreate, "y", "s3://b/w/x/y"),
	}})
	require.ErrorIs(t, res.Err(), ErrLocationInUse)
	_, ok := o.table("x")
	assert.False(t, ok, "all or nothing")
}

func TestPurgingLocationIsRefusedAsBeingPurged(t *testing.T) {
	o := newOwnFSM(t)
	require.NoError(t, o.create("a", "s3://b/w/a").Err())
	require.NoError(t, o.apply(DropTable{Ident: Ident{Namespace: nsA, Name: "a"}, Purge: true, Job: &PurgeJobSpec{ID: "j1"}}).Err())
	assert.ErrorIs(t, o.create("n", "s3://b/w/a/x").Err(), ErrBeingPurged)
	require.NoError(t, o.f.View(func(r *Reader) error {
		j, ok := r.PurgeJob("j1")
		require.True(t, ok)
		assert.Equal(t, "s3://b/w/a/", j.LocationKey, "the job keeps the key its tombstone is stored under")
		return nil
	}))
}

// A version-1 CommitTables entry (written before ownership was enforced)
// replays to the overlap it made, and the overlap is listed.
func TestLegacyCommitsReplayTheirOverlaps(t *testing.T) {
	o := newOwnFSM(t)
	require.NoError(t, o.create("a", "s3://b/w/a").Err())
	body := `{"changes":[{"kind":"register","ident":{"namespace":["a"],"name":"b"},"metadata-location":"s3://b/w/a/metadata/1.json","location":"s3://b/w/a","uuid":"u-a"}],"at-ms":1}`
	require.NoError(t, o.applyRaw(append([]byte{byte(TypeCommitTables), 1}, body...)).Err())
	_, ok := o.table("b")
	require.True(t, ok)

	var conflicts []LocationConflict
	require.NoError(t, o.f.View(func(r *Reader) error {
		conflicts, _ = r.LocationConflicts(0)
		owner, found := r.LocationOwner("s3://b/w/a/data/f.parquet")
		assert.True(t, found)
		assert.Equal(t, "s3://b/w/a", owner.Location)
		_, found = r.LocationOwner("s3://b/w/other/f.parquet")
		assert.False(t, found)
		return nil
	}))
	require.Len(t, conflicts, 1)
	assert.ElementsMatch(t, []string{"a", "b"}, []string{conflicts[0].Outer.Name, conflicts[0].Inner.Name})

	// A version-2 command for the same overlap is refused.
	assert.ErrorIs(t, o.apply(CommitTables{Changes: []TableChange{change(ChangeRegister, "c", "s3://b/w/a")}}).Err(), ErrLocationInUse)
}

// A file written before the location index existed gets the index built
// when it is opened (start or snapshot restore), overlaps included.
func TestIndexIsBuiltForStateWrittenBeforeIt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fsm.db")
	f, err := Open(path, nil)
	require.NoError(t, err)
	i := uint64(0)
	apply := func(c Command) {
		i++
		require.NoError(t, result(t, f.Apply(entry(t, i, c))).Err())
	}
	apply(CreateNamespace{Namespace: nsA})
	apply(create(Ident{Namespace: nsA, Name: "t1"}, "m1"))
	apply(create(Ident{Namespace: nsA, Name: "t2"}, "m2"))
	require.NoError(t, f.Close())

	// Make it look like an old file: no index bucket, no stamped keys, and
	// two tables at nested locations.
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		require.NoError(t, tx.DeleteBucket(bucketTableLocs))
		b := tx.Bucket(bucketTables)
		for name, loc := range map[string]string{"t1": "file:///w/t1", "t2": "file:///w/t1/nested"} {
			raw := fmt.Sprintf(`{"namespace":["a"],"name":%q,"uuid":"u","location":%q,"metadata-location":"m"}`, name, loc)
			require.NoError(t, b.Put(tableKey(Ident{Namespace: nsA, Name: name}), []byte(raw)))
		}
		return nil
	}))
	require.NoError(t, db.Close())

	f2 := mustOpen(t, path)
	require.NoError(t, f2.View(func(r *Reader) error {
		c, more := r.LocationConflicts(0)
		assert.False(t, more)
		require.Len(t, c, 1)
		assert.Equal(t, "t1", c[0].Outer.Name)
		assert.Equal(t, "t2", c[0].Inner.Name)
		tb, _ := r.Table(Ident{Namespace: nsA, Name: "t2"})
		assert.Equal(t, "file:///w/t1/nested/", tb.LocationKey, "records are stamped with the key they are indexed under")
		return nil
	}))
}

func TestRestoreThatCannotRenameKeepsTheOldState(t *testing.T) {
	src := mustOpen(t, filepath.Join(t.TempDir(), "src.db"))
	src.Apply(entry(t, 1, CreateNamespace{Namespace: []string{"from-snapshot"}}))
	snap, err := src.Snapshot()
	require.NoError(t, err)
	sink := &memSink{}
	require.NoError(t, snap.Persist(sink))
	snap.Release()

	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	f.Apply(entry(t, 1, CreateNamespace{Namespace: nsA}))
	renameFile = func(string, string) error { return errors.New("disk said no") }
	t.Cleanup(func() { renameFile = os.Rename })

	err = f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes())))
	require.ErrorContains(t, err, "disk said no")
	require.NoError(t, f.View(func(r *Reader) error {
		_, ok := r.Namespace(nsA)
		assert.True(t, ok, "the old state is still open and readable")
		return nil
	}))
	r := result(t, f.Apply(entry(t, 2, CreateNamespace{Namespace: []string{"b"}})))
	require.NoError(t, r.Err(), "and still applies")

	renameFile = os.Rename
	require.NoError(t, f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))))
	require.NoError(t, f.View(func(r *Reader) error {
		_, ok := r.Namespace([]string{"from-snapshot"})
		assert.True(t, ok)
		return nil
	}))
}

func TestKeyedIgnorableCommandIsSkipped(t *testing.T) {
	o := newOwnFSM(t)
	inner := []byte{byte(typeIgnorableForTest), 1, '{', '}'}
	res := o.apply(Keyed{Key: "k", Binding: Binding{Operation: "x"}, AtMs: 1, ExpiresMs: 10, Command: inner})
	require.NoError(t, res.Err())
	assert.False(t, res.Recorded)
}

// Only a command that may move a table is written as body version 3, which
// a replica on an older binary cannot read: the rest stays version 2.
func TestOnlyMovesAreWrittenAsVersion3(t *testing.T) {
	plain, err := Encode(CommitTables{Changes: []TableChange{change(ChangeUpdate, "x", "s3://b/w/x"), change(ChangeCreate, "y", "s3://b/w/y")}})
	require.NoError(t, err)
	assert.Equal(t, byte(2), plain[1])
	moving := change(ChangeUpdate, "x", "s3://b/w/x2")
	moving.Moves = true
	b, err := Encode(CommitTables{Changes: []TableChange{change(ChangeCreate, "y", "s3://b/w/y"), moving}})
	require.NoError(t, err)
	assert.Equal(t, byte(3), b[1])
	assert.NotContains(t, string(b), "moves", "the hint picks the version and is not stored")
	decoded, err := Decode(b)
	require.NoError(t, err)
	again, err := Encode(decoded)
	require.NoError(t, err)
	assert.Equal(t, b, again, "a version 3 entry encodes again as version 3")
}

// S3 keeps "a//b" apart from "a/b", but S3A and file-backed S3 servers do
// not: the readers that protect files find a table under either spelling,
// while Apply keys locations as it always did.
func TestLocationOwnerReadsBothSpellings(t *testing.T) {
	o := newOwnFSM(t)
	require.NoError(t, o.create("a", "s3://b/w/a").Err())
	require.NoError(t, o.create("legacy", "s3://b/x//l").Err(), "Apply keys it as it always did (the catalog refuses such a new location)")
	assert.Equal(t, "s3://b/w//a/", LocationKey("s3://b/w//a"), "LocationKey is unchanged")
	self := Ident{Namespace: nsA, Name: "other"}
	require.NoError(t, o.f.View(func(r *Reader) error {
		for uri, want := range map[string]string{
			"s3://b/w//a/data/f.parquet":  "a",
			"s3://b//w/a/metadata/m.json": "a",
			"s3://b/x//l/data/f.parquet":  "legacy",
		} {
			owner, found := r.LocationOwner(uri)
			require.True(t, found, uri)
			assert.Equal(t, want, owner.Name, uri)
			owner, found = r.LocationOwnerExcept(uri, self)
			require.True(t, found, uri)
			assert.Equal(t, want, owner.Name, uri)
		}
		_, found := r.LocationOwner("s3://b/w//other/f")
		assert.False(t, found)
		return nil
	}))
}

// A register adopts the places its metadata points into (body version 4):
// those no other live table holds, none being purged, none inside its own
// location, at most maxFormerLocations in all. A place held elsewhere is
// not adopted and the register still applies.
func TestRegisterAdoptsFreePlaces(t *testing.T) {
	o := newOwnFSM(t)
	require.NoError(t, o.create("held", "s3://b/w/held").Err())
	require.NoError(t, o.create("gone", "s3://b/w/gone").Err())
	require.NoError(t, o.apply(DropTable{Ident: Ident{Namespace: nsA, Name: "gone"}, Purge: true, Job: &PurgeJobSpec{ID: "j1"}}).Err())
	reg := change(ChangeRegister, "x", "s3://b/w/x2")
	for _, loc := range []string{"s3://b/w/x", "s3://b/w/held", "s3://b/w/held/inner", "s3://b/w/gone", "s3://b/w/x2/inside", "s3://b/w/x", "s3://b/w/y"} {
		reg.Adopts = append(reg.Adopts, FormerLocation{Location: loc, Key: LocationKey(loc)})
	}
	b, err := Encode(CommitTables{Changes: []TableChange{reg}})
	require.NoError(t, err)
	assert.Equal(t, byte(4), b[1])
	require.NoError(t, o.applyRaw(b).Err())
	tb, _ := o.table("x")
	assert.Equal(t, []string{"s3://b/w/x/", "s3://b/w/y/"}, formerKeys(tb))
	res := o.create("n", "s3://b/w/x/sub")
	require.ErrorIs(t, res.Err(), ErrLocationInUse)
	assert.Contains(t, res.Message, "a.x")

	// Bounded: a register adopting more than the table may own keeps the
	// first ones; a command listing more is invalid.
	many := change(ChangeRegister, "m", "s3://b/w/m")
	for i := range maxFormerLocations + 1 {
		loc := fmt.Sprintf("s3://b/w/m%d", i)
		many.Adopts = append(many.Adopts, FormerLocation{Location: loc, Key: LocationKey(loc)})
	}
	require.ErrorIs(t, o.apply(CommitTables{Changes: []TableChange{many}}).Err(), ErrInvalidCommand)
	many.Adopts = many.Adopts[:maxFormerLocations]
	require.NoError(t, o.apply(CommitTables{Changes: []TableChange{many}}).Err())
	tb, _ = o.table("m")
	assert.Len(t, tb.FormerLocations, maxFormerLocations)
}
