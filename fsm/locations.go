package fsm

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/floe-catalog/floe/internal/location"
)

// Location ownership: a location belongs to one table or view. Every live
// table and view is indexed by its normalised location, so "is this
// location equal to, inside or around a live table's or view's?" is a few
// bbolt seeks, decided inside Apply.
//
//	table_locs   normalised location, 0x00, table key → table key
//	             normalised location, 0x00, 0x01, view key → 0x01, view key
//
// Live views are indexed in the same bucket (see views.go), so a location
// belongs to one table or view.
//
// A location key is what LocationKey returns. The proposer stamps it into
// the command (TableChange.LocationKey, CreateView.LocationKey) and the
// record keeps it, so the index and the purge tombstones never depend on
// how a later release normalises locations. Records written before keys
// were stamped are keyed with this binary's LocationKey when the index is
// built (buildLocationIndex).
var bucketTableLocs = []byte("table_locs")

func init() {
	allBuckets = append(allBuckets, bucketTableLocs)
}

// LocationKey is the normalised form locations are compared in: scheme,
// bucket and key as location.ParseURI normalises them (s3a:// and s3n:// are
// s3://, file:/x and file:///x are /x), with exactly one trailing slash, so
// "equal, inside or containing" become string-prefix tests on whole path
// segments: s3://b/t1/ never prefixes s3://b/t10/. A location ParseURI
// refuses is kept verbatim behind a marker (control bytes escaped): it
// matches only itself and what lies lexically below it.
func LocationKey(uri string) string {
	if uri == "" {
		return "" // no location: owns nothing
	}
	scheme, bucket, key, err := location.ParseURI(uri)
	if err != nil {
		raw := strings.TrimRight(uri, "/")
		raw = strings.ReplaceAll(raw, "\x00", "%00")
		return "raw:" + raw + "/"
	}
	key = strings.Trim(key, "/")
	n := scheme + "://" + bucket + "/"
	if key != "" {
		n += key + "/"
	}
	return n
}

// stampedKey is the location key a proposer stamped, or this binary's
// normalisation of loc for records written before keys were stamped.
func stampedKey(stamped, loc string) string {
	if stamped != "" {
		return stamped
	}
	return LocationKey(loc)
}

func (tb Table) locKey() string { return stampedKey(tb.LocationKey, tb.Location) }

func ownerKey(norm string, id Ident) []byte {
	return append([]byte(norm+"\x00"), tableKey(id)...)
}

// ownedKeys are the location keys a table holds in the index: its
// location's and its former locations'.
func (tb Table) ownedKeys() []string { return keysWithFormer(tb.locKey(), tb.FormerLocations) }

// keysWithFormer is key followed by the former locations' keys, without
// the empty ones.
func keysWithFormer(key string, former []FormerLocation) []string {
	var keys []string
	if key != "" {
		keys = append(keys, key)
	}
	for _, f := range former {
		if f.Key != "" {
			keys = append(keys, f.Key)
		}
	}
	return keys
}

func (t *txn) indexTable(tb Table) {
	for _, k := range tb.ownedKeys() {
		if err := t.tx.Bucket(bucketTableLocs).Put(ownerKey(k, tb.Ident()), tableKey(tb.Ident())); err != nil {
			panic(fmt.Sprintf("fsm: put location index: %v", err))
		}
	}
}

func (t *txn) unindexTable(tb Table) {
	for _, k := range tb.ownedKeys() {
		t.del(bucketTableLocs, ownerKey(k, tb.Ident()))
	}
}

// movedFrom returns the former locations of a table that moves from cur's
// location to the location keyed next: cur's, plus the one it leaves,
// less the one it moves to (a table moving back owns it as its location).
func movedFrom(cur Table, next string) []FormerLocation {
	var out []FormerLocation
	add := func(f FormerLocation) {
		if f.Key == "" || f.Key == next {
			return
		}
		for _, o := range out {
			if o.Key == f.Key {
				return
			}
		}
		out = append(out, f)
	}
	for _, f := range cur.FormerLocations {
		add(f)
	}
	add(FormerLocation{Location: cur.Location, Key: cur.locKey()})
	return out
}

// scanOverlaps calls visit with every key and value of a location-prefixed
// index (keys: location key, 0x00, suffix) whose location is equal to,
// inside or containing the location key n, until visit returns false. It
// costs one seek for "equal or inside" plus one per ancestor of n.
func scanOverlaps(c *bolt.Cursor, n string, visit func(k, v []byte) bool) {
	// Equal to or inside n: keys starting with n (n ends in "/").
	for k, v := c.Seek([]byte(n)); k != nil && bytes.HasPrefix(k, []byte(n)); k, v = c.Next() {
		if !visit(k, v) {
			return
		}
	}
	// Containing n: an entry at one of n's ancestors (each ends in "/").
	// The scheme's "://" holds no ancestor, so start after it.
	start := strings.Index(n, "://")
	if start < 0 {
		return
	}
	for i := start + 3; i < len(n)-1; i++ {
		if n[i] != '/' {
			continue
		}
		anc := []byte(n[:i+1] + "\x00")
		for k, v := c.Seek(anc); k != nil && bytes.HasPrefix(k, anc); k, v = c.Next() {
			if !visit(k, v) {
				return
			}
		}
	}
}

// locHolder is what an entry of the location index names: a live table
// or a live view (exactly one of the two is set).
type locHolder struct {
	table *Table
	view  *View
	// key is the index entry's location key: the holder's location's, or
	// one of a table's former locations'.
	key string
}

// asTable is the holder as a Table value; a view keeps its identifier,
// UUID, locations and times.
func (h locHolder) asTable() Table {
	if h.table != nil {
		return *h.table
	}
	return h.view.asTable()
}

// isTable matches the holder that is the table at id.
func isTable(id Ident) func(locHolder) bool {
	self := string(tableKey(id))
	return func(h locHolder) bool { return h.table != nil && string(tableKey(h.table.Ident())) == self }
}

// isView matches the holder that is the view at id.
func isView(id Ident) func(locHolder) bool {
	self := string(tableKey(id))
	return func(h locHolder) bool { return h.view != nil && string(tableKey(h.view.Ident())) == self }
}

// otherTables matches every holder but the other live tables: what a
// table's location may not overlap. A table and a view may share a
// location (Iceberg's reference catalog allows it, and clients' own
// suites do it): a view keeps only its metadata files there, and a purge
// never deletes a live view's current metadata file (Reader.LocationOwner)
// nor, told by their content, its earlier ones (Reader.ViewOverlapping).
func otherTables(id Ident) func(locHolder) bool {
	self := isTable(id)
	return func(h locHolder) bool { return h.view != nil || self(h) }
}

// otherViews matches every holder but the other live views: what a view's
// location may not overlap.
func otherViews(id Ident) func(locHolder) bool {
	self := isView(id)
	return func(h locHolder) bool { return h.table != nil || self(h) }
}

// locationOwner returns a live table or view, other than those skip
// matches (nil: none), whose location overlaps the location key n.
func locationOwner(tx *bolt.Tx, n string, skip func(locHolder) bool) (locHolder, bool) {
	if n == "" {
		return locHolder{}, false
	}
	var (
		owner locHolder
		found bool
	)
	tables := tx.Bucket(bucketTables)
	scanOverlaps(tx.Bucket(bucketTableLocs).Cursor(), n, func(k, v []byte) bool {
		h := locHolder{key: string(k[:bytes.IndexByte(k, 0)])}
		if isViewEntry(v) {
			vw := indexedView(tx, v)
			h.view = &vw
		} else {
			raw := tables.Get(v)
			if raw == nil {
				panic(fmt.Sprintf("fsm: location index names missing table %q", v))
			}
			var tb Table
			mustUnmarshal(v, raw, &tb)
			h.table = &tb
		}
		if skip != nil && skip(h) {
			return true
		}
		owner, found = h, true
		return false
	})
	return owner, found
}

func locationTaken(loc string, owner locHolder) Result {
	if owner.view != nil {
		return fail(StatusLocationInUse, "location %s overlaps %s, the location of view %s; a location belongs to one table or view",
			loc, owner.view.Location, owner.view.Ident())
	}
	for _, f := range owner.table.FormerLocations {
		if f.Key == owner.key && f.Key != owner.table.locKey() {
			return fail(StatusLocationInUse, "location %s overlaps %s, a location table %s moved away from and whose files its snapshots may still reference; a location belongs to one table until it is dropped",
				loc, f.Location, owner.table.Ident())
		}
	}
	return fail(StatusLocationInUse, "location %s overlaps %s, the location of table %s; a location belongs to one table",
		loc, owner.table.Location, owner.table.Ident())
}

// keysOverlap reports whether two location keys are equal or nested.
func keysOverlap(a, b string) bool {
	return strings.HasPrefix(a, b) || strings.HasPrefix(b, a)
}

// KeysOverlap is keysOverlap for proposers: two location keys
// (LocationKey) that are equal or nested.
func KeysOverlap(a, b string) bool { return keysOverlap(a, b) }

// buildLocationIndex fills table_locs from the tables bucket when the file
// was written before the index existed (the bucket is missing), stamping
// each table record with the key it is indexed under. It runs when a file
// is opened (start and snapshot restore), so every replica derives the same
// index from the same state; overlaps already present are indexed as they
// are (see Reader.LocationConflicts).
func buildLocationIndex(tx *bolt.Tx) error {
	if tx.Bucket(bucketTableLocs) != nil {
		return nil
	}
	idx, err := tx.CreateBucket(bucketTableLocs)
	if err != nil {
		return err
	}
	tables := tx.Bucket(bucketTables)
	if tables == nil {
		return nil
	}
	var stamped []Table
	err = tables.ForEach(func(k, v []byte) error {
		var tb Table
		mustUnmarshal(k, v, &tb)
		if tb.LocationKey == "" && tb.Location != "" {
			tb.LocationKey = LocationKey(tb.Location)
			stamped = append(stamped, tb)
		}
		for _, k := range tb.ownedKeys() {
			if err := idx.Put(ownerKey(k, tb.Ident()), tableKey(tb.Ident())); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	t := &txn{tx: tx}
	for _, tb := range stamped {
		t.put(bucketTables, tableKey(tb.Ident()), tb)
	}
	// Views came after the index, so a file without it holds none, unless
	// the index was removed by hand; every view record carries its key.
	if views := tx.Bucket(bucketViews); views != nil {
		err = views.ForEach(func(k, v []byte) error {
			var vw View
			mustUnmarshal(k, v, &vw)
			if vw.locKey() == "" {
				return nil
			}
			return idx.Put(viewOwnerKey(vw.locKey(), vw.Ident()), viewIndexValue(vw.Ident()))
		})
	}
	return err
}

// --- reads ---

// LocationOwner returns a live table whose location is equal to, inside or
// contains uri, or a live view whose current metadata file is uri, if any;
// a view is returned as a Table value with its identifier, UUID and
// locations. The purge worker asks it before each delete batch: a file
// inside a live table's location, or a live view's metadata file, is never
// deleted. (A view may share a table's location, so the rest of a view's
// location belongs to whichever table lies there.)
func (r *Reader) LocationOwner(uri string) (Table, bool) {
	for _, key := range fileKeys(uri) {
		if h, ok := locationOwner(r.tx, key, func(h locHolder) bool { return h.view != nil }); ok {
			return h.asTable(), true
		}
		if h, ok := locationOwner(r.tx, key, func(h locHolder) bool {
			return h.table != nil || !sameFileKey(h.view.MetadataLocation, key)
		}); ok {
			return h.asTable(), true
		}
	}
	return Table{}, false
}

// ViewOverlapping returns a live view whose location is equal to, inside
// or around uri's (under any of fileKeys(uri)): for a file, the view whose
// place holds it. LocationOwner protects only a view's current metadata
// file, since a table may share a view's location; its earlier metadata
// files lie in the same place, and a table's metadata log may name them.
// Code that deletes a table's files reads those a view's place holds
// before it deletes them (storage.IsTableMetadata), and a register does
// not adopt a place a view holds.
func (r *Reader) ViewOverlapping(uri string) (View, bool) {
	for _, key := range fileKeys(uri) {
		if h, ok := locationOwner(r.tx, key, func(h locHolder) bool { return h.table != nil }); ok {
			return *h.view, true
		}
	}
	return View{}, false
}

// fileKeys are the location keys a file is looked up under by the readers
// that protect files (LocationOwner, LocationOwnerExcept): LocationKey(uri)
// and, when its S3 key holds an empty segment, the same with repeated
// slashes collapsed. S3 keeps "a//b" apart from "a/b"; Hadoop's Path, S3A
// and S3 servers backed by a file system read them as one place, so a file
// either spelling names is protected. (Apply keys locations with
// LocationKey alone, unchanged, so every binary decides the same; the
// catalog refuses new locations with an empty segment.)
func fileKeys(uri string) []string {
	key := LocationKey(uri)
	if !strings.HasPrefix(key, "s3://") || !strings.Contains(key[len("s3://"):], "//") {
		return []string{key}
	}
	rest := key[len("s3://"):]
	for strings.Contains(rest, "//") {
		rest = strings.ReplaceAll(rest, "//", "/")
	}
	return []string{key, "s3://" + rest}
}

// sameFileKey reports whether loc names the file whose key (one of
// fileKeys) is key.
func sameFileKey(loc, key string) bool {
	return slices.Contains(fileKeys(loc), key)
}

// LocationOwnerExcept is LocationOwner ignoring the table at self: a live
// table other than self whose location is equal to, inside or contains
// uri, or a live view whose current metadata file is uri. A commit asks it
// before deleting the metadata files that fell out of its table's log
// (write.metadata.delete-after-commit): a registered table's log may name
// any file, and only those self alone holds are its to delete.
func (r *Reader) LocationOwnerExcept(uri string, self Ident) (Table, bool) {
	selfTable := isTable(self)
	var (
		h  locHolder
		ok bool
	)
	for _, key := range fileKeys(uri) {
		if h, ok = locationOwner(r.tx, key, func(h locHolder) bool {
			if h.table != nil {
				return selfTable(h)
			}
			return !sameFileKey(h.view.MetadataLocation, key)
		}); ok {
			break
		}
	}
	if !ok {
		return Table{}, false
	}
	return h.asTable(), true
}

// CheckClaim answers, from this view, what Apply would answer for a table
// at id claiming loc: the name or location being purged, or the location
// owned by another live table; nil when neither. It is advice for a
// proposer that wants to refuse before writing files: Apply decides again.
func (r *Reader) CheckClaim(id Ident, loc string) error {
	if j, ok := r.PurgeTombstone(id); ok {
		return beingPurgedName(id, j).Err()
	}
	if j, ok := r.PurgeLocationTombstone(loc); ok {
		return beingPurgedLocation(loc, j).Err()
	}
	if owner, ok := locationOwner(r.tx, LocationKey(loc), otherTables(id)); ok {
		return locationTaken(loc, owner).Err()
	}
	return nil
}

// LocationConflict is a pair of live tables whose locations are equal or
// nested: state written before ownership was enforced, or registered while
// an older binary led.
type LocationConflict struct {
	Outer Table `json:"outer"`
	Inner Table `json:"inner"`
}

// LocationConflicts lists pairs of live tables with equal or nested
// locations, in location order, at most limit (limit <= 0: all). One pass
// over the index: entries sort by location key, so each entry's ancestors
// are on a stack of the entries before it. Views are left out: every
// command that gives a view a location checks it, so no view overlaps.
func (r *Reader) LocationConflicts(limit int) (out []LocationConflict, more bool) {
	type entry struct {
		key string
		tk  []byte
	}
	var stack []entry
	// A table with former locations has several entries: each pair of
	// tables is listed once.
	type pair struct{ a, b string }
	listed := map[pair]bool{}
	pairOf := func(x, y []byte) pair {
		if bytes.Compare(x, y) > 0 {
			x, y = y, x
		}
		return pair{string(x), string(y)}
	}
	tables := r.tx.Bucket(bucketTables)
	load := func(tk []byte) Table {
		var tb Table
		raw := tables.Get(tk)
		if raw == nil {
			panic(fmt.Sprintf("fsm: location index names missing table %q", tk))
		}
		mustUnmarshal(tk, raw, &tb)
		return tb
	}
	c := r.tx.Bucket(bucketTableLocs).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if isViewEntry(v) {
			continue
		}
		key := string(k[:bytes.IndexByte(k, 0)])
		for len(stack) > 0 && !strings.HasPrefix(key, stack[len(stack)-1].key) {
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 {
			inner := load(v)
			for _, e := range stack {
				if bytes.Equal(e.tk, v) || listed[pairOf(e.tk, v)] {
					continue // a table moved inside a location it left; a pair already listed
				}
				listed[pairOf(e.tk, v)] = true
				if limit > 0 && len(out) == limit {
					return out, true
				}
				out = append(out, LocationConflict{Outer: load(e.tk), Inner: inner})
			}
		}
		stack = append(stack, entry{key: key, tk: append([]byte(nil), v...)})
	}
	return out, false
}
