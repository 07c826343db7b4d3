package purge

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/internal/testenv"
)

// laggingStore is a node whose local replica (StaleRead) has applied only a
// prefix of the log, while Propose and the linearizable Read see all of it:
// a node that has just restarted and is still catching up.
type laggingStore struct {
	mu       sync.Mutex
	cur, lag *fsm.FSM
	i        uint64
	proposed []fsm.CommandType // every command proposed, in order
}

func (s *laggingStore) apply(t *testing.T, c fsm.Command, both bool) fsm.Result {
	t.Helper()
	res, err := s.propose(c, both)
	require.NoError(t, err)
	return res
}

func (s *laggingStore) propose(c fsm.Command, both bool) (fsm.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := fsm.Encode(c)
	if err != nil {
		return fsm.Result{}, err
	}
	s.i++
	s.proposed = append(s.proposed, c.Type())
	entry := &raft.Log{Index: s.i, Term: 1, Type: raft.LogCommand, Data: b}
	res := s.cur.Apply(entry).(fsm.Result)
	if both {
		s.lag.Apply(entry)
	}
	return res, nil
}

func (s *laggingStore) Propose(_ context.Context, c fsm.Command) (fsm.Result, error) {
	return s.propose(c, false)
}
func (s *laggingStore) Read(_ context.Context, fn func(*fsm.Reader) error) error {
	return s.cur.View(fn)
}
func (s *laggingStore) StaleRead(fn func(*fsm.Reader) error) error { return s.lag.View(fn) }

// newLaggingStore opens its two state machines for one test, and applies
// to both a table db.t at the file root whose drop with purge adds the
// job "job", leased to n1 (as a synchronous drop does) and stamped with
// first as judged from root.
func newLaggingStore(t *testing.T, root string, first int) *laggingStore {
	t.Helper()
	open := func(name string) *fsm.FSM {
		f, err := fsm.Open(filepath.Join(t.TempDir(), name), nil)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		return f
	}
	st := &laggingStore{cur: open("cur.db"), lag: open("lag.db")}
	loc := root[:strings.Index(root, "/metadata/")]
	id := fsm.Ident{Namespace: []string{"db"}, Name: "t"}
	require.NoError(t, st.apply(t, fsm.CreateNamespace{Namespace: []string{"db"}}, true).Err())
	require.NoError(t, st.apply(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: id, Location: loc, MetadataLocation: root, UUID: "u"}}}, true).Err())
	require.NoError(t, st.apply(t, fsm.DropTable{Ident: id, Purge: true, Job: &fsm.PurgeJobSpec{ID: "job", LeaseNode: "n1",
		FirstPhase: first, FirstPhaseOf: root}}, true).Err())
	return st
}

// runToEnd runs a purge service on n1 over st, with local storage, until
// the job "job" is SUCCEEDED or FAILED, and returns it.
func runToEnd(t *testing.T, st *laggingStore) fsm.PurgeJob {
	t.Helper()
	objs, err := storage.New(storage.Config{})
	require.NoError(t, err)
	s, err := New(Config{NodeID: "n1", Store: st, HeartbeatTimeout: time.Second, Registerer: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler), PollInterval: 20 * time.Millisecond,
		Storage: func(string, map[string]string) (Objects, error) { return objs, nil }})
	require.NoError(t, err)
	s.Start()
	t.Cleanup(s.Stop)
	var job fsm.PurgeJob
	require.Eventually(t, func() bool {
		require.NoError(t, st.Read(context.Background(), func(r *fsm.Reader) error {
			job, _ = r.PurgeJob("job")
			return nil
		}))
		return job.State.Terminal()
	}, 10*time.Second, 10*time.Millisecond)
	s.Stop()
	return job
}

// TestRestartedNodeResumesFromTheCommittedCheckpoint reproduces the fault
// harness's "metadata file … is missing" FAILED job whose files were all
// gone: a node ran a job into the root phase (recorded), deleted the root
// metadata file and was killed before recording the outcome; it restarted
// at once (so its lease was never reassigned: same token) and its poll loop
// found the job, still leased to it, in its lagging local replica, whose
// checkpoint predates the root phase. Resuming from that stale checkpoint,
// the missing root looked like lost metadata and the job went FAILED. The
// run must start from the committed checkpoint (a linearizable read).
func TestRestartedNodeResumesFromTheCommittedCheckpoint(t *testing.T) {
	dir := t.TempDir()
	root := "file://" + filepath.ToSlash(dir) + "/db/t/metadata/00000-0190a0a0-0000-7000-8000-000000000000.metadata.json" // already deleted
	st := newLaggingStore(t, root, 0)
	token := st.i
	// The previous incarnation recorded the root phase (then deleted the
	// root); the local replica has not applied that entry yet.
	require.NoError(t, st.apply(t, fsm.ReportPurgeProgress{JobID: "job", Token: token, Progress: fsm.PurgeProgress{Phase: PhaseRoot, Deleted: 7}}, false).Err())

	job := runToEnd(t, st)
	assert.Equal(t, fsm.JobSucceeded, job.State, "last error: %s", job.LastError)
	assert.Empty(t, job.LastError)
	assert.Equal(t, 0, job.Attempts)
}

// A run fences itself at every batch: the guard's linearizable read also
// checks that the job is still RUNNING under the run's token, so a run
// whose lease was lost deletes no batch it guards from then on, even while
// the node's own replica (which its sweep stops runs by) has not seen the
// change. (A batch guarded just before may still be deleted.)
func TestGuardRefusesABatchOnceTheLeaseIsLost(t *testing.T) {
	dir := t.TempDir()
	root := "file://" + filepath.ToSlash(dir) + "/db/t/metadata/00000-0190a0a0-0000-7000-8000-000000000000.metadata.json"
	st := newLaggingStore(t, root, 0)
	token := st.i
	s, err := New(Config{NodeID: "n1", Store: st, HeartbeatTimeout: time.Second, Registerer: prometheus.NewRegistry(),
		Logger:  slog.New(slog.DiscardHandler),
		Storage: func(string, map[string]string) (Objects, error) { return storage.New(storage.Config{}) }})
	require.NoError(t, err)
	var job fsm.PurgeJob
	require.NoError(t, st.StaleRead(func(r *fsm.Reader) error { job, _ = r.PurgeJob("job"); return nil }))
	run := &jobRun{s: s, job: job, token: token, log: slog.New(slog.DiscardHandler), ctx: context.Background()}
	file := "file://" + filepath.ToSlash(dir) + "/db/t/data/f.parquet"

	keep, err := run.guard([]string{file})
	require.NoError(t, err)
	assert.Equal(t, []string{file}, keep, "leased to the run: the batch may go")

	// The job fails elsewhere (its lease expired); this node's replica lags.
	require.NoError(t, st.apply(t, fsm.FinishPurgeJob{JobID: "job", Token: token, Outcome: fsm.OutcomeFailed, Error: "lease expired", MaxAttempts: 1, AtMs: 1}, false).Err())
	require.NoError(t, st.StaleRead(func(r *fsm.Reader) error {
		j, _ := r.PurgeJob("job")
		require.Equal(t, fsm.JobRunning, j.State, "the local replica has not seen it")
		return nil
	}))
	keep, err = run.guard([]string{file})
	require.ErrorIs(t, err, errStale)
	assert.Empty(t, keep)
}

// gatedStore holds its linearizable reads until gate is closed.
type gatedStore struct {
	*laggingStore
	gate chan struct{}
}

func (s *gatedStore) Read(ctx context.Context, fn func(*fsm.Reader) error) error {
	select {
	case <-s.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.laggingStore.Read(ctx, fn)
}

// A node replaying its log after a restart finds in its replica a job
// still leased to it, whose outcome a later entry records. The run it
// started for that lease had not yet read its job: nothing was lost, and
// it is not counted or logged as a lost lease.
func TestRunPassedBeforeItStartedIsNoLostLease(t *testing.T) {
	dir := t.TempDir()
	root := "file://" + filepath.ToSlash(dir) + "/db/t/metadata/00000-0190a0a0-0000-7000-8000-000000000000.metadata.json"
	lag := newLaggingStore(t, root, 0)
	token := lag.i
	st := &gatedStore{laggingStore: lag, gate: make(chan struct{})}
	logs := &testenv.LogBuffer{}
	s, err := New(Config{NodeID: "n1", Store: st, HeartbeatTimeout: time.Second, Registerer: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewTextHandler(logs, nil)), PollInterval: 20 * time.Millisecond,
		Storage: func(string, map[string]string) (Objects, error) { return storage.New(storage.Config{}) }})
	require.NoError(t, err)
	s.Start()
	t.Cleanup(s.Stop)
	require.Eventually(t, func() bool { return len(s.localRuns()) == 1 }, 10*time.Second, 10*time.Millisecond, "the run starts from the replica")

	// The replica applies the outcome an earlier incarnation recorded.
	require.NoError(t, lag.apply(t, fsm.FinishPurgeJob{JobID: "job", Token: token, Outcome: fsm.OutcomeSucceeded, MaxAttempts: 1, AtMs: 1}, true).Err())
	require.Eventually(t, func() bool { return len(s.localRuns()) == 0 }, 10*time.Second, 10*time.Millisecond, "the poll stops the run")
	close(st.gate)
	s.Stop()
	assert.Zero(t, testutil.ToFloat64(s.m.staleLeases))
	assert.NotContains(t, logs.String(), "lease lost")
}
