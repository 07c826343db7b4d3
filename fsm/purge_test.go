package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// purgeFSM applies commands with increasing log indexes.
type purgeFSM struct {
	t *testing.T
	f *FSM
	i uint64
}

func newPurgeFSM(t *testing.T) *purgeFSM {
	p := &purgeFSM{t: t, f: mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))}
	p.ok(CreateNamespace{Namespace: nsA})
	return p
}

func (p *purgeFSM) apply(c Command) Result {
	p.t.Helper()
	p.i++
	return result(p.t, p.f.Apply(entry(p.t, p.i, c)))
}

func (p *purgeFSM) ok(c Command) Result {
	p.t.Helper()
	r := p.apply(c)
	require.NoError(p.t, r.Err())
	return r
}

func (p *purgeFSM) job(id string) PurgeJob {
	p.t.Helper()
	var j PurgeJob
	require.NoError(p.t, p.f.View(func(r *Reader) error {
		var ok bool
		j, ok = r.PurgeJob(id)
		require.True(p.t, ok, "job %s", id)
		return nil
	}))
	return j
}

func (p *purgeFSM) jobs(f PurgeJobFilter) []string {
	p.t.Helper()
	var ids []string
	require.NoError(p.t, p.f.View(func(r *Reader) error {
		list, _ := r.PurgeJobs(f, 0)
		for _, j := range list {
			ids = append(ids, j.ID)
		}
		return nil
	}))
	return ids
}

func tableAt(name, loc string) CommitTables {
	id := Ident{Namespace: nsA, Name: name}
	return CommitTables{Changes: []TableChange{{Kind: ChangeCreate, Ident: id, MetadataLocation: loc + "/metadata/00000.metadata.json", Location: loc, UUID: "u-" + name}}}
}

func purgeDrop(name, jobID string) DropTable {
	return DropTable{Ident: Ident{Namespace: nsA, Name: name}, Purge: true, AtMs: 100,
		Job: &PurgeJobSpec{ID: jobID, Warehouse: "s3://b/wh", FileIO: map[string]string{"s3.region": "r"}, DroppedBy: "anonymous"}}
}

func TestPurgingDropAddsJobAndTombstonesInOneEntry(t *testing.T) {
	p := newPurgeFSM(t)
	p.ok(tableAt("t1", "s3://b/wh/a/t1"))
	p.ok(tableAt("t10", "s3://b/wh/a/t10"))
	res := p.ok(purgeDrop("t1", "job-1"))
	require.Len(t, res.Tables, 1)
	assert.Equal(t, "s3://b/wh/a/t1", res.Tables[0].Location)

	j := p.job("job-1")
	assert.Equal(t, JobPending, j.State)
	assert.Nil(t, j.Lease)
	assert.Equal(t, "s3://b/wh/a/t1/metadata/00000.metadata.json", j.MetadataLocation)
	assert.Equal(t, "u-t1", j.TableUUID)
	assert.Equal(t, "anonymous", j.DroppedBy)
	assert.Equal(t, map[string]string{"s3.region": "r"}, j.FileIO)
	assert.Equal(t, int64(100), j.CreatedMs)

	// A job id is never reused: the drop is refused and changes nothing.
	p.ok(tableAt("t2", "s3://b/wh/a/t2"))
	assert.ErrorIs(t, p.apply(purgeDrop("t2", "job-1")).Err(), ErrAlreadyExists)
	p.ok(DropTable{Ident: Ident{Namespace: nsA, Name: "t2"}})

	// The table is gone; a repeated drop is 404 and adds no job.
	assert.ErrorIs(t, p.apply(purgeDrop("t1", "job-2")).Err(), ErrNoSuchTable)
	assert.Equal(t, []string{"job-1"}, p.jobs(PurgeJobFilter{}))

	// Name tombstone: create and register at the identifier, rename onto it.
	for _, c := range []Command{
		tableAt("t1", "s3://b/wh/elsewhere/t1"),
		CommitTables{Changes: []TableChange{{Kind: ChangeRegister, Ident: Ident{Namespace: nsA, Name: "t1"}, Location: "s3://b/other", MetadataLocation: "s3://b/other/m.json", UUID: "x"}}},
		RenameTable{From: Ident{Namespace: nsA, Name: "t10"}, To: Ident{Namespace: nsA, Name: "t1"}},
	} {
		r := p.apply(c)
		require.ErrorIs(t, r.Err(), ErrBeingPurged, "%T", c)
		assert.Contains(t, r.Message, "job-1")
		assert.Contains(t, r.Message, "PENDING")
	}

	// Location tombstone: equal, inside, containing, and other spellings
	// of the same location.
	for _, loc := range []string{"s3://b/wh/a/t1", "s3://b/wh/a/t1/", "s3a://b/wh/a/t1", "s3://b/wh/a/t1/sub", "s3://b/wh/a", "s3://b/wh", "s3://b"} {
		r := p.apply(tableAt("new", loc))
		require.ErrorIs(t, r.Err(), ErrBeingPurged, loc)
		assert.Contains(t, r.Message, "job-1", loc)
	}
	// set-location of a live table into the purged location.
	upd := CommitTables{Changes: []TableChange{{Kind: ChangeUpdate, Ident: Ident{Namespace: nsA, Name: "t10"},
		ExpectedMetadataLocation: "s3://b/wh/a/t10/metadata/00000.metadata.json", MetadataLocation: "s3://b/wh/a/t10/metadata/00001.json",
		Location: "s3://b/wh/a/t1/moved", UUID: "u-t10"}}}
	assert.ErrorIs(t, p.apply(upd).Err(), ErrBeingPurged)

	// Not overlapping: a string-prefix sibling, another bucket, a commit
	// that keeps a live table's location.
	p.ok(tableAt("t100", "s3://b/wh/a/t100"))
	p.ok(tableAt("b1", "s3://b2/wh/a/t1"))
	upd.Changes[0].Location = "s3://b/wh/a/t10"
	p.ok(upd)
}

func TestFileLocationTombstones(t *testing.T) {
	p := newPurgeFSM(t)
	p.ok(tableAt("t", "file:///w/a/t"))
	p.ok(purgeDrop("t", "job-1"))
	for _, loc := range []string{"/w/a/t", "file:/w/a/t/x", "file://localhost/w/a", "file:///"} {
		assert.ErrorIs(t, p.apply(tableAt("n", loc)).Err(), ErrBeingPurged, loc)
	}
	p.ok(tableAt("n", "file:///w/a/tt"))
}

func TestDropWithoutPurgeAddsNoJob(t *testing.T) {
	p := newPurgeFSM(t)
	p.ok(tableAt("t", "s3://b/t"))
	p.ok(tableAt("u", "s3://b/u"))
	p.ok(DropTable{Ident: Ident{Namespace: nsA, Name: "t"}})
	// An entry from before purge jobs existed: Purge without a job.
	p.ok(DropTable{Ident: Ident{Namespace: nsA, Name: "u"}, Purge: true})
	assert.Empty(t, p.jobs(PurgeJobFilter{}))
	p.ok(tableAt("t", "s3://b/t"))
}

func TestLeasesAreFencedByLogIndex(t *testing.T) {
	p := newPurgeFSM(t)
	p.ok(tableAt("t", "s3://b/t"))
	p.ok(purgeDrop("t", "j"))

	// Only a PENDING job without a lease can be claimed with token 0.
	p.ok(AssignPurgeLease{JobID: "j", Node: "n1", AtMs: 200, ExpiresMs: 1200})
	first := p.i
	j := p.job("j")
	assert.Equal(t, JobRunning, j.State)
	assert.Equal(t, &PurgeLease{Node: "n1", Token: first, ExpiresMs: 1200}, j.Lease)
	assert.ErrorIs(t, p.apply(AssignPurgeLease{JobID: "j", Node: "n2"}).Err(), ErrStaleLease)
	assert.ErrorIs(t, p.apply(AssignPurgeLease{JobID: "j", Node: "n2", ExpectedToken: first + 99}).Err(), ErrStaleLease)
	assert.ErrorIs(t, p.apply(AssignPurgeLease{JobID: "nope", Node: "n2"}).Err(), ErrNoSuchJob)

	p.ok(ReportPurgeProgress{JobID: "j", Token: first, Progress: PurgeProgress{Phase: 0, Offset: 10, Deleted: 10}, AtMs: 300})
	assert.Equal(t, int64(10), p.job("j").Progress.Offset)

	// Reassignment away from a silent node: a new token.
	p.ok(AssignPurgeLease{JobID: "j", Node: "n2", ExpectedToken: first, AtMs: 400})
	second := p.i
	assert.Equal(t, second, p.job("j").Lease.Token)
	assert.Greater(t, second, first)

	// The old worker can neither report nor finish.
	r := p.apply(ReportPurgeProgress{JobID: "j", Token: first, Progress: PurgeProgress{Offset: 99}})
	assert.ErrorIs(t, r.Err(), ErrStaleLease)
	assert.ErrorIs(t, p.apply(FinishPurgeJob{JobID: "j", Token: first, Outcome: OutcomeSucceeded}).Err(), ErrStaleLease)
	assert.ErrorIs(t, p.apply(FinishPurgeJob{JobID: "j", Token: second, Outcome: "maybe"}).Err(), ErrCommitFailed)
	assert.Equal(t, int64(10), p.job("j").Progress.Offset, "stale progress must not land")
	assert.Equal(t, JobRunning, p.job("j").State)

	// A heartbeat renews only the leases it really holds.
	p.ok(PurgeHeartbeat{Node: "n1", Slots: 2, Leases: []LeaseRef{{JobID: "j", Token: first}}, AtMs: 500, ExpiresMs: 9999})
	assert.NotEqual(t, int64(9999), p.job("j").Lease.ExpiresMs)
	p.ok(PurgeHeartbeat{Node: "n2", Slots: 3, Leases: []LeaseRef{{JobID: "j", Token: second}}, AtMs: 500, ExpiresMs: 7777})
	assert.Equal(t, int64(7777), p.job("j").Lease.ExpiresMs)
	require.NoError(t, p.f.View(func(r *Reader) error {
		nodes := r.PurgeNodes()
		require.Len(t, nodes, 2)
		assert.Equal(t, PurgeNode{Node: "n2", Slots: 3, Index: p.i, AtMs: 500}, nodes[1])
		return nil
	}))

	p.ok(FinishPurgeJob{JobID: "j", Token: second, Outcome: OutcomeSucceeded, Progress: PurgeProgress{Phase: 5, Deleted: 42}, AtMs: 600})
	j = p.job("j")
	assert.Equal(t, JobSucceeded, j.State)
	assert.Nil(t, j.Lease)
	assert.Equal(t, int64(42), j.Progress.Deleted)
	assert.ErrorIs(t, p.apply(FinishPurgeJob{JobID: "j", Token: second, Outcome: OutcomeSucceeded}).Err(), ErrStaleLease, "finishing twice")

	// Succeeded: the name and location are free again.
	p.ok(tableAt("t", "s3://b/t"))
	p.assertSummaries()
}

func TestSyncDropLeasesToTheReceivingNode(t *testing.T) {
	p := newPurgeFSM(t)
	p.ok(tableAt("t", "s3://b/t"))
	d := purgeDrop("t", "j")
	d.Job.LeaseNode, d.Job.LeaseExpiresMs = "receiver", 5000
	p.ok(d)
	j := p.job("j")
	assert.Equal(t, JobRunning, j.State)
	assert.Equal(t, &PurgeLease{Node: "receiver", Token: p.i, ExpiresMs: 5000}, j.Lease)
	assert.Equal(t, []string{"j"}, p.jobs(PurgeJobFilter{State: JobRunning}))
	assert.Empty(t, p.jobs(PurgeJobFilter{State: JobPending}))
}

func TestFailuresRetriesAndRelease(t *testing.T) {
	p := newPurgeFSM(t)
	p.ok(tableAt("t", "s3://b/t"))
	p.ok(purgeDrop("t", "j"))

	claim := func() uint64 {
		p.ok(AssignPurgeLease{JobID: "j", Node: "n"})
		return p.i
	}
	tok := claim()
	p.ok(FinishPurgeJob{JobID: "j", Token: tok, Outcome: OutcomeRetry, Error: "slow down", MaxAttempts: 2, NotBeforeMs: 777, AtMs: 10})
	j := p.job("j")
	assert.Equal(t, JobPending, j.State)
	assert.Equal(t, 1, j.Attempts)
	assert.Equal(t, "slow down", j.LastError)
	assert.Equal(t, int64(777), j.NotBeforeMs)
	assert.Nil(t, j.Lease)

	tok = claim()
	p.ok(FinishPurgeJob{JobID: "j", Token: tok, Outcome: OutcomeRetry, Error: "access denied", MaxAttempts: 2, AtMs: 20})
	j = p.job("j")
	assert.Equal(t, JobFailed, j.State, "max attempts reached")
	assert.Equal(t, 2, j.Attempts)
	assert.Equal(t, "access denied", j.LastError)

	// FAILED keeps the tombstones and cannot be claimed.
	r := p.apply(tableAt("t", "s3://b/t"))
	require.ErrorIs(t, r.Err(), ErrBeingPurged)
	assert.Contains(t, r.Message, "FAILED")
	assert.ErrorIs(t, p.apply(AssignPurgeLease{JobID: "j", Node: "n"}).Err(), ErrStaleLease)

	// Retry: back to PENDING with attempts reset; then fail permanently.
	p.ok(RetryPurgeJob{JobID: "j", By: "op", AtMs: 30})
	j = p.job("j")
	assert.Equal(t, JobPending, j.State)
	assert.Equal(t, 0, j.Attempts)
	assert.ErrorIs(t, p.apply(RetryPurgeJob{JobID: "j"}).Err(), ErrCommitFailed, "only FAILED jobs")
	assert.ErrorIs(t, p.apply(ReleasePurgeJob{JobID: "j"}).Err(), ErrCommitFailed, "only FAILED jobs")
	tok = claim()
	p.ok(FinishPurgeJob{JobID: "j", Token: tok, Outcome: OutcomeFailed, Error: "corrupt metadata", MaxAttempts: 5, AtMs: 40})
	j = p.job("j")
	assert.Equal(t, JobFailed, j.State, "a permanent failure skips the retries")
	assert.Equal(t, 1, j.Attempts)

	// Release drops the tombstones; the job stays, FAILED and released.
	p.ok(ReleasePurgeJob{JobID: "j", By: "op", AtMs: 50})
	j = p.job("j")
	assert.True(t, j.Released)
	assert.Equal(t, "op", j.ReleasedBy)
	assert.Equal(t, JobFailed, j.State)
	p.ok(tableAt("t", "s3://b/t"))
	assert.ErrorIs(t, p.apply(RetryPurgeJob{JobID: "j"}).Err(), ErrCommitFailed, "a released job cannot be retried")
	assert.ErrorIs(t, p.apply(ReleasePurgeJob{JobID: "j"}).Err(), ErrCommitFailed)
	assert.ErrorIs(t, p.apply(RetryPurgeJob{JobID: "nope"}).Err(), ErrNoSuchJob)
	assert.ErrorIs(t, p.apply(ReleasePurgeJob{JobID: "nope"}).Err(), ErrNoSuchJob)
	p.assertSummaries()
}

func TestStateIndexFollowsEveryTransition(t *testing.T) {
	p := newPurgeFSM(t)
	for _, n := range []string{"a", "b", "c"} {
		p.ok(tableAt(n, "s3://b/"+n))
		p.ok(purgeDrop(n, "job-"+n))
	}
	p.ok(AssignPurgeLease{JobID: "job-b", Node: "n"})
	tb := p.i
	p.ok(AssignPurgeLease{JobID: "job-c", Node: "n"})
	tc := p.i
	p.ok(FinishPurgeJob{JobID: "job-c", Token: tc, Outcome: OutcomeSucceeded})

	assert.Equal(t, []string{"job-a"}, p.jobs(PurgeJobFilter{State: JobPending}))
	assert.Equal(t, []string{"job-b"}, p.jobs(PurgeJobFilter{State: JobRunning}))
	assert.Equal(t, []string{"job-c"}, p.jobs(PurgeJobFilter{State: JobSucceeded}))
	assert.Empty(t, p.jobs(PurgeJobFilter{State: JobFailed}))
	p.ok(FinishPurgeJob{JobID: "job-b", Token: tb, Outcome: OutcomeRetry, MaxAttempts: 3})
	assert.Equal(t, []string{"job-a", "job-b"}, p.jobs(PurgeJobFilter{State: JobPending}))
	assert.Empty(t, p.jobs(PurgeJobFilter{State: JobRunning}))

	// Identifier index and other filters, with pagination.
	assert.Equal(t, []string{"job-b"}, p.jobs(PurgeJobFilter{Namespace: nsA, Table: "b"}))
	assert.Equal(t, []string{"job-a", "job-b", "job-c"}, p.jobs(PurgeJobFilter{Namespace: nsA, Warehouse: "s3://b/wh"}))
	assert.Empty(t, p.jobs(PurgeJobFilter{Warehouse: "other"}))
	assert.Equal(t, []string{"job-c"}, p.jobs(PurgeJobFilter{After: "job-b"}))
	require.NoError(t, p.f.View(func(r *Reader) error {
		page, more := r.PurgeJobs(PurgeJobFilter{State: JobPending}, 1)
		require.Len(t, page, 1)
		assert.True(t, more)
		page, more = r.PurgeJobs(PurgeJobFilter{State: JobPending, After: page[0].ID}, 1)
		require.Len(t, page, 1)
		assert.Equal(t, "job-b", page[0].ID)
		assert.False(t, more)
		return nil
	}))
	p.assertSummaries()
}

func TestPruneRemovesOnlyOldFinishedJobs(t *testing.T) {
	p := newPurgeFSM(t)
	finish := func(name, outcome string, atMs int64) {
		p.ok(tableAt(name, "s3://b/"+name))
		p.ok(purgeDrop(name, "job-"+name))
		p.ok(AssignPurgeLease{JobID: "job-" + name, Node: "n"})
		p.ok(FinishPurgeJob{JobID: "job-" + name, Token: p.i, Outcome: outcome, AtMs: atMs})
	}
	finish("old-ok", OutcomeSucceeded, 100)
	finish("new-ok", OutcomeSucceeded, 5000)
	finish("old-failed", OutcomeFailed, 100)
	finish("old-released", OutcomeFailed, 50)
	p.ok(ReleasePurgeJob{JobID: "job-old-released", AtMs: 100})
	p.ok(tableAt("pending", "s3://b/pending"))
	p.ok(purgeDrop("pending", "job-pending")) // created at 100
	p.ok(PurgeHeartbeat{Node: "gone", AtMs: 100})
	p.ok(PurgeHeartbeat{Node: "alive", AtMs: 5000})

	r := p.ok(PrunePurgeJobs{BeforeMs: 1000, AtMs: 1000})
	assert.Equal(t, 2, r.Count)
	assert.Equal(t, []string{"job-new-ok", "job-old-failed", "job-pending"}, p.jobs(PurgeJobFilter{}))
	assert.Empty(t, p.jobs(PurgeJobFilter{Namespace: nsA, Table: "old-ok"}), "identifier index pruned too")
	assert.Equal(t, []string{"job-new-ok"}, p.jobs(PurgeJobFilter{State: JobSucceeded}))
	require.NoError(t, p.f.View(func(r *Reader) error {
		nodes := r.PurgeNodes()
		require.Len(t, nodes, 1)
		assert.Equal(t, "alive", nodes[0].Node)
		return nil
	}))
	// The unreleased FAILED job still blocks its name.
	assert.ErrorIs(t, p.apply(tableAt("old-failed", "s3://b/x")).Err(), ErrBeingPurged)
	p.assertSummaries()
}

// assertSummaries checks that every job's state index entry, and only
// that one, carries the job's summary.
func (p *purgeFSM) assertSummaries() {
	p.t.Helper()
	require.NoError(p.t, p.f.db.View(func(tx *bolt.Tx) error {
		entries := 0
		_ = tx.Bucket(bucketPurgeByState).ForEach(func(k, v []byte) error {
			entries++
			i := bytes.IndexByte(k, 0)
			var j PurgeJob
			require.NoError(p.t, json.Unmarshal(tx.Bucket(bucketPurgeJobs).Get(k[i+1:]), &j), "index entry %q", k)
			assert.Equal(p.t, string(j.State), string(k[:i]), "job %s", j.ID)
			assert.Equal(p.t, summaryOf(j), v, "summary of job %s (%s)", j.ID, j.State)
			return nil
		})
		assert.Equal(p.t, tx.Bucket(bucketPurgeJobs).Stats().KeyN, entries, "one state index entry per job")
		return nil
	}))
}

// clearStateSummaries empties the value of every state index entry, as an
// earlier release wrote them.
func clearStateSummaries(db *bolt.DB) error {
	return db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketPurgeByState)
		var keys [][]byte
		_ = bk.ForEach(func(k, _ []byte) error { keys = append(keys, append([]byte(nil), k...)); return nil })
		for _, k := range keys {
			if err := bk.Put(k, nil); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestStateIndexSummariesSpareDecoding checks the job summaries in the
// state index: the scheduler's walk of due PENDING jobs, the job counts and
// the prune decide from them without decoding the jobs they pass over (here
// made undecodable), and decide alike from entries written without them.
func TestStateIndexSummariesSpareDecoding(t *testing.T) {
	build := func() *purgeFSM {
		p := newPurgeFSM(t)
		drop := func(name string) string {
			p.ok(tableAt(name, "s3://b/"+name))
			p.ok(purgeDrop(name, "job-"+name))
			p.ok(AssignPurgeLease{JobID: "job-" + name, Node: "n"})
			return "job-" + name
		}
		p.ok(tableAt("due", "s3://b/due"))
		p.ok(purgeDrop("due", "job-due"))
		p.ok(FinishPurgeJob{JobID: drop("backoff"), Token: p.i, Outcome: OutcomeRetry, MaxAttempts: 5, NotBeforeMs: 5000, AtMs: 100})
		p.ok(FinishPurgeJob{JobID: drop("due-later"), Token: p.i, Outcome: OutcomeRetry, MaxAttempts: 5, NotBeforeMs: 500, AtMs: 100})
		p.ok(FinishPurgeJob{JobID: drop("due-now"), Token: p.i, Outcome: OutcomeRetry, MaxAttempts: 5, NotBeforeMs: 1000, AtMs: 100})
		p.ok(FinishPurgeJob{JobID: drop("old-ok"), Token: p.i, Outcome: OutcomeSucceeded, AtMs: 100})
		p.ok(FinishPurgeJob{JobID: drop("new-ok"), Token: p.i, Outcome: OutcomeSucceeded, AtMs: 5000})
		p.ok(FinishPurgeJob{JobID: drop("old-failed"), Token: p.i, Outcome: OutcomeFailed, AtMs: 100})
		p.ok(FinishPurgeJob{JobID: drop("old-released"), Token: p.i, Outcome: OutcomeFailed, AtMs: 50})
		p.ok(ReleasePurgeJob{JobID: "job-old-released", AtMs: 100})
		return p
	}
	check := func(t *testing.T, p *purgeFSM) {
		assert.NotPanics(t, func() {
			assert.Equal(t, []string{"job-due"}, p.jobs(PurgeJobFilter{State: JobPending, NoBackoff: true}))
			var backoff []string
			require.NoError(t, p.f.View(func(r *Reader) error {
				r.PurgeJobsInBackoff(func(id string, notBeforeMs int64) bool {
					backoff = append(backoff, fmt.Sprintf("%s@%d", id, notBeforeMs))
					return true
				})
				return nil
			}))
			assert.Equal(t, []string{"job-backoff@5000", "job-due-later@500", "job-due-now@1000"}, backoff)
			require.NoError(t, p.f.View(func(r *Reader) error {
				counts, released := r.PurgeJobCounts()
				assert.Equal(t, map[JobState]int{JobPending: 4, JobSucceeded: 2, JobFailed: 2}, counts)
				assert.Equal(t, 1, released)
				return nil
			}))
			assert.Equal(t, 2, p.ok(PrunePurgeJobs{BeforeMs: 1000, AtMs: 1000}).Count, "job-old-ok and job-old-released")
		})
	}
	t.Run("passed over undecoded", func(t *testing.T) {
		p := build()
		// Jobs none of the three needs to decode: in backoff, finished too
		// recently, FAILED and not released.
		require.NoError(t, p.f.db.Update(func(tx *bolt.Tx) error {
			for _, id := range []string{"job-backoff", "job-new-ok", "job-old-failed"} {
				if err := tx.Bucket(bucketPurgeJobs).Put([]byte(id), []byte("{not a job")); err != nil {
					return err
				}
			}
			return nil
		}))
		check(t, p)
	})
	t.Run("entries without summaries", func(t *testing.T) {
		p := build()
		require.NoError(t, clearStateSummaries(p.f.db))
		check(t, p)
		assert.Equal(t, []string{"job-backoff", "job-due", "job-due-later", "job-due-now", "job-new-ok", "job-old-failed"}, p.jobs(PurgeJobFilter{}))
	})
}

// TestPurgeApplyIsDeterministic applies one log to two state machines and
// compares everything a reader sees.
func TestPurgeApplyIsDeterministic(t *testing.T) {
	log := []Command{
		CreateNamespace{Namespace: nsA},
		tableAt("t", "s3://b/t"),
		purgeDrop("t", "j"),
		AssignPurgeLease{JobID: "j", Node: "n1", AtMs: 1, ExpiresMs: 2},
		PurgeHeartbeat{Node: "n1", Slots: 2, Leases: []LeaseRef{{JobID: "j", Token: 4}}, AtMs: 3, ExpiresMs: 4},
		ReportPurgeProgress{JobID: "j", Token: 4, Progress: PurgeProgress{Phase: 1, Offset: 3}},
		AssignPurgeLease{JobID: "j", Node: "n2", ExpectedToken: 4},
		FinishPurgeJob{JobID: "j", Token: 7, Outcome: OutcomeRetry, Error: "e", MaxAttempts: 5, NotBeforeMs: 9},
	}
	dump := func() string {
		f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
		for i, c := range log {
			f.Apply(entry(t, uint64(i+1), c))
		}
		var out []byte
		require.NoError(t, f.View(func(r *Reader) error {
			jobs, _ := r.PurgeJobs(PurgeJobFilter{}, 0)
			var err error
			out, err = json.Marshal([]any{jobs, r.PurgeNodes()})
			return err
		}))
		return string(out)
	}
	a := dump()
	assert.Equal(t, a, dump())
	assert.Contains(t, a, `"state":"PENDING"`)
	assert.Contains(t, a, `"attempts":1`)
}

// TestDropJobEventIsTheJob checks that the purge-job event a purging drop
// records (built from the command, not read back) describes the job the
// drop stored, async and sync.
func TestDropJobEventIsTheJob(t *testing.T) {
	p := newPurgeFSM(t)
	p.ok(tableAt("a", "s3://b/a"))
	p.ok(purgeDrop("a", "ja"))
	p.ok(tableAt("s", "s3://b/s"))
	d := purgeDrop("s", "js")
	d.Job.LeaseNode, d.Job.LeaseExpiresMs = "receiver", 5000
	p.ok(d)

	var got []Event
	for _, e := range events(t, p.f, 0) {
		if e.Type == EventPurgeJob {
			got = append(got, e)
		}
	}
	require.Len(t, got, 2)
	for i, id := range []string{"ja", "js"} {
		want := jobEvent(p.job(id), got[i].AtMs)
		want.Index, want.Seq = got[i].Index, got[i].Seq
		assert.Equal(t, want, got[i], id)
	}
	assert.Equal(t, JobPending, got[0].PurgeJob.State)
	assert.Equal(t, "receiver", got[1].PurgeJob.Node)
}

// TestPurgeWorkWakes checks which entries wake the purge service, and
// with what: those that make a job claimable, lease one or end a run, and
// no others.
func TestPurgeWorkWakes(t *testing.T) {
	p := newPurgeFSM(t)
	var wakes []PurgeWork
	p.f.OnPurgeWork(func(w PurgeWork) { wakes = append(wakes, w) })
	step := func(c Command, want PurgeWork, what string) {
		t.Helper()
		wakes = nil
		p.ok(c)
		if want == 0 {
			assert.Empty(t, wakes, what)
			return
		}
		assert.Equal(t, []PurgeWork{want}, wakes, what)
	}
	step(tableAt("t", "s3://b/t"), 0, "a create")
	step(purgeDrop("t", "j"), PurgeClaimable, "an async purging drop")
	step(PurgeHeartbeat{Node: "n2", Slots: 1}, 0, "a heartbeat")
	step(AssignPurgeLease{JobID: "j", Node: "n2"}, PurgeLeased, "a lease")
	token := p.job("j").Lease.Token
	step(ReportPurgeProgress{JobID: "j", Token: token, Progress: PurgeProgress{Phase: 1}}, 0, "progress")
	step(FinishPurgeJob{JobID: "j", Token: token, Outcome: OutcomeRetry, MaxAttempts: 3}, PurgeRunEnded, "a run ending in a retry")
	step(AssignPurgeLease{JobID: "j", Node: "n2"}, PurgeLeased, "a lease")
	step(FinishPurgeJob{JobID: "j", Token: p.job("j").Lease.Token, Outcome: OutcomeFailed}, PurgeRunEnded, "a run ending in failure")
	step(RetryPurgeJob{JobID: "j", By: "op"}, PurgeClaimable, "an operator's retry")
	step(AssignPurgeLease{JobID: "j", Node: "n2"}, PurgeLeased, "a lease")
	step(FinishPurgeJob{JobID: "j", Token: p.job("j").Lease.Token, Outcome: OutcomeSucceeded}, PurgeRunEnded, "a run ending in success")

	// Entries applied in one batch wake once, with all they did.
	p.ok(tableAt("u", "s3://b/u"))
	p.ok(tableAt("v", "s3://b/v"))
	p.ok(purgeDrop("u", "ju"))
	wakes = nil
	p.i += 2
	for _, res := range p.f.ApplyBatch([]*raft.Log{entry(t, p.i-1, purgeDrop("v", "jv")), entry(t, p.i, AssignPurgeLease{JobID: "ju", Node: "n2"})}) {
		require.NoError(t, result(t, res).Err())
	}
	assert.Equal(t, []PurgeWork{PurgeClaimable | PurgeLeased}, wakes)
}

// A job takes the proposer's first phase only when the dropped table is
// still at the metadata file the proposer judged it from; a first phase
// out of range is ignored, and the drop applies.
func TestPurgeJobTakesTheFirstPhaseOfItsOwnFile(t *testing.T) {
	p := newPurgeFSM(t)
	p.ok(tableAt("t1", "s3://b/wh/a/t1"))
	p.ok(tableAt("t2", "s3://b/wh/a/t2"))

	d := purgeDrop("t1", "job-1")
	d.Job.FirstPhase, d.Job.FirstPhaseOf = 5, "s3://b/wh/a/t1/metadata/00000.metadata.json"
	p.ok(d)
	assert.Equal(t, 5, p.job("job-1").FirstPhase)

	d = purgeDrop("t2", "job-2")
	d.Job.FirstPhase, d.Job.FirstPhaseOf = 5, "s3://b/wh/a/t2/metadata/00001.metadata.json"
	p.ok(d)
	assert.Equal(t, 0, p.job("job-2").FirstPhase, "judged from another file: a commit came between")

	for i, bad := range []int{-1, MaxPurgeFirstPhase + 1} {
		name, job := fmt.Sprintf("t%d", 3+i), fmt.Sprintf("job-%d", 3+i)
		p.ok(tableAt(name, "s3://b/wh/a/"+name))
		d = purgeDrop(name, job)
		d.Job.FirstPhase, d.Job.FirstPhaseOf = bad, "s3://b/wh/a/"+name+"/metadata/00000.metadata.json"
		p.ok(d)
		assert.Equal(t, 0, p.job(job).FirstPhase, "first phase %d", bad)
	}
}

// A heartbeat's features are kept in the node's row; a feature is
// everywhere only when every row announces it.
func TestPurgeFeaturesFromHeartbeats(t *testing.T) {
	p := newPurgeFSM(t)
	nodes := func() []PurgeNode {
		var out []PurgeNode
		require.NoError(t, p.f.View(func(r *Reader) error { out = r.PurgeNodes(); return nil }))
		return out
	}
	assert.False(t, PurgeFeaturesEverywhere(nodes(), PurgeFeatureFirstPhase), "no node known")
	p.ok(PurgeHeartbeat{Node: "n1", Slots: 2, Features: PurgeFeatureFirstPhase})
	p.ok(PurgeHeartbeat{Node: "n2", Slots: 2, Features: PurgeFeatureFirstPhase})
	assert.Equal(t, PurgeFeatureFirstPhase, nodes()[0].Features)
	assert.True(t, PurgeFeaturesEverywhere(nodes(), PurgeFeatureFirstPhase))
	p.ok(PurgeHeartbeat{Node: "n3", Slots: 2}) // an older binary
	assert.False(t, PurgeFeaturesEverywhere(nodes(), PurgeFeatureFirstPhase))
	p.ok(PurgeHeartbeat{Node: "n3", Slots: 2, Features: PurgeFeatureFirstPhase}) // upgraded
	assert.True(t, PurgeFeaturesEverywhere(nodes(), PurgeFeatureFirstPhase))
}

// A purging drop of a table that had moved takes its former locations into
// the job, tombstoned with its location until the job succeeds.
func TestPurgeOfAMovedTableHoldsItsFormerLocations(t *testing.T) {
	p := newPurgeFSM(t)
	p.ok(tableAt("t", "s3://b/wh/a/t"))
	var cur Table
	require.NoError(t, p.f.View(func(r *Reader) error {
		cur, _ = r.Table(Ident{Namespace: nsA, Name: "t"})
		return nil
	}))
	p.ok(CommitTables{Changes: []TableChange{{Kind: ChangeUpdate, Ident: cur.Ident(), UUID: cur.UUID,
		MetadataLocation: "s3://b/wh/a/t2/metadata/00001.metadata.json", Location: "s3://b/wh/a/t2",
		ExpectedMetadataLocation: cur.MetadataLocation, ExpectedUUID: cur.UUID, Moves: true}}})
	res := p.ok(purgeDrop("t", "j"))
	assert.Empty(t, res.Tables[0].FormerLocations)
	j := p.job("j")
	assert.Equal(t, []string{"s3://b/wh/a/t2", "s3://b/wh/a/t"}, j.Locations())

	for _, loc := range []string{"s3://b/wh/a/t", "s3://b/wh/a/t/x", "s3://b/wh/a/t2"} {
		assert.ErrorIs(t, p.apply(tableAt("n", loc)).Err(), ErrBeingPurged, loc)
	}
	p.ok(AssignPurgeLease{JobID: "j", Node: "n1", AtMs: 200, ExpiresMs: 1200})
	p.ok(FinishPurgeJob{JobID: "j", Token: p.i, Outcome: OutcomeSucceeded, AtMs: 300})
	p.ok(tableAt("n", "s3://b/wh/a/t"))
	p.ok(tableAt("n2", "s3://b/wh/a/t2"))
}

// A reassignment checked against the silent node's heartbeat row is
// refused once the node heartbeat after it was seen silent; its workers
// take such a heartbeat as leave to delete.
func TestReassignmentRefusedAfterTheNodeHeartbeat(t *testing.T) {
	p := newPurgeFSM(t)
	p.ok(tableAt("t", "s3://b/t"))
	p.ok(purgeDrop("t", "j"))
	p.ok(AssignPurgeLease{JobID: "j", Node: "n1", AtMs: 1, ExpiresMs: 2})
	token := p.job("j").Lease.Token
	p.ok(PurgeHeartbeat{Node: "n1", Slots: 2, AtMs: 3, ExpiresMs: 4})
	seen := p.i // the row's index as the scheduler saw it
	p.ok(PurgeHeartbeat{Node: "n1", Slots: 2, Leases: []LeaseRef{{JobID: "j", Token: token}}, AtMs: 5, ExpiresMs: 6})
	res := p.apply(AssignPurgeLease{JobID: "j", Node: "n2", ExpectedToken: token, SilentIndex: seen, AtMs: 7, ExpiresMs: 8})
	require.ErrorIs(t, res.Err(), ErrStaleLease)
	assert.Equal(t, "n1", p.job("j").Lease.Node)
	p.ok(AssignPurgeLease{JobID: "j", Node: "n2", ExpectedToken: token, SilentIndex: p.i - 1, AtMs: 9, ExpiresMs: 10}) // the row as it is
	assert.Equal(t, "n2", p.job("j").Lease.Node)
	b, err := Encode(AssignPurgeLease{JobID: "j", Node: "n2", ExpectedToken: 1, SilentIndex: 5})
	require.NoError(t, err)
	assert.Equal(t, byte(2), b[1], "body version 2 with the check")
	b, err = Encode(AssignPurgeLease{JobID: "j", Node: "n2"})
	require.NoError(t, err)
	assert.Equal(t, byte(1), b[1], "version 1 without, which older binaries read")
}
