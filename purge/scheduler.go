package purge

import (
	"context"
	"errors"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/floe-catalog/floe/fsm"
)

// Lead runs the scheduler until ctx ends. Register it with
// raftnode.Node.OnLeadership: it runs only while this node leads.
//
// Every poll interval it reads the local replica (the leader's is the most
// recent there is; a decision made on a slightly old view is caught by the
// compare-and-set in AssignPurgeLease) and:
//
//   - notes which nodes' heartbeats moved since the last look: a node is
//     live when its heartbeat's log index moved within the heartbeat
//     timeout, by this leader's own clock (no clocks are compared). Only
//     a heartbeat proposed during this leadership (above the log's last
//     index when it began) counts as a move, and then even one seen for
//     the first time. Nodes heartbeat at once when they learn of a new
//     leader (Service.NewLeader), so a new leader knows who is live
//     within moments;
//   - leases PENDING jobs whose backoff is over, and re-leases RUNNING
//     jobs whose node is silent, oldest job first, to live nodes with a
//     free worker slot: followers before the leader, then the least
//     loaded, then by node id. The token is the assigning entry's index.
//     A new leader reassigns nothing during its first heartbeat timeout:
//     it has not yet seen anyone's heartbeat move;
//   - every PruneInterval, proposes the pruning of SUCCEEDED and released
//     FAILED jobs older than Retention (by this leader's clock).
func (s *Service) Lead(ctx context.Context) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	// Stop ends the scheduler too, and waits for it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	log := s.log.With("role", "purge-scheduler")
	log.Info("purge scheduler started")
	sc := s.newScheduler()
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		sc.tick(ctx)
		select {
		case <-ctx.Done():
			log.Info("purge scheduler stopped")
			return
		case <-t.C:
		case <-s.wake:
			s.m.wakes.Inc()
		}
	}
}

type observed struct {
	index uint64
	at    time.Time // when this leader saw index move; zero: not yet
}

type scheduler struct {
	s     *Service
	start time.Time
	// startIndex: a heartbeat at a higher index was proposed during this
	// leadership (see newScheduler).
	startIndex uint64
	seen       map[string]observed
	lastPrune  time.Time
	// backoff holds the PENDING jobs in backoff by their NotBeforeMs, which
	// is on the clock of the node whose run failed (see dueInBackoff).
	backoff map[string]backoffSeen
}

// backoffSeen is a job in backoff as this scheduler first saw it: its
// NotBeforeMs then, and when it is due on this node's monotonic clock.
type backoffSeen struct {
	notBeforeMs int64
	due         time.Time
}

// leadershipStart is implemented by a Store that knows its log's last
// index when this node's leadership began (raftnode.Node): every entry
// above it was proposed after the election.
type leadershipStart interface {
	LeadershipStartIndex() uint64
}

// newScheduler starts a scheduler's state: now, and the index above which
// a heartbeat is fresh. That is the log's last index when the leadership
// began, when the Store knows it, so that a heartbeat an earlier leader
// left (its own last one, say) is not taken for a sign of life; else the
// index applied so far. (If even that cannot be read it is 0: then every
// heartbeat first seen counts as a move, which at worst leases a job to a
// node that is gone, and its lease is reassigned after the heartbeat
// timeout.)
func (s *Service) newScheduler() *scheduler {
	now := s.cfg.Now()
	sc := &scheduler{s: s, start: now, seen: map[string]observed{}, lastPrune: now, backoff: map[string]backoffSeen{}}
	if ls, ok := s.cfg.Store.(leadershipStart); ok {
		sc.startIndex = ls.LeadershipStartIndex()
		return sc
	}
	_ = s.cfg.Store.StaleRead(func(r *fsm.Reader) error {
		sc.startIndex = r.AppliedIndex()
		return nil
	})
	return sc
}

type claim struct {
	job      fsm.PurgeJob
	expected uint64 // the silent node's token; 0 for a PENDING job
	// silentIndex is the silent node's heartbeat row index this tick saw
	// (fsm.AssignPurgeLease.SilentIndex); 0: not checked.
	silentIndex uint64
}

// dueInBackoff returns up to limit PENDING jobs waiting out a backoff whose
// backoff has passed since this scheduler first saw them. A job's
// NotBeforeMs is set by the node whose run failed, on that node's clock,
// which may be hours from this one's: a clock ahead would keep the job
// waiting as long, one behind would skip every backoff (a transient
// failure FAILED within a second). The backoff the worker meant is
// NotBeforeMs less the time it recorded the failure at (UpdatedMs), both on
// its clock; it is counted here on this node's monotonic clock from when
// the scheduler first saw the job in backoff, and never longer than
// MaxRetryBackoff. A new leader counts it afresh. Jobs are watched at every
// tick, with or without free slots, so that their backoff starts when they
// enter it.
func (sc *scheduler) dueInBackoff(r *fsm.Reader, now time.Time, limit int) []fsm.PurgeJob {
	var due []fsm.PurgeJob
	seen := make(map[string]backoffSeen, len(sc.backoff))
	r.PurgeJobsInBackoff(func(id string, notBeforeMs int64) bool {
		b, ok := sc.backoff[id]
		if !ok || b.notBeforeMs != notBeforeMs {
			j, found := r.PurgeJob(id)
			if !found {
				return true
			}
			wait := time.Duration(j.NotBeforeMs-j.UpdatedMs) * time.Millisecond
			b = backoffSeen{notBeforeMs: notBeforeMs, due: now.Add(min(max(wait, 0), sc.s.cfg.MaxRetryBackoff))}
		}
		seen[id] = b
		if len(due) < limit && !now.Before(b.due) {
			if j, found := r.PurgeJob(id); found && j.State == fsm.JobPending {
				due = append(due, j)
			}
		}
		return true
	})
	sc.backoff = seen
	return due
}

func (sc *scheduler) tick(ctx context.Context) {
	s := sc.s
	now := s.cfg.Now() // time.Now by default: monotonic, so clock steps do not matter
	nowMs := now.UnixMilli()
	var (
		slots   = map[string]int{}
		load    = map[string]int{}
		claims  []claim
		targets []string
	)
	timeout := s.cfg.HeartbeatTimeout
	live := func(node string) bool {
		o := sc.seen[node]
		return !o.at.IsZero() && now.Sub(o.at) < timeout
	}
	silent := func(node string) bool {
		last := sc.start
		if o := sc.seen[node]; o.at.After(last) {
			last = o.at
		}
		return now.Sub(last) >= timeout
	}
	if err := s.cfg.Store.StaleRead(func(r *fsm.Reader) error {
		nodes := r.PurgeNodes()
		// A reassignment is checked against the node's heartbeat row once
		// every node applies the check alike.
		checkSilence := fsm.PurgeFeaturesEverywhere(nodes, fsm.PurgeFeatureSilentCheck)
		index := map[string]uint64{}
		for _, n := range nodes {
			index[n.Node] = n.Index
			o, ok := sc.seen[n.Node]
			switch {
			case !ok && n.Index > sc.startIndex:
				// Proposed during this leadership.
				sc.seen[n.Node] = observed{index: n.Index, at: now}
			case !ok:
				sc.seen[n.Node] = observed{index: n.Index}
			case o.index != n.Index && n.Index > sc.startIndex:
				sc.seen[n.Node] = observed{index: n.Index, at: now}
			case o.index != n.Index:
				// An earlier leader's entry, applied late: the node was
				// alive then, which says nothing about now.
				sc.seen[n.Node] = observed{index: n.Index, at: o.at}
			}
			slots[n.Node] = n.Slots
		}
		running, _ := r.PurgeJobs(fsm.PurgeJobFilter{State: fsm.JobRunning}, 0)
		for _, j := range running {
			if j.Lease == nil {
				continue
			}
			load[j.Lease.Node]++
			if silent(j.Lease.Node) {
				c := claim{job: j, expected: j.Lease.Token}
				if checkSilence {
					// A node without a row yet (a sync drop on a node
					// whose first heartbeat has not applied): no index can
					// match, so any row that appears refuses it.
					idx, ok := index[j.Lease.Node]
					if !ok {
						idx = math.MaxUint64
					}
					c.silentIndex = idx
				}
				claims = append(claims, c)
			}
		}
		free := 0
		for node := range slots {
			if live(node) && slots[node] > 0 {
				targets = append(targets, node)
				free += max(0, slots[node]-load[node])
			}
		}
		// At most free claims can be leased this tick, taken in id order:
		// of the PENDING jobs, only the first free due ones can be among
		// them. Reading those (and as many again, for leases refused as
		// stale) rather than the whole queue keeps a tick's cost
		// independent of the queue's length, thousands of jobs after a
		// burst of drops.
		if free > 0 {
			pending, _ := r.PurgeJobs(fsm.PurgeJobFilter{State: fsm.JobPending, NoBackoff: true}, 2*free)
			for _, j := range pending {
				claims = append(claims, claim{job: j})
			}
		}
		for _, j := range sc.dueInBackoff(r, now, 2*free) {
			claims = append(claims, claim{job: j})
		}
		return nil
	}); err != nil {
		return
	}
	sort.Slice(claims, func(a, b int) bool { return claims[a].job.ID < claims[b].job.ID })

	self := s.cfg.NodeID
	pick := func() string {
		best := ""
		for _, n := range targets {
			if load[n] >= slots[n] {
				continue
			}
			if best == "" || less(n, best, self, load) {
				best = n
			}
		}
		return best
	}
	// Plan every lease first, then propose them together: Raft carries
	// proposals made at once in one batch (one log write and one bbolt
	// transaction on every replica), where one after another each paid a
	// round of its own.
	type lease struct {
		claim
		node string
	}
	var plan []lease
	for _, c := range claims {
		node := pick()
		if node == "" {
			break
		}
		load[node]++
		if c.expected != 0 {
			load[c.job.Lease.Node]--
		}
		plan = append(plan, lease{claim: c, node: node})
	}
	outcomes := make([]leaseOutcome, len(plan))
	var wg sync.WaitGroup
	for i, l := range plan {
		wg.Go(func() {
			outcomes[i] = sc.assign(ctx, l.claim, l.node, nowMs)
		})
	}
	wg.Wait()
	if slices.Contains(outcomes, leaseRefused) && len(plan) < len(claims) {
		// A lease refused as stale left its slot free while claims
		// remain: look again at once (this replica has applied the
		// refusal, so the next read is fresh). A proposal that failed
		// (no leader, shutting down) waits for the next poll instead.
		s.wakeScheduler()
	}

	if now.Sub(sc.lastPrune) >= s.cfg.PruneInterval {
		sc.lastPrune = now
		res, err := s.cfg.Store.Propose(ctx, fsm.PrunePurgeJobs{BeforeMs: nowMs - s.cfg.Retention.Milliseconds(), AtMs: nowMs})
		if err == nil && res.Count > 0 {
			s.log.Info("pruned finished purge jobs", "jobs", res.Count, "retention", s.cfg.Retention)
		}
	}
}

// leaseOutcome is what became of one proposed lease.
type leaseOutcome int

const (
	leaseGranted leaseOutcome = iota
	leaseRefused              // the job moved on since the read (stale)
	leaseFailed               // no answer, or refused for another reason
)

// assign proposes one lease. A refused or failed proposal is logged; the
// job keeps its state.
func (sc *scheduler) assign(ctx context.Context, c claim, node string, nowMs int64) leaseOutcome {
	s := sc.s
	res, err := s.cfg.Store.Propose(ctx, fsm.AssignPurgeLease{
		JobID: c.job.ID, Node: node, ExpectedToken: c.expected, SilentIndex: c.silentIndex,
		AtMs: nowMs, ExpiresMs: nowMs + s.cfg.HeartbeatTimeout.Milliseconds(),
	})
	if err != nil {
		s.log.Debug("purge lease not assigned", "job_id", c.job.ID, "node", node, "error", err)
		return leaseFailed
	}
	if rerr := res.Err(); rerr != nil {
		if errors.Is(rerr, fsm.ErrStaleLease) || errors.Is(rerr, fsm.ErrNoSuchJob) {
			return leaseRefused
		}
		s.log.Warn("purge lease refused", "job_id", c.job.ID, "node", node, "error", rerr)
		return leaseFailed
	}
	if c.expected != 0 {
		s.m.leases.WithLabelValues("reassigned").Inc()
		s.log.Warn("purge lease reassigned from a silent node", "job_id", c.job.ID, "table", c.job.Ident.String(),
			"from", c.job.Lease.Node, "old_token", c.expected, "to", node)
	} else {
		s.m.leases.WithLabelValues("new").Inc()
		s.log.Info("purge lease assigned", "job_id", c.job.ID, "table", c.job.Ident.String(), "node", node, "attempts", c.job.Attempts)
	}
	return leaseGranted
}

// less orders assignment targets: followers before the leader (self), then
// the least loaded, then by id, so that the choice is deterministic.
func less(a, b, self string, load map[string]int) bool {
	if (a == self) != (b == self) {
		return b == self
	}
	if load[a] != load[b] {
		return load[a] < load[b]
	}
	return a < b
}
