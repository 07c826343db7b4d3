package purge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floe-catalog/floe/fsm"
)

// Store is the replicated state the service reads and changes: a
// raftnode.Node. Propose forwards to the leader from any node.
type Store interface {
	Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
	Read(ctx context.Context, fn func(*fsm.Reader) error) error
	StaleRead(fn func(*fsm.Reader) error) error
}

// Objects reads and deletes table files. Delete is a bulk delete: a
// missing object counts as deleted (storage.Mux).
type Objects interface {
	Read(ctx context.Context, uri string) ([]byte, error)
	Delete(ctx context.Context, uris []string) (int, error)
}

// Defaults for the Config knobs left zero.
const (
	DefaultWorkerThreads = 2
	DefaultDeleteThreads = 4
	// MaxWorkerThreads and MaxDeleteThreads bound the pools: the delete
	// pool's threads all start with the service, so a mistyped count
	// would take the host's memory before the first purge.
	MaxWorkerThreads        = 256
	MaxDeleteThreads        = 1024
	DefaultDeleteBatchSize  = 1000
	DefaultHeartbeatTimeout = 10 * time.Second
	DefaultMaxAttempts      = 5
	DefaultRetention        = 720 * time.Hour
	DefaultRetryBackoff     = 5 * time.Second
	DefaultMaxRetryBackoff  = 5 * time.Minute
	DefaultPruneInterval    = time.Minute
)

// Config configures a Service.
type Config struct {
	// NodeID names this node in leases and heartbeats: the Raft server ID.
	NodeID string
	Store  Store
	// Settings is an opaque fingerprint of this node's storage settings,
	// carried by its heartbeats (fsm.PurgeHeartbeat) for the nodes to
	// compare. Empty: none sent.
	Settings string
	// Storage returns the Objects to use for a job, given its table's
	// warehouse ("" for the default one) and the FileIO properties
	// captured when the table was dropped.
	Storage func(warehouse string, fileIO map[string]string) (Objects, error)

	// WorkerThreads bounds the jobs this node runs at once (those the
	// scheduler leased to it; a synchronous drop's job runs on top).
	WorkerThreads int
	// DeleteThreads is the size of the node's one delete pool, shared by
	// every job; its queue holds as many batches.
	DeleteThreads int
	// DeleteBatchSize is the number of files per bulk delete (one S3
	// DeleteObjects request), 1 to 1000.
	DeleteBatchSize int
	// HeartbeatTimeout is how long a node may stay silent before the
	// leader reassigns its leases. Nodes heartbeat every third of it; a new
	// leader waits one timeout before reassigning anything.
	HeartbeatTimeout time.Duration
	// MaxAttempts is how many failed runs send a job to FAILED.
	MaxAttempts int
	// Retention is how long SUCCEEDED and released FAILED jobs are kept.
	Retention time.Duration
	// RetryBackoff is the delay before a failed job may run again, doubled
	// per attempt up to MaxRetryBackoff.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// CheckpointInterval is the least time between two progress reports
	// of one job. Default: a third of HeartbeatTimeout, at most 2s.
	CheckpointInterval time.Duration
	// PruneInterval is how often the scheduler prunes old jobs.
	PruneInterval time.Duration
	// AllowedLocations, when set, bounds every delete: a file outside all
	// of these prefixes is never deleted (checked before each batch, with
	// the other live tables' locations). Empty: only the job's own
	// location bounds it.
	AllowedLocations []string

	// StopTimeout bounds how long Stop waits for the workers and delete
	// threads to return once canceled. A storage call that ignores its
	// context (a hung mount behind a file:// warehouse) would otherwise
	// keep the node from shutting down. Default 10s.
	StopTimeout time.Duration
	// PollInterval is how often workers look for jobs leased to this
	// node and the scheduler looks for work. Default: a quarter of
	// HeartbeatTimeout, between 20ms and 1s.
	PollInterval time.Duration

	// RunMarkDir, when set, is a directory of this node's where each run
	// in flight is marked, so that a run the process ended during (a
	// crash, an OOM kill) counts as a failed attempt when the node gets
	// its lease back (runMarks). Empty: no marks; such a run is resumed
	// under the same attempt.
	RunMarkDir string

	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Now stamps commands. Default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() error {
	if c.NodeID == "" {
		return errors.New("purge: NodeID is required")
	}
	if c.Store == nil || c.Storage == nil {
		return errors.New("purge: Store and Storage are required")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.WorkerThreads, DefaultWorkerThreads)
	def(&c.DeleteThreads, DefaultDeleteThreads)
	def(&c.DeleteBatchSize, DefaultDeleteBatchSize)
	def(&c.MaxAttempts, DefaultMaxAttempts)
	defd(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	defd(&c.Retention, DefaultRetention)
	defd(&c.RetryBackoff, DefaultRetryBackoff)
	defd(&c.MaxRetryBackoff, DefaultMaxRetryBackoff)
	defd(&c.PruneInterval, DefaultPruneInterval)
	defd(&c.StopTimeout, 10*time.Second)
	defd(&c.CheckpointInterval, min(c.HeartbeatTimeout/3, 2*time.Second))
	defd(&c.PollInterval, min(max(c.HeartbeatTimeout/4, 20*time.Millisecond), time.Second))
	if c.WorkerThreads < 1 || c.DeleteThreads < 1 || c.MaxAttempts < 1 {
		return errors.New("purge: WorkerThreads, DeleteThreads and MaxAttempts must be positive")
	}
	if c.WorkerThreads > MaxWorkerThreads || c.DeleteThreads > MaxDeleteThreads {
		return fmt.Errorf("purge: WorkerThreads %d, DeleteThreads %d: at most %d and %d", c.WorkerThreads, c.DeleteThreads, MaxWorkerThreads, MaxDeleteThreads)
	}
	if c.DeleteBatchSize < 1 || c.DeleteBatchSize > 1000 {
		return fmt.Errorf("purge: DeleteBatchSize %d out of range 1..1000", c.DeleteBatchSize)
	}
	if c.HeartbeatTimeout <= 0 || c.Retention <= 0 {
		return errors.New("purge: HeartbeatTimeout and Retention must be positive")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// Service runs purge jobs on one node: workers that run the jobs leased to
// this node, a heartbeat that keeps those leases alive, and (through Lead,
// while this node leads) the scheduler that hands out leases.
//
// Every background loop stops when Stop is called, and Stop waits for them.
type Service struct {
	cfg   Config
	log   *slog.Logger
	m     *metrics
	pool  *deletePool
	marks *runMarks // nil without Config.RunMarkDir

	// ctx is canceled by Stop; runs and loops derive from it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// wake tells a running scheduler (Lead) to look for work now.
	wake chan struct{}
	// pollWake starts a poll of the jobs leased here now (Wake).
	pollWake chan struct{}
	// beat sends a heartbeat now (NewLeader).
	beat chan struct{}
	// renew sends a heartbeat now for a delete batch waiting on its fence.
	renew    chan struct{}
	renewals *renewals

	mu   sync.Mutex
	runs map[string]*run // by job id
	// ended holds the jobs whose outcome a run here recorded, by id: its
	// token. Until the local replica applies that outcome it still shows
	// the job RUNNING under the token, and a poll must not start it again.
	ended   map[string]uint64
	busy    int // scheduler-leased runs (bounded by WorkerThreads)
	started bool
	stopped bool
}

// run is one job running on this node under one lease token.
type run struct {
	token  uint64
	sync   bool
	cancel context.CancelFunc
	done   chan struct{}
	// finishing is set before the run proposes its outcome: a poll that
	// then sees the job finished must not take it for a lost lease.
	finishing atomic.Bool
	// started is set once the run has read its job as committed under its
	// token: before that, a lease the local replica has passed (a node
	// replaying its log after a restart) was never this run's to lose.
	started atomic.Bool
}

// New validates cfg and returns a service. It does nothing in the
// background until Start; Run works without Start (a catalog without a
// node-wide service runs synchronous purges that way).
func New(cfg Config) (*Service, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "purge", "node_id", cfg.NodeID)
	marks, err := openRunMarks(cfg.RunMarkDir, log)
	if err != nil {
		return nil, err
	}
	m := newMetrics()
	if err := m.register(cfg.Registerer); err != nil {
		return nil, err
	}
	s := &Service{
		cfg:      cfg,
		log:      log,
		m:        m,
		marks:    marks,
		pool:     newDeletePool(cfg.DeleteThreads),
		runs:     map[string]*run{},
		ended:    map[string]uint64{},
		wake:     make(chan struct{}, 1),
		pollWake: make(chan struct{}, 1),
		beat:     make(chan struct{}, 1),
		renew:    make(chan struct{}, 1),
		renewals: newRenewals(),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Wake is told what a batch of applied entries changed for purges: a node
// wires it to the state machine's OnPurgeWork, so an asynchronous purge is
// leased as soon as its drop is applied and started as soon as its lease
// is. A claimable job or a free worker slot wakes the scheduler, if it runs
// here (this node leads), to assign jobs now instead of at its next poll; a
// lease wakes this node's workers to look for jobs leased to it now. Drops
// alone never wake the workers: during a burst of asynchronous drops every
// batch adds jobs, and none of them is leased yet. It never blocks; wakes
// that arrive while one is pending merge into it.
func (s *Service) Wake(w fsm.PurgeWork) {
	if w&(fsm.PurgeClaimable|fsm.PurgeRunEnded) != 0 {
		s.wakeScheduler()
	}
	if w&fsm.PurgeLeased != 0 {
		s.wakePoll()
	}
}

// wakeScheduler asks the scheduler, if it runs here, to look at once.
func (s *Service) wakeScheduler() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// wakePoll asks this node's workers to look for jobs leased here at once.
func (s *Service) wakePoll() {
	select {
	case s.pollWake <- struct{}{}:
	default:
	}
}

// NewLeader tells the service that a new leader is known: it heartbeats
// now rather than at its next interval, so that the new leader's scheduler
// counts this node live within moments of the election instead of a third
// of the heartbeat timeout later (a node wires it to the Raft node's
// OnNewLeader). It never blocks.
func (s *Service) NewLeader() {
	select {
	case s.beat <- struct{}{}:
	default:
	}
}

// NodeID is the node this service runs jobs for.
func (s *Service) NodeID() string { return s.cfg.NodeID }

// LeaseTimeout is the heartbeat timeout: how long a lease outlives a
// silent node.
func (s *Service) LeaseTimeout() time.Duration { return s.cfg.HeartbeatTimeout }

// Start starts the heartbeat and the worker loop.
func (s *Service) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return
	}
	s.started = true
	s.wg.Add(2)
	go s.heartbeatLoop()
	go s.pollLoop()
	s.log.Info("purge workers started", "worker_threads", s.cfg.WorkerThreads, "delete_threads", s.cfg.DeleteThreads,
		"delete_batch_size", s.cfg.DeleteBatchSize, "heartbeat_timeout", s.cfg.HeartbeatTimeout, "max_attempts", s.cfg.MaxAttempts)
}

// Stop stops every loop and run and waits for them, at most StopTimeout:
// one stuck in a storage call that ignores cancellation is left behind.
// Jobs running here stay leased to this node until the leader sees it
// silent and reassigns them. Stop is idempotent.
func (s *Service) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.mu.Unlock()
	s.cancel()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		s.pool.close()
		close(done)
	}()
	select {
	case <-done:
		s.log.Info("purge workers stopped")
	case <-time.After(s.cfg.StopTimeout):
		// Their leases expire and another node resumes their jobs, as
		// after a crash; the process exiting ends them.
		s.log.Warn("purge workers still running at the stop timeout, left behind: a storage call has not returned",
			"timeout", s.cfg.StopTimeout)
	}
	s.m.unregister(s.cfg.Registerer)
}

// Run starts running the job if it is leased to this node (a synchronous
// drop leases its job to the node that took the request) and returns a
// channel closed when the local run ends, or at once when there is nothing
// to run here. The run is not bound to the caller: it goes on if the
// client goes away.
func (s *Service) Run(jobID string) <-chan struct{} {
	out := make(chan struct{})
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		close(out)
		return out
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer close(out)
		var (
			job   fsm.PurgeJob
			found bool
		)
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.HeartbeatTimeout)
		err := s.cfg.Store.Read(ctx, func(r *fsm.Reader) error {
			job, found = r.PurgeJob(jobID)
			return nil
		})
		cancel()
		if err != nil || !found || job.State != fsm.JobRunning || job.Lease == nil || job.Lease.Node != s.cfg.NodeID {
			return
		}
		if rn := s.startRun(job, true); rn != nil {
			select {
			case <-rn.done:
			case <-s.ctx.Done():
			}
		}
	}()
	return out
}

// startRun starts job under its lease token unless it already runs here.
// A scheduler-leased run needs a free worker slot; without one it returns
// nil and the poll loop tries again.
func (s *Service) startRun(job fsm.PurgeJob, sync bool) *run {
	token := job.Lease.Token
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	if s.ended[job.ID] == token {
		return nil // its outcome is recorded; the replica lags
	}
	if cur, ok := s.runs[job.ID]; ok {
		if cur.token == token {
			return cur
		}
		// An older lease of ours: fenced off already; make way.
		cur.cancel()
		return nil
	}
	if !sync {
		if s.busy >= s.cfg.WorkerThreads {
			return nil
		}
		s.busy++
	}
	ctx, cancel := context.WithCancel(s.ctx)
	rn := &run{token: token, sync: sync, cancel: cancel, done: make(chan struct{})}
	s.runs[job.ID] = rn
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(rn.done)
		defer cancel()
		s.execute(ctx, job, rn)
		s.mu.Lock()
		if s.runs[job.ID] == rn {
			delete(s.runs, job.ID)
		}
		if !sync {
			s.busy--
		}
		s.mu.Unlock()
		// A lease that arrived while every slot was busy waits for this
		// one: look again now rather than at the next tick.
		s.wakePoll()
	}()
	return rn
}

// leases lists the leases this node is running.
func (s *Service) leases() []fsm.LeaseRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]fsm.LeaseRef, 0, len(s.runs))
	for id, rn := range s.runs {
		out = append(out, fsm.LeaseRef{JobID: id, Token: rn.token})
	}
	return out
}

// heartbeatLoop proposes a heartbeat every third of the timeout, and at
// once when a new leader is known (NewLeader). It runs on its own
// goroutine and never waits for a delete: a worker stuck in a slow batch
// keeps its leases.
func (s *Service) heartbeatLoop() {
	defer s.wg.Done()
	interval := s.cfg.HeartbeatTimeout / 3
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		now := s.cfg.Now()
		// The fence (fence.go) counts from the sending, by this
		// process's monotonic clock, whatever cfg.Now says.
		sent := time.Now()
		ctx, cancel := context.WithTimeout(s.ctx, interval)
		leases := s.leases()
		_, err := s.cfg.Store.Propose(ctx, fsm.PurgeHeartbeat{
			Node: s.cfg.NodeID, Slots: s.cfg.WorkerThreads, Leases: leases, Features: fsm.PurgeFeaturesOfThisBinary, Settings: s.cfg.Settings,
			AtMs: now.UnixMilli(), ExpiresMs: now.Add(s.cfg.HeartbeatTimeout).UnixMilli(),
		})
		cancel()
		switch {
		case err == nil:
			s.checkRenewals(sent, leases)
		case s.ctx.Err() == nil:
			s.log.Debug("purge heartbeat failed", "error", err)
		}
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.beat:
			s.m.leaderBeats.Inc()
		case <-s.renew:
		}
	}
}

// checkRenewals reads, linearizably after a heartbeat sent at sent was
// accepted, which of the leases it carried are still this node's, for the
// delete fence (fence.go). A read that fails records nothing: the fence
// waits for the next heartbeat.
func (s *Service) checkRenewals(sent time.Time, leases []fsm.LeaseRef) {
	var held, lost []uint64
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.HeartbeatTimeout/3)
	defer cancel()
	if err := s.cfg.Store.Read(ctx, func(rd *fsm.Reader) error {
		held, lost = heldLeases(rd, s.cfg.NodeID, leases)
		return nil
	}); err != nil {
		s.log.Debug("purge: leases not checked after a heartbeat", "error", err)
		return
	}
	s.renewals.checked(sent, held, lost)
}

// pollLoop starts the jobs leased to this node, stops runs whose lease is
// gone, and refreshes the job gauges, from the local replica. A wake (a
// lease applied here, or a run of this node ending) polls at once but
// leaves the gauges to the next tick: counting the jobs walks every job
// kept, and wakes come with every lease and every run ending here.
func (s *Service) pollLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	gauges := true
	for {
		s.poll(gauges)
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			gauges = true
		case <-s.pollWake:
			gauges = false
		}
	}
}

func (s *Service) poll(gauges bool) {
	var (
		applied  uint64
		mine     []fsm.PurgeJob
		current  = map[string]fsm.PurgeJob{}
		counts   map[fsm.JobState]int
		released int
		oldest   int64
	)
	local := s.localRuns()
	left := s.marks.leftOver()
	err := s.cfg.Store.StaleRead(func(r *fsm.Reader) error {
		applied = r.AppliedIndex()
		for id := range left {
			if j, ok := r.PurgeJob(id); ok {
				current[id] = j
			}
		}
		running, _ := r.PurgeJobs(fsm.PurgeJobFilter{State: fsm.JobRunning}, 0)
		for _, j := range running {
			if j.Lease != nil && j.Lease.Node == s.cfg.NodeID {
				mine = append(mine, j)
			}
		}
		for id := range local {
			if j, ok := r.PurgeJob(id); ok {
				current[id] = j
			}
		}
		if !gauges {
			return nil
		}
		counts, released = r.PurgeJobCounts()
		if p, _ := r.PurgeJobs(fsm.PurgeJobFilter{State: fsm.JobPending}, 1); len(p) > 0 {
			oldest = p[0].CreatedMs
		}
		return nil
	})
	if err != nil {
		return
	}
	// A run whose token the local replica has passed, and which is not
	// RUNNING under that token any more, is fenced off: stop it. A replica
	// that has not yet applied the lease proves nothing.
	for id, token := range local {
		if applied < token {
			continue
		}
		j, ok := current[id]
		if !ok || j.State != fsm.JobRunning || j.Lease == nil || j.Lease.Token != token {
			s.stopStale(id, token, j)
		}
	}
	// A mark left by the previous process whose job this node no longer
	// holds under the mark's token (the lease moved on while the node was
	// down, or the job ended): nothing to count here.
	for id, token := range left {
		if applied < token {
			continue
		}
		j, ok := current[id]
		if !ok || j.State != fsm.JobRunning || j.Lease == nil || j.Lease.Node != s.cfg.NodeID || j.Lease.Token != token {
			s.marks.drop(id, token)
		}
	}
	s.forgetEnded(mine)
	for _, j := range mine {
		s.startRun(j, false)
	}
	if !gauges {
		return
	}
	for _, st := range []fsm.JobState{fsm.JobPending, fsm.JobRunning, fsm.JobSucceeded} {
		s.m.jobs.WithLabelValues(string(st)).Set(float64(counts[st]))
	}
	s.m.jobs.WithLabelValues(string(fsm.JobFailed)).Set(float64(counts[fsm.JobFailed] - released))
	s.m.jobs.WithLabelValues("RELEASED").Set(float64(released))
	if oldest > 0 {
		s.m.oldestPending.Set(max(0, float64(s.cfg.Now().UnixMilli()-oldest)/1000))
	} else {
		s.m.oldestPending.Set(0)
	}
}

// noteEnded records that the run of id under token recorded its outcome.
func (s *Service) noteEnded(id string, token uint64) {
	s.mu.Lock()
	s.ended[id] = token
	s.mu.Unlock()
}

// forgetEnded drops the ended runs whose job the local replica no longer
// shows RUNNING under their token (mine: every job it shows leased here).
func (s *Service) forgetEnded(mine []fsm.PurgeJob) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ended) == 0 {
		return
	}
	still := map[string]uint64{}
	for _, j := range mine {
		still[j.ID] = j.Lease.Token
	}
	for id, token := range s.ended {
		if still[id] != token {
			delete(s.ended, id)
		}
	}
}

func (s *Service) localRuns() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]uint64, len(s.runs))
	for id, rn := range s.runs {
		out[id] = rn.token
	}
	return out
}

func (s *Service) stopStale(id string, token uint64, now fsm.PurgeJob) {
	s.mu.Lock()
	rn, ok := s.runs[id]
	if !ok || rn.token != token || rn.finishing.Load() {
		s.mu.Unlock()
		return
	}
	rn.cancel()
	s.mu.Unlock()
	if !rn.started.Load() {
		// Found in a replica still catching up (a node replaying its
		// log), passed before the run read its job: nothing was lost.
		s.log.Debug("purge run not started: its lease has passed", "job_id", id, "token", token, "state", now.State)
		return
	}
	s.m.staleLeases.Inc()
	s.log.Warn("purge lease lost; stopping the run", "job_id", id, "token", token, "state", now.State, "lease", now.Lease)
}
