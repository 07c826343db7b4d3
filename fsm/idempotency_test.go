package fsm

import (
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func keyed(t *testing.T, key string, b Binding, atMs int64, inner Command) Keyed {
	t.Helper()
	raw, err := Encode(inner)
	require.NoError(t, err)
	return Keyed{Key: key, Binding: b, AtMs: atMs, ExpiresMs: atMs + 1000, Command: raw}
}

func TestKeyedCommandsApplyOnce(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	var i uint64
	apply := func(c Command) Result { i++; return result(t, f.Apply(entry(t, i, c))) }
	b := Binding{Operation: "createNamespace", Route: "", Principal: "p", BodyDigest: "d1"}

	first := apply(keyed(t, "k1", b, 100, CreateNamespace{Namespace: nsA}))
	require.NoError(t, first.Err())
	assert.True(t, first.Recorded)
	assert.False(t, first.Replayed)

	// The same key and binding: nothing applied again, the outcome replayed.
	again := apply(keyed(t, "k1", b, 200, CreateNamespace{Namespace: nsA}))
	require.NoError(t, again.Err(), "a replay of a success is a success, not AlreadyExists")
	assert.True(t, again.Replayed)

	// Another body under the same key: refused, nothing changes.
	other := b
	other.BodyDigest = "d2"
	reused := apply(keyed(t, "k1", other, 300, CreateNamespace{Namespace: []string{"b"}}))
	assert.ErrorIs(t, reused.Err(), ErrKeyReused)
	assert.Contains(t, reused.Message, "was first used for another request")

	// A deterministic failure is recorded and replayed as the same failure.
	dup := apply(keyed(t, "k2", b, 300, CreateNamespace{Namespace: nsA}))
	assert.ErrorIs(t, dup.Err(), ErrAlreadyExists)
	assert.True(t, dup.Recorded)
	dup2 := apply(keyed(t, "k2", b, 400, DropNamespace{Namespace: nsA}))
	assert.ErrorIs(t, dup2.Err(), ErrAlreadyExists)
	assert.True(t, dup2.Replayed)

	// A lost compare-and-set is not recorded: the proposer retries.
	apply(create(tbl1, "m0"))
	cas := apply(keyed(t, "k3", b, 400, CommitTables{Changes: []TableChange{{Kind: ChangeUpdate, Ident: tbl1, ExpectedMetadataLocation: "stale", MetadataLocation: "m1"}}}))
	assert.ErrorIs(t, cas.Err(), ErrCommitFailed)
	assert.False(t, cas.Recorded)
	ok := apply(keyed(t, "k3", b, 450, CommitTables{Changes: []TableChange{{Kind: ChangeUpdate, Ident: tbl1, ExpectedMetadataLocation: "m0", MetadataLocation: "m1"}}}))
	require.NoError(t, ok.Err())
	assert.True(t, ok.Recorded)

	// RecordOutcome stores a failure decided before proposing; a live
	// record wins over it.
	rec := apply(RecordOutcome{Key: "k4", Binding: b, AtMs: 500, ExpiresMs: 1500, Result: Result{Status: StatusNoSuchTable, Message: "gone"}})
	assert.ErrorIs(t, rec.Err(), ErrNoSuchTable)
	rec = apply(RecordOutcome{Key: "k1", Binding: b, AtMs: 500, ExpiresMs: 1500, Result: Result{Status: StatusNoSuchTable}})
	require.NoError(t, rec.Err())
	assert.True(t, rec.Replayed)

	// An expired key is new again.
	fresh := apply(keyed(t, "k1", other, 5000, CreateNamespace{Namespace: []string{"b"}}))
	require.NoError(t, fresh.Err())
	assert.False(t, fresh.Replayed)

	// Pruning removes what expired by the proposer's time, and only that.
	pruned := apply(PruneIdempotency{NowMs: 1500})
	assert.Equal(t, 3, pruned.Count, "k2, k3 and k4 expired at 1300, 1450 and 1500")
	require.NoError(t, f.View(func(r *Reader) error {
		assert.Equal(t, 1, r.IdempotencyRecords())
		_, ok := r.IdempotencyRecord("k1")
		assert.True(t, ok)
		return nil
	}))
	assert.Equal(t, 1, apply(PruneIdempotency{NowMs: 10000}).Count)
}

// memRoots is a rootTable in memory that interns up to two roots.
type memRoots []string

func (m *memRoots) id(root string) (uint64, bool) {
	i := slices.Index(*m, root)
	if i < 0 {
		if len(*m) >= 2 {
			return 0, false
		}
		*m = append(*m, root)
		i = len(*m) - 1
	}
	return uint64(i + 1), true
}

func (m *memRoots) root(id uint64) (string, bool) {
	if id == 0 || id > uint64(len(*m)) {
		return "", false
	}
	return (*m)[id-1], true
}

// replayable is res as a record of op keeps it: entries without their
// times, and without their UUID for the operations of uuidFreeOps.
func replayable(op string, res Result) Result {
	res.Tables, res.Views = slices.Clone(res.Tables), slices.Clone(res.Views)
	for i := range res.Tables {
		t := &res.Tables[i]
		t.CreatedMs, t.UpdatedMs = 0, 0
		if uuidFreeOps[op] {
			t.UUID = ""
		}
	}
	for i := range res.Views {
		v := &res.Views[i]
		v.CreatedMs, v.UpdatedMs = 0, 0
		if uuidFreeOps[op] {
			v.UUID = ""
		}
	}
	return res
}

// compactResults are outcomes of every shape a record stores.
func compactResults() []Result {
	tbl := Table{
		Namespace: []string{"db", "inner"}, Name: "events", UUID: "0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e",
		Location: "s3://wh/db/inner/events", LocationKey: "s3://wh/db/inner/events/",
		MetadataLocation: "s3://wh/db/inner/events/metadata/00042-9b2f5e1c-3a4d-4e5f-8a6b-7c8d9e0f1a2b.metadata.json",
		CreatedMs:        1_700_000_000_000, UpdatedMs: 1_785_000_000_003,
	}
	custom := tbl
	custom.Location, custom.LocationKey = "s3://elsewhere/x", "s3://elsewhere/x/"
	custom.MetadataLocation = "s3://elsewhere/x/metadata/123456-9b2f5e1c-3a4d-4e5f-8a6b-7c8d9e0f1a2b.metadata.json"
	odd := Table{Namespace: []string{}, Name: "", UUID: "u-not-a-uuid", Location: "file:///w/t", LocationKey: "raw:/w/t/",
		MetadataLocation: "file:///w/t/metadata/7-9B2F5E1C-3A4D-4E5F-8A6B-7C8D9E0F1A2B.metadata.json", CreatedMs: -5, UpdatedMs: 1 << 62}
	unstamped := tbl
	unstamped.LocationKey = ""
	unstamped.MetadataLocation = "s3://wh/db/inner/events/metadata/00001-9b2f5e1c-3a4d-4e5f-8a6b-7c8d9e0f1a2b.metadata.json.gz"
	padded := tbl
	padded.MetadataLocation = "s3://wh/db/inner/events/metadata/0000042-9b2f5e1c-3a4d-4e5f-8a6b-7c8d9e0f1a2b.metadata.json"
	return []Result{
		{},
		{Status: StatusOK, Tables: []Table{tbl}},
		{Status: StatusOK, Tables: []Table{tbl, custom, odd, unstamped, padded}},
		{Status: StatusOK, Views: []View{tbl.asView(), odd.asView()}},
		{Status: StatusOK, Tables: []Table{{}}, Views: []View{{Namespace: []string{"a"}}}},
		{Status: StatusNoSuchTable, Message: "table does not exist: db.t"},
		{Status: StatusOK, Properties: &PropertiesOutcome{Updated: []string{"a", ""}, Removed: []string{}, Missing: nil}},
		{Status: StatusOK, Properties: &PropertiesOutcome{}},
		{Status: StatusOK, Count: -3, Replayed: true, Recorded: true},
		{Status: Status(200), Message: "ünïcode \x00"},
	}
}

func TestIdempotencyRecordRoundTrip(t *testing.T) {
	keys := []string{"0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e", "0190F0A4-7B1C-7CC0-8D2E-1F2A3B4C5D6E", "membership-claim/x", "k"}
	times := [][2]int64{{1_785_000_000_000, 1_785_002_100_000}, {1, 1000}, {100, 50}, {-7, 3}, {0, 0}, {1<<63 - 1, -1 << 63}, {5, 5 + 1<<62}}
	// Routes: none, one naming the "db.inner.events" entries (left out of
	// the stored entries), the namespace alone, and a warehouse's.
	routes := []string{"", "db\x1finner\x1fevents", "db\x1finner", "\x1esales\x1fdb\x1finner\x1fevents", "k"}
	for _, res := range compactResults() {
		for i, key := range keys {
			tm := times[i%len(times)]
			for j, op := range []string{"updateTable", "dropTable", "someday-an-operation", ""} {
				b := Binding{Operation: op, Route: routes[(i+j)%len(routes)]}
				rec := newIdemRecord(key, b, res, tm[0], tm[1])
				k := recordKey(key)
				sk := recordSlotKey(rec.ExpiresMs, 42<<8)
				var roots rootTable // none, then two slots for roots
				if j%2 == 1 {
					roots = &memRoots{}
				}
				got, gotK, err := decodeRecord(sk, encodeRecord(k, rec, roots), roots)
				require.NoError(t, err)
				assert.Equal(t, [5]any{rec.Key, rec.Operation, rec.Digest, rec.CreatedMs, rec.ExpiresMs},
					[5]any{got.Key, got.Operation, got.Digest, got.CreatedMs, got.ExpiresMs})
				out, ok := got.Outcome(b)
				require.True(t, ok)
				assert.Equal(t, replayable(op, res), out, "route %q", b.Route)
				assert.Equal(t, k, gotK)
			}
		}
	}
	for _, tm := range times {
		for _, seq := range []uint64{0, 1, 1<<63 + 5} {
			e, s, err := decodeRef(encodeRef(tm[1], seq))
			require.NoError(t, err)
			assert.Equal(t, [2]any{tm[1], seq}, [2]any{e, s})
		}
	}
}

// firstCompactRecord is an updateTable record as the first binary with
// the compact format wrote it (entries with their UUID and times, no
// identifier left out): compactResults()[1] for the binding of
// TestIdempotencyRecordFormat, stored under slot key
// recordSlotKey(1_785_002_100_000, 7<<8).
const firstCompactRecord = "01" + // format
	"a002" + // expires-ms − slot start: 288
	"11ff0190f0a47b1c7cc08d2e1f2a3b4c5d6e" + // the key in bucketIdempotency
	"d141" + // lifetime: 2100 s
	"06" + // updateTable
	"b87439d429c1138b53ca614539adc7468de7d6" + // binding digest and tags
	"00" + "08" + "01" + // StatusOK, tables, one
	"2b" + // UUID as bytes, location under the identifier, location its directory, key location + "/"
	"0302646205696e6e6572066576656e7473" + // db, inner; events
	"0190f0a47b1c7cc08d2e1f2a3b4c5d6e" + // UUID
	"0773333a2f2f77682a9b2f5e1c3a4d4e5f8a6b7c8d9e0f1a2b" + // s3://wh, version 42, file UUID
	"0586c8a8a6f904" // atMs − updated-ms: −3; updated-ms − created-ms

// TestIdempotencyRecordFormat pins the stored format: records written by
// this binary, and by the ones before it, must read the same in every
// later one.
func TestIdempotencyRecordFormat(t *testing.T) {
	b := Binding{Operation: "updateTable", Route: "db\x1fevents", Principal: "alice", BodyDigest: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}
	d := b.Digest()
	assert.Equal(t, "b87439d429c1138b53ca614539adc746 8de7d6", fmt.Sprintf("%x %02x%02x%02x", d.Sum, d.Route, d.Principal, d.Body))
	sk := recordSlotKey(1_785_002_100_000, 7<<8)

	// A record of the first compact format reads whole.
	raw, err := hex.DecodeString(firstCompactRecord)
	require.NoError(t, err)
	got, _, err := decodeRecord(sk, raw, nil)
	require.NoError(t, err)
	assert.Equal(t, IdempotencyRecord{Key: "0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e", Operation: b.Operation, Digest: d,
		outcome: compactResults()[1], CreatedMs: 1_785_000_000_000, ExpiresMs: 1_785_002_100_000}, got)

	// Written now: the entry keeps neither its times nor, for an
	// updateTable, its UUID.
	rec := newIdemRecord("0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e", b, compactResults()[1], 1_785_000_000_000, 1_785_002_100_000)
	raw = encodeRecord(recordKey(rec.Key), rec, nil)
	assert.Equal(t, "01"+"a002"+"11ff0190f0a47b1c7cc08d2e1f2a3b4c5d6e"+"d141"+"06"+"b87439d429c1138b53ca614539adc7468de7d6"+
		"00"+"88"+"01"+ // StatusOK, tables and no times, one
		"aa"+ // no UUID, location under the identifier, location its directory, key location + "/"
		"0302646205696e6e6572066576656e7473"+ // db, inner; events
		"0773333a2f2f77682a9b2f5e1c3a4d4e5f8a6b7c8d9e0f1a2b", // s3://wh, version 42, file UUID
		hex.EncodeToString(raw))
	got, _, err = decodeRecord(sk, raw, nil)
	require.NoError(t, err)
	out, ok := got.Outcome(b)
	require.True(t, ok)
	assert.Equal(t, replayable(b.Operation, compactResults()[1]), out)
	assert.Equal(t, "02c094d4a6f367800e", hex.EncodeToString(encodeRef(rec.ExpiresMs, 7<<8)))

	// The same outcome for a request on the table's own route: its entry
	// leaves out the identifier, which the route gives back.
	b.Route = "db\x1finner\x1fevents"
	rec = newIdemRecord(rec.Key, b, compactResults()[1], rec.CreatedMs, rec.ExpiresMs)
	raw = encodeRecord(recordKey(rec.Key), rec, nil)
	assert.Equal(t, "01"+"a002"+"11ff0190f0a47b1c7cc08d2e1f2a3b4c5d6e"+"d141"+"06"+
		hex.EncodeToString(rec.Digest.Sum[:])+fmt.Sprintf("%02x%02x%02x", rec.Digest.Route, rec.Digest.Principal, rec.Digest.Body)+
		"00"+"88"+"01"+
		"ea"+ // as before, and the identifier is the route's
		"0773333a2f2f77682a9b2f5e1c3a4d4e5f8a6b7c8d9e0f1a2b",
		hex.EncodeToString(raw))
	got, _, err = decodeRecord(sk, raw, nil)
	require.NoError(t, err)
	out, ok = got.Outcome(b)
	require.True(t, ok)
	assert.Equal(t, replayable(b.Operation, compactResults()[1]), out)
	_, ok = got.Outcome(Binding{Route: "events"})
	assert.False(t, ok, "a route of one part names no table")

	// A drop keeps the UUID (a replayed synchronous purge finds its job by
	// it), not the times.
	b.Operation = "dropTable"
	rec = newIdemRecord(rec.Key, b, compactResults()[1], rec.CreatedMs, rec.ExpiresMs)
	raw = encodeRecord(recordKey(rec.Key), rec, nil)
	assert.Contains(t, hex.EncodeToString(raw), "0088016b"+"0190f0a47b1c7cc08d2e1f2a3b4c5d6e"+"0773333a2f2f7768")
	got, _, err = decodeRecord(sk, raw, nil)
	require.NoError(t, err)
	out, ok = got.Outcome(b)
	require.True(t, ok)
	assert.Equal(t, "0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e", out.Tables[0].UUID)
	assert.Equal(t, replayable(b.Operation, compactResults()[1]), out)

	// With the root interned (id 2), the entry names it by its id.
	roots := &memRoots{"s3://other"}
	b.Operation = "updateTable"
	rec = newIdemRecord(rec.Key, b, compactResults()[1], rec.CreatedMs, rec.ExpiresMs)
	raw = encodeRecord(recordKey(rec.Key), rec, roots)
	assert.Equal(t, &memRoots{"s3://other", "s3://wh"}, roots)
	assert.True(t, strings.HasSuffix(hex.EncodeToString(raw), "0088"+"01"+"ee"+"02"+"2a9b2f5e1c3a4d4e5f8a6b7c8d9e0f1a2b"),
		"routed, root id 2: %x", raw)
	got, _, err = decodeRecord(sk, raw, roots)
	require.NoError(t, err)
	out, ok = got.Outcome(b)
	require.True(t, ok)
	assert.Equal(t, replayable(b.Operation, compactResults()[1]), out)
	_, _, err = decodeRecord(sk, raw, &memRoots{"s3://other"})
	assert.ErrorContains(t, err, "unknown root id 2")
}

// legacyJSON is a record as the binary before the compact format wrote it.
const legacyJSON = `{"key":"0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e","binding":{"op":"updateTable","route":"a\u001ft1","principal":"alice","body":"d1"},` +
	`"result":{"status":0,"tables":[{"namespace":["a"],"name":"t1","uuid":"u-t1","location":"file:///w/t1","metadata-location":"m1","created-ms":10,"updated-ms":20}]},` +
	`"created-ms":1000,"expires-ms":5000}`

// putLegacy writes records as the binary before the compact format did.
func putLegacy(t *testing.T, f *FSM, recs ...legacyRecord) {
	t.Helper()
	require.NoError(t, f.db.Update(func(tx *bolt.Tx) error {
		for _, rec := range recs {
			if err := putLegacyRecord(tx, rec); err != nil {
				return err
			}
		}
		return nil
	}))
}

// storedKeys returns every record's key and expiry, checking that each
// has exactly one entry in the bucket that holds it.
func storedKeys(t *testing.T, f *FSM) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	require.NoError(t, f.View(func(r *Reader) error {
		b := idemBucketsOf(r.tx)
		require.NoError(t, b.keys.ForEach(func(k, v []byte) error {
			rec, _, err := b.read(k, v)
			require.NoError(t, err, "%q", k)
			require.Equal(t, keyOf(k), rec.Key)
			out[rec.Key] = rec.ExpiresMs
			return nil
		}))
		assert.Equal(t, b.keys.Stats().KeyN, b.records.Stats().KeyN+b.legacyExpiry.Stats().KeyN, "one entry per record")
		assert.Equal(t, len(out), r.IdempotencyRecords())
		return nil
	}))
	return out
}

func TestLegacyIdempotencyRecords(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	var i uint64
	apply := func(c Command) Result { i++; return result(t, f.Apply(entry(t, i, c))) }
	const key = "0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e"
	require.NoError(t, f.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketIdempotency).Put([]byte(key), []byte(legacyJSON)); err != nil {
			return err
		}
		return tx.Bucket(bucketIdemExpiry).Put(expiryKey(5000, []byte(key)), nil)
	}))
	b := Binding{Operation: "updateTable", Route: "a\x1ft1", Principal: "alice", BodyDigest: "d1"}
	stored := Result{Status: StatusOK, Tables: []Table{{Namespace: nsA, Name: "t1", UUID: "u-t1", Location: "file:///w/t1",
		MetadataLocation: "m1", CreatedMs: 10, UpdatedMs: 20}}}
	require.NoError(t, f.View(func(r *Reader) error {
		rec, ok := r.IdempotencyRecord(key)
		require.True(t, ok)
		assert.Equal(t, IdempotencyRecord{Key: key, Operation: "updateTable", Digest: b.Digest(), outcome: stored,
			CreatedMs: 1000, ExpiresMs: 5000}, rec)
		assert.True(t, rec.Binds(b))
		return nil
	}))

	// The same request replays the legacy record's outcome; another is
	// refused, and the message says how it differs.
	again := apply(keyed(t, key, b, 2000, create(tbl1, "m0")))
	assert.True(t, again.Replayed)
	stored.Replayed = true
	assert.Equal(t, stored, again)
	other := b
	other.BodyDigest = "d2"
	reused := apply(keyed(t, key, other, 2000, create(tbl1, "m0")))
	assert.ErrorIs(t, reused.Err(), ErrKeyReused)
	// The refusal tells nothing of the first request, not even its
	// operation: it may be another principal's.
	assert.Equal(t, "Idempotency-Key "+key+" was first used for another request: use a new key for each request", reused.Message)
	stranger := other
	stranger.Principal = "mallory"
	reused = apply(keyed(t, key, stranger, 2000, create(tbl1, "m0")))
	assert.ErrorIs(t, reused.Err(), ErrKeyReused)
	assert.Equal(t, "Idempotency-Key "+key+" was first used for another request: use a new key for each request", reused.Message)
	assert.Equal(t, map[string]int64{key: 5000}, storedKeys(t, f))

	// Once expired, the key is new: the compact record replaces the
	// legacy one, its expiry index entry included.
	require.NoError(t, apply(CreateNamespace{Namespace: nsA}).Err())
	fresh := apply(keyed(t, key, other, 6000, create(tbl1, "m0")))
	require.NoError(t, fresh.Err())
	assert.True(t, fresh.Recorded)
	assert.Equal(t, map[string]int64{key: 7000}, storedKeys(t, f))
	require.NoError(t, f.View(func(r *Reader) error {
		assert.Nil(t, r.tx.Bucket(bucketIdempotency).Get([]byte(key)), "no legacy record left")
		assert.Zero(t, r.tx.Bucket(bucketIdemExpiry).Stats().KeyN)
		rec, ok := r.IdempotencyRecord(key)
		require.True(t, ok)
		fresh.Recorded = false
		out, ok := rec.Outcome(other)
		require.True(t, ok)
		assert.Equal(t, replayable(other.Operation, fresh), out, "the stored outcome, as a record keeps it")
		return nil
	}))

	// Legacy records are pruned with the others.
	putLegacy(t, f, legacyRecord{Key: "membership-claim/" + key, Binding: b, CreatedMs: 1, ExpiresMs: 6500})
	assert.Equal(t, 2, apply(PruneIdempotency{NowMs: 7000}).Count)
	assert.Empty(t, storedKeys(t, f))
}

// TestIdempotencyRecordKeys: a UUID key in canonical form is stored as its
// 16 bytes; any other key as it is.
func TestIdempotencyRecordKeys(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	var i uint64
	apply := func(c Command) Result { i++; return result(t, f.Apply(entry(t, i, c))) }
	b := Binding{Operation: "op"}
	keys := []string{"0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e", "0190F0A4-7B1C-7CC0-8D2E-1F2A3B4C5D6E",
		"membership-claim/0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e", "k", "0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6g"}
	for _, k := range keys {
		require.True(t, apply(RecordOutcome{Key: k, Binding: b, AtMs: 1, ExpiresMs: 100}).Recorded)
	}
	require.NoError(t, f.View(func(r *Reader) error {
		var stored []string
		require.NoError(t, r.tx.Bucket(bucketIdempotency).ForEach(func(k, _ []byte) error {
			stored = append(stored, string(k))
			return nil
		}))
		raw, _ := parseUUID(keys[0])
		assert.ElementsMatch(t, []string{string(append([]byte{0xff}, raw[:]...)), keys[1], keys[2], keys[3], keys[4]}, stored)
		for _, k := range keys {
			rec, ok := r.IdempotencyRecord(k)
			require.True(t, ok, k)
			assert.Equal(t, k, rec.Key)
		}
		_, ok := r.IdempotencyRecord("0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6f")
		assert.False(t, ok)
		return nil
	}))
}

// TestTwoRecordsInOneEntry: an entry that writes two records (a
// RecordOutcome wrapped in Keyed) stores both.
func TestTwoRecordsInOneEntry(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	b := Binding{Operation: "op"}
	res := result(t, f.Apply(entry(t, 1, keyed(t, "outer", b, 1, RecordOutcome{Key: "inner", Binding: b, AtMs: 1, ExpiresMs: 1001}))))
	require.NoError(t, res.Err())
	assert.Equal(t, map[string]int64{"outer": 1001, "inner": 1001}, storedKeys(t, f))
	require.NoError(t, f.View(func(r *Reader) error {
		inner, _ := r.IdempotencyRecord("inner")
		outer, _ := r.IdempotencyRecord("outer")
		assert.False(t, inner.outcome.Recorded)
		assert.True(t, outer.outcome.Recorded, "as the inner command returned it")
		return nil
	}))
}

// TestPruneIdempotencyOrder checks pruning against the rule the binary
// before the compact format applied with its expiry index: delete in the
// order of (expires-ms as unsigned, key), up to the first record that
// expires after NowMs, at most Limit records. Records of both formats,
// keys of every form, ties and slot boundaries are mixed.
func TestPruneIdempotencyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := 0; round < 20; round++ {
		f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
		var i uint64
		apply := func(c Command) Result { i++; return result(t, f.Apply(entry(t, i, c))) }
		model := map[string]int64{}
		var pool []string
		for range 40 {
			var id [16]byte
			for j := range id {
				id[j] = byte(rng.Uint32())
			}
			k := formatUUID(id)
			switch rng.IntN(4) {
			case 1:
				k = strings.ToUpper(k)
			case 2:
				k = "membership-claim/" + k
			case 3:
				k = k[:rng.IntN(5)+1]
			}
			pool = append(pool, k)
		}
		const base = 10_000
		b := Binding{Operation: "op"}
		var legacy []legacyRecord
		for _, k := range pool[:20] {
			if _, dup := model[k]; !dup {
				e := base + rng.Int64N(3000)
				if rng.IntN(10) == 0 {
					e = -e // sorts after every positive expiry
				}
				legacy = append(legacy, legacyRecord{Key: k, Binding: b, CreatedMs: 0, ExpiresMs: e})
				model[k] = e
			}
		}
		putLegacy(t, f, legacy...)
		for step := 0; step < 60; step++ {
			if rng.IntN(4) == 0 {
				now, limit := base+rng.Int64N(4000), 1+rng.IntN(8)
				type kv struct {
					k string
					e int64
				}
				var all []kv
				for k, e := range model {
					all = append(all, kv{k, e})
				}
				slices.SortFunc(all, func(a, b kv) int {
					if c := cmp.Compare(uint64(a.e), uint64(b.e)); c != 0 {
						return c
					}
					return strings.Compare(a.k, b.k)
				})
				want := 0
				for _, x := range all {
					if x.e > now || want == limit {
						break
					}
					delete(model, x.k)
					want++
				}
				require.Equal(t, want, apply(PruneIdempotency{NowMs: now, Limit: limit}).Count)
			} else {
				k := pool[rng.IntN(len(pool))]
				at := base + rng.Int64N(3000)
				exp := at + rng.Int64N(2500)
				res := apply(RecordOutcome{Key: k, Binding: b, AtMs: at, ExpiresMs: exp})
				if e, ok := model[k]; ok && at < e {
					require.True(t, res.Replayed)
				} else {
					require.True(t, res.Recorded)
					model[k] = exp
				}
			}
			require.Equal(t, model, storedKeys(t, f), "round %d step %d", round, step)
		}
	}
}

// FuzzIdempotencyRecordDecode: a stored value that is not a record is an
// error, never a panic; one that decodes encodes back to itself.
func FuzzIdempotencyRecordDecode(f *testing.F) {
	for _, res := range compactResults() {
		for _, route := range []string{"", "db\x1finner\x1fevents"} {
			rec := newIdemRecord("k", Binding{Operation: "createView", Route: route}, res, 1, 2101)
			f.Add(encodeRecord([]byte("k"), rec, nil))
		}
	}
	f.Add([]byte{recordFormat1})
	f.Add([]byte{recordFormat1, 0x80})
	f.Add(encodeRecord([]byte("k"), newIdemRecord("k", Binding{Operation: "updateTable", Route: "db\x1finner\x1fevents"}, compactResults()[2], 1, 2101), &memRoots{"s3://wh"}))
	f.Fuzz(func(t *testing.T, raw []byte) {
		sk := recordSlotKey(2101, 1<<8)
		roots := &memRoots{"s3://wh"}
		rec, k, err := decodeRecord(sk, raw, roots)
		if err != nil {
			return
		}
		// Answered on a route, the outcome is stored again the same way
		// (an entry the route names leaves its identifier out) and reads
		// back the same.
		b := Binding{Operation: rec.Operation, Route: "db\x1fevents"}
		out, ok := rec.Outcome(b)
		require.True(t, ok)
		rec.outcome, rec.routed, rec.route = out, nil, b.Route
		again, k2, err := decodeRecord(sk, encodeRecord(k, rec, roots), roots)
		require.NoError(t, err)
		assert.Equal(t, [5]any{rec.Key, rec.Operation, rec.Digest, rec.CreatedMs, rec.ExpiresMs},
			[5]any{again.Key, again.Operation, again.Digest, again.CreatedMs, again.ExpiresMs})
		out2, ok := again.Outcome(b)
		require.True(t, ok)
		assert.Equal(t, replayable(rec.Operation, out), out2, "as a record written now keeps it")
		assert.Equal(t, k, k2)
	})
}

// TestFileBeforeCompactRecords: a state machine file written before the
// compact format (legacy records, no records bucket) opens, answers from
// its records and prunes them.
func TestFileBeforeCompactRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	f, err := Open(path, nil)
	require.NoError(t, err)
	b := Binding{Operation: "createNamespace", Principal: "p", BodyDigest: "d1"}
	putLegacy(t, f,
		legacyRecord{Key: "0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e", Binding: b, Result: Result{Status: StatusAlreadyExists, Message: "exists"}, CreatedMs: 1, ExpiresMs: 1000},
		legacyRecord{Key: "k2", Binding: b, CreatedMs: 1, ExpiresMs: 2000})
	require.NoError(t, f.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketIdemRecords) }))
	require.NoError(t, f.Close())

	f = mustOpen(t, path)
	replay := result(t, f.Apply(entry(t, 1, keyed(t, "0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e", b, 500, CreateNamespace{Namespace: nsA}))))
	assert.ErrorIs(t, replay.Err(), ErrAlreadyExists)
	assert.True(t, replay.Replayed)
	assert.Equal(t, "exists", replay.Message)
	require.True(t, result(t, f.Apply(entry(t, 2, RecordOutcome{Key: "k3", Binding: b, AtMs: 500, ExpiresMs: 1500}))).Recorded)
	assert.Equal(t, map[string]int64{"0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e": 1000, "k2": 2000, "k3": 1500}, storedKeys(t, f))
	assert.Equal(t, 2, result(t, f.Apply(entry(t, 3, PruneIdempotency{NowMs: 1500}))).Count)
	assert.Equal(t, map[string]int64{"k2": 2000}, storedKeys(t, f))
}

// TestIdempotencyRootsInterned: records stored through Apply name their
// warehouse root by an id in idempotency_roots; a reopened state machine,
// and another one that applied the same log, replay them the same; past
// maxIdemRoots roots are stored in each record as they are.
func TestIdempotencyRootsInterned(t *testing.T) {
	dir := t.TempDir()
	var log []*raft.Log
	add := func(c Command) { log = append(log, entry(t, uint64(len(log)+1), c)) }
	add(CreateNamespace{Namespace: nsA})
	type keyedCreate struct {
		key  string
		b    Binding
		want Table
	}
	var creates []keyedCreate
	long := "s3://long/" + strings.Repeat("x", maxIdemRootLen)
	for i := range maxIdemRoots + 6 {
		root := fmt.Sprintf("s3://wh%02d/lake", i)
		if i == 0 {
			root = long // too long to intern: stored in the record, no id taken
		}
		name := fmt.Sprintf("t%02d", i)
		loc := root + "/a/" + name
		meta := loc + "/metadata/00001-9b2f5e1c-3a4d-4e5f-8a6b-7c8d9e0f1a2b.metadata.json"
		op := "updateTable" // a keyed commit on the table's own route
		if i%2 == 1 {
			op = "dropTable" // keeps the UUID
		}
		c := keyedCreate{key: fmt.Sprintf("0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c%04x", i), b: Binding{Operation: op, Route: "a\x1f" + name, Principal: "p"},
			want: Table{Namespace: nsA, Name: name, Location: loc, LocationKey: loc + "/", MetadataLocation: meta}}
		if op == "dropTable" {
			c.want.UUID = "0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e"
		}
		creates = append(creates, c)
		add(keyed(t, c.key, c.b, 100, CommitTables{Changes: []TableChange{{Kind: ChangeCreate, Ident: Ident{Namespace: nsA, Name: name},
			MetadataLocation: meta, Location: loc, UUID: "0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e"}}}))
	}
	apply := func(path string) *FSM {
		f := mustOpen(t, path)
		for i, r := range f.ApplyBatch(log) {
			require.NoError(t, result(t, r).Err(), "entry %d", i+1)
		}
		return f
	}
	check := func(f *FSM) map[string]string {
		roots := map[string]string{}
		require.NoError(t, f.View(func(r *Reader) error {
			for _, c := range creates {
				rec, ok := r.IdempotencyRecord(c.key)
				require.True(t, ok)
				out, ok := rec.Outcome(c.b)
				require.True(t, ok)
				assert.Equal(t, []Table{c.want}, out.Tables, c.key)
			}
			return r.tx.Bucket(bucketIdemRoots).ForEach(func(k, v []byte) error { roots[string(k)] = string(v); return nil })
		}))
		return roots
	}
	one := apply(filepath.Join(dir, "one.db"))
	roots := check(one)
	assert.Len(t, roots, 1+2*maxIdemRoots, "the count and both ways of each root, no more")
	assert.Equal(t, string(binary.AppendUvarint(nil, 1)), roots["rs3://wh01/lake"], "in the order of the log")
	assert.NotContains(t, roots, "r"+long, "a root over maxIdemRootLen")
	assert.Contains(t, roots, fmt.Sprintf("rs3://wh%02d/lake", maxIdemRoots), "the long root took no slot")
	assert.NotContains(t, roots, fmt.Sprintf("rs3://wh%02d/lake", maxIdemRoots+1))

	// The same log elsewhere: the same ids.
	assert.Equal(t, roots, check(apply(filepath.Join(dir, "two.db"))))
	// Reopened: the same answers.
	require.NoError(t, one.Close())
	assert.Equal(t, roots, check(mustOpen(t, filepath.Join(dir, "one.db"))))
}

// TestReleaseClaim: ReleaseClaim removes a claim only when it is the one
// taken at ClaimedAtMs for the same binding, with an OK result; anything
// else under the key stays. A key whose claim was removed can be claimed
// again at once.
func TestReleaseClaim(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	var i uint64
	apply := func(c Command) Result { i++; return result(t, f.Apply(entry(t, i, c))) }
	live := func(key string) bool {
		var ok bool
		require.NoError(t, f.View(func(r *Reader) error {
			var rec IdempotencyRecord
			rec, ok = r.IdempotencyRecord(key)
			ok = ok && rec.Live(150)
			return nil
		}))
		return ok
	}
	b := Binding{Operation: "removeMember", Route: "b", Principal: "root", BodyDigest: "d1"}
	other := b
	other.Route = "c"
	const claim = "membership-claim/0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e"
	require.True(t, apply(RecordOutcome{Key: claim, Binding: b, AtMs: 100, ExpiresMs: 200}).Recorded)

	for _, tc := range []struct {
		name string
		cmd  ReleaseClaim
	}{
		{"another claim time", ReleaseClaim{Key: claim, Binding: b, ClaimedAtMs: 99}},
		{"another binding", ReleaseClaim{Key: claim, Binding: other, ClaimedAtMs: 100}},
		{"another key", ReleaseClaim{Key: claim + "x", Binding: b, ClaimedAtMs: 100}},
	} {
		assert.Zero(t, apply(tc.cmd).Count, tc.name)
		assert.True(t, live(claim), "%s: the claim stays", tc.name)
	}

	// A recorded failure is an outcome, never a claim: it stays.
	const failed = "0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6f"
	apply(RecordOutcome{Key: failed, Binding: b, AtMs: 100, ExpiresMs: 200, Result: Result{Status: StatusNoSuchTable}})
	assert.Zero(t, apply(ReleaseClaim{Key: failed, Binding: b, ClaimedAtMs: 100}).Count)
	assert.True(t, live(failed))

	assert.Equal(t, 1, apply(ReleaseClaim{Key: claim, Binding: b, ClaimedAtMs: 100}).Count)
	assert.False(t, live(claim))
	again := apply(RecordOutcome{Key: claim, Binding: b, AtMs: 120, ExpiresMs: 220})
	assert.True(t, again.Recorded, "the key is free to claim again")
	assert.False(t, again.Replayed)

	// An invalid release is refused before it is applied.
	assert.ErrorIs(t, apply(ReleaseClaim{Binding: b, ClaimedAtMs: 120}).Err(), ErrInvalidCommand)
}

func TestIsKeyed(t *testing.T) {
	for _, c := range []Command{Keyed{Key: "k", AtMs: 1, Command: []byte{1}}, RecordOutcome{Key: "k", AtMs: 2}} {
		data, err := Encode(c)
		require.NoError(t, err)
		assert.True(t, IsKeyed(data), "%T", c)
	}
	plain, err := Encode(CreateNamespace{Namespace: []string{"a"}, AtMs: 7})
	require.NoError(t, err)
	assert.False(t, IsKeyed(plain), "only keyed commands")
	assert.False(t, IsKeyed([]byte{byte(TypeKeyed)}), "too short")
}
