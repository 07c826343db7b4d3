package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/floe-catalog/floe/internal/harness"
	"github.com/floe-catalog/floe/internal/raftnode"
)

// Fixed settings of item 10.
const (
	stabilityCommitClients = 16              // committers, each to its own tables, through the leader
	stabilityReadClients   = 16              // linearizable loadTable, round-robin over the nodes
	stabilityTablesPer     = 4               // tables per committer
	stabilityPollEvery     = time.Second     // GET /management/v1/cluster on every node
	stabilityPollTimeout   = 2 * time.Second // one poll; a member that does not answer costs the node 500 ms
	stabilitySpellGap      = 2 * time.Second // failures further apart are in different spells
	stabilityWarmOps       = 2               // per client, before the clock starts (uncounted)
)

// Floe's Raft metrics item 10 reads from every node's /metrics.
const (
	metricLeaderChanges = "floe_raft_leader_changes_total"
	metricTerm          = "floe_raft_term"
)

// LeaderSample is one node's answer to GET /management/v1/cluster during
// item 10: who it names as leader and its term, or why it did not answer.
type LeaderSample struct {
	At     time.Duration // since the load started (negative: before it)
	Node   string
	Leader string // "" when the node knows no leader
	Term   uint64
	Err    string
}

// LeaderEvent is a change of the leader one node named between two of its
// samples.
type LeaderEvent struct {
	At       time.Duration
	Node     string
	From, To string
	Term     uint64
}

// LeaderTally is what one node's samples say about leadership.
type LeaderTally struct {
	Samples    int
	Failed     int // polls not answered
	Leaderless int // answered, naming no leader
	// Changes counts the samples naming a leader other than the last one
	// this node named (a sample naming none changes nothing by itself).
	Changes   int
	Events    []LeaderEvent
	FirstTerm uint64 // of the first answered sample
	LastTerm  uint64 // of the last answered sample
}

// TermIncrease is how far the term moved between the first and the last
// answered sample: the elections held meanwhile.
func (t LeaderTally) TermIncrease() int {
	if t.LastTerm <= t.FirstTerm {
		return 0
	}
	return int(t.LastTerm - t.FirstTerm)
}

// tallyLeaderSamples tallies one node's samples, in the order taken.
func tallyLeaderSamples(samples []LeaderSample) LeaderTally {
	var t LeaderTally
	last := ""
	answered := false
	for _, s := range samples {
		t.Samples++
		if s.Err != "" {
			t.Failed++
			continue
		}
		if !answered {
			t.FirstTerm = s.Term
			answered = true
		}
		t.LastTerm = s.Term
		if s.Leader == "" {
			t.Leaderless++
			continue
		}
		if last != "" && s.Leader != last {
			t.Changes++
			t.Events = append(t.Events, LeaderEvent{At: s.At, Node: s.Node, From: last, To: s.Leader, Term: s.Term})
		}
		last = s.Leader
	}
	return t
}

// ErrorSpell is a stretch of item 10's run in which requests failed, no
// two failures in it more than stabilitySpellGap apart.
type ErrorSpell struct {
	Start, End time.Duration // of the first and the last failure, since the load started
	Commits    int
	Reads      int
}

// errorSpells groups failure times (since the load started, commits and
// reads apart) into spells: a failure more than gap after the previous
// one starts a new spell.
func errorSpells(commits, reads []time.Duration, gap time.Duration) []ErrorSpell {
	type failure struct {
		at     time.Duration
		commit bool
	}
	var all []failure
	for _, at := range commits {
		all = append(all, failure{at, true})
	}
	for _, at := range reads {
		all = append(all, failure{at, false})
	}
	slices.SortStableFunc(all, func(a, b failure) int { return cmp.Compare(a.at, b.at) })
	var out []ErrorSpell
	for _, f := range all {
		if len(out) == 0 || f.at-out[len(out)-1].End > gap {
			out = append(out, ErrorSpell{Start: f.at, End: f.at})
		}
		sp := &out[len(out)-1]
		sp.End = f.at
		if f.commit {
			sp.Commits++
		} else {
			sp.Reads++
		}
	}
	return out
}

// counterDelta is after − before of a counter or gauge, 0 when it went
// down (a restarted node would reset it; none is restarted here).
func counterDelta(before, after float64) int {
	if after <= before {
		return 0
	}
	return int(after - before + 0.5)
}

// StabilityNode is one node's view of item 10's run.
type StabilityNode struct {
	ID string
	// floe_raft_leader_changes_total and floe_raft_term just before the
	// load started and just after it stopped.
	LeaderChangesBefore, LeaderChangesAfter float64
	TermBefore, TermAfter                   float64
	// Poll tallies the GET /management/v1/cluster samples, the one before
	// and the one after the load included.
	Poll LeaderTally
}

// MetricLeaderChanges is the increase of floe_raft_leader_changes_total.
func (n StabilityNode) MetricLeaderChanges() int {
	return counterDelta(n.LeaderChangesBefore, n.LeaderChangesAfter)
}

// MetricTermIncrease is the increase of floe_raft_term.
func (n StabilityNode) MetricTermIncrease() int { return counterDelta(n.TermBefore, n.TermAfter) }

// StabilityBench is item 10: a 3-node cluster under a steady mixed load
// for Duration, with nothing done to it, and how often leadership moved.
type StabilityBench struct {
	Duration      time.Duration
	CommitClients int
	ReadClients   int
	Tables        int
	PollEvery     time.Duration
	// The Raft timeouts in effect: raftnode's defaults, which the floe
	// command line does not change.
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration

	Leader      string // the leader when the load started
	LeaderAfter string // the leader every node named after it stopped
	Commits     LoadResult
	Conflicts   int // commits answered 409 (none expected)
	Reads       LoadResult
	// The slowest commit and read answered successfully.
	CommitMax, ReadMax time.Duration
	// ErrorSpells are the stretches of the run in which commits or reads
	// failed.
	ErrorSpells []ErrorSpell
	Nodes       []StabilityNode
}

// LeaderChanges is the most leader changes any node saw, by its counter or
// by the polls.
func (s *StabilityBench) LeaderChanges() int {
	n := 0
	for _, nd := range s.Nodes {
		n = max(n, nd.MetricLeaderChanges(), nd.Poll.Changes)
	}
	return n
}

// Elections is the largest term increase any node saw, by its gauge or by
// the polls.
func (s *StabilityBench) Elections() int {
	n := 0
	for _, nd := range s.Nodes {
		n = max(n, nd.MetricTermIncrease(), nd.Poll.TermIncrease())
	}
	return n
}

// Stable is the aim: no leader change and no election over the run.
func (s *StabilityBench) Stable() bool { return s.LeaderChanges() == 0 && s.Elections() == 0 }

// PollFailures sums the polls no node answered.
func (s *StabilityBench) PollFailures() int {
	n := 0
	for _, nd := range s.Nodes {
		n += nd.Poll.Failed
	}
	return n
}

// Events lists every leader change the polls saw, node by node.
func (s *StabilityBench) Events() []LeaderEvent {
	var out []LeaderEvent
	for _, nd := range s.Nodes {
		out = append(out, nd.Poll.Events...)
	}
	return out
}

// pollStatus is the part of GET /management/v1/cluster item 10 reads.
type pollStatus struct {
	LeaderID string `json:"leader-id"`
	Term     uint64 `json:"term"`
}

// pollLeader asks n who leads, once.
func pollLeader(ctx context.Context, cl *http.Client, n *harness.Node, at time.Duration) LeaderSample {
	s := LeaderSample{At: at, Node: n.ID}
	st, rb, err := doRequestTimeout(ctx, cl, stabilityPollTimeout, http.MethodGet, n.BaseURL()+"/management/v1/cluster", nil)
	if err := expect("GET /management/v1/cluster on "+n.ID, http.StatusOK, st, rb, err); err != nil {
		s.Err = err.Error()
		return s
	}
	var ps pollStatus
	if err := json.Unmarshal(rb, &ps); err != nil {
		s.Err = fmt.Sprintf("%s: %v", n.ID, err)
		return s
	}
	s.Leader, s.Term = ps.LeaderID, ps.Term
	return s
}

// leaderPoller polls every node every stabilityPollEvery, each node from
// its own goroutine, until stopped.
type leaderPoller struct {
	stopCh  chan struct{}
	done    sync.WaitGroup
	samples [][]LeaderSample // by node index
}

func startLeaderPoller(ctx context.Context, cl *http.Client, nodes []*harness.Node, t0 time.Time) *leaderPoller {
	p := &leaderPoller{stopCh: make(chan struct{}), samples: make([][]LeaderSample, len(nodes))}
	for i, n := range nodes {
		p.done.Add(1)
		go func() {
			defer p.done.Done()
			tick := time.NewTicker(stabilityPollEvery)
			defer tick.Stop()
			for {
				select {
				case <-p.stopCh:
					return
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				p.samples[i] = append(p.samples[i], pollLeader(ctx, cl, n, time.Since(t0)))
			}
		}()
	}
	return p
}

// stop ends the polling and returns each node's samples.
func (p *leaderPoller) stop() [][]LeaderSample {
	close(p.stopCh)
	p.done.Wait()
	return p.samples
}

// raftCounters reads floe_raft_leader_changes_total and floe_raft_term
// from n.
func raftCounters(ctx context.Context, cl *http.Client, n *harness.Node) (changes, term float64, err error) {
	m, err := metricSums(ctx, cl, []*harness.Node{n}, metricLeaderChanges, metricTerm)
	if err != nil {
		return 0, 0, err
	}
	return m[metricLeaderChanges], m[metricTerm], nil
}

// runStability runs item 10: a 3-node cluster (file:// warehouse), 16
// clients committing set-properties to their own tables through the leader
// and 16 clients loading those tables linearizably, round-robin over the
// nodes, closed loop, for Sizes.StabilityDuration; every node's leader and
// term polled every second, and its leader-change counter and term read
// before and after.
func runStability(ctx context.Context, o *SuiteOptions, dir string) (*StabilityBench, error) {
	log := o.log()
	sb := &StabilityBench{
		Duration: o.Sizes.StabilityDuration, CommitClients: stabilityCommitClients, ReadClients: stabilityReadClients,
		Tables: stabilityTablesPer * stabilityCommitClients, PollEvery: stabilityPollEvery,
		HeartbeatTimeout: raftnode.DefaultHeartbeatTimeout, ElectionTimeout: raftnode.DefaultElectionTimeout,
		LeaderLeaseTimeout: raftnode.DefaultLeaderLeaseTimeout,
	}
	if sb.Duration <= 0 {
		return nil, fmt.Errorf("stability duration %s: want a positive duration", sb.Duration)
	}
	c, err := startCluster(ctx, harness.ClusterConfig{Bin: o.Floe, Dir: filepath.Join(dir, "floe"), Size: ClusterSize}, log)
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	leader, err := c.Leader(ctx)
	if err != nil {
		return nil, err
	}
	const ns = "stab"
	tables, _, err := createTables(ctx, leader.BaseURL(), ns, sb.Tables)
	if err != nil {
		return nil, err
	}
	if leader, err = c.Leader(ctx); err != nil {
		return nil, err
	}
	sb.Leader = leader.ID

	ctl := harness.NewHTTPClient(4, 0)
	defer ctl.CloseIdleConnections()
	nodes := make([]StabilityNode, len(c.Nodes))
	before := make([][]LeaderSample, len(c.Nodes))
	for i, n := range c.Nodes {
		nodes[i].ID = n.ID
		if nodes[i].LeaderChangesBefore, nodes[i].TermBefore, err = raftCounters(ctx, ctl, n); err != nil {
			return nil, err
		}
		before[i] = []LeaderSample{pollLeader(ctx, ctl, n, 0)}
	}

	commitHTTP := make([]*http.Client, stabilityCommitClients)
	for i := range commitHTTP {
		commitHTTP[i] = harness.NewHTTPClient(2, 0)
		defer commitHTTP[i].CloseIdleConnections()
	}
	conflicts := make([]int, stabilityCommitClients)
	commitFails := make([][]time.Time, stabilityCommitClients)
	commitMax := make([]time.Duration, stabilityCommitClients)
	commits, err := startLoad(ctx, stabilityCommitClients, stabilityWarmOps, func(ctx context.Context, i, j int) error {
		t := tables[(i+(j%stabilityTablesPer)*stabilityCommitClients)%len(tables)]
		start := time.Now()
		st, body, err := commitURL(ctx, commitHTTP[i], leader.BaseURL()+tablePath(ns, t), "", j)
		if err == nil && st != http.StatusOK {
			if st == http.StatusConflict {
				conflicts[i]++
			}
			err = fmt.Errorf("commit to %s via %s: status %d, body %s", t, leader.ID, st, body)
		}
		if err != nil {
			commitFails[i] = append(commitFails[i], time.Now())
			return err
		}
		if j >= stabilityWarmOps {
			commitMax[i] = max(commitMax[i], time.Since(start))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("commit load: %w", err)
	}
	readHTTP := make([]*http.Client, stabilityReadClients)
	for i := range readHTTP {
		readHTTP[i] = harness.NewHTTPClient(2*len(c.Nodes), 0)
		defer readHTTP[i].CloseIdleConnections()
	}
	readFails := make([][]time.Time, stabilityReadClients)
	readMax := make([]time.Duration, stabilityReadClients)
	reads, err := startLoad(ctx, stabilityReadClients, stabilityWarmOps, func(ctx context.Context, i, j int) error {
		n := c.Nodes[(i+j)%len(c.Nodes)]
		d, err := loadTable(ctx, readHTTP[i], n, tablePath(ns, tables[(i+j)%len(tables)]))
		if err != nil {
			readFails[i] = append(readFails[i], time.Now())
			return err
		}
		if j >= stabilityWarmOps {
			readMax[i] = max(readMax[i], d)
		}
		return nil
	})
	if err != nil {
		commits.stop()
		return nil, fmt.Errorf("read load: %w", err)
	}
	t0 := time.Now()
	poller := startLeaderPoller(ctx, ctl, c.Nodes, t0)
	log.Info("item 10: load running", "duration", sb.Duration, "committers", stabilityCommitClients, "readers", stabilityReadClients,
		"leader", sb.Leader, "raft_heartbeat", sb.HeartbeatTimeout, "raft_election", sb.ElectionTimeout, "raft_lease", sb.LeaderLeaseTimeout)

	timer := time.NewTimer(sb.Duration)
	progress := time.NewTicker(time.Minute)
	wait := true
	for wait {
		select {
		case <-timer.C:
			wait = false
		case <-ctx.Done():
			wait = false
		case <-progress.C:
			log.Info("item 10: running", "elapsed", time.Since(t0).Round(time.Second), "of", sb.Duration)
		}
	}
	timer.Stop()
	progress.Stop()
	sb.Commits = commits.stop()
	sb.Reads = reads.stop()
	during := poller.stop()
	for _, n := range conflicts {
		sb.Conflicts += n
	}
	// Failures and maxima since t0 (the warm-up ran before it and failed
	// nothing, or startLoad would have returned an error).
	var commitAt, readAt []time.Duration
	for i := range commitFails {
		for _, at := range commitFails[i] {
			commitAt = append(commitAt, at.Sub(t0))
		}
		sb.CommitMax = max(sb.CommitMax, commitMax[i])
	}
	for i := range readFails {
		for _, at := range readFails[i] {
			readAt = append(readAt, at.Sub(t0))
		}
		sb.ReadMax = max(sb.ReadMax, readMax[i])
	}
	sb.ErrorSpells = errorSpells(commitAt, readAt, stabilitySpellGap)

	for i, n := range c.Nodes {
		after := pollLeader(ctx, ctl, n, time.Since(t0))
		samples := append(append(before[i], during[i]...), after)
		nodes[i].Poll = tallyLeaderSamples(samples)
		if nodes[i].LeaderChangesAfter, nodes[i].TermAfter, err = raftCounters(ctx, ctl, n); err != nil {
			return nil, err
		}
	}
	sb.Nodes = nodes
	if l, err := c.Leader(ctx); err == nil {
		sb.LeaderAfter = l.ID
	}
	log.Info("item 10: done", "leader_changes", sb.LeaderChanges(), "elections", sb.Elections(),
		"commits_per_s", fmt.Sprintf("%.0f", sb.Commits.PerSecond()), "reads_per_s", fmt.Sprintf("%.0f", sb.Reads.PerSecond()),
		"commit_p50_ms", ms(sb.Commits.P50), "commit_p99_ms", ms(sb.Commits.P99),
		"commit_errors", sb.Commits.Errors, "read_errors", sb.Reads.Errors, "error_spells", len(sb.ErrorSpells),
		"commit_max_ms", ms(sb.CommitMax), "read_max_ms", ms(sb.ReadMax), "poll_failures", sb.PollFailures())
	return sb, ctx.Err()
}
