package fsm

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/floe-catalog/floe/internal/idemmodel"
)

// The size of Idempotency-Key records at rest, as a snapshot copies them
// (Reader.WriteTo, i.e. bbolt's Tx.WriteTo, free pages included), in the
// format written before the compact one and in the current one. Figures in
// DESIGN.md ("Idempotency records"):
//
//	go test ./fsm -run '^$' -bench IdempotencyRecordSize -benchtime 1x
//
// The records are internal/idemmodel's; floebench's item 8
// (bench/recordsize.go) measures the current format from the same model.

// putLegacyRecord stores a record exactly as the binary before the compact
// format did: JSON of the whole record under the key as it is, an expiry
// entry under expires-ms and the key, both buckets at bbolt's default fill
// percent.
func putLegacyRecord(tx *bolt.Tx, rec legacyRecord) error {
	records, expiry := tx.Bucket(bucketIdempotency), tx.Bucket(bucketIdemExpiry)
	if raw := records.Get([]byte(rec.Key)); raw != nil {
		var old legacyRecord
		if err := json.Unmarshal(raw, &old); err != nil {
			return err
		}
		if err := expiry.Delete(expiryKey(old.ExpiresMs, []byte(old.Key))); err != nil {
			return err
		}
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := records.Put([]byte(rec.Key), raw); err != nil {
		return err
	}
	return expiry.Put(expiryKey(rec.ExpiresMs, []byte(rec.Key)), nil)
}

// modelRecord is a record of the idemmodel model (a busy catalog's keyed
// requests, docs/benchmarks.md item 8) as the command that stores it.
func modelRecord(r idemmodel.Record) RecordOutcome {
	c := RecordOutcome{
		Key:       r.Key,
		Binding:   Binding{Operation: r.Operation, Route: r.Route, Principal: r.Principal, BodyDigest: r.BodyDigest},
		AtMs:      r.AtMs,
		ExpiresMs: r.ExpiresMs,
	}
	if p := r.Properties; p != nil {
		c.Result.Properties = &PropertiesOutcome{Updated: p.Updated, Removed: p.Removed, Missing: p.Missing}
	}
	if t := r.Table; t != nil {
		c.Result.Tables = []Table{{
			Namespace: t.Namespace, Name: t.Name, UUID: t.UUID, Location: t.Location, LocationKey: t.LocationKey,
			MetadataLocation: t.MetadataLocation, CreatedMs: t.CreatedMs, UpdatedMs: t.UpdatedMs,
		}}
	}
	return c
}

type recordSize struct {
	snapshot float64 // snapshot bytes per record
	inUse    float64 // bytes of both buckets' pages in use per record
	value    float64 // mean stored value
}

// measureRecords stores n records of the idemmodel model (commit outcomes,
// or updateProperties ones with properties set), in batches of 64 (one
// bbolt transaction each, as ApplyBatch commits a batch of Raft entries):
// through Apply in the current format, or written directly in the legacy
// one. It reports what they add to a snapshot of an empty state machine.
func measureRecords(tb testing.TB, n int, legacy, properties bool) recordSize {
	f, err := Open(filepath.Join(tb.TempDir(), "fsm.db"), nil)
	require.NoError(tb, err)
	defer f.Close()
	snapshotSize := func() int64 {
		var size int64
		require.NoError(tb, f.View(func(r *Reader) error {
			w := &countingWriter{}
			_, err := r.WriteTo(w)
			size = w.n
			return err
		}))
		return size
	}
	before := snapshotSize()
	outcome := idemmodel.Commit
	if properties {
		outcome = idemmodel.UpdateProperties
	}
	g := idemmodel.New(outcome)
	var values int64
	roots := &memRoots{} // as the state machine interns the warehouse root
	const batch = 64
	for done, index := 0, uint64(1); done < n; {
		cmds := make([]RecordOutcome, 0, batch)
		for ; len(cmds) < batch && done < n; done++ {
			cmds = append(cmds, modelRecord(g.Next()))
		}
		if legacy {
			require.NoError(tb, f.db.Update(func(tx *bolt.Tx) error {
				for _, c := range cmds {
					rec := legacyRecord{Key: c.Key, Binding: c.Binding, Result: c.Result, CreatedMs: c.AtMs, ExpiresMs: c.ExpiresMs}
					raw, err := json.Marshal(rec)
					if err != nil {
						return err
					}
					values += int64(len(raw))
					if err := putLegacyRecord(tx, rec); err != nil {
						return err
					}
				}
				index += uint64(len(cmds))
				return putUint64(tx.Bucket(bucketRaft), keyAppliedIndex, index-1)
			}))
			continue
		}
		logs := make([]*raft.Log, len(cmds))
		for i, c := range cmds {
			data, err := Encode(c)
			require.NoError(tb, err)
			logs[i] = &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}
			rec := newIdemRecord(c.Key, c.Binding, c.Result, c.AtMs, c.ExpiresMs)
			values += int64(len(encodeRecord(recordKey(c.Key), rec, roots)) + len(encodeRef(c.ExpiresMs, index<<8)))
			index++
		}
		for i, res := range f.ApplyBatch(logs) {
			require.True(tb, res.(Result).Recorded, "record %d", i)
		}
	}
	var inUse int
	require.NoError(tb, f.View(func(r *Reader) error {
		require.Equal(tb, n, r.IdempotencyRecords())
		for _, b := range [][]byte{bucketIdempotency, bucketIdemRecords, bucketIdemExpiry} {
			s := r.tx.Bucket(b).Stats()
			inUse += s.BranchInuse + s.LeafInuse
		}
		return nil
	}))
	return recordSize{
		snapshot: float64(snapshotSize()-before) / float64(n),
		inUse:    float64(inUse) / float64(n),
		value:    float64(values) / float64(n),
	}
}

type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

func (s recordSize) String() string {
	return fmt.Sprintf("%.0f snapshot bytes/record (%.0f in use; %.0f-byte values)", s.snapshot, s.inUse, s.value)
}

// TestIdempotencyRecordSize holds the compact format to a fraction of the
// legacy one's size.
func TestIdempotencyRecordSize(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 15 000 records")
	}
	const n = 5000
	legacy, compact := measureRecords(t, n, true, false), measureRecords(t, n, false, false)
	t.Logf("commit outcomes, legacy:  %v", legacy)
	t.Logf("commit outcomes, compact: %v", compact)
	assert.Less(t, compact.snapshot, legacy.snapshot/5)
	assert.Less(t, compact.snapshot, 200.0, "the aim of docs/benchmarks.md item 8")
	props := measureRecords(t, n, false, true)
	t.Logf("updateProperties outcomes, compact: %v", props)
	assert.Less(t, props.snapshot, 200.0)
}

// BenchmarkIdempotencyRecordSize reports the figures of DESIGN.md, for 50K
// records (run it with -benchtime 1x: the time is not the point).
func BenchmarkIdempotencyRecordSize(b *testing.B) {
	const n = 50_000
	for _, w := range []struct {
		name       string
		properties bool
	}{{"commits", false}, {"properties", true}} {
		b.Run(w.name, func(b *testing.B) {
			var legacy, compact recordSize
			for b.Loop() {
				legacy, compact = measureRecords(b, n, true, w.properties), measureRecords(b, n, false, w.properties)
			}
			b.ReportMetric(legacy.snapshot, "legacy-B/record")
			b.ReportMetric(compact.snapshot, "compact-B/record")
			b.ReportMetric(legacy.inUse, "legacy-inuse-B/record")
			b.ReportMetric(compact.inUse, "compact-inuse-B/record")
			b.ReportMetric(legacy.value, "legacy-value-B")
			b.ReportMetric(compact.value, "compact-value-B")
		})
	}
}
