package purge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http/httptrace"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/catalog"
	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/purge"
)

// TestPurge runs the purge scenarios against a three-node cluster, on the
// local filesystem and on a real S3 server.
func TestPurge(t *testing.T) {
	for _, wh := range []warehouse{fileWarehouse(), s3Warehouse()} {
		t.Run(wh.name, func(t *testing.T) {
			c := newCluster(t, wh, 3, 5)
			t.Run("async drop answers before the files go, then they all go", func(t *testing.T) { testAsyncDrop(t, c) })
			t.Run("sync drop answers after the files are gone", func(t *testing.T) { testSyncDrop(t, c) })
			t.Run("a moved table's files in the locations it left go too", func(t *testing.T) { testMovedTable(t, c) })
			t.Run("each phase is in the log before its first delete", func(t *testing.T) { testPhaseRecordedFirst(t, c) })
			t.Run("gc.enabled=false keeps data files", func(t *testing.T) { testGCDisabled(t, c) })
			t.Run("corrupt metadata fails at once and release frees the name", func(t *testing.T) { testCorruptMetadata(t, c) })
			t.Run("refused deletes retry, fail, and retry through the operator API", func(t *testing.T) { testDeleteFailures(t, c) })
			t.Run("a missing manifest fails the job, and no manifest is deleted", func(t *testing.T) { testMissingManifest(t, c) })
			t.Run("a delete that fails on its own past the fence is not sent again", func(t *testing.T) { testFailedPastFence(t, c) })
			t.Run("a local file written at its decoded path goes too", func(t *testing.T) { testEscapedLocalPaths(t, c, wh) })
			t.Run("a path through a symbolic link fails the job at once", func(t *testing.T) { testSymlinkFailsAtOnce(t, c, wh) })
			t.Run("a data file that is a directory fails the job at once", func(t *testing.T) { testDirectoryFailsAtOnce(t, c, wh) })
			t.Run("a stale lease is fenced off", func(t *testing.T) { testStaleLease(t, c) })
			t.Run("files of a live table overlapping from old state are never deleted", func(t *testing.T) { testLegacyOverlap(t, c) })
			t.Run("a live view's files in a purged table's place are never deleted", func(t *testing.T) { testViewFilesSurvive(t, c) })
			t.Run("a purge reads only the table's own manifests", func(t *testing.T) { testPurgeReadsOnlyItsOwnManifests(t, c) })
			t.Run("a purged table's metadata cannot be registered from a cached copy", func(t *testing.T) { testRegisterPurgedMetadata(t, c) })
			t.Run("no storage secret in jobs, the log or snapshots", func(t *testing.T) { testNoSecretInState(t, c) })
		})
	}
}

func testAsyncDrop(t *testing.T, c *cluster) {
	n := c.follower()
	// t10 is t1's string-prefix sibling; t1's metadata also lists one of
	// t10's files, which lies outside t1's location.
	t10 := c.makeTable(n, "async", "t10", nil, 2, 4)
	t1 := c.makeTable(n, "async", "t1", nil, 3, 4, t10.data[0])
	require.True(t, strings.HasPrefix(t10.tbl.Location(), t1.tbl.Location()), "string-prefix siblings")

	hook, entered, open := gate()
	c.setHook(hook)
	defer c.setHook(nil)
	r := n.do(t, "DELETE", "/v1/namespaces/async/tables/t1?purgeRequested=true", "", catalog.AsyncPurgeHeader, "true")
	require.Equal(t, 204, r.status, r.body)
	assert.Equal(t, 404, n.do(t, "HEAD", "/v1/namespaces/async/tables/t1", "").status)
	assert.Equal(t, 404, n.do(t, "DELETE", "/v1/namespaces/async/tables/t1?purgeRequested=true", "", catalog.AsyncPurgeHeader, "true").status,
		"a repeated drop is 404")
	<-entered // a worker is deleting, held by the gate
	assert.ElementsMatch(t, t1.files, c.exist(t1.files), "answered before any file was deleted")
	job := c.mustJob("async", "t1")
	assert.Equal(t, fsm.JobRunning, job.State)
	assert.Equal(t, "anonymous", job.DroppedBy)
	assert.Equal(t, t1.tbl.MetadataLocation(), job.MetadataLocation)
	jobs := 0
	require.NoError(t, n.raft.StaleRead(func(r *fsm.Reader) error {
		list, _ := r.PurgeJobs(fsm.PurgeJobFilter{Namespace: []string{"async"}, Table: "t1"}, 0)
		jobs = len(list)
		return nil
	}))
	assert.Equal(t, 1, jobs, "the repeated drop enqueued nothing")

	// While the job runs, the name and the location are taken: 409 naming
	// the job, from any node.
	for _, tc := range []struct{ what, path, body string }{
		{"create at the name", "/v1/namespaces/async/tables", createTableBody("t1", "")},
		{"create inside the location", "/v1/namespaces/async/tables", createTableBody("other", t1.tbl.Location()+"/nested")},
		{"create around the location", "/v1/namespaces/async/tables", createTableBody("other", c.warehouse+"/async")},
		{"register at the name", "/v1/namespaces/async/register", `{"name":"t1","metadata-location":"` + t10.tbl.MetadataLocation() + `"}`},
	} {
		for _, via := range c.live() {
			r := via.do(t, "POST", tc.path, tc.body)
			require.Equal(t, 409, r.status, "%s: %s", tc.what, r.body)
			assert.Contains(t, r.errorMessage(t), job.ID, tc.what)
		}
	}

	close(open)
	job = c.waitJob("async", "t1", 30*time.Second, isState(fsm.JobSucceeded))
	assert.Empty(t, c.list(t1.tbl.Location()), "every file of the dropped table is gone")
	c.assertNoDir(t1.tbl.Location())
	assert.ElementsMatch(t, t10.files, c.exist(t10.files), "nothing of the sibling table is touched")
	assert.ElementsMatch(t, t10.files, c.list(t10.tbl.Location()))
	assert.Equal(t, int64(1), job.Progress.Skipped, "the file outside the location was skipped")
	assert.Nil(t, job.Lease)

	// Free again.
	r = n.do(t, "POST", "/v1/namespaces/async/tables", createTableBody("t1", ""))
	assert.Equal(t, 200, r.status, r.body)
}

func testSyncDrop(t *testing.T, c *cluster) {
	n := c.follower()
	tt := c.makeTable(n, "sync", "t", nil, 2, 7)
	keep := c.makeTable(n, "sync", "keep", nil, 1, 3)
	// Slow deletes: the answer must still wait for all of them.
	var calls atomic.Int64
	c.setHook(func(ctx context.Context, _ []string) error {
		calls.Add(1)
		time.Sleep(20 * time.Millisecond)
		return nil
	})
	defer c.setHook(nil)
	r := n.do(t, "DELETE", "/v1/namespaces/sync/tables/t?purgeRequested=true", "")
	require.Equal(t, 204, r.status, r.body)
	assert.Empty(t, c.list(tt.tbl.Location()), "sync drop answers once the files are gone")
	c.assertNoDir(tt.tbl.Location())
	assert.Greater(t, calls.Load(), int64(2), "in bulk batches of 5")
	job := c.mustJob("sync", "t")
	assert.Equal(t, fsm.JobSucceeded, job.State)
	assert.Equal(t, int64(len(tt.files)), job.Progress.Deleted)
	assert.ElementsMatch(t, keep.files, c.exist(keep.files))
	assert.Greater(t, gathered(t, n.reg, "floe_purge_files_deleted_total"), float64(0), "the receiving node ran it")

	// purgeRequested=false drops the entry and touches no file.
	r = n.do(t, "DELETE", "/v1/namespaces/sync/tables/keep", "")
	require.Equal(t, 204, r.status, r.body)
	assert.ElementsMatch(t, keep.files, c.exist(keep.files))
	_, hasJob := c.jobFor("sync", "keep")
	assert.False(t, hasJob)
}

// testMovedTable purges a table that moved (set-location) after its first
// snapshots: their files, in the location it left, are its own and go with
// the rest; a neighbour's stay.
func testMovedTable(t *testing.T, c *cluster) {
	n := c.follower()
	tt := c.makeTable(n, "moved", "t", nil, 2, 3)
	keep := c.makeTable(n, "moved", "t2", nil, 1, 2)
	old := tt.tbl.Location()
	r := n.do(t, "POST", "/v1/namespaces/moved/tables/t", `{"requirements":[],"updates":[{"action":"set-location","location":"`+old+`3"}]}`)
	require.Equal(t, 200, r.status, r.body)
	var moved struct {
		MetadataLocation string `json:"metadata-location"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &moved))
	require.True(t, strings.HasPrefix(moved.MetadataLocation, old+"3/"), moved.MetadataLocation)

	r = n.do(t, "DELETE", "/v1/namespaces/moved/tables/t?purgeRequested=true", "")
	require.Equal(t, 204, r.status, r.body)
	assert.Empty(t, c.list(old), "the files in the location it left")
	assert.Empty(t, c.list(old+"3"), "and in its location")
	job := c.mustJob("moved", "t")
	assert.Equal(t, fsm.JobSucceeded, job.State)
	assert.Equal(t, int64(len(tt.files)+1), job.Progress.Deleted, "every file, the new metadata file included")
	assert.Zero(t, job.Progress.Skipped)
	assert.ElementsMatch(t, keep.files, c.exist(keep.files))
}

// testPhaseRecordedFirst checks, at every bulk delete, that the job's
// committed checkpoint (read linearizably while the delete waits) is
// already in the phase of every file deleted: the guarantee that keeps a
// stale worker from deleting a manifest, list or root a new owner still
// has to read.
func testPhaseRecordedFirst(t *testing.T, c *cluster) {
	n := c.follower()
	tt := c.makeTable(n, "phases", "t", nil, 2, 3)
	root := tt.tbl.MetadataLocation()
	phaseOf := func(uri string) int {
		switch base := uri[strings.LastIndex(uri, "/")+1:]; {
		case uri == root:
			return purge.PhaseRoot
		case strings.HasSuffix(base, ".parquet"):
			return purge.PhaseData
		case strings.HasPrefix(base, "snap-"):
			return purge.PhaseManifestLists
		case strings.HasSuffix(base, ".avro"):
			return purge.PhaseManifests
		default: // the previous metadata files
			return purge.PhaseMetadataLog
		}
	}
	type seen struct {
		committed int
		uris      []string
		err       error
	}
	var (
		mu    sync.Mutex
		calls []seen
	)
	c.setHook(func(ctx context.Context, uris []string) error {
		s := seen{committed: -1, uris: append([]string(nil), uris...)}
		s.err = c.nodes[0].raft.Read(ctx, func(r *fsm.Reader) error {
			jobs, _ := r.PurgeJobs(fsm.PurgeJobFilter{Namespace: []string{"phases"}, Table: "t"}, 0)
			if len(jobs) > 0 {
				j := jobs[len(jobs)-1]
				s.committed = max(j.Progress.Phase, j.FirstPhase) // the stamp stands for a record
			}
			return nil
		})
		mu.Lock()
		calls = append(calls, s)
		mu.Unlock()
		return s.err
	})
	defer c.setHook(nil)
	r := n.do(t, "DELETE", "/v1/namespaces/phases/tables/t?purgeRequested=true", "", catalog.AsyncPurgeHeader, "true")
	require.Equal(t, 204, r.status, r.body)
	c.waitJob("phases", "t", 30*time.Second, isState(fsm.JobSucceeded))
	assert.Empty(t, c.list(tt.tbl.Location()))

	mu.Lock()
	defer mu.Unlock()
	phases := map[int]bool{}
	for _, s := range calls {
		require.NoError(t, s.err)
		for _, u := range s.uris {
			phases[phaseOf(u)] = true
			assert.GreaterOrEqual(t, s.committed, phaseOf(u), "%s deleted while the log's checkpoint was in phase %s", u, purge.PhaseName(s.committed))
		}
	}
	assert.Len(t, phases, 5, "deletes in every phase: data, manifests, lists, previous metadata files, the root")
}

func testGCDisabled(t *testing.T, c *cluster) {
	n := c.live()[0]
	tt := c.makeTable(n, "nogc", "t", iceberg.Properties{"gc.enabled": "false"}, 2, 3)
	r := n.do(t, "DELETE", "/v1/namespaces/nogc/tables/t?purgeRequested=true", "")
	require.Equal(t, 204, r.status, r.body)
	assert.ElementsMatch(t, tt.data, c.list(tt.tbl.Location()), "only the data files are left")
}

func testCorruptMetadata(t *testing.T, c *cluster) {
	n := c.follower()
	tt := c.makeTable(n, "bad", "t", nil, 1, 2)
	require.NoError(t, n.objects.Write(context.Background(), tt.tbl.MetadataLocation(), []byte("{not metadata")))
	r := n.do(t, "DELETE", "/v1/namespaces/bad/tables/t?purgeRequested=true", "")
	require.Equal(t, 500, r.status, r.body)
	job := c.mustJob("bad", "t")
	msg := r.errorMessage(t)
	assert.Contains(t, msg, job.ID)
	assert.Contains(t, msg, "FAILED")
	assert.Equal(t, fsm.JobFailed, job.State)
	assert.Equal(t, 1, job.Attempts, "corrupt metadata is not retried")
	assert.Contains(t, job.LastError, "unreadable table metadata")
	assert.ElementsMatch(t, tt.files, c.exist(tt.files), "nothing deleted")

	// FAILED keeps the tombstone until an operator releases the job.
	r = n.do(t, "POST", "/v1/namespaces/bad/tables", createTableBody("t", ""))
	require.Equal(t, 409, r.status, r.body)
	assert.Contains(t, r.errorMessage(t), job.ID)
	assert.Contains(t, r.errorMessage(t), "FAILED")

	r = n.do(t, "POST", "/management/v1/purge-jobs/"+job.ID+"/release", "")
	require.Equal(t, 200, r.status, r.body)
	assert.Equal(t, true, r.json(t)["released"])
	r = n.do(t, "POST", "/v1/namespaces/bad/tables", createTableBody("t", ""))
	assert.Equal(t, 200, r.status, r.body)
}

// testSymlinkFailsAtOnce: a data file reached through a directory that
// is a symbolic link is never deleted, and no retry could change that: the
// job fails at once, and what the link points at stays.
func testSymlinkFailsAtOnce(t *testing.T, c *cluster, wh warehouse) {
	if wh.name != "file" {
		t.Skip("links are a local file system's")
	}
	n := c.follower()
	tt := c.makeTable(n, "linked", "t", nil, 1, 2)
	path := strings.TrimPrefix(tt.files[0], "file://")
	dir := filepath.Dir(path)
	elsewhere := t.TempDir() + "/moved"
	require.NoError(t, os.Rename(dir, elsewhere))
	require.NoError(t, os.Symlink(elsewhere, dir))
	release := c.syncPurgeFailsAtOnce(t, n, "linked", "symbolic link")
	_, err := os.Stat(filepath.Join(elsewhere, filepath.Base(path)))
	assert.NoError(t, err, "the file behind the link stays")
	release()
}

// syncPurgeFailsAtOnce drops table ns.t with a synchronous purge through n
// and checks the purge failed on its first attempt with an error containing
// want. The returned function releases the failed job's tombstones.
func (c *cluster) syncPurgeFailsAtOnce(t *testing.T, n *tnode, ns, want string) (release func()) {
	t.Helper()
	r := n.do(t, "DELETE", "/v1/namespaces/"+ns+"/tables/t?purgeRequested=true", "")
	require.Equal(t, 500, r.status, r.body)
	job := c.mustJob(ns, "t")
	assert.Equal(t, fsm.JobFailed, job.State)
	assert.Equal(t, 1, job.Attempts, "not retried")
	assert.Contains(t, job.LastError, want)
	return func() {
		r := n.do(t, "POST", "/management/v1/purge-jobs/"+job.ID+"/release", "")
		require.Equal(t, 200, r.status, r.body)
	}
}

// testDirectoryFailsAtOnce: a data file whose path is a directory is not
// deleted (the purge deletes files only), and no retry could change that:
// the job fails at once instead of being retried for a minute.
func testDirectoryFailsAtOnce(t *testing.T, c *cluster, wh warehouse) {
	if wh.name != "file" {
		t.Skip("directories are a local file system's")
	}
	n := c.follower()
	tt := c.makeTable(n, "dirfile", "t", nil, 1, 2)
	path := strings.TrimPrefix(tt.files[0], "file://")
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.MkdirAll(path, 0o755))
	require.NoError(t, os.WriteFile(path+"/inside", []byte("x"), 0o644))
	release := c.syncPurgeFailsAtOnce(t, n, "dirfile", "is a directory")
	assert.FileExists(t, path+"/inside", "nothing under the directory is deleted")
	release()
}

func testDeleteFailures(t *testing.T, c *cluster) {
	n := c.live()[0]
	tt := c.makeTable(n, "refused", "t", nil, 1, 3)
	c.setHook(func(context.Context, []string) error { return errors.New("AccessDenied: deletes refused") })
	defer c.setHook(nil)
	r := n.do(t, "DELETE", "/v1/namespaces/refused/tables/t?purgeRequested=true", "", catalog.AsyncPurgeHeader, "true")
	require.Equal(t, 204, r.status, r.body)
	job := c.waitJob("refused", "t", 30*time.Second, isState(fsm.JobFailed))
	assert.Equal(t, 3, job.Attempts, "retried up to max attempts")
	assert.Contains(t, job.LastError, "deletes refused")
	assert.ElementsMatch(t, tt.files, c.exist(tt.files))

	r = n.do(t, "GET", "/management/v1/purge-jobs?state=FAILED&namespace=refused", "")
	require.Equal(t, 200, r.status, r.body)
	require.Len(t, r.json(t)["jobs"], 1)

	c.setHook(nil)
	r = n.do(t, "POST", "/management/v1/purge-jobs/"+job.ID+"/retry", "")
	require.Equal(t, 200, r.status, r.body)
	c.waitJob("refused", "t", 30*time.Second, isState(fsm.JobSucceeded))
	assert.Empty(t, c.list(tt.tbl.Location()))
}

// A delete request written whole before the fence's deadline is left to
// finish; when it then fails on its own (storage's own timeout, a server
// error), the batch fails and the job takes its retry path: it is not sent
// again as if the fence had cut it off (four sends of a stalled request
// per attempt).
func testFailedPastFence(t *testing.T, c *cluster) {
	n := c.live()[0]
	c.makeTable(n, "pastfence", "t", nil, 1, 3)
	var sends atomic.Int32
	c.setHook(func(ctx context.Context, _ []string) error {
		sends.Add(1)
		trace := httptrace.ContextClientTrace(ctx)
		if trace != nil && trace.WroteRequest != nil {
			trace.WroteRequest(httptrace.WroteRequestInfo{}) // written whole, awaiting its answer
		}
		time.Sleep(time.Second) // past the fence's deadline (3/4 of the 1 s heartbeat timeout)
		if trace != nil && trace.GotFirstResponseByte != nil {
			trace.GotFirstResponseByte()
		}
		return errors.New("storage: object storage did not answer in time")
	})
	defer c.setHook(nil)
	r := n.do(t, "DELETE", "/v1/namespaces/pastfence/tables/t?purgeRequested=true", "", catalog.AsyncPurgeHeader, "true")
	require.Equal(t, 204, r.status, r.body)
	job := c.waitJob("pastfence", "t", 60*time.Second, isState(fsm.JobFailed))
	assert.Equal(t, int32(job.Attempts), sends.Load(), "one send per attempt")
	c.setHook(nil)
	r = n.do(t, "POST", "/management/v1/purge-jobs/"+job.ID+"/retry", "")
	require.Equal(t, 200, r.status, r.body)
	c.waitJob("pastfence", "t", 30*time.Second, isState(fsm.JobSucceeded))
}

// A manifest is the only record of the data files it lists: a purge that
// finds one missing (or is told so wrongly) fails, retried up to the
// attempts allowed, rather than succeed with its files left behind and the
// other manifests, which name theirs, deleted.
func testMissingManifest(t *testing.T, c *cluster) {
	n := c.live()[0]
	tt := c.makeTable(n, "lost", "t", nil, 2, 3)
	var manifests []string
	for _, f := range tt.files {
		if strings.HasSuffix(f, ".avro") && strings.Contains(path.Base(f), "-m") {
			manifests = append(manifests, f)
		}
	}
	require.GreaterOrEqual(t, len(manifests), 2, "one manifest a snapshot: %v", tt.files)
	_, err := n.objects.Delete(context.Background(), manifests[:1])
	require.NoError(t, err)
	r := n.do(t, "DELETE", "/v1/namespaces/lost/tables/t?purgeRequested=true", "", catalog.AsyncPurgeHeader, "true")
	require.Equal(t, 204, r.status, r.body)
	job := c.waitJob("lost", "t", 30*time.Second, isState(fsm.JobFailed))
	assert.Equal(t, 3, job.Attempts, "retried up to max attempts")
	assert.Contains(t, job.LastError, manifests[0]+" is missing")
	assert.ElementsMatch(t, manifests[1:], c.exist(manifests[1:]), "no manifest deleted")
	r = n.do(t, "POST", "/v1/namespaces/lost/tables", createTableBody("t", ""))
	assert.Equal(t, 409, r.status, "the name stays held: %s", r.body)
}

// iceberg-go's local FileIO writes a data file whose stored URI holds
// %-escapes (a partition value "x/y" as name=x%2Fy) at the decoded path;
// the purge deletes it there too, and nothing beside the table.
func testEscapedLocalPaths(t *testing.T, c *cluster, wh warehouse) {
	if wh.name != "file" {
		t.Skip("S3 keys are literal")
	}
	n := c.live()[0]
	loc := c.warehouse + "/esc/t"
	stored := []string{loc + "/data/name=x%2Fy/a.parquet", loc + "/data/ts=10%3A00/b.parquet", loc + "/data/%2E%2E/%2E%2E/keep/c.parquet"}
	written := []string{loc + "/data/name=x/y/a.parquet", loc + "/data/ts=10:00/b.parquet"}
	keep := c.warehouse + "/esc/keep/c.parquet" // where the last would decode to
	for _, u := range append(slices.Clone(written), keep) {
		require.NoError(t, n.objects.Write(context.Background(), u, []byte("placeholder")))
	}
	tt := c.makeTable(n, "esc", "t", nil, 1, 2, stored...)
	require.Equal(t, loc, tt.tbl.Location())
	r := n.do(t, "DELETE", "/v1/namespaces/esc/tables/t?purgeRequested=true", "")
	require.Equal(t, 204, r.status, r.body)
	assert.Empty(t, c.exist(written), "the files at the decoded paths are gone")
	assert.Empty(t, c.list(loc))
	assert.Equal(t, []string{keep}, c.exist([]string{keep}), "a decoded path leaving the directory is not followed")
}

func testStaleLease(t *testing.T, c *cluster) {
	n := c.live()[0]
	tt := c.makeTable(n, "stale", "t", nil, 1, 12)
	hook, entered, open := gate()
	c.setHook(hook)
	defer c.setHook(nil)
	r := n.do(t, "DELETE", "/v1/namespaces/stale/tables/t?purgeRequested=true", "", catalog.AsyncPurgeHeader, "true")
	require.Equal(t, 204, r.status, r.body)
	<-entered
	job := c.waitJob("stale", "t", 10*time.Second, isState(fsm.JobRunning))
	first := c.byID(job.Lease.Node)

	// The leader hands the job to another node (as it would once the
	// first seemed silent): the first worker's token is stale.
	var other *tnode
	for _, o := range c.live() {
		if o != first {
			other = o
		}
	}
	ctx := context.Background()
	res, err := n.raft.Propose(ctx, fsm.AssignPurgeLease{JobID: job.ID, Node: other.raft.ID(), ExpectedToken: job.Lease.Token})
	require.NoError(t, err)
	require.NoError(t, res.Err())
	res, err = n.raft.Propose(ctx, fsm.ReportPurgeProgress{JobID: job.ID, Token: job.Lease.Token, Progress: fsm.PurgeProgress{Phase: purge.PhaseRoot}})
	require.NoError(t, err)
	assert.ErrorIs(t, res.Err(), fsm.ErrStaleLease, "progress under the old token is refused")
	res, err = n.raft.Propose(ctx, fsm.FinishPurgeJob{JobID: job.ID, Token: job.Lease.Token, Outcome: fsm.OutcomeSucceeded})
	require.NoError(t, err)
	assert.ErrorIs(t, res.Err(), fsm.ErrStaleLease, "completion under the old token is refused")

	// The first worker notices and stops; the new owner finishes.
	require.Eventually(t, func() bool { return gathered(t, first.reg, "floe_purge_stale_leases_total") >= 1 }, 10*time.Second, 20*time.Millisecond)
	close(open)
	done := c.waitJob("stale", "t", 30*time.Second, isState(fsm.JobSucceeded))
	assert.Empty(t, c.list(tt.tbl.Location()))
	assert.Greater(t, other.store.deleted.Load(), int64(0), "the new owner deleted the files")
	assert.Equal(t, 0, done.Attempts)
}

// TestKillNodeRunningJob shuts down, mid-purge, the node running a job in a
// three-node cluster on S3: the leader reassigns the job once the node is
// silent, and the new owner resumes from the last checkpoint.
func TestKillNodeRunningJob(t *testing.T) {
	c := newCluster(t, s3Warehouse(), 3, 10)
	n := c.follower()
	keep := c.makeTable(n, "kill", "keep", nil, 1, 5)
	tt := c.makeTable(n, "kill", "big", nil, 3, 60)
	c.setHook(func(ctx context.Context, _ []string) error {
		select {
		case <-time.After(60 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	r := n.do(t, "DELETE", "/v1/namespaces/kill/tables/big?purgeRequested=true", "", catalog.AsyncPurgeHeader, "true")
	require.Equal(t, 204, r.status, r.body)

	job := c.waitJob("kill", "big", 20*time.Second, func(j fsm.PurgeJob) bool {
		return j.State == fsm.JobRunning && j.Progress.Offset >= 40
	})
	owner := c.byID(job.Lease.Node)
	owner.kill()
	t.Logf("killed %s at checkpoint %s/%d after %d deletes", owner.raft.ID(), purge.PhaseName(job.Progress.Phase), job.Progress.Offset, owner.store.deleted.Load())

	done := c.waitJob("kill", "big", 40*time.Second, isState(fsm.JobSucceeded))
	assert.Empty(t, c.list(tt.tbl.Location()), "the table's prefix is empty")
	assert.ElementsMatch(t, keep.files, c.exist(keep.files), "nothing of a live table is touched")
	assert.Equal(t, 0, done.Attempts, "a reassignment is not a failure")
	var after int64
	for _, o := range c.live() {
		after += o.store.deleted.Load()
	}
	assert.Less(t, after, int64(len(tt.files)), "the new owner resumed from the checkpoint instead of starting over")
	var reassigned float64
	for _, o := range c.live() {
		reassigned += gathered(t, o.reg, "floe_purge_lease_assignments_total")
	}
	assert.GreaterOrEqual(t, reassigned, float64(1))
}

// State written before locations were owned can hold two live tables at
// one location (here made with a version-1 CommitTables entry, as an older
// binary wrote it). Purging one of them deletes nothing of the other: the
// worker's last check before each batch skips, counts and reports them.
func testLegacyOverlap(t *testing.T, c *cluster) {
	n := c.follower()
	a := c.makeTable(n, "legacy", "a", nil, 2, 3)
	body, err := json.Marshal(map[string]any{
		"changes": []any{map[string]any{
			"kind": "register", "ident": map[string]any{"namespace": []string{"legacy"}, "name": "b"},
			"metadata-location": a.tbl.MetadataLocation(), "location": a.tbl.Location(), "uuid": a.tbl.Metadata().TableUUID().String(),
		}},
		"at-ms": time.Now().UnixMilli(),
	})
	require.NoError(t, err)
	var leader *tnode
	for _, x := range c.live() {
		if x.raft.IsLeader() {
			leader = x
		}
	}
	require.NotNil(t, leader)
	// Propose encodes commands as this binary writes them; an older binary's
	// entry goes in as the inner command of a Keyed, which carries it as
	// encoded and applies it through the same decoder as a bare entry.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	at := time.Now().UnixMilli()
	res, err := leader.raft.Propose(ctx, fsm.Keyed{
		Key: uuid.NewString(), Binding: fsm.Binding{Operation: "legacyRegister"}, AtMs: at, ExpiresMs: at + time.Hour.Milliseconds(),
		Command: append([]byte{byte(fsm.TypeCommitTables), 1}, body...),
	})
	require.NoError(t, err)
	require.NoError(t, res.Err())
	require.Equal(t, 200, n.do(t, "GET", "/v1/namespaces/legacy/tables/b", "").status)

	// The overlap is listed by the operator API.
	r := n.do(t, "GET", "/management/v1/locations/conflicts", "")
	require.Equal(t, 200, r.status, r.body)
	assert.Contains(t, r.body, `"legacy"`)
	assert.Len(t, r.json(t)["conflicts"], 1)
	r = n.do(t, "GET", "/management/v1/locations/conflicts?pageSize=1", "")
	assert.Equal(t, 400, r.status, "a misspelt page-size is refused, not ignored: %s", r.body)

	before := gatheredOwned(t, c)
	r = n.do(t, "DELETE", "/v1/namespaces/legacy/tables/a?purgeRequested=true", "")
	require.Equal(t, 204, r.status, r.body)
	job := c.mustJob("legacy", "a")
	assert.Equal(t, fsm.JobSucceeded, job.State)
	assert.Equal(t, int64(0), job.Progress.Deleted)
	assert.Equal(t, int64(len(a.files)), job.Progress.SkippedOwned, "every file is b's too: skipped and counted")
	assert.ElementsMatch(t, a.files, c.exist(a.files), "b keeps every file")
	assert.Equal(t, 200, n.do(t, "GET", "/v1/namespaces/legacy/tables/b", "").status)
	assert.GreaterOrEqual(t, gatheredOwned(t, c)-before, float64(len(a.files)), "a run that is restarted counts its skips again")
}

func gatheredOwned(t *testing.T, c *cluster) float64 {
	var sum float64
	for _, n := range c.live() {
		sum += gathered(t, n.reg, "floe_purge_files_skipped_guarded_total")
	}
	return sum
}

// After an asynchronous purge has deleted a table's files, registering a
// table on its old metadata file is refused by every node, although each
// of them read (and cached) that file while the table was live.
func testRegisterPurgedMetadata(t *testing.T, c *cluster) {
	n := c.follower()
	tt := c.makeTable(n, "cached", "t", nil, 1, 2)
	for _, x := range c.live() {
		require.Equal(t, 200, x.do(t, "GET", "/v1/namespaces/cached/tables/t", "").status)
	}
	r := n.do(t, "DELETE", "/v1/namespaces/cached/tables/t?purgeRequested=True", "", catalog.AsyncPurgeHeader, "true")
	require.Equal(t, 204, r.status, r.body)
	c.waitJob("cached", "t", 30*time.Second, isState(fsm.JobSucceeded))
	require.Empty(t, c.list(tt.tbl.Location()))
	for _, x := range c.live() {
		r := x.do(t, "POST", "/v1/namespaces/cached/register", `{"name":"again","metadata-location":"`+tt.tbl.MetadataLocation()+`"}`)
		assert.Equal(t, 400, r.status, r.body)
	}
	assert.Equal(t, 404, n.do(t, "GET", "/v1/namespaces/cached/tables/again", "").status)
}

// Purge jobs name the storage settings without credentials: the job is in
// the Raft log, the state machine and every snapshot. The node that runs
// it uses its own credentials.
func testNoSecretInState(t *testing.T, c *cluster) {
	secret := c.scfg.S3SecretAccessKey
	if secret == "" {
		t.Skip("the warehouse has no static credentials")
	}
	n := c.follower()
	c.makeTable(n, "secret", "t", nil, 1, 2)
	r := n.do(t, "DELETE", "/v1/namespaces/secret/tables/t?purgeRequested=true", "")
	require.Equal(t, 204, r.status, r.body)
	job := c.mustJob("secret", "t")
	assert.Equal(t, fsm.JobSucceeded, job.State)
	for k := range job.FileIO {
		assert.False(t, storage.IsSecretProperty(k), "job FileIO holds %s", k)
	}
	// fsm.db and raft.db hold every entry and record; a snapshot is a copy
	// of fsm.db, and any snapshot taken so far is under snapshots/.
	for _, x := range c.live() {
		err := filepath.WalkDir(x.dataDir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			assert.NotContains(t, string(b), secret, "%s holds the storage secret", path)
			return nil
		})
		require.NoError(t, err)
	}
}

// A worker stuck in a storage call that ignores cancellation (a hung mount
// behind a file:// warehouse) does not keep Stop, and so the node's
// shutdown, waiting: Stop gives up after StopTimeout, and the job's lease
// passes to another node as after a crash.
func TestStopDoesNotWaitForAStuckStorageCall(t *testing.T) {
	c := newCluster(t, fileWarehouse(), 3, 10)
	n := c.follower()
	c.makeTable(n, "stuck", "t", nil, 1, 3)
	entered, release := make(chan struct{}, 64), make(chan struct{})
	t.Cleanup(func() { close(release) })
	c.setHook(func(context.Context, []string) error {
		entered <- struct{}{}
		<-release // ignores its context
		return nil
	})
	r := n.do(t, "DELETE", "/v1/namespaces/stuck/tables/t?purgeRequested=true", "", catalog.AsyncPurgeHeader, "true")
	require.Equal(t, 204, r.status, r.body)
	<-entered
	job := c.waitJob("stuck", "t", 20*time.Second, func(j fsm.PurgeJob) bool { return j.Lease != nil })
	owner := c.byID(job.Lease.Node)
	stopped := make(chan struct{})
	go func() {
		owner.svc.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop waited for a storage call that never returns")
	}
}

// A table may share a live view's location, and a registered table's
// metadata log may name any file: a purge of such a table deletes its own
// metadata file there but none of the view's, earlier or current (only
// the current one is in the location index; the earlier ones are told by
// their content).
func testViewFilesSurvive(t *testing.T, c *cluster) {
	n := c.follower()
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", `{"namespace":["vshare"]}`).status)
	view := `{"name":"v","schema":` + schemaJSON + `,"view-version":{"version-id":1,"schema-id":0,"timestamp-ms":1700000000000,` +
		`"summary":{"engine-name":"test"},"representations":[{"type":"sql","sql":"select %d","dialect":"spark"}],"default-namespace":["vshare"]},"properties":{}}`
	r := n.do(t, "POST", "/v1/namespaces/vshare/views", fmt.Sprintf(view, 1))
	require.Equal(t, 200, r.status, r.body)
	first := r.json(t)["metadata-location"].(string)
	viewLoc := r.json(t)["metadata"].(map[string]any)["location"].(string)
	r = n.do(t, "POST", "/v1/namespaces/vshare/views/v", `{"requirements":[],"updates":[{"action":"add-view-version","view-version":`+
		`{"version-id":2,"schema-id":0,"timestamp-ms":1700000000001,"summary":{"engine-name":"test"},`+
		`"representations":[{"type":"sql","sql":"select 2","dialect":"spark"}],"default-namespace":["vshare"]}},`+
		`{"action":"set-current-view-version","view-version-id":-1}]}`)
	require.Equal(t, 200, r.status, r.body)
	current := r.json(t)["metadata-location"].(string)
	require.NotEqual(t, first, current)

	// A table's metadata at the view's location, whose log names the
	// view's first metadata file.
	r = n.do(t, "POST", "/v1/namespaces/vshare/tables", `{"name":"tpl","schema":`+schemaJSON+`}`)
	require.Equal(t, 200, r.status, r.body)
	m := r.json(t)["metadata"].(map[string]any)
	m["location"] = viewLoc
	m["table-uuid"] = uuid.NewString()
	m["metadata-log"] = []any{map[string]any{"timestamp-ms": 1, "metadata-file": first}}
	raw, err := json.Marshal(m)
	require.NoError(t, err)
	crafted := viewLoc + "/metadata/00009-" + uuid.NewString() + ".metadata.json"
	require.NoError(t, n.objects.Write(context.Background(), crafted, raw))
	r = n.do(t, "POST", "/v1/namespaces/vshare/register", fmt.Sprintf(`{"name":"b","metadata-location":%q}`, crafted))
	require.Equal(t, 200, r.status, r.body)

	r = n.do(t, "DELETE", "/v1/namespaces/vshare/tables/b?purgeRequested=true", "")
	require.Equal(t, 204, r.status, r.body)
	job := c.mustJob("vshare", "b")
	assert.Equal(t, fsm.JobSucceeded, job.State)
	assert.ElementsMatch(t, []string{first, current}, c.exist([]string{first, current, crafted}),
		"the view's files stay; the table's own metadata file goes")
	assert.Equal(t, int64(1), job.Progress.SkippedOwned, "the view's earlier file")
	assert.Equal(t, 200, n.do(t, "GET", "/v1/namespaces/vshare/views/v", "").status)
}

// A snapshot may name any file as its manifest list: a purge reads only
// the table's own, so it tells nothing of another table's file (before,
// a synchronous drop answered 500 quoting the file's first bytes when it
// existed, and 204 when it did not).
func testPurgeReadsOnlyItsOwnManifests(t *testing.T, c *cluster) {
	n := c.follower()
	victim := c.makeTable(n, "probe", "victim", nil, 1, 1)
	for _, name := range []string{"p1", "p2"} {
		r := n.do(t, "POST", "/v1/namespaces/probe/tables", `{"name":"`+name+`","schema":`+schemaJSON+`}`)
		require.Equal(t, 200, r.status, r.body)
	}
	snap := func(list string) string {
		return fmt.Sprintf(`{"requirements":[],"updates":[{"action":"add-snapshot","snapshot":{"snapshot-id":7,"sequence-number":1,`+
			`"timestamp-ms":%d,"manifest-list":%q,"summary":{"operation":"append"},"schema-id":0}},`+
			`{"action":"set-snapshot-ref","ref-name":"main","type":"branch","snapshot-id":7}]}`, time.Now().UnixMilli(), list)
	}
	for name, list := range map[string]string{"p1": victim.data[0], "p2": victim.tbl.Location() + "/data/nothere.parquet"} {
		r := n.do(t, "POST", "/v1/namespaces/probe/tables/"+name, snap(list))
		require.Equal(t, 200, r.status, r.body)
		r = n.do(t, "DELETE", "/v1/namespaces/probe/tables/"+name+"?purgeRequested=true", "")
		assert.Equal(t, 204, r.status, "%s: %s", name, r.body)
		assert.Equal(t, fsm.JobSucceeded, c.mustJob("probe", name).State, name)
	}
	assert.ElementsMatch(t, victim.files, c.exist(victim.files), "the victim keeps every file")
}

// A node whose allowed locations lack the job's location (it has not got
// its warehouse's definition yet, or no longer) fails the job rather than
// skip every file and succeed having deleted nothing, which would free
// the table's name and location over its files.
func TestJobOutsideThisNodesAllowedLocationsFails(t *testing.T) {
	c := newCluster(t, fileWarehouse(), 1, 5, func(cfg *purge.Config) {
		cfg.AllowedLocations = []string{"file:///nowhere/else"}
	})
	n := c.nodes[0]
	tb := c.makeTable(n, "gone", "t", nil, 2, 3)
	r := n.do(t, "DELETE", "/v1/namespaces/gone/tables/t?purgeRequested=true", "", catalog.AsyncPurgeHeader, "true")
	require.Equal(t, 204, r.status, r.body)
	job := c.waitJob("gone", "t", 30*time.Second, isState(fsm.JobFailed))
	assert.Contains(t, job.LastError, "outside this node's allowed locations")
	assert.Zero(t, job.Progress.Deleted)
	assert.ElementsMatch(t, tb.files, c.exist(tb.files), "no file deleted")
	assert.True(t, job.HoldsTombstones(), "the name and location stay taken")
}

// A run that panics (a decoder meeting a crafted manifest list, a storage
// client an answer it was not written for) fails its attempt, is retried
// and then FAILED, and the node lives on: a panic ended the process,
// which restarted into the same run, and the job's lease then took the
// next node down the same way.
func TestAPanickingRunFailsItsJobNotTheNode(t *testing.T) {
	c := newCluster(t, fileWarehouse(), 1, 10)
	n := c.nodes[0]
	for _, tc := range []struct {
		name, want string
		arm        func()
	}{
		{"walk", "the run panicked: crafted", func() {
			n.store.setRead(func(uri string) {
				if strings.Contains(uri, "/metadata/snap-") {
					panic("crafted")
				}
			})
		}},
		{"delete", "the delete panicked: odd answer", func() {
			c.setHook(func(context.Context, []string) error { panic("odd answer") })
		}},
	} {
		tt := c.makeTable(n, "panics", tc.name, nil, 1, 2)
		tc.arm()
		r := n.do(t, "DELETE", "/v1/namespaces/panics/tables/"+tc.name+"?purgeRequested=true", "", catalog.AsyncPurgeHeader, "true")
		require.Equal(t, 204, r.status, r.body)
		job := c.waitJob("panics", tc.name, 30*time.Second, func(j fsm.PurgeJob) bool { return j.State == fsm.JobFailed })
		assert.Equal(t, 3, job.Attempts, tc.name)
		assert.Contains(t, job.LastError, tc.want, tc.name)
		n.store.setRead(nil)
		c.setHook(nil)
		assert.NotEmpty(t, c.exist(tt.files), "%s: nothing more was deleted", tc.name)
	}
	require.NoError(t, n.raft.Ready(), "the node lives on")
}
