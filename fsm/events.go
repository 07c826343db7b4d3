package fsm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	bolt "go.etcd.io/bbolt"
)

// The change feed: every committed catalog change, recorded by the entry
// that made it, in the same transaction. Events are derived inside Apply
// from the command, its Result and the state the command left, so every
// replica records the same events under the same keys, and a node serves
// the feed from its own replica.
//
//	events       log index (8 bytes BE), sequence within the entry (4 bytes BE) → JSON Event
//	events_meta  "count" → 8 bytes BE: events stored
//	             "bytes" → 8 bytes BE: their size (absent in older files)
//	             "horizon" → 8 bytes BE: log index through which events are gone
//
// Retention is by count and size, inside Apply: once more than
// eventRetention events, or more than eventRetentionBytes of them, are
// stored, each new one removes the oldest until both hold. The horizon is the highest
// log index an event was removed from, or, for a file written before the
// feed existed, the applied index when the feed started on it. A reader
// whose cursor (the last log index it has seen) is below the horizon has
// missed events: ErrEventsPruned.

// EventType names what an event reports.
type EventType string

// Event types. A refused command (Result.Status other than StatusOK) and a
// replayed Idempotency-Key record no event.
const (
	EventNamespaceCreated EventType = "namespace-created"
	EventNamespaceUpdated EventType = "namespace-updated"
	EventNamespaceDropped EventType = "namespace-dropped"
	EventTableCreated     EventType = "table-created"
	EventTableRegistered  EventType = "table-registered"
	EventTableCommitted   EventType = "table-committed"
	EventTableRenamed     EventType = "table-renamed"
	EventTableDropped     EventType = "table-dropped"
	EventViewCreated      EventType = "view-created"
	EventViewReplaced     EventType = "view-replaced"
	EventViewRenamed      EventType = "view-renamed"
	EventViewDropped      EventType = "view-dropped"
	// EventPurgeJob reports a purge job's new state: added (PENDING, or
	// RUNNING for a synchronous drop), leased (RUNNING), finished
	// (SUCCEEDED, FAILED, or PENDING again to retry), retried by an
	// operator (PENDING) or released (FAILED with Released set).
	EventPurgeJob EventType = "purge-job"
)

// Event is one committed change. Index is the log index of the entry that
// made it and Seq its position among that entry's events (a multi-table
// commit, a purging drop); (Index, Seq) is unique and increasing. AtMs is
// the time the proposer stamped into the command (absent in DropNamespace
// entries written before it carried one). Fields that do not apply to Type
// are empty.
type Event struct {
	Index uint64    `json:"index"`
	Seq   uint32    `json:"seq"`
	Type  EventType `json:"type"`
	AtMs  int64     `json:"at-ms,omitempty"`

	// Namespace names the namespace of a namespace event.
	Namespace []string `json:"namespace,omitempty"`
	// Properties are a created namespace's properties.
	Properties map[string]string `json:"properties,omitempty"`
	// Updated and Removed are the property keys an update set and removed.
	Updated []string `json:"updated,omitempty"`
	Removed []string `json:"removed,omitempty"`

	// Ident names the table or view (for a rename, its old name; for a
	// purge job, the dropped table).
	Ident *Ident `json:"ident,omitempty"`
	// To is a renamed table's or view's new name.
	To   *Ident `json:"to,omitempty"`
	UUID string `json:"uuid,omitempty"`
	// MetadataLocation is the table's or view's metadata file after the
	// change (for a drop, the last one).
	MetadataLocation string `json:"metadata-location,omitempty"`
	// PreviousMetadataLocation is the file a commit replaced.
	PreviousMetadataLocation string `json:"previous-metadata-location,omitempty"`
	// SnapshotID is the table's current snapshot after a commit, when the
	// command carried it (TableChange.SnapshotID).
	SnapshotID *int64 `json:"snapshot-id,omitempty"`
	// Purge: the drop purges the table's files.
	Purge bool `json:"purge,omitempty"`

	// PurgeJob is the job of a purging drop or a purge-job event.
	PurgeJob *PurgeJobEvent `json:"purge-job,omitempty"`
}

// PurgeJobEvent is a purge job's state as an event reports it.
type PurgeJobEvent struct {
	ID        string   `json:"id"`
	State     JobState `json:"state"`
	Released  bool     `json:"released,omitempty"`
	Attempts  int      `json:"attempts"`
	LastError string   `json:"last-error,omitempty"`
	// Node holds the lease of a RUNNING job.
	Node string `json:"node,omitempty"`
}

// ErrEventsPruned is returned when events after the cursor asked for are
// no longer stored (or were never recorded on this replica): the reader
// must resync from the catalog and follow the feed from a newer index.
var ErrEventsPruned = errors.New("events pruned")

// eventRetention is how many events the feed keeps. It is part of what
// Apply does, so it is a constant of the binary, never a node setting:
// replicas on the same binary keep the same events. Tests lower it.
var eventRetention uint64 = 100_000

// eventRetentionBytes bounds the stored events' size as eventRetention
// bounds their number, whichever binds first (the newest event is always
// kept). A namespace-created event carries the namespace's properties, up
// to 1 MiB: without it a loop creating and dropping such a namespace kept
// up to 100 GB of events, in fsm.db and in every snapshot, while the
// catalog stayed empty. Typical events are a few hundred bytes, so the
// count binds first. Tests lower it.
var eventRetentionBytes uint64 = 64 << 20

var (
	bucketEvents     = []byte("events")
	bucketEventsMeta = []byte("events_meta")

	keyEventCount   = []byte("count")
	keyEventHorizon = []byte("horizon")
	keyEventBytes   = []byte("bytes")
)

// eventDerivers derives, for each command type that changes the catalog,
// the events of a successful apply. It runs after the command was applied,
// in its transaction: it may read the state the command left, never
// anything outside the transaction. A new command type that should appear
// in the feed is one entry here.
var eventDerivers = map[CommandType]func(t *txn, c Command, res Result) []Event{
	TypeCreateNamespace:  namespaceCreated,
	TypeUpdateNamespace:  namespaceUpdated,
	TypeDropNamespace:    namespaceDropped,
	TypeCommitTables:     tablesCommitted,
	TypeDropTable:        tableDropped,
	TypeRenameTable:      tableRenamed,
	TypeCreateView:       viewCreated,
	TypeReplaceView:      viewReplaced,
	TypeDropView:         viewDropped,
	TypeRenameView:       viewRenamed,
	TypeAssignPurgeLease: purgeJobChanged,
	TypeFinishPurgeJob:   purgeJobChanged,
	TypeRetryPurgeJob:    purgeJobChanged,
	TypeReleasePurgeJob:  purgeJobChanged,
}

func namespaceCreated(_ *txn, c Command, _ Result) []Event {
	cmd := c.(CreateNamespace)
	return []Event{{Type: EventNamespaceCreated, AtMs: cmd.AtMs, Namespace: cmd.Namespace, Properties: cmd.Properties}}
}

func namespaceUpdated(_ *txn, c Command, res Result) []Event {
	cmd := c.(UpdateNamespace)
	e := Event{Type: EventNamespaceUpdated, AtMs: cmd.AtMs, Namespace: cmd.Namespace}
	if res.Properties != nil {
		e.Updated, e.Removed = res.Properties.Updated, res.Properties.Removed
	}
	return []Event{e}
}

func namespaceDropped(_ *txn, c Command, _ Result) []Event {
	d := c.(DropNamespace)
	return []Event{{Type: EventNamespaceDropped, Namespace: d.Namespace, AtMs: d.AtMs}}
}

// tablesCommitted reports each change of a CommitTables, as written.
func tablesCommitted(_ *txn, c Command, _ Result) []Event {
	cmd := c.(CommitTables)
	out := make([]Event, 0, len(cmd.Changes))
	for _, ch := range cmd.Changes {
		e := Event{AtMs: cmd.AtMs, Ident: identPtr(ch.Ident), UUID: ch.UUID, MetadataLocation: ch.MetadataLocation, SnapshotID: ch.SnapshotID}
		switch ch.Kind {
		case ChangeCreate:
			e.Type = EventTableCreated
		case ChangeRegister:
			e.Type = EventTableRegistered
		default:
			e.Type = EventTableCommitted
			e.PreviousMetadataLocation = ch.ExpectedMetadataLocation
		}
		out = append(out, e)
	}
	return out
}

// tableDropped reports the drop and, for a purging drop, the job it added.
func tableDropped(t *txn, c Command, res Result) []Event {
	cmd := c.(DropTable)
	tb := first(res.Tables)
	out := []Event{{Type: EventTableDropped, AtMs: cmd.AtMs, Ident: identPtr(cmd.Ident), UUID: tb.UUID,
		MetadataLocation: tb.MetadataLocation, Purge: cmd.Purge}}
	if cmd.Purge && cmd.Job != nil {
		// The job this entry added, as addPurgeJob made it: not read back.
		// The drop's event carries it too, so a reader of table-dropped
		// alone sees the job's state (PENDING, or RUNNING for a drop that
		// leases its own job) rather than an empty one.
		// A version 1 entry's event carries the id alone, as binaries
		// from before version 2 record it (DropTable.JobInEvent).
		je := jobEvent(newPurgeJob(tb, *cmd.Job, cmd.AtMs, t.index), cmd.AtMs)
		out[0].PurgeJob = &PurgeJobEvent{ID: cmd.Job.ID}
		if cmd.JobInEvent {
			job := *je.PurgeJob
			out[0].PurgeJob = &job
		}
		out = append(out, je)
	}
	return out
}

func tableRenamed(_ *txn, c Command, res Result) []Event {
	cmd := c.(RenameTable)
	tb := first(res.Tables)
	return []Event{renamed(EventTableRenamed, cmd.From, cmd.To, cmd.AtMs, tb.UUID, tb.MetadataLocation)}
}

func viewCreated(_ *txn, c Command, res Result) []Event {
	return viewEvent(EventViewCreated, c.(CreateView).AtMs, res)
}

func viewReplaced(_ *txn, c Command, res Result) []Event {
	return viewEvent(EventViewReplaced, c.(ReplaceView).AtMs, res)
}

func viewDropped(_ *txn, c Command, res Result) []Event {
	return viewEvent(EventViewDropped, c.(DropView).AtMs, res)
}

func viewRenamed(_ *txn, c Command, res Result) []Event {
	cmd := c.(RenameView)
	v := first(res.Views)
	return []Event{renamed(EventViewRenamed, cmd.From, cmd.To, cmd.AtMs, v.UUID, v.MetadataLocation)}
}

func renamed(typ EventType, from, to Ident, atMs int64, uuid, metadata string) Event {
	return Event{Type: typ, AtMs: atMs, Ident: identPtr(from), To: identPtr(to), UUID: uuid, MetadataLocation: metadata}
}

// viewEvent reports a view command; res.Views holds the view after it (for
// a drop, as it was).
func viewEvent(typ EventType, atMs int64, res Result) []Event {
	v := first(res.Views)
	return []Event{{Type: typ, AtMs: atMs, Ident: identPtr(v.Ident()), UUID: v.UUID, MetadataLocation: v.MetadataLocation}}
}

// first is the first element of s, or the zero value: a deriver must never
// panic inside Apply, whatever a Result holds.
func first[T any](s []T) T {
	var zero T
	if len(s) == 0 {
		return zero
	}
	return s[0]
}

// purgeJobChanged reports the job a purge command changed.
func purgeJobChanged(t *txn, c Command, _ Result) []Event {
	switch cmd := c.(type) {
	case AssignPurgeLease:
		return t.purgeJobEvent(cmd.JobID, cmd.AtMs)
	case FinishPurgeJob:
		return t.purgeJobEvent(cmd.JobID, cmd.AtMs)
	case RetryPurgeJob:
		return t.purgeJobEvent(cmd.JobID, cmd.AtMs)
	case ReleasePurgeJob:
		return t.purgeJobEvent(cmd.JobID, cmd.AtMs)
	}
	return nil
}

// purgeJobEvent reports the job as the command left it.
func (t *txn) purgeJobEvent(id string, atMs int64) []Event {
	j, ok := t.purgeJob(id)
	if !ok {
		return nil
	}
	return []Event{jobEvent(j, atMs)}
}

// jobEvent is the purge-job event of j as it stands.
func jobEvent(j PurgeJob, atMs int64) Event {
	e := &PurgeJobEvent{ID: j.ID, State: j.State, Released: j.Released, Attempts: j.Attempts, LastError: j.LastError}
	if j.State == JobRunning && j.Lease != nil {
		e.Node = j.Lease.Node
	}
	return Event{Type: EventPurgeJob, AtMs: atMs, Ident: identPtr(j.Ident), UUID: j.TableUUID, PurgeJob: e}
}

func identPtr(id Ident) *Ident { return &id }

// recordEvents stores the events of a command applied with res. Refused
// commands and Idempotency-Key replays changed nothing and record nothing;
// a Keyed command records its inner command's events (the inner command is
// applied through the registry too).
func (t *txn) recordEvents(c Command, res Result) {
	if res.Status != StatusOK || res.Replayed {
		return
	}
	derive, ok := eventDerivers[c.Type()]
	if !ok {
		return
	}
	for _, e := range derive(t, c, res) {
		t.appendEvent(e)
	}
}

// appendEvent stores e under the current entry's index and next sequence
// number, then removes the oldest events beyond eventRetention and
// eventRetentionBytes.
func (t *txn) appendEvent(e Event) {
	if t.eventIndex != t.index {
		t.eventIndex, t.eventSeq = t.index, 0
	}
	e.Index, e.Seq = t.index, t.eventSeq
	t.eventSeq++
	raw, err := json.Marshal(e)
	if err != nil {
		panic(fmt.Sprintf("fsm: encode event: %v", err))
	}

	meta := t.tx.Bucket(bucketEventsMeta)
	events := t.tx.Bucket(bucketEvents)
	size := storedEventBytes(meta, events) + uint64(len(raw))
	key := eventKey(e.Index, e.Seq)
	if err := events.Put(key, raw); err != nil {
		panic(fmt.Sprintf("fsm: put event: %v", err))
	}
	count := getUint64(meta, keyEventCount) + 1
	horizon := getUint64(meta, keyEventHorizon)
	for count > eventRetention || size > eventRetentionBytes && count > 1 {
		k, v := events.Cursor().First()
		if k == nil {
			break
		}
		horizon = max(horizon, binary.BigEndian.Uint64(k[:8]))
		size -= min(size, uint64(len(v)))
		t.del(bucketEvents, append([]byte(nil), k...))
		count--
	}
	if err := putUint64(meta, keyEventCount, count); err != nil {
		panic(fmt.Sprintf("fsm: put event count: %v", err))
	}
	rec := make([]byte, 8, 8+len(key))
	binary.BigEndian.PutUint64(rec, size)
	if err := meta.Put(keyEventBytes, append(rec, key...)); err != nil {
		panic(fmt.Sprintf("fsm: put event bytes: %v", err))
	}
	if err := putUint64(meta, keyEventHorizon, horizon); err != nil {
		panic(fmt.Sprintf("fsm: put event horizon: %v", err))
	}
}

// storedEventBytes is the size of the events stored: the "bytes" record
// when it was written with the newest event stored now; else (a file
// written before it was kept, or whose events a binary that does not keep
// it has changed since) the sum of the stored events' sizes, read once.
// The file's state alone decides it, as Apply must.
func storedEventBytes(meta, events *bolt.Bucket) uint64 {
	newest, _ := events.Cursor().Last()
	if v := meta.Get(keyEventBytes); len(v) >= 8 && bytes.Equal(v[8:], newest) {
		return binary.BigEndian.Uint64(v)
	}
	var size uint64
	_ = events.ForEach(func(_, v []byte) error {
		size += uint64(len(v))
		return nil
	})
	return size
}

func eventKey(index uint64, seq uint32) []byte {
	k := make([]byte, 12)
	binary.BigEndian.PutUint64(k, index)
	binary.BigEndian.PutUint32(k[8:], seq)
	return k
}

// initEvents creates the feed's buckets in a file that lacks them. A file
// that already applied entries (written before the feed existed, or
// restored from such a snapshot) has no events for them: its horizon
// starts at its applied index, so that a reader asking for older ones is
// told they are gone rather than given a feed with a hole.
func initEvents(tx *bolt.Tx) error {
	if tx.Bucket(bucketEvents) != nil {
		return nil
	}
	var applied uint64
	if rb := tx.Bucket(bucketRaft); rb != nil {
		applied = getUint64(rb, keyAppliedIndex)
	}
	if _, err := tx.CreateBucket(bucketEvents); err != nil {
		return err
	}
	meta, err := tx.CreateBucketIfNotExists(bucketEventsMeta)
	if err != nil {
		return err
	}
	if err := putUint64(meta, keyEventCount, 0); err != nil {
		return err
	}
	if err := putUint64(meta, keyEventBytes, 0); err != nil {
		return err
	}
	return putUint64(meta, keyEventHorizon, applied)
}

// --- reads ---

// EventHorizon is the log index through which events are gone: a reader
// that has seen every event up to an index at or above it can resume
// without a gap. 0 when nothing was ever pruned.
func (r *Reader) EventHorizon() uint64 {
	return getUint64(r.tx.Bucket(bucketEventsMeta), keyEventHorizon)
}

// Events returns the events of entries after log index after, in (Index,
// Seq) order: at least limit of them when there are (limit <= 0: all), and
// always every event of the last entry returned, so that a reader resuming
// after that entry's index misses none. more reports whether events follow.
// An after below EventHorizon is ErrEventsPruned.
func (r *Reader) Events(after uint64, limit int) (out []Event, more bool, err error) {
	if h := r.EventHorizon(); after < h {
		return nil, false, fmt.Errorf("%w: events after log index %d are no longer kept (kept: after %d); resync and resume after a newer index",
			ErrEventsPruned, after, h)
	}
	if after == math.MaxUint64 {
		return nil, false, nil
	}
	c := r.tx.Bucket(bucketEvents).Cursor()
	for k, v := c.Seek(eventKey(after+1, 0)); k != nil; k, v = c.Next() {
		if limit > 0 && len(out) >= limit && binary.BigEndian.Uint64(k[:8]) != out[len(out)-1].Index {
			return out, true, nil
		}
		var e Event
		mustUnmarshal(k, v, &e)
		out = append(out, e)
	}
	return out, false, nil
}
