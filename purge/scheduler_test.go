package purge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/fsmtest"
)

// fsmStore is the shared one-replica store, with this package's helpers.
type fsmStore struct{ *fsmtest.Store }

func (s *fsmStore) must(t *testing.T, c fsm.Command) { s.Must(t, c) }

func (s *fsmStore) lease(t *testing.T, id string) *fsm.PurgeLease {
	t.Helper()
	var j fsm.PurgeJob
	require.NoError(t, s.F.View(func(r *fsm.Reader) error {
		var ok bool
		j, ok = r.PurgeJob(id)
		require.True(t, ok)
		return nil
	}))
	return j.Lease
}

// newFSMStore opens a state machine for one test.
func newFSMStore(t *testing.T) *fsmStore {
	t.Helper()
	return &fsmStore{fsmtest.Open(t)}
}

// idleService is a service on n1 over st whose own timers never fire
// within a test (an hour): the test drives it. now is its clock (nil:
// time.Now).
func idleService(t *testing.T, st Store, now func() time.Time) *Service {
	t.Helper()
	s, err := New(Config{NodeID: "n1", Store: st, HeartbeatTimeout: time.Hour, PollInterval: time.Hour, Registerer: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler), Storage: func(string, map[string]string) (Objects, error) { return nil, nil }, Now: now})
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	return s
}

// TestSchedulerAssignsDeterministically drives the leader's scheduler with
// a fake clock: nothing before a heartbeat moves, followers before the
// leader and the least loaded first, never above a node's slots, and a
// silent node's lease reassigned with a new token only after the timeout.
func TestSchedulerAssignsDeterministically(t *testing.T) {
	st := newFSMStore(t)
	clock := time.Unix(1000, 0)
	reg := prometheus.NewRegistry()
	s, err := New(Config{NodeID: "n1", Store: st, HeartbeatTimeout: time.Second, Registerer: reg, Logger: slog.New(slog.DiscardHandler),
		Storage: func(string, map[string]string) (Objects, error) { return nil, nil }, Now: func() time.Time { return clock }})
	require.NoError(t, err)
	t.Cleanup(s.Stop)

	st.must(t, fsm.CreateNamespace{Namespace: []string{"db"}})
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		id := fsm.Ident{Namespace: []string{"db"}, Name: name}
		st.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: id, Location: "s3://b/" + name, MetadataLocation: "m", UUID: name}}})
		st.must(t, fsm.DropTable{Ident: id, Purge: true, Job: &fsm.PurgeJobSpec{ID: "job-" + name}})
	}
	beat := func(nodes ...string) {
		for _, n := range nodes {
			slots := map[string]int{"n1": 1, "n2": 1, "n3": 3}[n]
			st.must(t, fsm.PurgeHeartbeat{Node: n, Slots: slots, AtMs: clock.UnixMilli()})
		}
	}
	ctx := context.Background()
	beat("n1", "n2", "n3")
	sc := s.newScheduler()
	sc.tick(ctx)
	for _, j := range []string{"a", "b", "c", "d", "e"} {
		assert.Nil(t, st.lease(t, "job-"+j), "no node is known live before its heartbeat moves")
	}

	clock = clock.Add(100 * time.Millisecond)
	beat("n1", "n2", "n3")
	sc.tick(ctx)
	assert.Equal(t, "n2", st.lease(t, "job-a").Node, "followers first, ties by id")
	assert.Equal(t, "n3", st.lease(t, "job-b").Node, "n2 is full")
	assert.Equal(t, "n3", st.lease(t, "job-c").Node)
	assert.Equal(t, "n3", st.lease(t, "job-d").Node)
	assert.Equal(t, "n1", st.lease(t, "job-e").Node, "the leader last")
	tokenA := st.lease(t, "job-a").Token

	// n2 goes silent. A new leader reassigns nothing in its first timeout.
	clock = clock.Add(1500 * time.Millisecond)
	beat("n1", "n3")
	fresh := s.newScheduler()
	fresh.tick(ctx)
	assert.Equal(t, tokenA, st.lease(t, "job-a").Token)
	// Free a slot on n3; the old leader's scheduler reassigns job-a there.
	st.must(t, fsm.FinishPurgeJob{JobID: "job-b", Token: st.lease(t, "job-b").Token, Outcome: fsm.OutcomeSucceeded})
	sc.tick(ctx)
	l := st.lease(t, "job-a")
	assert.Equal(t, "n3", l.Node)
	assert.Greater(t, l.Token, tokenA, "a new fencing token")
	assert.Equal(t, 1.0, counter(t, reg, "floe_purge_lease_assignments_total", "reassigned"))
	assert.Equal(t, 5.0, counter(t, reg, "floe_purge_lease_assignments_total", "new"))
}

// TestSchedulerLeasesTheFirstDueJobs fills the free slots with the
// PENDING jobs first in id order, passing over those waiting out a retry
// backoff, however long the queue.
func TestSchedulerLeasesTheFirstDueJobs(t *testing.T) {
	st := newFSMStore(t)
	clock := time.Unix(1000, 0)
	s, err := New(Config{NodeID: "n1", Store: st, HeartbeatTimeout: time.Second, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler),
		Storage: func(string, map[string]string) (Objects, error) { return nil, nil }, Now: func() time.Time { return clock }})
	require.NoError(t, err)
	t.Cleanup(s.Stop)

	st.must(t, fsm.CreateNamespace{Namespace: []string{"db"}})
	const jobs = 40
	id := func(i int) string { return fmt.Sprintf("job-%02d", i) }
	for i := range jobs {
		ident := fsm.Ident{Namespace: []string{"db"}, Name: fmt.Sprintf("t%02d", i)}
		st.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: ident, Location: "s3://b/" + ident.Name, MetadataLocation: "m", UUID: ident.Name}}})
		st.must(t, fsm.DropTable{Ident: ident, Purge: true, Job: &fsm.PurgeJobSpec{ID: id(i)}})
	}
	beat := func() {
		st.must(t, fsm.PurgeHeartbeat{Node: "n2", Slots: 2, AtMs: clock.UnixMilli()})
	}
	leased := func() (out []string) {
		for i := range jobs {
			if l := st.lease(t, id(i)); l != nil {
				out = append(out, id(i))
			}
		}
		return out
	}
	ctx := context.Background()
	sc := &scheduler{s: s, start: clock, seen: map[string]observed{}, lastPrune: clock}
	beat()
	sc.tick(ctx) // sees n2's heartbeat for the first time
	clock = clock.Add(100 * time.Millisecond)
	beat()
	sc.tick(ctx)
	require.Equal(t, []string{id(0), id(1)}, leased(), "two slots: the first two jobs")

	// job-00 fails and waits out its backoff; job-01 succeeds. Two slots
	// free: the next two due jobs, not job-00.
	st.must(t, fsm.FinishPurgeJob{JobID: id(0), Token: st.lease(t, id(0)).Token, Outcome: fsm.OutcomeRetry, MaxAttempts: 5,
		AtMs: clock.UnixMilli(), NotBeforeMs: clock.Add(time.Minute).UnixMilli(), Error: "refused"})
	st.must(t, fsm.FinishPurgeJob{JobID: id(1), Token: st.lease(t, id(1)).Token, Outcome: fsm.OutcomeSucceeded})
	clock = clock.Add(100 * time.Millisecond)
	beat()
	sc.tick(ctx)
	assert.Equal(t, []string{id(2), id(3)}, leased())

	// Once its backoff is over, job-00 comes first again.
	for _, j := range []string{id(2), id(3)} {
		st.must(t, fsm.FinishPurgeJob{JobID: j, Token: st.lease(t, j).Token, Outcome: fsm.OutcomeSucceeded})
	}
	clock = clock.Add(time.Minute)
	beat()
	sc.tick(ctx)
	assert.Equal(t, []string{id(0), id(4)}, leased())
}

// TestBackoffOnAnotherClock: a job's NotBeforeMs is on the clock of the
// node whose run failed. One whose clock is an hour ahead of the leader's
// must not keep the job waiting an hour, nor one an hour behind skip the
// backoff: the scheduler counts the backoff the worker meant (5 s) on its
// own clock, from when it first saw the job.
func TestBackoffOnAnotherClock(t *testing.T) {
	st := newFSMStore(t)
	clock := time.Unix(1000, 0)
	s := idleService(t, st, func() time.Time { return clock })

	st.must(t, fsm.CreateNamespace{Namespace: []string{"db"}})
	for _, name := range []string{"a", "b"} {
		ident := fsm.Ident{Namespace: []string{"db"}, Name: name}
		st.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: ident, Location: "s3://b/" + name, MetadataLocation: "m", UUID: name}}})
		st.must(t, fsm.DropTable{Ident: ident, Purge: true, Job: &fsm.PurgeJobSpec{ID: "job-" + name}})
	}
	beat := func() { st.must(t, fsm.PurgeHeartbeat{Node: "n2", Slots: 2, AtMs: clock.UnixMilli()}) }
	ctx := context.Background()
	sc := s.newScheduler()
	beat()
	sc.tick(ctx)
	clock = clock.Add(100 * time.Millisecond)
	beat()
	sc.tick(ctx)
	require.NotNil(t, st.lease(t, "job-a"))
	require.NotNil(t, st.lease(t, "job-b"))

	// n2's clock is an hour ahead when job-a fails, an hour behind when
	// job-b does: both with a 5 s backoff on it.
	for j, worker := range map[string]time.Time{"job-a": clock.Add(time.Hour), "job-b": clock.Add(-time.Hour)} {
		st.must(t, fsm.FinishPurgeJob{JobID: j, Token: st.lease(t, j).Token, Outcome: fsm.OutcomeRetry, MaxAttempts: 5, Error: "refused",
			AtMs: worker.UnixMilli(), NotBeforeMs: worker.Add(5 * time.Second).UnixMilli()})
	}
	clock = clock.Add(100 * time.Millisecond)
	beat()
	sc.tick(ctx)
	assert.Nil(t, st.lease(t, "job-a"), "in backoff")
	assert.Nil(t, st.lease(t, "job-b"), "in backoff, though its not-before is an hour past here")

	// A new leader's scheduler counts the backoff from when it sees the job.
	clock = clock.Add(3 * time.Second)
	fresh := s.newScheduler()
	beat()
	fresh.tick(ctx)
	assert.Nil(t, st.lease(t, "job-b"), "a new scheduler starts the backoff when it first sees the job")

	clock = clock.Add(2 * time.Second)
	beat()
	sc.tick(ctx)
	assert.NotNil(t, st.lease(t, "job-a"), "5 s after the first scheduler saw it, not an hour")
	assert.NotNil(t, st.lease(t, "job-b"))
}

func counter(t *testing.T, reg *prometheus.Registry, name, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// Lead runs until its context ends or the service stops, and Stop waits
// for it: no scheduler outlives its service.
func TestLeadStopsWithTheService(t *testing.T) {
	s, err := New(Config{NodeID: "n1", Store: newFSMStore(t), HeartbeatTimeout: time.Second, Logger: slog.New(slog.DiscardHandler),
		Storage: func(string, map[string]string) (Objects, error) { return nil, nil }})
	require.NoError(t, err)

	led := make(chan struct{})
	go func() {
		defer close(led)
		s.Lead(context.Background()) // a leadership that never ends by itself
	}()
	stopped := make(chan struct{})
	go func() {
		s.Stop()
		close(stopped)
	}()
	select {
	case <-led:
	case <-time.After(10 * time.Second):
		t.Fatal("Lead did not return after Stop")
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return")
	}
	// A Lead started after Stop returns at once.
	done := make(chan struct{})
	go func() { s.Lead(context.Background()); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Lead after Stop did not return")
	}
}

// An asynchronous purge is assigned as soon as its drop is applied: the
// state machine wakes the leader's scheduler, whose own poll here would
// not come for an hour.
func TestDropWakesTheScheduler(t *testing.T) {
	st := newFSMStore(t)
	s, err := New(Config{NodeID: "n1", Store: st, HeartbeatTimeout: time.Hour, PollInterval: time.Hour,
		Logger: slog.New(slog.DiscardHandler), Storage: func(string, map[string]string) (Objects, error) { return nil, nil }})
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	st.F.OnPurgeWork(s.Wake)

	st.must(t, fsm.CreateNamespace{Namespace: []string{"db"}})
	id := fsm.Ident{Namespace: []string{"db"}, Name: "t"}
	st.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: id, Location: "s3://b/t", MetadataLocation: "m", UUID: "u"}}})
	st.must(t, fsm.PurgeHeartbeat{Node: "n2", Slots: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Lead(ctx)
	// The first look (at start) notes n2's heartbeat; a later one must see
	// it move before n2 counts as live. A wake taken off the channel means
	// the first look is done.
	s.Wake(fsm.PurgeClaimable)
	require.Eventually(t, func() bool { return len(s.wake) == 0 }, 10*time.Second, time.Millisecond)
	st.must(t, fsm.PurgeHeartbeat{Node: "n2", Slots: 1})
	st.must(t, fsm.DropTable{Ident: id, Purge: true, Job: &fsm.PurgeJobSpec{ID: "job-t"}})
	require.Eventually(t, func() bool {
		l := st.lease(t, "job-t")
		return l != nil && l.Node == "n2"
	}, 10*time.Second, 5*time.Millisecond, "the drop woke the scheduler")
}

// A new leader's scheduler counts a node live from a heartbeat applied
// after it started, even one it sees first: nodes heartbeat when they learn
// of the new leader, and a job dropped right after an election is leased
// at once, not a heartbeat interval later.
func TestNewLeaderLeasesOnFreshHeartbeats(t *testing.T) {
	st := newFSMStore(t)
	s := idleService(t, st, func() time.Time { return time.Unix(1000, 0) })

	st.must(t, fsm.CreateNamespace{Namespace: []string{"db"}})
	for _, name := range []string{"a", "b"} {
		id := fsm.Ident{Namespace: []string{"db"}, Name: name}
		st.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: id, Location: "s3://b/" + name, MetadataLocation: "m", UUID: name}}})
	}
	// n2 heartbeat under the old leader; n3 has never heartbeat.
	st.must(t, fsm.PurgeHeartbeat{Node: "n2", Slots: 1})
	sc := s.newScheduler()
	sc.tick(context.Background())
	// Both learn of the new leader and heartbeat; then the drops come.
	st.must(t, fsm.PurgeHeartbeat{Node: "n2", Slots: 1})
	st.must(t, fsm.PurgeHeartbeat{Node: "n3", Slots: 1})
	for _, name := range []string{"a", "b"} {
		st.must(t, fsm.DropTable{Ident: fsm.Ident{Namespace: []string{"db"}, Name: name}, Purge: true, Job: &fsm.PurgeJobSpec{ID: "job-" + name}})
	}
	sc.tick(context.Background())
	require.NotNil(t, st.lease(t, "job-a"))
	require.NotNil(t, st.lease(t, "job-b"))
	assert.ElementsMatch(t, []string{"n2", "n3"}, []string{st.lease(t, "job-a").Node, st.lease(t, "job-b").Node})
}

// ledStore is a store on a node whose leadership began when its log's
// last index was start.
type ledStore struct {
	*fsmStore
	start uint64
}

func (l ledStore) LeadershipStartIndex() uint64 { return l.start }

// A heartbeat an earlier leader left in the log (at or below the index the
// leadership began at) is no sign of life, even applied after the
// scheduler started; one proposed during the leadership is.
func TestSchedulerIgnoresAnEarlierLeadersHeartbeats(t *testing.T) {
	fs := newFSMStore(t)
	st := ledStore{fsmStore: fs}
	s := idleService(t, st, func() time.Time { return time.Unix(1000, 0) })

	fs.must(t, fsm.CreateNamespace{Namespace: []string{"db"}})
	id := fsm.Ident{Namespace: []string{"db"}, Name: "t"}
	fs.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: id, Location: "s3://b/t", MetadataLocation: "m", UUID: "u"}}})
	fs.must(t, fsm.PurgeHeartbeat{Node: "n2", Slots: 1})
	// The leadership began two entries from now: the next two entries
	// were in its log already, left by the earlier leader.
	st.start = fs.Index() + 2
	s.cfg.Store = st
	sc := s.newScheduler()
	sc.tick(context.Background())
	fs.must(t, fsm.PurgeHeartbeat{Node: "n2", Slots: 1}) // a move, but old
	fs.must(t, fsm.PurgeHeartbeat{Node: "n3", Slots: 1}) // first seen, but old
	fs.must(t, fsm.DropTable{Ident: id, Purge: true, Job: &fsm.PurgeJobSpec{ID: "job-t"}})
	sc.tick(context.Background())
	assert.Nil(t, st.lease(t, "job-t"), "no node is known live from an earlier leader's entries")
	fs.must(t, fsm.PurgeHeartbeat{Node: "n3", Slots: 1}) // proposed during the leadership
	sc.tick(context.Background())
	require.NotNil(t, st.lease(t, "job-t"))
	assert.Equal(t, "n3", st.lease(t, "job-t").Node)
}

// NewLeader sends a heartbeat at once, however long the interval.
func TestNewLeaderHeartbeatsAtOnce(t *testing.T) {
	st := newFSMStore(t)
	s := idleService(t, st, nil)
	index := func() uint64 {
		var i uint64
		require.NoError(t, st.F.View(func(r *fsm.Reader) error {
			for _, n := range r.PurgeNodes() {
				if n.Node == "n1" {
					i = n.Index
				}
			}
			return nil
		}))
		return i
	}
	s.Start()
	require.Eventually(t, func() bool { return index() > 0 }, 10*time.Second, time.Millisecond, "the first heartbeat at start")
	first := index()
	s.NewLeader()
	require.Eventually(t, func() bool { return index() > first }, 10*time.Second, time.Millisecond, "a heartbeat for the new leader")
}

// TestEndedRunNotRestarted: once a run has recorded its job's outcome, a
// poll that still sees the job RUNNING under that run's token (the local
// replica has not applied the outcome yet) does not start it again.
func TestEndedRunNotRestarted(t *testing.T) {
	st := newFSMStore(t)
	var mu sync.Mutex
	opened := map[string]int{}
	s, err := New(Config{NodeID: "n1", Store: st, HeartbeatTimeout: time.Hour, PollInterval: time.Hour, Registerer: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler), Storage: func(_ string, fileIO map[string]string) (Objects, error) {
			mu.Lock()
			opened[fileIO["job"]]++
			mu.Unlock()
			return nil, fmt.Errorf("no storage here")
		}})
	require.NoError(t, err)
	t.Cleanup(s.Stop)

	st.must(t, fsm.CreateNamespace{Namespace: []string{"db"}})
	for _, name := range []string{"ended", "live"} {
		id := fsm.Ident{Namespace: []string{"db"}, Name: name}
		st.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: id, Location: "s3://b/" + name, MetadataLocation: "m", UUID: name}}})
		st.must(t, fsm.DropTable{Ident: id, Purge: true, Job: &fsm.PurgeJobSpec{ID: "job-" + name, FileIO: map[string]string{"job": name}, LeaseNode: "n1"}})
	}
	token := st.lease(t, "job-ended").Token
	s.noteEnded("job-ended", token)
	s.poll(false)
	// job-live starts, finds no storage and fails; by then job-ended's
	// run, had it been started, would have asked for its storage too.
	require.Eventually(t, func() bool {
		var j fsm.PurgeJob
		require.NoError(t, st.F.View(func(r *fsm.Reader) error { j, _ = r.PurgeJob("job-live"); return nil }))
		return j.State == fsm.JobFailed
	}, 10*time.Second, 5*time.Millisecond)
	mu.Lock()
	assert.Equal(t, map[string]int{"live": 1}, opened, "the ended run is not started again")
	mu.Unlock()

	// Once the replica shows the outcome, the note is dropped.
	st.must(t, fsm.FinishPurgeJob{JobID: "job-ended", Token: token, Outcome: fsm.OutcomeSucceeded})
	s.poll(false)
	s.mu.Lock()
	assert.Empty(t, s.ended, "job-live's FAILED outcome and job-ended's are both applied")
	s.mu.Unlock()
}

// leaseFault answers every lease proposal with a refusal as stale (stale)
// or an error, without applying it; other commands pass through.
type leaseFault struct {
	*fsmStore
	mu     sync.Mutex
	stale  bool
	leases int
}

func (s *leaseFault) Propose(ctx context.Context, c fsm.Command) (fsm.Result, error) {
	if _, ok := c.(fsm.AssignPurgeLease); ok {
		s.mu.Lock()
		s.leases++
		s.mu.Unlock()
		if s.stale {
			return fsm.Result{Status: fsm.StatusStaleLease, Message: "stale"}, nil
		}
		return fsm.Result{}, fmt.Errorf("no leader")
	}
	return s.fsmStore.Propose(ctx, c)
}

// A tick proposes all its leases; when one is refused as stale and claims
// remain, the scheduler looks again at once, but a proposal that failed
// (no leader) waits for the next poll rather than spinning.
func TestSchedulerWakesAgainOnlyAfterAStaleRefusal(t *testing.T) {
	for _, stale := range []bool{true, false} {
		t.Run(fmt.Sprintf("stale=%v", stale), func(t *testing.T) {
			st := &leaseFault{fsmStore: newFSMStore(t), stale: stale}
			clock := time.Unix(1000, 0)
			s := idleService(t, st, func() time.Time { return clock })
			st.must(t, fsm.CreateNamespace{Namespace: []string{"db"}})
			for i := range 6 {
				ident := fsm.Ident{Namespace: []string{"db"}, Name: fmt.Sprintf("t%d", i)}
				st.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: ident, Location: "s3://b/" + ident.Name, MetadataLocation: "m", UUID: ident.Name}}})
				st.must(t, fsm.DropTable{Ident: ident, Purge: true, Job: &fsm.PurgeJobSpec{ID: fmt.Sprintf("job-%d", i)}})
			}
			sc := &scheduler{s: s, start: clock, seen: map[string]observed{}, lastPrune: clock}
			st.must(t, fsm.PurgeHeartbeat{Node: "n2", Slots: 2, AtMs: clock.UnixMilli()})
			sc.tick(context.Background())
			clock = clock.Add(100 * time.Millisecond)
			st.must(t, fsm.PurgeHeartbeat{Node: "n2", Slots: 2, AtMs: clock.UnixMilli()})
			for len(s.wake) > 0 {
				<-s.wake // the first tick's
			}
			st.leases = 0
			sc.tick(context.Background())
			assert.Equal(t, 2, st.leases, "both free slots proposed in one tick")
			assert.Equal(t, stale, len(s.wake) == 1, "a wake pending after the tick")
		})
	}
}

// assignHook runs before each AssignPurgeLease reaches the state machine.
type assignHook struct {
	*fsmStore
	before func()
}

func (h *assignHook) Propose(ctx context.Context, c fsm.Command) (fsm.Result, error) {
	if _, ok := c.(fsm.AssignPurgeLease); ok && h.before != nil {
		h.before()
	}
	return h.fsmStore.Propose(ctx, c)
}

var reassignTable = fsm.Ident{Namespace: []string{"db"}, Name: "t"}

// newReassignFixture is a service on n1 over a state machine holding the
// table db.t, with a hook before each lease assignment, a clock the test
// moves (clock points at it) and beat, which applies heartbeats of nodes
// that announce every feature.
func newReassignFixture(t *testing.T) (*fsmStore, *assignHook, *Service, *time.Time, func(nodes ...string)) {
	base := newFSMStore(t)
	st := &assignHook{fsmStore: base}
	clock := new(time.Time)
	*clock = time.Unix(1000, 0)
	s, err := New(Config{NodeID: "n1", Store: st, HeartbeatTimeout: time.Second, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler),
		Storage: func(string, map[string]string) (Objects, error) { return nil, nil }, Now: func() time.Time { return *clock }})
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	base.must(t, fsm.CreateNamespace{Namespace: reassignTable.Namespace})
	base.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: reassignTable, Location: "s3://b/t", MetadataLocation: "m", UUID: "u"}}})
	beat := func(nodes ...string) {
		for _, n := range nodes {
			base.must(t, fsm.PurgeHeartbeat{Node: n, Slots: 1, AtMs: clock.UnixMilli(), Features: fsm.PurgeFeaturesOfThisBinary})
		}
	}
	return base, st, s, clock, beat
}

// TestReassignmentLosesToAHeartbeat: once every node announces the check,
// a reassignment carries the silent node's heartbeat row as the scheduler
// saw it, and a heartbeat applied in between (the node woke up) keeps the
// lease with the node, whose workers take that heartbeat as leave to
// delete. Silent still at the next look, it is reassigned.
func TestReassignmentLosesToAHeartbeat(t *testing.T) {
	base, st, s, clock, beat := newReassignFixture(t)
	base.must(t, fsm.DropTable{Ident: reassignTable, Purge: true, Job: &fsm.PurgeJobSpec{ID: "j"}})
	ctx := context.Background()
	sc := s.newScheduler()
	beat("n1", "n2")
	sc.tick(ctx)
	*clock = clock.Add(100 * time.Millisecond)
	beat("n1", "n2")
	sc.tick(ctx)
	require.Equal(t, "n2", base.lease(t, "j").Node)
	token := base.lease(t, "j").Token

	*clock = clock.Add(1500 * time.Millisecond)
	beat("n1")
	st.before = func() { beat("n2") } // n2 wakes between the look and the proposal
	sc.tick(ctx)
	assert.Equal(t, token, base.lease(t, "j").Token, "the lease stays with the node that heartbeat")

	st.before = nil
	*clock = clock.Add(100 * time.Millisecond)
	sc.tick(ctx) // sees the heartbeat move: live again, for a timeout
	assert.Equal(t, token, base.lease(t, "j").Token)
	*clock = clock.Add(1500 * time.Millisecond)
	beat("n1")
	sc.tick(ctx)
	l := base.lease(t, "j")
	assert.Equal(t, "n1", l.Node, "silent at the next look: reassigned")
	assert.Greater(t, l.Token, token)
}

// A lease held by a node with no heartbeat row yet (a sync drop on a node
// whose first heartbeat has not applied) is not taken from it by a
// reassignment decided before that first heartbeat applied.
func TestReassignmentLosesToAFirstHeartbeat(t *testing.T) {
	base, st, s, clock, beat := newReassignFixture(t)
	ctx := context.Background()
	beat("n1")
	sc := s.newScheduler()
	sc.tick(ctx)
	*clock = clock.Add(1500 * time.Millisecond)
	base.must(t, fsm.DropTable{Ident: reassignTable, Purge: true, Job: &fsm.PurgeJobSpec{ID: "j", LeaseNode: "n2", LeaseExpiresMs: clock.Add(time.Second).UnixMilli()}})
	token := base.lease(t, "j").Token
	beat("n1")
	st.before = func() { beat("n2") } // n2's first heartbeat lands between the look and the proposal
	sc.tick(ctx)
	assert.Equal(t, token, base.lease(t, "j").Token, "the lease stays with the node that heartbeat")
}

// Wake wakes each part of the service for its own work only: a drop (a
// claimable job) or a run ending the scheduler, a lease the workers' poll.
func TestWakeWakesEachPartForItsOwnWork(t *testing.T) {
	s, err := New(Config{NodeID: "n1", Store: newFSMStore(t), HeartbeatTimeout: time.Hour, PollInterval: time.Hour,
		Logger: slog.New(slog.DiscardHandler), Storage: func(string, map[string]string) (Objects, error) { return nil, nil }})
	require.NoError(t, err)
	drain := func() (scheduler, poll bool) {
		select {
		case <-s.wake:
			scheduler = true
		default:
		}
		select {
		case <-s.pollWake:
			poll = true
		default:
		}
		return scheduler, poll
	}
	for _, c := range []struct {
		w               fsm.PurgeWork
		scheduler, poll bool
	}{
		{fsm.PurgeClaimable, true, false},
		{fsm.PurgeRunEnded, true, false},
		{fsm.PurgeLeased, false, true},
		{fsm.PurgeClaimable | fsm.PurgeLeased, true, true},
	} {
		s.Wake(c.w)
		scheduler, poll := drain()
		assert.Equal(t, c.scheduler, scheduler, "scheduler woken by %b", c.w)
		assert.Equal(t, c.poll, poll, "poll woken by %b", c.w)
	}
}

// A job's storage is its table's warehouse's: the worker names the
// warehouse the job's table was in.
func TestJobStorageIsItsWarehouses(t *testing.T) {
	var asked []string
	s, err := New(Config{NodeID: "n1", Store: newFSMStore(t), HeartbeatTimeout: time.Hour, PollInterval: time.Hour,
		Logger: slog.New(slog.DiscardHandler), Storage: func(wh string, _ map[string]string) (Objects, error) {
			asked = append(asked, wh)
			return nil, errors.New("no storage here")
		}})
	require.NoError(t, err)
	for _, levels := range [][]string{fsm.InWarehouse("sales", []string{"db"}), {"db"}} {
		s.openJob(context.Background(), fsm.PurgeJob{ID: "j", Ident: fsm.Ident{Namespace: levels, Name: "t"}})
	}
	assert.Equal(t, []string{"sales", ""}, asked)
}
