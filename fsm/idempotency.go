package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Idempotency records: Idempotency-Key → the binding it was first used with
// and the outcome to replay. They are written by the same log entry as the
// mutation (Keyed), so a record never exists without its effect or the
// other way round.
const (
	TypeKeyed            CommandType = 20
	TypeRecordOutcome    CommandType = 21
	TypePruneIdempotency CommandType = 22
)

var (
	bucketIdempotency = []byte("idempotency")
	// bucketIdemExpiry indexes records by expiry: 8-byte big-endian
	// expires-ms, then the key. Pruning walks it in order.
	bucketIdemExpiry = []byte("idempotency_expiry")
)

func init() {
	allBuckets = append(allBuckets, bucketIdempotency, bucketIdemExpiry)
	register(TypeKeyed, registration{1, jsonCodec[Keyed](1), applyKeyed})
	register(TypeRecordOutcome, registration{1, jsonCodec[RecordOutcome](1), applyRecordOutcome})
	register(TypePruneIdempotency, registration{1, jsonCodec[PruneIdempotency](1), applyPruneIdempotency})
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

// Describe says how other differs from b, the binding a key was first used
// with, for the message that refuses the reused key.
func (b Binding) Describe(other Binding) string {
	var diffs []string
	if b.Operation != other.Operation {
		diffs = append(diffs, fmt.Sprintf("operation %s, not %s", other.Operation, b.Operation))
	}
	if b.Route != other.Route {
		diffs = append(diffs, "another resource")
	}
	if b.Principal != other.Principal {
		diffs = append(diffs, "another principal")
	}
	if b.BodyDigest != other.BodyDigest {
		diffs = append(diffs, "a different request body")
	}
	return strings.Join(diffs, ", ")
}

// IdempotencyRecord is a stored key.
type IdempotencyRecord struct {
	Key       string  `json:"key"`
	Binding   Binding `json:"binding"`
	Result    Result  `json:"result"`
	CreatedMs int64   `json:"created-ms"`
	ExpiresMs int64   `json:"expires-ms"`
}

// Live reports whether the record still binds its key at time nowMs.
func (r IdempotencyRecord) Live(nowMs int64) bool { return nowMs < r.ExpiresMs }

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

func (Keyed) Type() CommandType            { return TypeKeyed }
func (RecordOutcome) Type() CommandType    { return TypeRecordOutcome }
func (PruneIdempotency) Type() CommandType { return TypePruneIdempotency }

func (t *txn) idemRecord(key string) (IdempotencyRecord, bool) {
	var rec IdempotencyRecord
	ok := t.get(bucketIdempotency, []byte(key), &rec)
	return rec, ok
}

func expiryKey(expiresMs int64, key string) []byte {
	b := make([]byte, 8, 8+len(key))
	binary.BigEndian.PutUint64(b, uint64(expiresMs))
	return append(b, key...)
}

func (t *txn) putIdemRecord(rec IdempotencyRecord) {
	if old, ok := t.idemRecord(rec.Key); ok {
		t.del(bucketIdemExpiry, expiryKey(old.ExpiresMs, old.Key))
	}
	t.put(bucketIdempotency, []byte(rec.Key), rec)
	if err := t.tx.Bucket(bucketIdemExpiry).Put(expiryKey(rec.ExpiresMs, rec.Key), nil); err != nil {
		panic(fmt.Sprintf("fsm: put idempotency expiry: %v", err))
	}
}

// checkKey returns the replay or refusal for a live record, or ok=false
// when the key is free (absent or expired).
func (t *txn) checkKey(key string, b Binding, atMs int64) (Result, bool) {
	rec, ok := t.idemRecord(key)
	if !ok || !rec.Live(atMs) {
		return Result{}, false
	}
	if rec.Binding != b {
		return fail(StatusKeyReused, "Idempotency-Key %s was first used for %s on %q; this request differs (%s)",
			key, rec.Binding.Operation, rec.Binding.Route, rec.Binding.Describe(b)), true
	}
	res := rec.Result
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
	t.putIdemRecord(IdempotencyRecord{Key: cmd.Key, Binding: cmd.Binding, Result: res, CreatedMs: cmd.AtMs, ExpiresMs: cmd.ExpiresMs})
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
	t.putIdemRecord(IdempotencyRecord{Key: cmd.Key, Binding: cmd.Binding, Result: res, CreatedMs: cmd.AtMs, ExpiresMs: cmd.ExpiresMs})
	res.Recorded = true
	return res
}

func applyPruneIdempotency(t *txn, c Command) Result {
	cmd := c.(PruneIdempotency)
	limit := cmd.Limit
	if limit <= 0 {
		limit = 10000
	}
	cur := t.tx.Bucket(bucketIdemExpiry).Cursor()
	var done [][]byte
	for k, _ := cur.First(); k != nil && len(done) < limit; k, _ = cur.Next() {
		if int64(binary.BigEndian.Uint64(k[:8])) > cmd.NowMs {
			break
		}
		done = append(done, append([]byte(nil), k...))
	}
	for _, k := range done {
		t.del(bucketIdemExpiry, k)
		t.del(bucketIdempotency, k[8:])
	}
	return Result{Count: len(done)}
}

// IdempotencyRecord returns the record stored for key, live or not.
func (r *Reader) IdempotencyRecord(key string) (IdempotencyRecord, bool) {
	var rec IdempotencyRecord
	ok := r.get(bucketIdempotency, []byte(key), &rec)
	return rec, ok
}

// IdempotencyRecords counts the stored records.
func (r *Reader) IdempotencyRecords() int {
	return r.tx.Bucket(bucketIdempotency).Stats().KeyN
}
