package fsm

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Views. A view is, like a table, a pointer to its current metadata file;
// the metadata itself lives in object storage. A name in a namespace is a
// table or a view, never both: every command that gives a name to a table
// or a view checks both buckets, inside Apply. Views take part in location
// ownership: a view's location is indexed in table_locs beside the
// tables', so no table or view may be created at, inside or around it.
//
//	views   key: namespace key, 0x00, view name   value: JSON View
//
// A view's entry in the location index is marked (viewMark, see
// viewIndexValue) so that it never equals a table's entry and an index
// reader can tell the two apart.
const (
	TypeCreateView  CommandType = 40
	TypeReplaceView CommandType = 41
	TypeDropView    CommandType = 42
	TypeRenameView  CommandType = 43
)

var bucketViews = []byte("views")

// viewMark starts the suffix of a view's key in the location index and its
// value there. Table keys start with a namespace level, which never holds
// a control character, so a marked entry is never a table's.
const viewMark = "\x01"

func init() {
	allBuckets = append(allBuckets, bucketViews)
	register(TypeCreateView, registration{1, jsonCodec[CreateView](1), applyCreateView})
	register(TypeReplaceView, registration{1, jsonCodec[ReplaceView](1), applyReplaceView})
	register(TypeDropView, registration{1, jsonCodec[DropView](1), applyDropView})
	register(TypeRenameView, registration{1, jsonCodec[RenameView](1), applyRenameView})
}

// View is a stored view pointer.
type View struct {
	Namespace []string `json:"namespace"`
	Name      string   `json:"name"`
	UUID      string   `json:"uuid"`
	Location  string   `json:"location"`
	// LocationKey is Location normalised (LocationKey), as the proposer
	// stamped it: the view's entry in the location index.
	LocationKey      string `json:"location-key,omitempty"`
	MetadataLocation string `json:"metadata-location"`
	CreatedMs        int64  `json:"created-ms"`
	UpdatedMs        int64  `json:"updated-ms"`
}

// Ident returns the view's identifier.
func (v View) Ident() Ident { return Ident{Namespace: v.Namespace, Name: v.Name} }

// asTable is the view as a Table value (identifier, UUID, locations and
// times), the shape idempotency records store both in.
func (v View) asTable() Table {
	return Table{Namespace: v.Namespace, Name: v.Name, UUID: v.UUID, Location: v.Location, LocationKey: v.LocationKey,
		MetadataLocation: v.MetadataLocation, CreatedMs: v.CreatedMs, UpdatedMs: v.UpdatedMs}
}

// asView is the inverse of View.asTable.
func (t Table) asView() View {
	return View{Namespace: t.Namespace, Name: t.Name, UUID: t.UUID, Location: t.Location, LocationKey: t.LocationKey,
		MetadataLocation: t.MetadataLocation, CreatedMs: t.CreatedMs, UpdatedMs: t.UpdatedMs}
}

func (v View) locKey() string { return stampedKey(v.LocationKey, v.Location) }

// CreateView adds a view whose metadata file the proposer wrote (a create)
// or found (a register). It is refused when the namespace does not exist
// (StatusNoSuchNamespace), when a view or a table already has the name
// (StatusAlreadyExists), when the location overlaps a purge job's
// (StatusBeingPurged) or a live table's or view's (StatusLocationInUse).
// Result.Views holds the new entry.
type CreateView struct {
	Ident            Ident  `json:"ident"`
	UUID             string `json:"uuid"`
	Location         string `json:"location"`
	LocationKey      string `json:"location-key,omitempty"`
	MetadataLocation string `json:"metadata-location"`
	AtMs             int64  `json:"at-ms"`
}

// ReplaceView points a view at a new metadata file: a compare-and-set of
// the metadata pointer (ExpectedMetadataLocation), guarded by the view's
// UUID against a drop and re-create in between. A lost compare-and-set is
// StatusCommitFailed; a missing view StatusNoSuchView. When the location
// changes, the new one is checked as CreateView checks it. Result.Views
// holds the entry as it is after the command.
type ReplaceView struct {
	Ident                    Ident  `json:"ident"`
	ExpectedMetadataLocation string `json:"expected-metadata-location"`
	ExpectedUUID             string `json:"expected-uuid,omitempty"`
	MetadataLocation         string `json:"metadata-location"`
	Location                 string `json:"location"`
	LocationKey              string `json:"location-key,omitempty"`
	AtMs                     int64  `json:"at-ms"`
}

func (c ReplaceView) locKey() string { return stampedKey(c.LocationKey, c.Location) }

// DropView removes a view's entry (its metadata files stay where they
// are). StatusNoSuchView when there is none. Result.Views holds the
// removed entry.
type DropView struct {
	Ident Ident `json:"ident"`
	AtMs  int64 `json:"at-ms"`
}

// RenameView moves a view to a new identifier, possibly in another
// namespace. StatusNoSuchView when the source does not exist,
// StatusNoSuchNamespace when the destination's namespace does not,
// StatusAlreadyExists when a view or a table has the destination's name.
type RenameView struct {
	From Ident `json:"from"`
	To   Ident `json:"to"`
	AtMs int64 `json:"at-ms"`
}

func (CreateView) Type() CommandType  { return TypeCreateView }
func (ReplaceView) Type() CommandType { return TypeReplaceView }
func (DropView) Type() CommandType    { return TypeDropView }
func (RenameView) Type() CommandType  { return TypeRenameView }

func (c CreateView) check() (Result, bool) {
	if res, bad := checkIdent(c.Ident); bad {
		return res, bad
	}
	return checkViewLocation(c.Ident, c.Location, c.LocationKey)
}

func (c ReplaceView) check() (Result, bool) {
	if res, bad := checkIdent(c.Ident); bad {
		return res, bad
	}
	return checkViewLocation(c.Ident, c.Location, c.LocationKey)
}

func (c DropView) check() (Result, bool) { return checkIdent(c.Ident) }

func (c RenameView) check() (Result, bool) {
	if res, bad := checkIdent(c.From); bad {
		return res, bad
	}
	return checkIdent(c.To)
}

func checkViewLocation(id Ident, loc, key string) (Result, bool) {
	if len(loc) > maxLocationBytes || len(key) > maxLocationBytes || len(stampedKey(key, loc)) > maxLocationBytes {
		return invalid("location of view %s is over %d bytes", id, maxLocationBytes)
	}
	return Result{}, false
}

// viewKey is a view's key in the views bucket: the same shape as a table's
// key in the tables bucket.
func viewKey(id Ident) []byte { return tableKey(id) }

// viewIndexValue is a view's value in the location index, and the suffix
// of its key there.
func viewIndexValue(id Ident) []byte { return append([]byte(viewMark), tableKey(id)...) }

func viewOwnerKey(norm string, id Ident) []byte {
	return append([]byte(norm+"\x00"), viewIndexValue(id)...)
}

// isViewEntry reports whether a location index value names a view.
func isViewEntry(v []byte) bool { return bytes.HasPrefix(v, []byte(viewMark)) }

// indexedView reads the view a location index value names.
func indexedView(tx *bolt.Tx, v []byte) View {
	k := v[len(viewMark):]
	raw := tx.Bucket(bucketViews).Get(k)
	if raw == nil {
		panic(fmt.Sprintf("fsm: location index names missing view %q", k))
	}
	var vw View
	mustUnmarshal(k, raw, &vw)
	return vw
}

func (t *txn) view(id Ident) (View, bool) {
	var v View
	ok := t.get(bucketViews, viewKey(id), &v)
	return v, ok
}

func (t *txn) indexView(v View) {
	if v.locKey() == "" {
		return
	}
	if err := t.tx.Bucket(bucketTableLocs).Put(viewOwnerKey(v.locKey(), v.Ident()), viewIndexValue(v.Ident())); err != nil {
		panic(fmt.Sprintf("fsm: put location index: %v", err))
	}
}

func (t *txn) unindexView(v View) {
	if v.locKey() == "" {
		return
	}
	t.del(bucketTableLocs, viewOwnerKey(v.locKey(), v.Ident()))
}

// nameTaken refuses id when a table or a view already has that name.
func (t *txn) nameTaken(id Ident) (Result, bool) {
	if _, ok := t.view(id); ok {
		return fail(StatusAlreadyExists, "view already exists: %s", id), true
	}
	if _, ok := t.table(id); ok {
		return fail(StatusAlreadyExists, "table already exists: %s", id), true
	}
	return Result{}, false
}

// checkViewClaim refuses a view at id claiming loc (location key key)
// while a purge job holds the location, or a live table or another view
// holds an overlapping one. A purge job's name tombstone does not bind
// views: it keeps a new table from taking the dropped table's name, and a
// view at a purged table's default location is refused by its location
// tombstone anyway.
func (t *txn) checkViewClaim(id Ident, loc, key string) (Result, bool) {
	if res, refused := t.checkTombstones(id, false, loc); refused {
		return res, true
	}
	if key == "" {
		return Result{}, false
	}
	if h, taken := locationOwner(t.tx, key, otherViews(id)); taken {
		return locationTaken(loc, h), true
	}
	return Result{}, false
}

func missingView(t *txn, id Ident) Result {
	if _, ok := t.namespace(id.Namespace); !ok {
		return fail(StatusNoSuchView, "view does not exist: %s (namespace %s does not exist)", id, nsName(id.Namespace))
	}
	return fail(StatusNoSuchView, "view does not exist: %s", id)
}

func applyCreateView(t *txn, c Command) Result {
	cmd := c.(CreateView)
	if _, ok := t.namespace(cmd.Ident.Namespace); !ok {
		return fail(StatusNoSuchNamespace, "namespace does not exist: %s", nsName(cmd.Ident.Namespace))
	}
	if res, taken := t.nameTaken(cmd.Ident); taken {
		return res
	}
	v := View{
		Namespace:        cmd.Ident.Namespace,
		Name:             cmd.Ident.Name,
		UUID:             cmd.UUID,
		Location:         cmd.Location,
		LocationKey:      stampedKey(cmd.LocationKey, cmd.Location),
		MetadataLocation: cmd.MetadataLocation,
		CreatedMs:        cmd.AtMs,
		UpdatedMs:        cmd.AtMs,
	}
	if res, refused := t.checkViewClaim(cmd.Ident, v.Location, v.locKey()); refused {
		return res
	}
	t.put(bucketViews, viewKey(cmd.Ident), v)
	t.indexView(v)
	return Result{Views: []View{v}}
}

func applyReplaceView(t *txn, c Command) Result {
	cmd := c.(ReplaceView)
	cur, ok := t.view(cmd.Ident)
	if !ok {
		return missingView(t, cmd.Ident)
	}
	if cur.MetadataLocation != cmd.ExpectedMetadataLocation {
		return fail(StatusCommitFailed, "view %s changed: metadata location is %s, expected %s",
			cmd.Ident, cur.MetadataLocation, cmd.ExpectedMetadataLocation)
	}
	if cmd.ExpectedUUID != "" && cur.UUID != cmd.ExpectedUUID {
		return fail(StatusCommitFailed, "view %s was replaced: uuid is %s, expected %s", cmd.Ident, cur.UUID, cmd.ExpectedUUID)
	}
	next := cur
	next.MetadataLocation = cmd.MetadataLocation
	next.UpdatedMs = cmd.AtMs
	if cmd.Location != cur.Location {
		if res, refused := t.checkViewClaim(cmd.Ident, cmd.Location, cmd.locKey()); refused {
			return res
		}
		next.Location, next.LocationKey = cmd.Location, cmd.locKey()
	}
	t.unindexView(cur)
	t.put(bucketViews, viewKey(cmd.Ident), next)
	t.indexView(next)
	return Result{Views: []View{next}}
}

func applyDropView(t *txn, c Command) Result {
	cmd := c.(DropView)
	cur, ok := t.view(cmd.Ident)
	if !ok {
		return missingView(t, cmd.Ident)
	}
	t.del(bucketViews, viewKey(cmd.Ident))
	t.unindexView(cur)
	return Result{Views: []View{cur}}
}

func applyRenameView(t *txn, c Command) Result {
	cmd := c.(RenameView)
	cur, ok := t.view(cmd.From)
	if !ok {
		return missingView(t, cmd.From)
	}
	if _, ok := t.namespace(cmd.To.Namespace); !ok {
		return fail(StatusNoSuchNamespace, "namespace does not exist: %s", nsName(cmd.To.Namespace))
	}
	if res, taken := t.nameTaken(cmd.To); taken {
		return res
	}
	t.del(bucketViews, viewKey(cmd.From))
	t.unindexView(cur)
	cur.Namespace, cur.Name, cur.UpdatedMs = cmd.To.Namespace, cmd.To.Name, cmd.AtMs
	t.put(bucketViews, viewKey(cmd.To), cur)
	t.indexView(cur)
	return Result{Views: []View{cur}}
}

// --- reads ---

// View returns the view and whether it exists.
func (r *Reader) View(id Ident) (View, bool) {
	var v View
	ok := r.get(bucketViews, viewKey(id), &v)
	return v, ok
}

// ViewNames lists the names of a namespace's views as Views does, from the
// keys alone.
func (r *Reader) ViewNames(namespace []string, after string, limit int) (out []string, more bool) {
	return names(r.tx.Bucket(bucketViews), tablePrefix(namespace), after, limit)
}

// Views lists the views of a namespace in name order, starting after the
// view named after, at most limit of them (limit <= 0: all). more reports
// whether any follow.
func (r *Reader) Views(namespace []string, after string, limit int) (out []View, more bool) {
	prefix := tablePrefix(namespace)
	c := r.tx.Bucket(bucketViews).Cursor()
	k, v := c.Seek(append(append([]byte{}, prefix...), after...))
	for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if after != "" && string(k[len(prefix):]) <= after {
			continue
		}
		if limit > 0 && len(out) == limit {
			return out, true
		}
		var vw View
		mustUnmarshal(k, v, &vw)
		out = append(out, vw)
	}
	return out, false
}

// CheckViewClaim answers, from this view of the state, what Apply would
// answer for a view at id claiming loc: the location being purged, or
// held by a live table or another view; nil when neither. It is advice
// for a proposer that wants to refuse before writing files: Apply decides
// again.
func (r *Reader) CheckViewClaim(id Ident, loc string) error {
	if j, ok := r.PurgeLocationTombstone(loc); ok {
		return beingPurgedLocation(loc, j).Err()
	}
	if h, ok := locationOwner(r.tx, LocationKey(loc), otherViews(id)); ok {
		return locationTaken(loc, h).Err()
	}
	return nil
}
