package fsm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// Bucket layout of the state machine's bbolt file.
//
//	raft        applied_index, applied_term (8-byte big-endian each)
//	namespaces  key: levels joined by 0x1F      value: JSON Namespace
//	tables      key: namespace key, 0x00, name  value: JSON Table
//	views       key: namespace key, 0x00, name  value: JSON View (views.go)
//
// Names never contain control characters (the catalog refuses them), so the
// separators cannot occur inside a level or a table name.
var (
	bucketRaft       = []byte("raft")
	bucketNamespaces = []byte("namespaces")
	bucketTables     = []byte("tables")

	keyAppliedIndex = []byte("applied_index")
	keyAppliedTerm  = []byte("applied_term")

	allBuckets = [][]byte{bucketRaft, bucketNamespaces, bucketTables}
)

const (
	levelSep = "\x1f"
	tableSep = "\x00"
)

// Domain outcomes. Apply returns them inside a Result, never as a failure of
// the log entry itself: the entry is committed and applied either way.
var (
	ErrNoSuchNamespace   = errors.New("namespace does not exist")
	ErrNoSuchTable       = errors.New("table does not exist")
	ErrAlreadyExists     = errors.New("already exists")
	ErrNamespaceNotEmpty = errors.New("namespace is not empty")
	ErrCommitFailed      = errors.New("commit failed")
	ErrBeingPurged       = errors.New("being purged")
	ErrStaleLease        = errors.New("stale purge lease")
	ErrKeyReused         = errors.New("idempotency key reused with a different request")
	ErrNoSuchJob         = errors.New("purge job does not exist")
	// ErrLocationInUse: the location is equal to, inside or around the
	// location of another live table.
	ErrLocationInUse = errors.New("location belongs to another table")
	// ErrInvalidCommand: a command the state machine cannot store (an
	// empty or over-long key); refused before anything was written.
	ErrInvalidCommand = errors.New("invalid command")
	// ErrNotFound: the auth record (client, token, signing key) named does
	// not exist.
	ErrNotFound = errors.New("not found")
	// ErrNoSuchView: the view named, or its namespace, does not exist.
	ErrNoSuchView = errors.New("view does not exist")
)

// Ident names a table: its namespace levels and its name.
type Ident struct {
	Namespace []string `json:"namespace"`
	Name      string   `json:"name"`
}

func (id Ident) String() string {
	if len(id.Namespace) == 0 {
		return id.Name
	}
	return nsName(id.Namespace) + "." + id.Name
}

// Namespace is a stored namespace.
type Namespace struct {
	Levels     []string          `json:"levels"`
	Properties map[string]string `json:"properties,omitempty"`
	CreatedMs  int64             `json:"created-ms"`
	UpdatedMs  int64             `json:"updated-ms"`
}

// Table is a stored table pointer: the catalog keeps only where the current
// metadata file is; the metadata itself lives in object storage.
type Table struct {
	Namespace []string `json:"namespace"`
	Name      string   `json:"name"`
	UUID      string   `json:"uuid"`
	Location  string   `json:"location"`
	// LocationKey is Location normalised (LocationKey), as the proposer
	// stamped it: the table's entry in the location index.
	LocationKey      string `json:"location-key,omitempty"`
	MetadataLocation string `json:"metadata-location"`
	CreatedMs        int64  `json:"created-ms"`
	UpdatedMs        int64  `json:"updated-ms"`
	// FormerLocations are the locations the table moved away from
	// (set-location) and has not moved back to. Its snapshots may still
	// reference files there, so they stay the table's own in the location
	// index until it is dropped or replaced (CommitTables body version 3).
	FormerLocations []FormerLocation `json:"former-locations,omitempty"`
}

// FormerLocation is a location a table moved away from, with the key it is
// indexed under.
type FormerLocation struct {
	Location string `json:"location"`
	Key      string `json:"key"`
}

// Ident returns the table's identifier.
func (t Table) Ident() Ident { return Ident{Namespace: t.Namespace, Name: t.Name} }

// answer is the table as a command's Result carries it: without its former
// locations, which are the state machine's own bookkeeping (an idempotency
// record does not keep them, so a replayed answer equals the first).
func (t Table) answer() Table {
	t.FormerLocations = nil
	return t
}

func namespaceKey(levels []string) []byte { return []byte(strings.Join(levels, levelSep)) }

func tableKey(id Ident) []byte {
	return []byte(strings.Join(id.Namespace, levelSep) + tableSep + id.Name)
}

func tablePrefix(levels []string) []byte {
	return []byte(strings.Join(levels, levelSep) + tableSep)
}

// txn wraps a bbolt write transaction for the apply functions. Storage errors
// inside Apply are unrecoverable (the entry is committed, the state machine
// could not record it), so the helpers panic instead of returning them.
type txn struct {
	tx *bolt.Tx
	// index is the log index of the entry being applied: purge leases use
	// it as their fencing token.
	index uint64
	// purgeWork says what the batch's entries changed for the purge
	// service, which is woken after commit.
	purgeWork PurgeWork
	// eventIndex and eventSeq number the change-feed events of the entry
	// being applied (events.go): eventSeq restarts at each new index.
	eventIndex uint64
	eventSeq   uint32
}

func (t *txn) get(bucket, key []byte, v any) bool {
	raw := t.tx.Bucket(bucket).Get(key)
	if raw == nil {
		return false
	}
	if err := json.Unmarshal(raw, v); err != nil {
		panic(fmt.Sprintf("fsm: corrupt value in %s/%q: %v", bucket, key, err))
	}
	return true
}

func (t *txn) put(bucket, key []byte, v any) {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("fsm: encode value for %s/%q: %v", bucket, key, err))
	}
	if err := t.tx.Bucket(bucket).Put(key, raw); err != nil {
		panic(fmt.Sprintf("fsm: put %s/%q: %v", bucket, key, err))
	}
}

func (t *txn) del(bucket, key []byte) {
	if err := t.tx.Bucket(bucket).Delete(key); err != nil {
		panic(fmt.Sprintf("fsm: delete %s/%q: %v", bucket, key, err))
	}
}

func (t *txn) namespace(levels []string) (Namespace, bool) {
	var ns Namespace
	ok := t.get(bucketNamespaces, namespaceKey(levels), &ns)
	return ns, ok
}

func (t *txn) table(id Ident) (Table, bool) {
	var tb Table
	ok := t.get(bucketTables, tableKey(id), &tb)
	return tb, ok
}

// hasPrefix reports whether any key in bucket starts with prefix.
func (t *txn) hasPrefix(bucket, prefix []byte) bool {
	k, _ := t.tx.Bucket(bucket).Cursor().Seek(prefix)
	return k != nil && bytes.HasPrefix(k, prefix)
}

func putUint64(b *bolt.Bucket, key []byte, v uint64) error {
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], v)
	return b.Put(key, buf[:])
}

func getUint64(b *bolt.Bucket, key []byte) uint64 {
	v := b.Get(key)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}
