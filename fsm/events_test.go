package fsm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// events reads every stored event after index after.
func events(t *testing.T, f *FSM, after uint64) []Event {
	t.Helper()
	var out []Event
	require.NoError(t, f.View(func(r *Reader) error {
		var err error
		out, _, err = r.Events(after, 0)
		return err
	}))
	return out
}

// brief is an event without the fields a test does not compare.
type brief struct {
	Index uint64
	Seq   uint32
	Type  EventType
	Name  string
}

func briefs(evs []Event) []brief {
	out := make([]brief, 0, len(evs))
	for _, e := range evs {
		b := brief{Index: e.Index, Seq: e.Seq, Type: e.Type}
		switch {
		case e.Ident != nil:
			b.Name = e.Ident.String()
		case e.Namespace != nil:
			b.Name = nsName(e.Namespace)
		}
		if e.PurgeJob != nil && e.Type == EventPurgeJob {
			b.Name += " " + string(e.PurgeJob.State)
			if e.PurgeJob.Released {
				b.Name += " released"
			}
		}
		out = append(out, b)
	}
	return out
}

// feedScript is one command of each kind that changes the catalog, and
// refused and replayed ones that must record nothing. Entry i+1 applies
// feedScript[i].
func feedScript(t *testing.T) []Command {
	snap := int64(42)
	t2 := Ident{Namespace: nsA, Name: "t2"}
	b := Binding{Operation: "createNamespace", Principal: "p", BodyDigest: "d"}
	return []Command{
		CreateNamespace{Namespace: nsA, Properties: map[string]string{"owner": "o"}, AtMs: 10},                 // 1
		CreateNamespace{Namespace: nsA, AtMs: 11},                                                              // 2 refused: exists
		UpdateNamespace{Namespace: nsA, Set: map[string]string{"k": "v"}, Remove: []string{"owner"}, AtMs: 12}, // 3
		tableAt("t1", "s3://b/wh/a/t1"),                                                                        // 4
		CommitTables{AtMs: 14, Changes: []TableChange{{Kind: ChangeUpdate, Ident: tbl1, // 5
			ExpectedMetadataLocation: "s3://b/wh/a/t1/metadata/00000.metadata.json", ExpectedUUID: "u-t1",
			MetadataLocation: "s3://b/wh/a/t1/metadata/00001.metadata.json", Location: "s3://b/wh/a/t1", UUID: "u-t1", SnapshotID: &snap}}},
		CommitTables{AtMs: 15, Changes: []TableChange{{Kind: ChangeUpdate, Ident: tbl1, // 6 refused: lost CAS
			ExpectedMetadataLocation: "stale", MetadataLocation: "x", Location: "s3://b/wh/a/t1", UUID: "u-t1"}}},
		CommitTables{AtMs: 16, Changes: []TableChange{ // 7: two tables, two events
			{Kind: ChangeRegister, Ident: t2, MetadataLocation: "s3://b/wh/a/t2/metadata/00000.metadata.json", Location: "s3://b/wh/a/t2", UUID: "u-t2"},
			{Kind: ChangeCreate, Ident: Ident{Namespace: nsA, Name: "t3"}, MetadataLocation: "s3://b/wh/a/t3/metadata/00000.metadata.json", Location: "s3://b/wh/a/t3", UUID: "u-t3"},
		}},
		RenameTable{From: Ident{Namespace: nsA, Name: "t3"}, To: Ident{Namespace: nsA, Name: "t4"}, AtMs: 17}, // 8
		DropTable{Ident: t2, AtMs: 18},                                                             // 9
		dropWithJobEvent(purgeDrop("t1", "job-1")),                                                 // 10: the drop and its job
		AssignPurgeLease{JobID: "job-1", Node: "n1", AtMs: 20, ExpiresMs: 99},                      // 11
		ReportPurgeProgress{JobID: "job-1", Token: 11, AtMs: 21},                                   // 12: no event
		FinishPurgeJob{JobID: "job-1", Token: 11, Outcome: OutcomeFailed, Error: "boom", AtMs: 22}, // 13
		RetryPurgeJob{JobID: "job-1", By: "op", AtMs: 23},                                          // 14
		AssignPurgeLease{JobID: "job-1", Node: "n2", AtMs: 24, ExpiresMs: 99},                      // 15
		FinishPurgeJob{JobID: "job-1", Token: 15, Outcome: OutcomeFailed, Error: "boom", AtMs: 25}, // 16
		ReleasePurgeJob{JobID: "job-1", By: "op", AtMs: 26},                                        // 17
		createView("v", "s3://b/wh/a/v"),                                                           // 18
		ReplaceView{Ident: viewIdent("v"), ExpectedMetadataLocation: "s3://b/wh/a/v/metadata/00000-a.metadata.json", // 19
			MetadataLocation: "s3://b/wh/a/v/metadata/00001-b.metadata.json", Location: "s3://b/wh/a/v", LocationKey: "s3://b/wh/a/v/", AtMs: 28},
		RenameView{From: viewIdent("v"), To: viewIdent("w"), AtMs: 29},             // 20
		DropView{Ident: viewIdent("w"), AtMs: 30},                                  // 21
		keyed(t, "k1", b, 31, CreateNamespace{Namespace: []string{"b"}, AtMs: 31}), // 22
		keyed(t, "k1", b, 32, CreateNamespace{Namespace: []string{"b"}, AtMs: 32}), // 23 replayed: no event
		DropNamespace{Namespace: []string{"b"}},                                    // 24
		PurgeHeartbeat{Node: "n1", Slots: 1, AtMs: 33},                             // 25: no event
		Noop{},                   // 26: no event
		purgeDrop("t4", "job-2"), // 27
		AssignPurgeLease{JobID: "job-2", Node: "n1", AtMs: 40, ExpiresMs: 99},          // 28
		FinishPurgeJob{JobID: "job-2", Token: 28, Outcome: OutcomeSucceeded, AtMs: 41}, // 29
	}
}

// dropWithJobEvent is d written as body version 2 (DropTable.JobInEvent).
func dropWithJobEvent(d DropTable) DropTable {
	d.JobInEvent = true
	return d
}

func applyScript(t *testing.T, f *FSM, script []Command) {
	t.Helper()
	for i, c := range script {
		f.Apply(entry(t, uint64(i+1), c))
	}
}

func TestEventsForEachCommandKind(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	applyScript(t, f, feedScript(t))

	evs := events(t, f, 0)
	assert.Equal(t, []brief{
		{1, 0, EventNamespaceCreated, "a"},
		{3, 0, EventNamespaceUpdated, "a"},
		{4, 0, EventTableCreated, "a.t1"},
		{5, 0, EventTableCommitted, "a.t1"},
		{7, 0, EventTableRegistered, "a.t2"},
		{7, 1, EventTableCreated, "a.t3"},
		{8, 0, EventTableRenamed, "a.t3"},
		{9, 0, EventTableDropped, "a.t2"},
		{10, 0, EventTableDropped, "a.t1"},
		{10, 1, EventPurgeJob, "a.t1 PENDING"},
		{11, 0, EventPurgeJob, "a.t1 RUNNING"},
		{13, 0, EventPurgeJob, "a.t1 FAILED"},
		{14, 0, EventPurgeJob, "a.t1 PENDING"},
		{15, 0, EventPurgeJob, "a.t1 RUNNING"},
		{16, 0, EventPurgeJob, "a.t1 FAILED"},
		{17, 0, EventPurgeJob, "a.t1 FAILED released"},
		{18, 0, EventViewCreated, "a.v"},
		{19, 0, EventViewReplaced, "a.v"},
		{20, 0, EventViewRenamed, "a.v"},
		{21, 0, EventViewDropped, "a.w"},
		{22, 0, EventNamespaceCreated, "b"},
		{24, 0, EventNamespaceDropped, "b"},
		{27, 0, EventTableDropped, "a.t4"},
		{27, 1, EventPurgeJob, "a.t4 PENDING"},
		{28, 0, EventPurgeJob, "a.t4 RUNNING"},
		{29, 0, EventPurgeJob, "a.t4 SUCCEEDED"},
	}, briefs(evs))

	byIndex := map[uint64]Event{}
	for _, e := range evs {
		if e.Seq == 0 {
			byIndex[e.Index] = e
		}
	}
	assert.Equal(t, map[string]string{"owner": "o"}, byIndex[1].Properties)
	assert.Equal(t, int64(10), byIndex[1].AtMs, "times come from the command")
	assert.Equal(t, []string{"k"}, byIndex[3].Updated)
	assert.Equal(t, []string{"owner"}, byIndex[3].Removed)

	commit := byIndex[5]
	assert.Equal(t, "u-t1", commit.UUID)
	assert.Equal(t, "s3://b/wh/a/t1/metadata/00001.metadata.json", commit.MetadataLocation)
	assert.Equal(t, "s3://b/wh/a/t1/metadata/00000.metadata.json", commit.PreviousMetadataLocation)
	require.NotNil(t, commit.SnapshotID)
	assert.Equal(t, int64(42), *commit.SnapshotID)
	assert.Nil(t, byIndex[4].SnapshotID, "absent when the command does not carry it")

	assert.Equal(t, "a.t4", byIndex[8].To.String())
	assert.False(t, byIndex[9].Purge)
	drop := byIndex[10]
	assert.True(t, drop.Purge)
	assert.Equal(t, "s3://b/wh/a/t1/metadata/00001.metadata.json", drop.MetadataLocation, "the last metadata file")
	require.NotNil(t, drop.PurgeJob)
	assert.Equal(t, "job-1", drop.PurgeJob.ID)
	assert.Equal(t, JobPending, drop.PurgeJob.State, "the drop's event shows the job as the drop added it")
	// A version 1 drop's event (entry 27) carries the job's id alone, as
	// binaries from before version 2 record it: a replica on either binary
	// stores the same event.
	require.Equal(t, EventTableDropped, byIndex[27].Type)
	assert.Equal(t, &PurgeJobEvent{ID: "job-2"}, byIndex[27].PurgeJob)
	assert.Equal(t, "n1", byIndex[11].PurgeJob.Node)
	assert.Equal(t, "boom", byIndex[13].PurgeJob.LastError)
	assert.Equal(t, 1, byIndex[13].PurgeJob.Attempts)
	assert.Equal(t, "a.w", byIndex[20].To.String())
	assert.Equal(t, "s3://b/wh/a/v/metadata/00001-b.metadata.json", byIndex[19].MetadataLocation)
	assert.Zero(t, byIndex[24].AtMs, "DropNamespace carries no time")
}

func TestEventsAreDeterministicAcrossReplicas(t *testing.T) {
	script := feedScript(t)
	// One replica applies entry by entry, the other in batches of 5 (as
	// raft hands them over): the stored events must be byte for byte
	// the same.
	one := mustOpen(t, filepath.Join(t.TempDir(), "one.db"))
	applyScript(t, one, script)
	two := mustOpen(t, filepath.Join(t.TempDir(), "two.db"))
	var batch []*raft.Log
	for i, c := range script {
		batch = append(batch, entry(t, uint64(i+1), c))
		if len(batch) == 5 || i == len(script)-1 {
			two.ApplyBatch(batch)
			batch = nil
		}
	}
	raw := func(f *FSM) []byte {
		var buf bytes.Buffer
		require.NoError(t, f.View(func(r *Reader) error {
			return r.tx.Bucket(bucketEvents).ForEach(func(k, v []byte) error {
				buf.Write(k)
				buf.Write(v)
				return nil
			})
		}))
		return buf.Bytes()
	}
	require.NotEmpty(t, raw(one))
	assert.Equal(t, raw(one), raw(two))

	// A snapshot carries the feed: a restored replica serves the same one.
	snap, err := one.Snapshot()
	require.NoError(t, err)
	var sink memSink
	require.NoError(t, snap.Persist(&sink))
	snap.Release()
	three := mustOpen(t, filepath.Join(t.TempDir(), "three.db"))
	require.NoError(t, three.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))))
	assert.Equal(t, raw(one), raw(three))
}

func TestReplayedEntriesRecordNoEventsTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	f := mustOpen(t, path)
	batch := []*raft.Log{entry(t, 1, CreateNamespace{Namespace: nsA}), entry(t, 2, CreateNamespace{Namespace: []string{"b"}})}
	f.ApplyBatch(batch)
	require.NoError(t, f.Close())
	f = mustOpen(t, path)
	f.ApplyBatch(append(batch, entry(t, 3, CreateNamespace{Namespace: []string{"c"}})))
	assert.Equal(t, []brief{{1, 0, EventNamespaceCreated, "a"}, {2, 0, EventNamespaceCreated, "b"}, {3, 0, EventNamespaceCreated, "c"}},
		briefs(events(t, f, 0)))
}

func TestEventPagesEndOnEntryBoundaries(t *testing.T) {
	p := newPurgeFSM(t) // entry 1: namespace a
	var changes []TableChange
	for _, n := range []string{"x", "y", "z"} {
		changes = append(changes, tableAt(n, "s3://b/wh/a/"+n).Changes[0])
	}
	p.ok(CommitTables{Changes: changes, AtMs: 1})   // entry 2: three events
	p.ok(CreateNamespace{Namespace: []string{"b"}}) // entry 3

	require.NoError(t, p.f.View(func(r *Reader) error {
		page, more, err := r.Events(0, 2)
		require.NoError(t, err)
		assert.Equal(t, []brief{{1, 0, EventNamespaceCreated, "a"}, {2, 0, EventTableCreated, "a.x"}, {2, 1, EventTableCreated, "a.y"}, {2, 2, EventTableCreated, "a.z"}},
			briefs(page), "a page that reaches its limit inside an entry finishes the entry")
		assert.True(t, more)
		page, more, err = r.Events(2, 2)
		require.NoError(t, err)
		assert.Equal(t, []brief{{3, 0, EventNamespaceCreated, "b"}}, briefs(page))
		assert.False(t, more)
		page, more, err = r.Events(3, 2)
		require.NoError(t, err)
		assert.Empty(t, page)
		assert.False(t, more)
		page, _, err = r.Events(100, 2)
		require.NoError(t, err)
		assert.Empty(t, page, "a cursor ahead of this replica waits; it is no error")
		return nil
	}))
}

func TestEventRetentionKeepsTheNewest(t *testing.T) {
	old := eventRetention
	eventRetention = 3
	t.Cleanup(func() { eventRetention = old })

	p := newPurgeFSM(t)                                                                                                                     // entry 1: namespace a
	p.ok(CommitTables{Changes: []TableChange{tableAt("x", "s3://b/wh/a/x").Changes[0], tableAt("y", "s3://b/wh/a/y").Changes[0]}, AtMs: 1}) // entry 2: two events
	for _, n := range []string{"b", "c"} {
		p.ok(CreateNamespace{Namespace: []string{n}}) // entries 3, 4
	}
	// Kept: 2/1, 3/0, 4/0. Entry 2 is partly gone, so the horizon is 2.
	require.NoError(t, p.f.View(func(r *Reader) error {
		assert.Equal(t, uint64(2), r.EventHorizon())
		for _, after := range []uint64{0, 1} {
			_, _, err := r.Events(after, 0)
			assert.ErrorIs(t, err, ErrEventsPruned, "after %d", after)
		}
		page, _, err := r.Events(2, 0)
		require.NoError(t, err)
		assert.Equal(t, []brief{{3, 0, EventNamespaceCreated, "b"}, {4, 0, EventNamespaceCreated, "c"}}, briefs(page))
		assert.Equal(t, 3, r.tx.Bucket(bucketEvents).Stats().KeyN)
		return nil
	}))
	p.ok(CreateNamespace{Namespace: []string{"d"}}) // entry 5
	require.NoError(t, p.f.View(func(r *Reader) error {
		assert.Equal(t, uint64(2), r.EventHorizon())
		assert.Equal(t, uint64(3), getUint64(r.tx.Bucket(bucketEventsMeta), keyEventCount))
		page, _, err := r.Events(2, 0)
		require.NoError(t, err)
		assert.Equal(t, []brief{{3, 0, EventNamespaceCreated, "b"}, {4, 0, EventNamespaceCreated, "c"}, {5, 0, EventNamespaceCreated, "d"}}, briefs(page))
		return nil
	}))
}

func TestFeedOfAnOlderFileStartsAtItsAppliedIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	f := mustOpen(t, path)
	f.Apply(entry(t, 1, CreateNamespace{Namespace: nsA}))
	f.Apply(entry(t, 2, CreateNamespace{Namespace: []string{"b"}}))
	require.NoError(t, f.Close())
	// A file written before the feed existed has no feed buckets.
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		require.NoError(t, tx.DeleteBucket(bucketEvents))
		return tx.DeleteBucket(bucketEventsMeta)
	}))
	require.NoError(t, db.Close())

	f = mustOpen(t, path)
	f.Apply(entry(t, 3, CreateNamespace{Namespace: []string{"c"}}))
	require.NoError(t, f.View(func(r *Reader) error {
		assert.Equal(t, uint64(2), r.EventHorizon())
		_, _, err := r.Events(1, 0)
		assert.ErrorIs(t, err, ErrEventsPruned, "entries before the feed started have no events")
		page, _, err := r.Events(2, 0)
		require.NoError(t, err)
		assert.Equal(t, []brief{{3, 0, EventNamespaceCreated, "c"}}, briefs(page))
		return nil
	}))
}

func TestAdvancedIsClosedByTheNextApply(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	ch := f.Advanced()
	select {
	case <-ch:
		t.Fatal("closed before anything was applied")
	default:
	}
	f.Apply(entry(t, 1, CreateNamespace{Namespace: nsA}))
	select {
	case <-ch:
	default:
		t.Fatal("not closed by an apply")
	}
	select {
	case <-f.Advanced():
		t.Fatal("the next channel is closed already")
	default:
	}
}

func TestEventJSON(t *testing.T) {
	snap := int64(7)
	raw, err := json.Marshal(Event{Index: 12, Type: EventTableCommitted, AtMs: 1700000000000, Ident: &Ident{Namespace: []string{"db"}, Name: "t"},
		UUID: "u", MetadataLocation: "s3://b/t/metadata/00001.metadata.json", PreviousMetadataLocation: "s3://b/t/metadata/00000.metadata.json", SnapshotID: &snap})
	require.NoError(t, err)
	assert.JSONEq(t, `{"index":12,"seq":0,"type":"table-committed","at-ms":1700000000000,
		"ident":{"namespace":["db"],"name":"t"},"uuid":"u",
		"metadata-location":"s3://b/t/metadata/00001.metadata.json",
		"previous-metadata-location":"s3://b/t/metadata/00000.metadata.json","snapshot-id":7}`, string(raw))
}

// The feed's size is bounded as its count is: a loop creating and dropping
// a namespace with large properties keeps no more than eventRetentionBytes
// of events (the newest always), and a file whose size record does not
// match its events (none yet, or written before an older binary changed
// them) counts them again.
func TestEventRetentionBoundsBytes(t *testing.T) {
	old := eventRetentionBytes
	eventRetentionBytes = 4000
	t.Cleanup(func() { eventRetentionBytes = old })

	p := newPurgeFSM(t) // entry 1: namespace a
	big := map[string]string{"p": strings.Repeat("x", 1500)}
	for i := range 6 {
		p.ok(CreateNamespace{Namespace: []string{fmt.Sprintf("n%d", i)}, Properties: big})
	}
	stored := func() (n int, size uint64, recorded uint64) {
		require.NoError(t, p.f.View(func(r *Reader) error {
			_ = r.tx.Bucket(bucketEvents).ForEach(func(_, v []byte) error {
				n++
				size += uint64(len(v))
				return nil
			})
			recorded = binary.BigEndian.Uint64(r.tx.Bucket(bucketEventsMeta).Get(keyEventBytes))
			return nil
		}))
		return n, size, recorded
	}
	n, size, recorded := stored()
	assert.Equal(t, 2, n, "two 1.5 KB events fit in 4000 bytes, not three")
	assert.LessOrEqual(t, size, eventRetentionBytes)
	assert.Equal(t, size, recorded)
	require.NoError(t, p.f.View(func(r *Reader) error {
		assert.Equal(t, uint64(5), r.EventHorizon())
		page, _, err := r.Events(5, 0)
		require.NoError(t, err)
		assert.Equal(t, []brief{{6, 0, EventNamespaceCreated, "n4"}, {7, 0, EventNamespaceCreated, "n5"}}, briefs(page))
		return nil
	}))

	// One event over the bound is kept alone.
	p.ok(CreateNamespace{Namespace: []string{"huge"}, Properties: map[string]string{"p": strings.Repeat("y", 5000)}})
	n, size, recorded = stored()
	assert.Equal(t, 1, n)
	assert.Equal(t, size, recorded)

	// A size record that does not match the newest event is not trusted.
	require.NoError(t, p.f.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEventsMeta).Put(keyEventBytes, append(binary.BigEndian.AppendUint64(nil, 1), eventKey(1, 0)...))
	}))
	p.ok(CreateNamespace{Namespace: []string{"small"}})
	n, size, recorded = stored()
	assert.Equal(t, 1, n, "the huge event and the small one exceed the bound together")
	assert.Equal(t, size, recorded)
}
