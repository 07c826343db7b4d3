package fsm

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// Idempotency records: Idempotency-Key → the binding it was first used with
// and the outcome to replay. They are written by the same log entry as the
// mutation (Keyed), so a record never exists without its effect or the
// other way round.
const (
	TypeKeyed            CommandType = 20
	TypeRecordOutcome    CommandType = 21
	TypePruneIdempotency CommandType = 22
	// TypeReleaseClaim is ignorable: a replica that skips it keeps the
	// claim until it expires, as binaries before it did.
	TypeReleaseClaim CommandType = 23 | IgnorableFlag
)

// Idempotency buckets (see DESIGN.md, "Idempotency records"; values in
// idempotency_compact.go).
var (
	// bucketIdempotency finds a key's record: under recordKey(key) (0xFF
	// and the 16 bytes of a UUID key, any other key as itself), a reference
	// to its entry in bucketIdemRecords. A record written before the
	// compact format is here whole, as JSON, under the key as it is.
	bucketIdempotency = []byte("idempotency")
	// bucketIdemRecords holds the compact records under recordSlotKey: the
	// expiry slot (expires-ms >> slotBits), then the log index of the entry
	// that wrote the record. Within a slot records are appended in log
	// order, and pruning walks the slots in order.
	bucketIdemRecords = []byte("idempotency_records")
	// bucketIdemExpiry indexes the records written before the compact
	// format by expiry: 8-byte big-endian expires-ms, then the key. Nothing
	// is added to it any more; pruning empties it.
	bucketIdemExpiry = []byte("idempotency_expiry")
	// bucketIdemRoots interns the roots that compact records name their
	// entries' metadata locations under (locUnderIdent: a warehouse's
	// location, shared by the records of all its tables): `n` holds how
	// many there are, `r` and the root its id, `i` and the id (uvarint)
	// the root. At most maxIdemRoots; never pruned.
	bucketIdemRoots = []byte("idempotency_roots")
)

// maxIdemRoots bounds bucketIdemRoots: roots past it, and roots longer than
// maxIdemRootLen, are stored in each record as they are.
const (
	maxIdemRoots   = 64
	maxIdemRootLen = 512
)

// slotBits sets the width of an expiry slot: 1024 ms. Records whose expiry
// falls in one slot are stored in log order, so that a record stamped a
// little earlier than one applied before it (by another node's clock, or a
// request that took longer) is still appended, not inserted between them.
const slotBits = 10

// Fill percents of the two buckets, set on every write (bbolt does not
// store them). bbolt splits a page that overflows at its bucket's fill
// percent (50% by default), and a page the inserts have moved past never
// fills again. Records are appended within their slot: their pages are
// filled to 95%. Keys arrive in the order of their clients' clocks (UUIDv7)
// or in none (UUIDv4): their pages keep 15% for keys arriving between
// others (of 70-95%, the smallest snapshot in BenchmarkIdempotencyRecordSize).
// Fill percents shape pages, never what pages hold.
const (
	idemKeysFillPercent    = 0.85
	idemRecordsFillPercent = 0.95
)

func init() {
	allBuckets = append(allBuckets, bucketIdempotency, bucketIdemRecords, bucketIdemExpiry, bucketIdemRoots)
	register(TypeKeyed, registration{1, jsonCodec[Keyed](1), applyKeyed})
	register(TypeRecordOutcome, registration{1, jsonCodec[RecordOutcome](1), applyRecordOutcome})
	register(TypePruneIdempotency, registration{1, jsonCodec[PruneIdempotency](1), applyPruneIdempotency})
	register(TypeReleaseClaim, registration{1, jsonCodec[ReleaseClaim](1), applyReleaseClaim})
}

// Binding ties a key to the request it was first used with: the operation,
// the route's identifiers, the principal and a digest of the body. A key
// reused with another binding is refused. Package idempotency builds
// bindings from requests (NewBinding).
type Binding struct {
	Operation string `json:"op"`
	// Route is the route's identifiers (namespace, table), canonical.
	Route     string `json:"route"`
	Principal string `json:"principal"`
	// BodyDigest is the SHA-256 of the request body, hex.
	BodyDigest string `json:"body"`
}

// IdempotencyRecord is a stored key: the operation and the digest of the
// binding it was first used with, the outcome to replay (the Result Apply
// stored, whole: Outcome) and its times.
type IdempotencyRecord struct {
	Key       string
	Operation string
	Digest    BindingDigest
	CreatedMs int64
	ExpiresMs int64
	// outcome is the Result stored. A table or view entry named by the
	// binding's route is stored without its identifier (routed lists
	// them); Outcome rebuilds it, and what is made from it, from the route
	// of the request being answered.
	outcome Result
	routed  []routedEntry
	// route is the binding's route of a record about to be stored
	// (newIdemRecord); a record read back does not know it.
	route string
}

// Outcome returns the stored Result, whole, to answer a request with
// binding b, one the record Binds: a table or view the outcome names by
// the route it was requested on takes its identifier from b's route. ok is
// false when b's route cannot name an entry (b does not bind the record).
func (r IdempotencyRecord) Outcome(b Binding) (Result, bool) {
	res := r.outcome
	if len(r.routed) == 0 {
		return res, true
	}
	ns, name, ok := splitRoute(b.Route)
	if !ok {
		return Result{}, false
	}
	res.Tables, res.Views = slices.Clone(res.Tables), slices.Clone(res.Views)
	for _, e := range r.routed {
		if e.view {
			t := res.Views[e.i].asTable()
			e.complete(&t, slices.Clone(ns), name)
			res.Views[e.i] = t.asView()
		} else {
			e.complete(&res.Tables[e.i], slices.Clone(ns), name)
		}
	}
	return res, true
}

// Live reports whether the record still binds its key at time nowMs.
func (r IdempotencyRecord) Live(nowMs int64) bool { return nowMs < r.ExpiresMs }

// Binds reports whether b is the binding the key was first used with.
func (r IdempotencyRecord) Binds(b Binding) bool { return r.Digest == b.Digest() }

// Keyed is a mutation carrying an Idempotency-Key. Applying it:
//   - a live record for the key with the same binding: nothing changes; the
//     stored Result is returned with Replayed set (this is also how a
//     duplicate that raced the first request ends);
//   - a live record with another binding: StatusKeyReused, nothing changes;
//   - otherwise the inner command is applied in the same transaction and
//     its Result stored under the key, unless it is StatusCommitFailed (a
//     lost compare-and-set the proposer may retry with the same key; a final
//     conflict is recorded with RecordOutcome).
type Keyed struct {
	Key     string  `json:"key"`
	Binding Binding `json:"binding"`
	// AtMs is the proposer's time; ExpiresMs = AtMs + lifetime + grace.
	AtMs      int64 `json:"at-ms"`
	ExpiresMs int64 `json:"expires-ms"`
	// Command is the inner command, as Encode wrote it.
	Command []byte `json:"command"`
}

// RecordOutcome stores a deterministic failure the proposer decided before
// proposing any mutation (a requirement that did not hold, a table that did
// not exist), so that a retry with the same key gets the same answer. A live
// record for the key wins: its outcome is returned, Replayed.
type RecordOutcome struct {
	Key       string  `json:"key"`
	Binding   Binding `json:"binding"`
	AtMs      int64   `json:"at-ms"`
	ExpiresMs int64   `json:"expires-ms"`
	Result    Result  `json:"result"`
}

// PruneIdempotency deletes records that expired at or before NowMs (the
// leader's clock when it proposed). Result.Count is how many.
type PruneIdempotency struct {
	NowMs int64 `json:"now-ms"`
	// Limit bounds the records deleted by one entry; 0 means 10000.
	Limit int `json:"limit,omitempty"`
}

// ReleaseClaim removes the record under Key when it is the claim taken at
// ClaimedAtMs for Binding (a record RecordOutcome stored with an OK result),
// so that a retry may take the key at once. The change the claim guarded
// failed, and running it again is harmless (package idempotency's Once).
// Any other record under Key is left alone. Result.Count is 1 when the
// claim was removed, else 0.
type ReleaseClaim struct {
	Key         string  `json:"key"`
	Binding     Binding `json:"binding"`
	ClaimedAtMs int64   `json:"claimed-at-ms"`
}

func (ReleaseClaim) Type() CommandType { return TypeReleaseClaim }

func applyReleaseClaim(t *txn, c Command) Result {
	cmd := c.(ReleaseClaim)
	b := idemBucketsOf(t.tx)
	rec, e, ok := b.find(cmd.Key)
	if !ok || rec.CreatedMs != cmd.ClaimedAtMs || !rec.Binds(cmd.Binding) {
		return Result{}
	}
	if res, ok := rec.Outcome(cmd.Binding); !ok || res.Status != StatusOK {
		return Result{}
	}
	b.del(e)
	return Result{Count: 1}
}

// IsKeyed reports whether an encoded command is keyed (Keyed,
// RecordOutcome): its Idempotency-Key record's expiry is judged by the
// proposing node's clock, so a node forwarding one sends its clock's
// reading with it (raftnode). Only the type byte is read.
func IsKeyed(data []byte) bool {
	if len(data) < 2 {
		return false
	}
	switch CommandType(data[0]) {
	case TypeKeyed, TypeRecordOutcome:
		return true
	}
	return false
}

// PrunesByTime reports whether the encoded command data deletes what
// expired by the proposer's clock: Idempotency-Key records or finished
// purge jobs.
func PrunesByTime(data []byte) bool {
	if len(data) < 2 {
		return false
	}
	switch CommandType(data[0]) {
	case TypePruneIdempotency, TypePrunePurgeJobs:
		return true
	}
	return false
}

func (Keyed) Type() CommandType            { return TypeKeyed }
func (RecordOutcome) Type() CommandType    { return TypeRecordOutcome }
func (PruneIdempotency) Type() CommandType { return TypePruneIdempotency }

// idemBuckets holds the idempotency buckets of one transaction.
type idemBuckets struct {
	keys, records, legacyExpiry *bolt.Bucket
	roots                       boltRoots
}

// boltRoots is the rootTable of bucketIdemRoots: it interns new roots when
// its transaction writes.
type boltRoots struct{ b *bolt.Bucket }

func (r boltRoots) id(root string) (uint64, bool) {
	if v := r.b.Get(append([]byte{'r'}, root...)); v != nil {
		id, n := binary.Uvarint(v)
		return id, n > 0
	}
	if !r.b.Tx().Writable() || len(root) > maxIdemRootLen {
		return 0, false
	}
	var count uint64
	if v := r.b.Get([]byte{'n'}); v != nil {
		count, _ = binary.Uvarint(v)
	}
	if count >= maxIdemRoots {
		return 0, false
	}
	id := count + 1
	idb := binary.AppendUvarint(nil, id)
	for _, kv := range [][2][]byte{{{'n'}, idb}, {append([]byte{'r'}, root...), idb}, {append([]byte{'i'}, idb...), []byte(root)}} {
		if err := r.b.Put(kv[0], kv[1]); err != nil {
			panic(fmt.Sprintf("fsm: put %s/%q: %v", bucketIdemRoots, kv[0], err))
		}
	}
	return id, true
}

func (r boltRoots) root(id uint64) (string, bool) {
	v := r.b.Get(append([]byte{'i'}, binary.AppendUvarint(nil, id)...))
	return string(v), v != nil
}

// idemBucketsOf returns tx's idempotency buckets, with their fill percents
// set when tx writes.
func idemBucketsOf(tx *bolt.Tx) idemBuckets {
	b := idemBuckets{
		keys: tx.Bucket(bucketIdempotency), records: tx.Bucket(bucketIdemRecords),
		legacyExpiry: tx.Bucket(bucketIdemExpiry), roots: boltRoots{tx.Bucket(bucketIdemRoots)},
	}
	if tx.Writable() {
		b.keys.FillPercent, b.records.FillPercent = idemKeysFillPercent, idemRecordsFillPercent
	}
	return b
}

// idemEntry is where a record is stored: its key in bucketIdempotency, and
// its key in bucketIdemRecords (compact) or bucketIdemExpiry (legacy).
type idemEntry struct {
	key, slotKey, legacyExpiryKey []byte
}

// find returns key's record and where it is: where the current format puts
// it, else where a record written before it was put.
func (b idemBuckets) find(key string) (IdempotencyRecord, idemEntry, bool) {
	for _, k := range [][]byte{recordKey(key), legacyRecordKey(key)} {
		if k == nil {
			continue
		}
		raw := b.keys.Get(k)
		if raw == nil {
			continue
		}
		rec, e, err := b.read(k, raw)
		if err != nil {
			panic(fmt.Sprintf("fsm: corrupt idempotency record %q: %v", k, err))
		}
		return rec, e, true
	}
	return IdempotencyRecord{}, idemEntry{}, false
}

// read reads the record whose value under k in bucketIdempotency is raw.
func (b idemBuckets) read(k, raw []byte) (IdempotencyRecord, idemEntry, error) {
	if raw[0] == '{' {
		rec, err := decodeLegacyRecord(raw)
		return rec, idemEntry{key: k, legacyExpiryKey: expiryKey(rec.ExpiresMs, k)}, err
	}
	expiresMs, seq, err := decodeRef(raw)
	if err != nil {
		return IdempotencyRecord{}, idemEntry{}, err
	}
	sk := recordSlotKey(expiresMs, seq)
	v := b.records.Get(sk)
	if v == nil {
		return IdempotencyRecord{}, idemEntry{}, fmt.Errorf("no record at %x", sk)
	}
	rec, rk, err := decodeRecord(sk, v, b.roots)
	if err == nil && string(rk) != string(k) {
		err = fmt.Errorf("the record at %x is %q's", sk, rk)
	}
	return rec, idemEntry{key: k, slotKey: sk}, err
}

// del deletes the record stored at e.
func (b idemBuckets) del(e idemEntry) {
	for _, d := range []struct {
		b *bolt.Bucket
		k []byte
	}{{b.keys, e.key}, {b.records, e.slotKey}, {b.legacyExpiry, e.legacyExpiryKey}} {
		if d.k == nil {
			continue
		}
		if err := d.b.Delete(d.k); err != nil {
			panic(fmt.Sprintf("fsm: delete idempotency record %q: %v", d.k, err))
		}
	}
}

func (t *txn) idemRecord(key string) (IdempotencyRecord, bool) {
	rec, _, ok := idemBucketsOf(t.tx).find(key)
	return rec, ok
}

// expiryKey is a key of bucketIdemExpiry.
func expiryKey(expiresMs int64, k []byte) []byte {
	b := make([]byte, 8, 8+len(k))
	binary.BigEndian.PutUint64(b, uint64(expiresMs))
	return append(b, k...)
}

// recordSlotKey is a key of bucketIdemRecords: 8-byte big-endian expiry
// slot, 8-byte big-endian seq (the log index << 8, plus a count of the
// records the entry wrote before).
func recordSlotKey(expiresMs int64, seq uint64) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, uint64(expiresMs)>>slotBits)
	binary.BigEndian.PutUint64(b[8:], seq)
	return b
}

// putIdemRecord stores rec in the compact format, replacing the key's
// record in either format.
func (t *txn) putIdemRecord(rec IdempotencyRecord) {
	b := idemBucketsOf(t.tx)
	if _, e, ok := b.find(rec.Key); ok {
		b.del(e)
	}
	if t.index >= 1<<56 {
		panic(fmt.Sprintf("fsm: log index %d is too large for an idempotency record", t.index))
	}
	seq := t.index << 8
	sk := recordSlotKey(rec.ExpiresMs, seq)
	for b.records.Get(sk) != nil { // another record of the same entry
		if seq&0xff == 0xff {
			panic(fmt.Sprintf("fsm: log entry %d writes too many idempotency records", t.index))
		}
		seq++
		sk = recordSlotKey(rec.ExpiresMs, seq)
	}
	k := recordKey(rec.Key)
	if err := b.records.Put(sk, encodeRecord(k, rec, b.roots)); err != nil {
		panic(fmt.Sprintf("fsm: put idempotency record %q: %v", k, err))
	}
	if err := b.keys.Put(k, encodeRef(rec.ExpiresMs, seq)); err != nil {
		panic(fmt.Sprintf("fsm: put %s/%q: %v", bucketIdempotency, k, err))
	}
}

func newIdemRecord(key string, b Binding, res Result, atMs, expiresMs int64) IdempotencyRecord {
	return IdempotencyRecord{Key: key, Operation: b.Operation, Digest: b.Digest(), outcome: res, CreatedMs: atMs, ExpiresMs: expiresMs, route: b.Route}
}

// checkKey returns the replay or refusal for a live record, or ok=false
// when the key is free (absent or expired).
func (t *txn) checkKey(key string, b Binding, atMs int64) (Result, bool) {
	rec, ok := t.idemRecord(key)
	if !ok || !rec.Live(atMs) {
		return Result{}, false
	}
	if !rec.Binds(b) {
		// Nothing about the first request, not even its operation: it
		// may be another principal's, which the record's one-byte
		// principal tag cannot always tell.
		return fail(StatusKeyReused, "Idempotency-Key %s was first used for another request: use a new key for each request", key), true
	}
	res, ok := rec.Outcome(b)
	if !ok { // a digest collision: never answer with another request's outcome
		return fail(StatusKeyReused, "Idempotency-Key %s was first used for %s; this request differs (a different request)", key, rec.Operation), true
	}
	res.Replayed = true
	return res, true
}

func applyKeyed(t *txn, c Command) Result {
	cmd := c.(Keyed)
	if res, done := t.checkKey(cmd.Key, cmd.Binding, cmd.AtMs); done {
		return res
	}
	inner, err := Decode(cmd.Command)
	if err != nil {
		if errors.Is(err, ErrUnknownCommand) && CommandType(cmd.Command[0])&IgnorableFlag != 0 {
			// A command a newer binary wrote and flagged as safe to skip:
			// skip it with its key, as ApplyBatch skips it unwrapped.
			return Result{}
		}
		panic(fmt.Sprintf("fsm: keyed command %s: %v", cmd.Key, err))
	}
	if _, nested := inner.(Keyed); nested {
		panic(fmt.Sprintf("fsm: keyed command %s wraps another keyed command", cmd.Key))
	}
	res := registry[inner.Type()].apply(t, inner)
	if res.Status == StatusCommitFailed {
		return res
	}
	t.putIdemRecord(newIdemRecord(cmd.Key, cmd.Binding, res, cmd.AtMs, cmd.ExpiresMs))
	res.Recorded = true
	return res
}

func applyRecordOutcome(t *txn, c Command) Result {
	cmd := c.(RecordOutcome)
	if res, done := t.checkKey(cmd.Key, cmd.Binding, cmd.AtMs); done {
		return res
	}
	res := cmd.Result
	res.Replayed, res.Recorded = false, false
	t.putIdemRecord(newIdemRecord(cmd.Key, cmd.Binding, res, cmd.AtMs, cmd.ExpiresMs))
	res.Recorded = true
	return res
}

// applyPruneIdempotency deletes, in the order of (expires-ms as unsigned,
// key), the records up to the first that expires after NowMs, at most
// Limit of them: the records the binary before the compact format deleted,
// whose expiry index had that order. It walks one expiry slot at a time,
// the compact records of the slot and the legacy index entries in it
// together, sorted.
func applyPruneIdempotency(t *txn, c Command) Result {
	cmd := c.(PruneIdempotency)
	limit := cmd.Limit
	if limit <= 0 {
		limit = 10000
	}
	b := idemBucketsOf(t.tx)
	type cand struct {
		expires uint64
		key     string
		e       idemEntry
	}
	var done []idemEntry
	recs, legacy := b.records.Cursor(), b.legacyExpiry.Cursor()
	rk, rv := recs.First()
	lk, _ := legacy.First()
walk:
	for (rk != nil || lk != nil) && len(done) < limit {
		// The next slot, from whichever bucket reaches it first.
		slot := uint64(1<<64 - 1)
		if rk != nil {
			slot = binary.BigEndian.Uint64(rk[:8])
		}
		if lk != nil {
			slot = min(slot, binary.BigEndian.Uint64(lk[:8])>>slotBits)
		}
		var cands []cand
		for ; rk != nil && binary.BigEndian.Uint64(rk[:8]) == slot; rk, rv = recs.Next() {
			expires, k, err := decodeRecordHead(rk, rv)
			if err != nil {
				panic(fmt.Sprintf("fsm: corrupt idempotency record at %x: %v", rk, err))
			}
			k = append([]byte(nil), k...)
			cands = append(cands, cand{uint64(expires), keyOf(k), idemEntry{key: k, slotKey: append([]byte(nil), rk...)}})
		}
		for ; lk != nil && binary.BigEndian.Uint64(lk[:8])>>slotBits == slot; lk, _ = legacy.Next() {
			k := append([]byte(nil), lk[8:]...)
			cands = append(cands, cand{binary.BigEndian.Uint64(lk[:8]), string(k), idemEntry{key: k, legacyExpiryKey: append([]byte(nil), lk...)}})
		}
		slices.SortFunc(cands, func(a, b cand) int {
			if c := cmp.Compare(a.expires, b.expires); c != 0 {
				return c
			}
			return strings.Compare(a.key, b.key)
		})
		for _, c := range cands {
			if int64(c.expires) > cmd.NowMs || len(done) == limit {
				break walk
			}
			done = append(done, c.e)
		}
	}
	for _, e := range done {
		b.del(e)
	}
	return Result{Count: len(done)}
}

// IdempotencyRecord returns the record stored for key, live or not.
func (r *Reader) IdempotencyRecord(key string) (IdempotencyRecord, bool) {
	rec, _, ok := idemBucketsOf(r.tx).find(key)
	return rec, ok
}

// IdempotencyRecords counts the stored records.
func (r *Reader) IdempotencyRecords() int {
	return r.tx.Bucket(bucketIdempotency).Stats().KeyN
}
