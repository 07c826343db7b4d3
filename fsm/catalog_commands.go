package fsm

import (
	"fmt"
	"maps"
	"slices"
)

// Result is what applying one command produced. Domain outcomes (not found,
// already exists, CAS lost) are values here, decided inside Apply and
// therefore linearizable; Err turns them into sentinel errors.
type Result struct {
	// Status is StatusOK on success, else names the domain outcome.
	Status Status `json:"status"`
	// Message explains a failure to a human.
	Message string `json:"message,omitempty"`
	// Tables holds, for table commands, the entries as they are after the
	// command (create, commit, register, rename) or as they were before it
	// (drop).
	Tables []Table `json:"tables,omitempty"`
	// Views holds, for view commands, the entries as they are after the
	// command (create, replace, rename) or as they were before it (drop).
	Views []View `json:"views,omitempty"`
	// Properties reports an UpdateNamespace outcome.
	Properties *PropertiesOutcome `json:"properties,omitempty"`
	// Count is how many records a pruning command removed.
	Count int `json:"count,omitempty"`
	// Replayed: the command carried an Idempotency-Key already used for
	// the same request; nothing changed and this is the stored outcome.
	Replayed bool `json:"replayed,omitempty"`
	// Recorded: the outcome was stored under the command's
	// Idempotency-Key.
	Recorded bool `json:"recorded,omitempty"`
}

// Status is a domain outcome. Its values are stable: results cross the
// network when a follower forwards a command to the leader.
type Status uint8

const (
	StatusOK Status = iota
	StatusNoSuchNamespace
	StatusNoSuchTable
	StatusAlreadyExists
	StatusNamespaceNotEmpty
	StatusCommitFailed
	// StatusBeingPurged: the name or location belongs to a table whose
	// purge job has not succeeded (a tombstone).
	StatusBeingPurged
	// StatusStaleLease: a purge worker's fencing token is no longer the
	// job's current one.
	StatusStaleLease
	// StatusKeyReused: an Idempotency-Key was used before with a different
	// binding (operation, route, principal or body).
	StatusKeyReused
	// StatusNoSuchJob: no purge job has that id.
	StatusNoSuchJob
	// StatusLocationInUse: the location is equal to, inside or around the
	// location of another live table.
	StatusLocationInUse
	// StatusInvalid: the command is malformed (an empty or over-long key
	// the state machine cannot store); nothing was applied.
	StatusInvalid
	// StatusNotFound: the auth record named does not exist.
	StatusNotFound
	// StatusNoSuchView: the view named (or its namespace) does not exist.
	StatusNoSuchView
)

var statusErrors = map[Status]error{
	StatusNoSuchNamespace:   ErrNoSuchNamespace,
	StatusNoSuchTable:       ErrNoSuchTable,
	StatusAlreadyExists:     ErrAlreadyExists,
	StatusNamespaceNotEmpty: ErrNamespaceNotEmpty,
	StatusCommitFailed:      ErrCommitFailed,
	StatusBeingPurged:       ErrBeingPurged,
	StatusStaleLease:        ErrStaleLease,
	StatusKeyReused:         ErrKeyReused,
	StatusNoSuchJob:         ErrNoSuchJob,
	StatusLocationInUse:     ErrLocationInUse,
	StatusInvalid:           ErrInvalidCommand,
	StatusNotFound:          ErrNotFound,
	StatusNoSuchView:        ErrNoSuchView,
}

// Err returns nil for StatusOK, else an *OutcomeError that matches the
// status's sentinel (ErrNoSuchTable, ErrCommitFailed, ...) with errors.Is.
func (r Result) Err() error {
	if r.Status == StatusOK {
		return nil
	}
	sentinel, ok := statusErrors[r.Status]
	if !ok {
		return fmt.Errorf("fsm: unknown status %d: %s", r.Status, r.Message)
	}
	return &OutcomeError{Status: r.Status, Message: r.Message, sentinel: sentinel}
}

// OutcomeError is a domain outcome as an error. errors.Is matches the
// status's sentinel; its text is the outcome's message alone, so an answer
// rebuilt from a stored outcome (an Idempotency-Key replay) reads exactly as
// the first one did.
type OutcomeError struct {
	Status   Status
	Message  string
	sentinel error
}

func (e *OutcomeError) Error() string {
	if e.Message == "" {
		return e.sentinel.Error()
	}
	return e.Message
}

func (e *OutcomeError) Unwrap() error { return e.sentinel }

// PropertiesOutcome is the outcome of UpdateNamespace.
type PropertiesOutcome struct {
	Updated []string `json:"updated"`
	Removed []string `json:"removed"`
	Missing []string `json:"missing"`
}

func fail(s Status, format string, args ...any) Result {
	return Result{Status: s, Message: fmt.Sprintf(format, args...)}
}

// CreateNamespace creates a namespace. Its parent, for a multi-level
// namespace, must exist.
type CreateNamespace struct {
	Namespace  []string          `json:"namespace"`
	Properties map[string]string `json:"properties,omitempty"`
	AtMs       int64             `json:"at-ms"`
}

// DropNamespace removes an empty namespace (no tables, no views, no child
// namespaces).
type DropNamespace struct {
	Namespace []string `json:"namespace"`
	// AtMs is when the proposer dropped it, for the change feed; 0 in
	// entries written before it was stamped.
	AtMs int64 `json:"at-ms,omitempty"`
}

// UpdateNamespace sets and removes namespace properties. A key both set and
// removed is refused by the catalog before proposing.
type UpdateNamespace struct {
	Namespace []string          `json:"namespace"`
	Set       map[string]string `json:"set,omitempty"`
	Remove    []string          `json:"remove,omitempty"`
	AtMs      int64             `json:"at-ms"`
}

// Change kinds inside CommitTables.
const (
	ChangeCreate   = "create"   // the table must not exist
	ChangeUpdate   = "update"   // compare-and-set of the metadata pointer
	ChangeRegister = "register" // create, or replace when Overwrite is set
)

// TableChange is one table's part of a CommitTables command. The metadata
// file at MetadataLocation was written by the proposer before proposing.
type TableChange struct {
	Kind  string `json:"kind"`
	Ident Ident  `json:"ident"`
	// ExpectedMetadataLocation is the pointer an update was built on.
	ExpectedMetadataLocation string `json:"expected-metadata-location,omitempty"`
	// ExpectedUUID guards an update against a drop and re-create in between.
	ExpectedUUID     string `json:"expected-uuid,omitempty"`
	MetadataLocation string `json:"metadata-location"`
	Location         string `json:"location"`
	// LocationKey is LocationKey(Location), stamped by the proposer so the
	// location index never depends on the applying binary's normalisation.
	// Empty (entries written before keys were stamped): computed in Apply.
	LocationKey string `json:"location-key,omitempty"`
	UUID        string `json:"uuid"`
	Overwrite   bool   `json:"overwrite,omitempty"`
	// SnapshotID is the table's current snapshot in the new metadata, when
	// the proposer knows it; the change feed reports it. Nothing in Apply
	// depends on it.
	SnapshotID *int64 `json:"snapshot-id,omitempty"`
	// Moves is the proposer's word that the change may give an existing
	// table a new location (set-location, a register-overwrite): the
	// command is then written as body version 3 (CommitTables.bodyVersion).
	// It only picks the version; Apply compares the locations itself.
	Moves bool `json:"-"`
	// Adopts, for a register, are the places the registered metadata
	// points into outside its location, as the proposer read them from
	// it (the table roots of its metadata log and manifest lists), with
	// their keys. Apply makes each one the table's FormerLocation unless
	// it overlaps the table's location (inside it or around it), another
	// live table holds it, a purge job is deleting it, or the table
	// already owns maxFormerLocations: a table moved, dropped without purge and
	// registered again keeps the place it left, as it did while it
	// lived (body version 4).
	Adopts []FormerLocation `json:"adopts,omitempty"`
}

func (ch TableChange) locKey() string { return stampedKey(ch.LocationKey, ch.Location) }

// bodyVersion is the body version Encode writes: 4 when a register adopts
// places (Adopts); 3 when a change may move an existing table (Moves), so
// that it keeps the location it leaves; 2 otherwise, which a replica on a
// binary from before version 3 still reads.
// An older binary stops at a version 3 entry, so only moving tables needs
// every node upgraded first.
func (c CommitTables) bodyVersion() uint8 {
	v := uint8(2)
	for _, ch := range c.Changes {
		if len(ch.Adopts) > 0 {
			return commitTablesVersion
		}
		if ch.Moves {
			v = 3
		}
	}
	return v
}

// commitTablesVersion is the newest CommitTables body version: 4, whose
// registers may adopt places (TableChange.Adopts). A version 3 binary
// stops at it; the catalog proposes Adopts only once every node announces
// PurgeFeatureAdopts.
const commitTablesVersion = 4

// CommitTables applies one or more table changes atomically: either every
// change's precondition holds and all are written, or nothing is written and
// the first failing change is reported.
//
// A change that gives a table a location (create, register, an update that
// moves it) is refused with StatusLocationInUse when that location is equal
// to, inside or around the location of another live table or a live view,
// or of another change in the same command. A create or register at a name
// a view holds is StatusAlreadyExists. Body version 1 entries, written before
// ownership was enforced, replay without that check so that every replica
// reaches the state they made when they were first applied.
//
// From body version 3, an update that moves a table (set-location) keeps
// the location it leaves as one of the table's FormerLocations: its
// snapshots may still reference files there, so no other table may claim
// it (and a purge of that table delete them) until this one is dropped or
// replaced. Earlier versions freed it, and replay as they were applied.
type CommitTables struct {
	Changes []TableChange `json:"changes"`
	AtMs    int64         `json:"at-ms"`
	// legacy marks a command decoded from a version-1 body.
	legacy bool
	// freesMoved marks a command decoded from a body before version 3: an
	// update that moves a table frees the location it leaves.
	freesMoved bool
}

// DropTable removes a table's catalog entry. Result.Tables holds the removed
// entry so the caller can find its files. With Purge and Job set it also adds
// the table's purge job and its name and location tombstones, in the same
// transaction (see purge.go). A Purge without Job (entries written before
// purge jobs existed) only removes the entry.
type DropTable struct {
	Ident Ident         `json:"ident"`
	Purge bool          `json:"purge,omitempty"`
	Job   *PurgeJobSpec `json:"job,omitempty"`
	AtMs  int64         `json:"at-ms"`
	// JobInEvent, body version 2, makes a purging drop's table-dropped
	// event carry its job's state as the drop added it; a version 1
	// entry's event carries the job's id alone, as older binaries record
	// it. Events are stored as each replica applies the entry, so the
	// catalog sets it only once every node announces
	// PurgeFeatureDropJobEvent: replicas on two binaries would otherwise
	// serve different events under one index.
	JobInEvent bool `json:"-"`
}

// bodyVersion is 2 for a drop whose event carries its job (JobInEvent),
// which an older binary stops at; 1 otherwise.
func (c DropTable) bodyVersion() uint8 {
	if c.JobInEvent {
		return dropTableVersion
	}
	return 1
}

// dropTableVersion is the newest DropTable body version.
const dropTableVersion = 2

func decodeDropTable(v uint8, body []byte) (Command, error) {
	c, err := jsonCodec[DropTable](dropTableVersion)(v, body)
	if err != nil {
		return nil, err
	}
	d := c.(DropTable)
	d.JobInEvent = v >= 2
	return d, nil
}

// RenameTable moves a table to a new identifier, possibly in another namespace.
// A table or a view at the destination is StatusAlreadyExists.
type RenameTable struct {
	From Ident `json:"from"`
	To   Ident `json:"to"`
	AtMs int64 `json:"at-ms"`
}

// Noop changes nothing but the applied index. It is used to measure the raw
// cost of the log and as a write barrier.
type Noop struct {
	Pad []byte `json:"pad,omitempty"`
}

func (CreateNamespace) Type() CommandType { return TypeCreateNamespace }
func (DropNamespace) Type() CommandType   { return TypeDropNamespace }
func (UpdateNamespace) Type() CommandType { return TypeUpdateNamespace }
func (CommitTables) Type() CommandType    { return TypeCommitTables }
func (DropTable) Type() CommandType       { return TypeDropTable }
func (RenameTable) Type() CommandType     { return TypeRenameTable }
func (Noop) Type() CommandType            { return TypeNoop }

func init() {
	register(TypeCreateNamespace, registration{1, jsonCodec[CreateNamespace](1), applyCreateNamespace})
	register(TypeDropNamespace, registration{1, jsonCodec[DropNamespace](1), applyDropNamespace})
	register(TypeUpdateNamespace, registration{1, jsonCodec[UpdateNamespace](1), applyUpdateNamespace})
	register(TypeCommitTables, registration{commitTablesVersion, decodeCommitTables, applyCommitTables})
	register(TypeDropTable, registration{dropTableVersion, decodeDropTable, applyDropTable})
	register(TypeRenameTable, registration{1, jsonCodec[RenameTable](1), applyRenameTable})
	register(TypeNoop, registration{1, jsonCodec[Noop](1), func(*txn, Command) Result { return Result{} }})
}

// decodeCommitTables reads body versions 1 to 4; version 1 entries replay
// without the location-ownership check, versions 1 and 2 free the location
// a moved table leaves (see CommitTables).
func decodeCommitTables(v uint8, body []byte) (Command, error) {
	c, err := jsonCodec[CommitTables](commitTablesVersion)(v, body)
	if err != nil {
		return nil, err
	}
	ct := c.(CommitTables)
	ct.legacy = v < 2
	ct.freesMoved = v < 3
	if !ct.freesMoved {
		// Encoded again, it stays the version it was.
		for i := range ct.Changes {
			ct.Changes[i].Moves = true
		}
	}
	return ct, nil
}

func applyCreateNamespace(t *txn, c Command) Result {
	cmd := c.(CreateNamespace)
	if len(cmd.Namespace) == 0 {
		return fail(StatusNoSuchNamespace, "empty namespace")
	}
	if _, ok := t.namespace(cmd.Namespace); ok {
		return fail(StatusAlreadyExists, "namespace already exists: %s", nsName(cmd.Namespace))
	}
	if isWarehouseRootOnly(cmd.Namespace) {
		return fail(StatusInvalid, "a warehouse's root is not a namespace")
	}
	if parent := cmd.Namespace[:len(cmd.Namespace)-1]; len(parent) > 0 && !isWarehouseRootOnly(parent) {
		if _, ok := t.namespace(parent); !ok {
			return fail(StatusNoSuchNamespace, "parent namespace does not exist: %s", nsName(parent))
		}
	}
	t.put(bucketNamespaces, namespaceKey(cmd.Namespace), Namespace{
		Levels:     cmd.Namespace,
		Properties: cmd.Properties,
		CreatedMs:  cmd.AtMs,
		UpdatedMs:  cmd.AtMs,
	})
	return Result{}
}

func applyDropNamespace(t *txn, c Command) Result {
	cmd := c.(DropNamespace)
	if _, ok := t.namespace(cmd.Namespace); !ok {
		return fail(StatusNoSuchNamespace, "namespace does not exist: %s", nsName(cmd.Namespace))
	}
	if t.hasPrefix(bucketTables, tablePrefix(cmd.Namespace)) {
		return fail(StatusNamespaceNotEmpty, "namespace %s contains tables", nsName(cmd.Namespace))
	}
	if t.hasPrefix(bucketViews, tablePrefix(cmd.Namespace)) {
		return fail(StatusNamespaceNotEmpty, "namespace %s contains views", nsName(cmd.Namespace))
	}
	if t.hasPrefix(bucketNamespaces, append(namespaceKey(cmd.Namespace), levelSep...)) {
		return fail(StatusNamespaceNotEmpty, "namespace %s contains namespaces", nsName(cmd.Namespace))
	}
	t.del(bucketNamespaces, namespaceKey(cmd.Namespace))
	return Result{}
}

func applyUpdateNamespace(t *txn, c Command) Result {
	cmd := c.(UpdateNamespace)
	ns, ok := t.namespace(cmd.Namespace)
	if !ok {
		return fail(StatusNoSuchNamespace, "namespace does not exist: %s", nsName(cmd.Namespace))
	}
	out := &PropertiesOutcome{Updated: []string{}, Removed: []string{}, Missing: []string{}}
	props := maps.Clone(ns.Properties)
	if props == nil {
		props = map[string]string{}
	}
	for _, k := range cmd.Remove {
		if _, ok := props[k]; ok {
			delete(props, k)
			out.Removed = append(out.Removed, k)
		} else {
			out.Missing = append(out.Missing, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(cmd.Set)) {
		props[k] = cmd.Set[k]
		out.Updated = append(out.Updated, k)
	}
	ns.Properties = props
	ns.UpdatedMs = cmd.AtMs
	t.put(bucketNamespaces, namespaceKey(cmd.Namespace), ns)
	return Result{Properties: out}
}

func applyCommitTables(t *txn, c Command) Result {
	cmd := c.(CommitTables)
	if len(cmd.Changes) == 0 {
		return fail(StatusCommitFailed, "no table changes")
	}
	// Check every precondition before writing anything, so a failing change
	// leaves the whole transaction unapplied.
	seen := map[string]bool{}
	next := make([]Table, 0, len(cmd.Changes))
	prev := make([]*Table, 0, len(cmd.Changes))
	var claims []TableChange // changes that give their table a new location
	for _, ch := range cmd.Changes {
		key := string(tableKey(ch.Ident))
		if seen[key] {
			return fail(StatusCommitFailed, "table %s appears twice in one commit", ch.Ident)
		}
		seen[key] = true
		if _, ok := t.namespace(ch.Ident.Namespace); !ok {
			return fail(StatusNoSuchNamespace, "namespace does not exist: %s", nsName(ch.Ident.Namespace))
		}
		cur, exists := t.table(ch.Ident)
		tb := Table{
			Namespace:        ch.Ident.Namespace,
			Name:             ch.Ident.Name,
			UUID:             ch.UUID,
			Location:         ch.Location,
			LocationKey:      ch.locKey(),
			MetadataLocation: ch.MetadataLocation,
			CreatedMs:        cmd.AtMs,
			UpdatedMs:        cmd.AtMs,
		}
		switch ch.Kind {
		case ChangeCreate:
			if exists {
				return fail(StatusAlreadyExists, "table already exists: %s", ch.Ident)
			}
			if _, isView := t.view(ch.Ident); isView {
				return fail(StatusAlreadyExists, "view already exists: %s", ch.Ident)
			}
			if res, refused := t.checkTombstones(ch.Ident, true, ch.Location); refused {
				return res
			}
		case ChangeRegister:
			if exists && !ch.Overwrite {
				return fail(StatusAlreadyExists, "table already exists: %s", ch.Ident)
			}
			if _, isView := t.view(ch.Ident); isView {
				// Overwrite replaces a table, never a view.
				return fail(StatusAlreadyExists, "view already exists: %s", ch.Ident)
			}
			if !exists || cur.Location != ch.Location {
				if res, refused := t.checkTombstones(ch.Ident, !exists, ch.Location); refused {
					return res
				}
			}
		case ChangeUpdate:
			if !exists {
				return fail(StatusNoSuchTable, "table does not exist: %s", ch.Ident)
			}
			if cur.MetadataLocation != ch.ExpectedMetadataLocation {
				return fail(StatusCommitFailed, "table %s changed: metadata location is %s, expected %s",
					ch.Ident, cur.MetadataLocation, ch.ExpectedMetadataLocation)
			}
			if ch.ExpectedUUID != "" && cur.UUID != ch.ExpectedUUID {
				return fail(StatusCommitFailed, "table %s was replaced: uuid is %s, expected %s", ch.Ident, cur.UUID, ch.ExpectedUUID)
			}
			if ch.Location != cur.Location {
				// set-location into files still being purged.
				if res, refused := t.checkTombstones(ch.Ident, false, ch.Location); refused {
					return res
				}
			}
			tb.CreatedMs = cur.CreatedMs
		default:
			return fail(StatusCommitFailed, "unknown change kind %q", ch.Kind)
		}
		// The same table, updated or registered again (same UUID), keeps
		// the locations it left, and from version 3 adds the one it leaves
		// now; a register-overwrite with another UUID replaces the table
		// and frees them.
		if exists && (ch.Kind == ChangeUpdate || cur.UUID != "" && cur.UUID == ch.UUID) {
			tb.FormerLocations = cur.FormerLocations
			if !cmd.freesMoved && ch.Location != cur.Location && ch.locKey() != cur.locKey() {
				tb.FormerLocations = movedFrom(cur, ch.locKey())
				if len(tb.FormerLocations) > maxFormerLocations {
					return fail(StatusInvalid, "table %s has moved away from %d locations, the limit is %d: each stays its own until it is dropped, or moves back to one of them",
						ch.Ident, len(cur.FormerLocations), maxFormerLocations)
				}
			}
		}
		if ch.Kind == ChangeRegister && len(ch.Adopts) > 0 {
			tb.FormerLocations = t.adopt(ch, tb)
		}
		if !exists || cur.Location != ch.Location {
			claims = append(claims, ch)
		}
		next = append(next, tb)
		if exists {
			prev = append(prev, &cur)
		} else {
			prev = append(prev, nil)
		}
	}
	if !cmd.legacy {
		if res, refused := t.checkOwnership(claims); refused {
			return res
		}
	}
	for i, tb := range next {
		if prev[i] != nil {
			t.unindexTable(*prev[i])
		}
		t.put(bucketTables, tableKey(tb.Ident()), tb)
		t.indexTable(tb)
	}
	for i := range next {
		next[i] = next[i].answer()
	}
	return Result{Tables: next}
}

// adopt returns tb's former locations with the places ch adopts added:
// each one not overlapping tb's location, not held by another live table, not
// being purged, and not owned already, while tb owns fewer than
// maxFormerLocations. Nothing here is refused: a place another table
// holds stays that table's, and its files with it.
func (t *txn) adopt(ch TableChange, tb Table) []FormerLocation {
	out := tb.FormerLocations
	owned := func(key string) bool {
		if key == tb.locKey() {
			return true
		}
		for _, f := range out {
			if f.Key == key {
				return true
			}
		}
		return false
	}
	for _, a := range ch.Adopts {
		key := stampedKey(a.Key, a.Location)
		if len(out) >= maxFormerLocations || key == "" || owned(key) || keysOverlap(key, tb.locKey()) {
			continue
		}
		if _, held := locationOwner(t.tx, key, otherTables(ch.Ident)); held {
			continue
		}
		if _, purging := t.locationTombstone(a.Location); purging {
			continue
		}
		out = append(slices.Clip(out), FormerLocation{Location: a.Location, Key: key})
	}
	return out
}

// checkOwnership refuses the first change whose new location overlaps the
// location of a live table other than itself, of a live view, or of another
// change in the same command.
func (t *txn) checkOwnership(claims []TableChange) (Result, bool) {
	for i, ch := range claims {
		if ch.locKey() == "" {
			continue
		}
		owner, taken := locationOwner(t.tx, ch.locKey(), otherTables(ch.Ident))
		if taken {
			return locationTaken(ch.Location, owner), true
		}
		for _, other := range claims[:i] {
			if other.locKey() != "" && keysOverlap(ch.locKey(), other.locKey()) {
				return fail(StatusLocationInUse, "location %s of table %s overlaps %s, the location of table %s in the same commit; a location belongs to one table",
					ch.Location, ch.Ident, other.Location, other.Ident), true
			}
		}
	}
	return Result{}, false
}

func applyDropTable(t *txn, c Command) Result {
	cmd := c.(DropTable)
	cur, ok := t.table(cmd.Ident)
	if !ok {
		if _, nsOK := t.namespace(cmd.Ident.Namespace); !nsOK {
			return fail(StatusNoSuchNamespace, "namespace does not exist: %s", nsName(cmd.Ident.Namespace))
		}
		return fail(StatusNoSuchTable, "table does not exist: %s", cmd.Ident)
	}
	if cmd.Purge && cmd.Job != nil {
		if res, refused := t.checkPurgeSpec(cmd.Job); refused {
			return res
		}
	}
	t.del(bucketTables, tableKey(cmd.Ident))
	t.unindexTable(cur)
	if cmd.Purge && cmd.Job != nil {
		t.addPurgeJob(cur, *cmd.Job, cmd.AtMs)
	}
	return Result{Tables: []Table{cur.answer()}}
}

func applyRenameTable(t *txn, c Command) Result {
	cmd := c.(RenameTable)
	cur, ok := t.table(cmd.From)
	if !ok {
		return fail(StatusNoSuchTable, "table does not exist: %s", cmd.From)
	}
	if _, ok := t.namespace(cmd.To.Namespace); !ok {
		return fail(StatusNoSuchNamespace, "namespace does not exist: %s", nsName(cmd.To.Namespace))
	}
	if _, ok := t.table(cmd.To); ok {
		return fail(StatusAlreadyExists, "table already exists: %s", cmd.To)
	}
	if _, ok := t.view(cmd.To); ok {
		return fail(StatusAlreadyExists, "view already exists: %s", cmd.To)
	}
	if j, ok := t.nameTombstone(cmd.To); ok {
		return beingPurgedName(cmd.To, j)
	}
	t.del(bucketTables, tableKey(cmd.From))
	t.unindexTable(cur)
	cur.Namespace, cur.Name, cur.UpdatedMs = cmd.To.Namespace, cmd.To.Name, cmd.AtMs
	t.put(bucketTables, tableKey(cmd.To), cur)
	t.indexTable(cur)
	return Result{Tables: []Table{cur.answer()}}
}
