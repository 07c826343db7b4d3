package fsm

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func viewIdent(name string) Ident { return Ident{Namespace: nsA, Name: name} }

func createView(name, loc string) CreateView {
	return CreateView{Ident: viewIdent(name), UUID: "v-" + name, Location: loc, LocationKey: LocationKey(loc),
		MetadataLocation: loc + "/metadata/00000-a.metadata.json", AtMs: 1}
}

func (o *ownFSM) view(name string) (View, bool) {
	var (
		v  View
		ok bool
	)
	require.NoError(o.t, o.f.View(func(r *Reader) error {
		v, ok = r.View(viewIdent(name))
		return nil
	}))
	return v, ok
}

func TestViewLifecycle(t *testing.T) {
	o := newOwnFSM(t)
	missingNS := createView("v", "s3://b/w/v")
	missingNS.Ident.Namespace = []string{"nope"}
	assert.ErrorIs(t, o.apply(missingNS).Err(), ErrNoSuchNamespace)

	res := o.apply(createView("v", "s3://b/w/v"))
	require.NoError(t, res.Err())
	require.Len(t, res.Views, 1)
	assert.Equal(t, "s3://b/w/v/metadata/00000-a.metadata.json", res.Views[0].MetadataLocation)
	assert.Equal(t, "s3://b/w/v/", res.Views[0].LocationKey)
	assert.ErrorIs(t, o.apply(createView("v", "s3://b/w/v2")).Err(), ErrAlreadyExists)

	// Replace: a compare-and-set of the pointer, guarded by the UUID.
	replace := ReplaceView{Ident: viewIdent("v"), ExpectedMetadataLocation: "s3://b/w/v/metadata/00000-a.metadata.json",
		ExpectedUUID: "v-v", MetadataLocation: "s3://b/w/v/metadata/00001-b.metadata.json", Location: "s3://b/w/v",
		LocationKey: "s3://b/w/v/", AtMs: 2}
	wrongUUID := replace
	wrongUUID.ExpectedUUID = "other"
	assert.ErrorIs(t, o.apply(wrongUUID).Err(), ErrCommitFailed)
	res = o.apply(replace)
	require.NoError(t, res.Err())
	assert.Equal(t, "s3://b/w/v/metadata/00001-b.metadata.json", res.Views[0].MetadataLocation)
	assert.Equal(t, int64(1), res.Views[0].CreatedMs)
	assert.Equal(t, int64(2), res.Views[0].UpdatedMs)
	assert.ErrorIs(t, o.apply(replace).Err(), ErrCommitFailed, "the same compare-and-set again lost")
	v, ok := o.view("v")
	require.True(t, ok)
	assert.Equal(t, "s3://b/w/v/metadata/00001-b.metadata.json", v.MetadataLocation)

	missing := replace
	missing.Ident = viewIdent("none")
	assert.ErrorIs(t, o.apply(missing).Err(), ErrNoSuchView)

	// Drop returns the entry as it was.
	res = o.apply(DropView{Ident: viewIdent("v"), AtMs: 3})
	require.NoError(t, res.Err())
	assert.Equal(t, v, res.Views[0])
	_, ok = o.view("v")
	assert.False(t, ok)
	assert.ErrorIs(t, o.apply(DropView{Ident: viewIdent("v")}).Err(), ErrNoSuchView)
	res = o.apply(DropView{Ident: Ident{Namespace: []string{"nope"}, Name: "v"}})
	assert.ErrorIs(t, res.Err(), ErrNoSuchView)
	assert.Contains(t, res.Message, "namespace nope does not exist")
}

func TestRenameView(t *testing.T) {
	o := newOwnFSM(t)
	require.NoError(t, o.apply(CreateNamespace{Namespace: []string{"b"}}).Err())
	require.NoError(t, o.apply(createView("v", "s3://b/w/v")).Err())
	to := Ident{Namespace: []string{"b"}, Name: "w"}

	assert.ErrorIs(t, o.apply(RenameView{From: viewIdent("none"), To: to}).Err(), ErrNoSuchView)
	assert.ErrorIs(t, o.apply(RenameView{From: viewIdent("v"), To: Ident{Namespace: []string{"nope"}, Name: "w"}}).Err(), ErrNoSuchNamespace)

	res := o.apply(RenameView{From: viewIdent("v"), To: to, AtMs: 5})
	require.NoError(t, res.Err())
	assert.Equal(t, to, res.Views[0].Ident())
	_, ok := o.view("v")
	assert.False(t, ok)
	require.NoError(t, o.f.View(func(r *Reader) error {
		v, ok := r.View(to)
		require.True(t, ok)
		assert.Equal(t, "s3://b/w/v", v.Location, "a rename keeps the location")
		owner, found := r.LocationOwner(v.MetadataLocation)
		require.True(t, found)
		assert.Equal(t, to, owner.Ident(), "the location index follows the rename")
		return nil
	}))
}

// A name in a namespace is a table or a view, never both, whichever
// command gives it.
func TestViewsAndTablesShareOneNamespace(t *testing.T) {
	o := newOwnFSM(t)
	require.NoError(t, o.create("t", "s3://b/w/t").Err())
	require.NoError(t, o.apply(createView("v", "s3://b/w/v")).Err())

	res := o.apply(createView("t", "s3://b/w/other"))
	assert.ErrorIs(t, res.Err(), ErrAlreadyExists)
	assert.Equal(t, "table already exists: a.t", res.Message)

	res = o.create("v", "s3://b/w/other")
	assert.ErrorIs(t, res.Err(), ErrAlreadyExists)
	assert.Equal(t, "view already exists: a.v", res.Message)
	reg := change(ChangeRegister, "v", "s3://b/w/other")
	reg.Overwrite = true
	assert.ErrorIs(t, o.apply(CommitTables{Changes: []TableChange{reg}}).Err(), ErrAlreadyExists, "overwrite replaces tables only")

	assert.ErrorIs(t, o.apply(RenameTable{From: viewIdent("t"), To: viewIdent("v")}).Err(), ErrAlreadyExists)
	assert.ErrorIs(t, o.apply(RenameView{From: viewIdent("v"), To: viewIdent("t")}).Err(), ErrAlreadyExists)
	require.NoError(t, o.apply(createView("w", "s3://b/w/w")).Err())
	assert.ErrorIs(t, o.apply(RenameView{From: viewIdent("v"), To: viewIdent("w")}).Err(), ErrAlreadyExists)

	tb, ok := o.table("t")
	require.True(t, ok)
	assert.Equal(t, "s3://b/w/t", tb.Location)
	_, ok = o.table("v")
	assert.False(t, ok)

	// Once the view is gone, a table may take its name.
	require.NoError(t, o.apply(DropView{Ident: viewIdent("v")}).Err())
	require.NoError(t, o.create("v", "s3://b/w/v").Err())
}

func TestNamespaceWithAViewIsNotEmpty(t *testing.T) {
	o := newOwnFSM(t)
	require.NoError(t, o.apply(createView("v", "s3://b/w/v")).Err())
	res := o.apply(DropNamespace{Namespace: nsA})
	assert.ErrorIs(t, res.Err(), ErrNamespaceNotEmpty)
	assert.Contains(t, res.Message, "contains views")
	require.NoError(t, o.apply(DropView{Ident: viewIdent("v")}).Err())
	require.NoError(t, o.apply(DropNamespace{Namespace: nsA}).Err())
}

// A commit deletes a metadata file that fell out of its log only when no
// live table but itself, and no live view as its current metadata file,
// holds it.
func TestLocationOwnerExcept(t *testing.T) {
	o := newOwnFSM(t)
	require.NoError(t, o.create("t", "s3://b/w/t").Err())
	require.NoError(t, o.create("inner", "s3://b/w/other/inner").Err())
	require.NoError(t, o.apply(createView("beside", "s3://b/w/t")).Err())
	self := Ident{Namespace: nsA, Name: "t"}
	require.NoError(t, o.f.View(func(r *Reader) error {
		_, found := r.LocationOwnerExcept("s3://b/w/t/metadata/00001-x.metadata.json", self)
		assert.False(t, found, "the table's own file")
		owner, found := r.LocationOwnerExcept("s3://b/w/t/metadata/00000-a.metadata.json", self)
		require.True(t, found, "the current metadata file of a view beside the table")
		assert.Equal(t, viewIdent("beside"), owner.Ident())
		owner, found = r.LocationOwnerExcept("s3://b/w//other/inner/metadata/00000.metadata.json", self)
		require.True(t, found, "another table's file, spelled with an empty segment")
		assert.Equal(t, "inner", owner.Name)
		_, found = r.LocationOwnerExcept("s3://b/w/nobody/f.json", self)
		assert.False(t, found)
		return nil
	}))
}

func TestViewLocationOwnership(t *testing.T) {
	o := newOwnFSM(t)
	require.NoError(t, o.create("t", "s3://b/w/t").Err())
	require.NoError(t, o.apply(createView("v", "s3://b/w/v")).Err())

	// A view's location may not be equal to, inside or around another
	// live view's.
	for _, loc := range []string{"s3://b/w/v", "s3://b/w", "s3a://b/w/v/sub/"} {
		res := o.apply(createView("x", loc))
		assert.ErrorIs(t, res.Err(), ErrLocationInUse, loc)
		assert.Contains(t, res.Message, "the location of view a.v", loc)
	}
	// s3://b/w/v/ never prefixes s3://b/w/v2/.
	require.NoError(t, o.apply(createView("v2", "s3://b/w/v2")).Err())
	// A view and a table may share a location, either way round, as
	// Iceberg's reference catalog allows.
	require.NoError(t, o.apply(createView("beside", "s3://b/w/t")).Err())
	require.NoError(t, o.create("under", "s3://b/w/v2/under").Err())

	// Moving a view onto another view's location is refused; moving it
	// elsewhere frees the old location.
	move := ReplaceView{Ident: viewIdent("v"), ExpectedMetadataLocation: "s3://b/w/v/metadata/00000-a.metadata.json",
		ExpectedUUID: "v-v", MetadataLocation: "s3://b/w/moved/metadata/00001-b.metadata.json", AtMs: 2}
	move.Location, move.LocationKey = "s3://b/w/v2/v", LocationKey("s3://b/w/v2/v")
	assert.ErrorIs(t, o.apply(move).Err(), ErrLocationInUse)
	move.Location, move.LocationKey = "s3://b/w/moved", LocationKey("s3://b/w/moved")
	require.NoError(t, o.apply(move).Err())
	require.NoError(t, o.apply(createView("x", "s3://b/w/v")).Err(), "the view's old location is free")

	require.NoError(t, o.f.View(func(r *Reader) error {
		owner, found := r.LocationOwner("s3://b/w/moved/metadata/00001-b.metadata.json")
		require.True(t, found, "the purge worker never deletes a live view's metadata file")
		assert.Equal(t, viewIdent("v"), owner.Ident())
		assert.Equal(t, "s3://b/w/moved", owner.Location)
		_, found = r.LocationOwner("s3://b/w/moved/data/f.parquet")
		assert.False(t, found, "the rest of a view's location is no view's")
		owner, found = r.LocationOwner("s3://b/w/t/data/f.parquet")
		require.True(t, found)
		assert.Equal(t, viewIdent("t"), owner.Ident(), "a table owns its location even with a view beside it")
		assert.Error(t, r.CheckViewClaim(viewIdent("y"), "s3://b/w/moved/y"))
		assert.NoError(t, r.CheckViewClaim(viewIdent("v"), "s3://b/w/moved"), "a view never conflicts with itself")
		assert.NoError(t, r.CheckClaim(viewIdent("z"), "s3://b/w/moved"), "a table may lie at a view's location")
		conflicts, _ := r.LocationConflicts(0)
		assert.Empty(t, conflicts)
		return nil
	}))

	// Dropping a view frees its location for views.
	require.NoError(t, o.apply(DropView{Ident: viewIdent("v")}).Err())
	require.NoError(t, o.apply(createView("y", "s3://b/w/moved")).Err())
}

// A view may not claim a location a purge job still holds; a purged
// table's name is free for a view.
func TestViewLocationBeingPurged(t *testing.T) {
	o := newOwnFSM(t)
	require.NoError(t, o.create("t", "s3://b/w/t").Err())
	require.NoError(t, o.apply(DropTable{Ident: viewIdent("t"), Purge: true,
		Job: &PurgeJobSpec{ID: "job-1", Warehouse: "s3://b/w", DroppedBy: "me"}, AtMs: 2}).Err())
	assert.ErrorIs(t, o.apply(createView("v", "s3://b/w/t/v")).Err(), ErrBeingPurged)
	assert.ErrorIs(t, o.apply(createView("t", "s3://b/w/t")).Err(), ErrBeingPurged)
	require.NoError(t, o.apply(createView("t", "s3://b/w/elsewhere")).Err())
}

func TestListViews(t *testing.T) {
	o := newOwnFSM(t)
	require.NoError(t, o.apply(CreateNamespace{Namespace: []string{"a", "sub"}}).Err())
	for _, name := range []string{"c", "a", "b"} {
		require.NoError(t, o.apply(createView(name, "s3://b/w/"+name)).Err())
	}
	sub := createView("z", "s3://b/w/z")
	sub.Ident.Namespace = []string{"a", "sub"}
	require.NoError(t, o.apply(sub).Err())
	require.NoError(t, o.create("t", "s3://b/w/t").Err())

	require.NoError(t, o.f.View(func(r *Reader) error {
		names := func(list []View) []string {
			var out []string
			for _, v := range list {
				out = append(out, v.Name)
			}
			return out
		}
		all, more := r.Views(nsA, "", 0)
		assert.Equal(t, []string{"a", "b", "c"}, names(all), "views only, of this namespace only")
		assert.False(t, more)
		page, more := r.Views(nsA, "", 2)
		assert.Equal(t, []string{"a", "b"}, names(page))
		assert.True(t, more)
		page, more = r.Views(nsA, "b", 2)
		assert.Equal(t, []string{"c"}, names(page))
		assert.False(t, more)
		tables, _ := r.Tables(nsA, "", 0)
		assert.Len(t, tables, 1, "views are not tables")
		viewNames, more := r.ViewNames(nsA, "", 0)
		assert.Equal(t, []string{"a", "b", "c"}, viewNames)
		assert.False(t, more)
		viewNames, more = r.ViewNames(nsA, "a", 1)
		assert.Equal(t, []string{"b"}, viewNames)
		assert.True(t, more)
		viewNames, _ = r.ViewNames([]string{"a", "sub"}, "", 0)
		assert.Equal(t, []string{"z"}, viewNames)
		tableNames, _ := r.TableNames(nsA, "", 0)
		assert.Equal(t, []string{"t"}, tableNames)
		return nil
	}))
}

func TestMalformedViewCommandsAreRefused(t *testing.T) {
	o := newOwnFSM(t)
	for _, c := range []Command{
		CreateView{Ident: Ident{Namespace: nsA, Name: ""}},
		CreateView{Ident: viewIdent("v"), Location: "s3://b/" + string(make([]byte, maxLocationBytes))},
		ReplaceView{Ident: Ident{Name: "v"}},
		DropView{Ident: Ident{Namespace: nsA}},
		RenameView{From: viewIdent("v"), To: Ident{Namespace: []string{""}, Name: "w"}},
	} {
		assert.ErrorIs(t, o.apply(c).Err(), ErrInvalidCommand, "%#v", c)
	}
}

// Keyed view commands store their outcome, except a lost compare-and-set,
// which the proposer retries with the same key.
func TestKeyedViewCommands(t *testing.T) {
	o := newOwnFSM(t)
	keyed := func(key string, c Command) Keyed {
		raw, err := Encode(c)
		require.NoError(t, err)
		return Keyed{Key: key, Binding: Binding{Operation: "op", Route: key}, AtMs: 1, ExpiresMs: 1000, Command: raw}
	}
	first := o.apply(keyed("k1", createView("v", "s3://b/w/v")))
	require.NoError(t, first.Err())
	assert.True(t, first.Recorded)
	again := o.apply(keyed("k1", createView("v", "s3://b/w/v")))
	require.NoError(t, again.Err(), "a replay answers the stored outcome, not already-exists")
	assert.True(t, again.Replayed)
	assert.Equal(t, replayable("op", first).Views, again.Views, "as a record keeps it: no times")

	stale := ReplaceView{Ident: viewIdent("v"), ExpectedMetadataLocation: "stale", MetadataLocation: "m1", Location: "s3://b/w/v"}
	lost := o.apply(keyed("k2", stale))
	assert.ErrorIs(t, lost.Err(), ErrCommitFailed)
	assert.False(t, lost.Recorded)
	require.NoError(t, o.f.View(func(r *Reader) error {
		_, ok := r.IdempotencyRecord("k2")
		assert.False(t, ok)
		return nil
	}))
}

// A file whose location index is rebuilt (opened without it) indexes its
// views again.
func TestIndexRebuildKeepsViews(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	f, err := Open(path, nil)
	require.NoError(t, err)
	require.NoError(t, result(t, f.Apply(entry(t, 1, CreateNamespace{Namespace: nsA}))).Err())
	require.NoError(t, result(t, f.Apply(entry(t, 2, createView("v", "s3://b/w/v")))).Err())
	require.NoError(t, f.Close())

	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketTableLocs) }))
	require.NoError(t, db.Close())

	f2 := mustOpen(t, path)
	require.NoError(t, f2.View(func(r *Reader) error {
		owner, found := r.LocationOwner("s3://b/w/v/metadata/00000-a.metadata.json")
		require.True(t, found)
		assert.Equal(t, viewIdent("v"), owner.Ident())
		assert.Error(t, r.CheckViewClaim(viewIdent("w"), "s3://b/w/v/inner"), "the rebuilt index still holds the view")
		return nil
	}))
}
