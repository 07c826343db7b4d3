package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/idemmodel"
)

// recordSizeDefaultN is the default size's Sizes.RecordSizeN: as many
// records as the state machine's unit benchmark (fsm's
// BenchmarkIdempotencyRecordSize) stores, so that both give the same figures.
const recordSizeDefaultN = 50_000

// recordSizeBatch is how many records one ApplyBatch stores (one bbolt
// transaction), as Raft hands the state machine a batch of entries.
const recordSizeBatch = 64

// RecordSize is item 8's size at rest of an Idempotency-Key record,
// measured in the driver's process on the state machine's own code: the
// snapshot bytes that Records records of the idemmodel model add to an
// empty state machine, divided by Records, for each kind of outcome.
type RecordSize struct {
	Records    int
	Commit     float64 // bytes per record, commit outcomes
	Properties float64 // bytes per record, updateProperties outcomes
	Took       time.Duration
}

// runRecordSize measures RecordSize with o.Sizes.RecordSizeN records of
// each kind, in state machines under dir.
func runRecordSize(ctx context.Context, o *SuiteOptions, dir string) (*RecordSize, error) {
	n := o.Sizes.RecordSizeN
	if n <= 0 {
		return nil, fmt.Errorf("record size: %d records", n)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	log := o.log()
	log.Info("item 8: idempotency record size at rest", "records", n)
	rs := &RecordSize{Records: n}
	t0 := time.Now()
	var err error
	if rs.Commit, err = measureRecordSize(ctx, dir, n, idemmodel.Commit); err != nil {
		return nil, fmt.Errorf("record size, commit outcomes: %w", err)
	}
	log.Info("item 8: commit outcome records at rest", "records", n, "bytes_per_record", fmt.Sprintf("%.1f", rs.Commit))
	if rs.Properties, err = measureRecordSize(ctx, dir, n, idemmodel.UpdateProperties); err != nil {
		return nil, fmt.Errorf("record size, updateProperties outcomes: %w", err)
	}
	log.Info("item 8: updateProperties outcome records at rest", "records", n, "bytes_per_record", fmt.Sprintf("%.1f", rs.Properties))
	rs.Took = time.Since(t0)
	return rs, nil
}

// measureRecordSize opens a new state machine in a temporary directory
// under dir (removed after), applies n records of the idemmodel model with
// outcomes of kind outcome as fsm.RecordOutcome commands, in batches of
// recordSizeBatch, and returns the bytes they add to its snapshot
// (Reader.WriteTo: the bbolt file as a snapshot copies it, free pages
// included) per record. It fails if a record is not stored.
func measureRecordSize(ctx context.Context, dir string, n int, outcome idemmodel.Outcome) (perRecord float64, err error) {
	tmp, err := os.MkdirTemp(dir, "recordsize-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	f, err := fsm.Open(filepath.Join(tmp, "fsm.db"), nil)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	// ApplyBatch panics when bbolt fails (a full disk): this measurement
	// fails instead of the whole suite.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("apply: %v", p)
		}
	}()

	before, err := snapshotBytes(f)
	if err != nil {
		return 0, err
	}
	g := idemmodel.New(outcome)
	index := uint64(1)
	for done := 0; done < n; {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		logs := make([]*raft.Log, 0, recordSizeBatch)
		for ; len(logs) < recordSizeBatch && done < n; done++ {
			data, err := fsm.Encode(recordOutcome(g.Next()))
			if err != nil {
				return 0, err
			}
			logs = append(logs, &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data})
			index++
		}
		for i, res := range f.ApplyBatch(logs) {
			if r, ok := res.(fsm.Result); !ok || !r.Recorded {
				return 0, fmt.Errorf("entry %d: record not stored: %+v", logs[i].Index, res)
			}
		}
	}
	var stored int
	if err := f.View(func(r *fsm.Reader) error {
		stored = r.IdempotencyRecords()
		return nil
	}); err != nil {
		return 0, err
	}
	if stored != n {
		return 0, fmt.Errorf("%d records stored, want %d", stored, n)
	}
	after, err := snapshotBytes(f)
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(n), nil
}

// snapshotBytes is the size of a snapshot of f now.
func snapshotBytes(f *fsm.FSM) (int64, error) {
	var size int64
	err := f.View(func(r *fsm.Reader) error {
		var err error
		size, err = r.WriteTo(io.Discard)
		return err
	})
	return size, err
}

// recordOutcome is the command that stores the model's record r.
func recordOutcome(r idemmodel.Record) fsm.RecordOutcome {
	c := fsm.RecordOutcome{
		Key:       r.Key,
		Binding:   fsm.Binding{Operation: r.Operation, Route: r.Route, Principal: r.Principal, BodyDigest: r.BodyDigest},
		AtMs:      r.AtMs,
		ExpiresMs: r.ExpiresMs,
	}
	if p := r.Properties; p != nil {
		c.Result.Properties = &fsm.PropertiesOutcome{Updated: p.Updated, Removed: p.Removed, Missing: p.Missing}
	}
	if t := r.Table; t != nil {
		c.Result.Tables = []fsm.Table{{
			Namespace: t.Namespace, Name: t.Name, UUID: t.UUID, Location: t.Location, LocationKey: t.LocationKey,
			MetadataLocation: t.MetadataLocation, CreatedMs: t.CreatedMs, UpdatedMs: t.UpdatedMs,
		}}
	}
	return c
}
