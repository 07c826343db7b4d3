package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/floe-catalog/floe/internal/harness"
)

// Settings of the growth cluster (items 7 and 8). Snapshots are what item
// 8 measures, so this cluster takes them often: after Sizes.SnapshotThreshold
// entries, checked every growthSnapshotInterval (raftnode's defaults, 8192
// and 2m, would leave the smaller steps without any snapshot).
const (
	growthSnapshotInterval = time.Second
	growthTablesPerNS      = 1000 // tables per namespace g00000, g00001, …
	growthFillWorkers      = 32
	growthSnapshotWait     = 3 * time.Minute
	growthMaxFillerRounds  = 200 // rounds of 64 commits while waiting for a snapshot
)

// GrowthStep is the cluster measured at one table count.
type GrowthStep struct {
	Tables  int
	Records int           // idempotency records held (only the last step has any)
	Fill    time.Duration // time to create this step's new tables (or records)
	FillOps int           // requests sent to get there
	Commits []time.Duration
	// Snapshot is the leader's newest Raft snapshot taken after the step
	// was complete (index ≥ the step's last entry).
	SnapshotBytes int64
	SnapshotIndex uint64
	// Snapshots is how many snapshots the leader wrote while the step was
	// measured, and SnapshotPersist their mean write time (the node's
	// floe_raft_snapshot_persist_seconds histogram, sum ÷ count, before and
	// after); the last of them holds the whole step.
	Snapshots       int
	SnapshotPersist time.Duration
	// Restore is a new node's catch-up at this step, zero when not measured.
	Restore Restore
	// RSS of each node after the step, by node ID.
	Memory map[string]NodeMemory
	Leader string
}

// NodeMemory is one node's /proc/<pid>/status memory figures.
type NodeMemory struct {
	RSS, Anon, File, Peak int64
}

// Restore is one new node joining the cluster at a growth step: from its
// process start to its applied index reaching the leader's commit index read
// just before the start (the leader sends it its newest snapshot, then the
// log after it). Memory is the new node's right after.
type Restore struct {
	Node   string
	Index  uint64
	Took   time.Duration
	Memory NodeMemory
}

// GrowthBench is items 8 (growth) and 7 (memory).
type GrowthBench struct {
	Empty map[string]NodeMemory // after the cluster started, before any table
	Steps []GrowthStep
	// RecordsStep is the step with the idempotency records (last), or -1.
	RecordsStep int
}

func nodeMemory(n *harness.Node) (NodeMemory, error) {
	pid := n.Pid()
	if pid == 0 {
		return NodeMemory{}, fmt.Errorf("node %s is not running", n.ID)
	}
	m, err := procMemory(pid)
	if err != nil {
		return NodeMemory{}, err
	}
	nm := NodeMemory{RSS: m.RSS, Peak: m.Peak}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nm, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fs := strings.Fields(v)
		if len(fs) != 2 {
			continue
		}
		kb, err := strconv.ParseInt(fs[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "RssAnon":
			nm.Anon = kb << 10
		case "RssFile":
			nm.File = kb << 10
		}
	}
	return nm, sc.Err()
}

func (c *Cluster) memory() (map[string]NodeMemory, error) {
	out := map[string]NodeMemory{}
	for _, n := range c.Nodes {
		m, err := nodeMemory(n)
		if err != nil {
			return nil, err
		}
		out[n.ID] = m
	}
	return out, nil
}

// metricValue scrapes one unlabelled metric from n's /metrics.
func metricValue(ctx context.Context, cl *http.Client, n *harness.Node, name string) (float64, error) {
	st, rb, err := doRequest(ctx, cl, http.MethodGet, n.BaseURL()+"/metrics", nil)
	if err := expect("GET /metrics on "+n.ID, http.StatusOK, st, rb, err); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(rb), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found on %s", name, n.ID)
}

// snapshotMeta is the part of a Raft file snapshot's meta.json read here.
type snapshotMeta struct {
	ID    string
	Index uint64
	Size  int64
}

// newestSnapshot returns the snapshot with the highest index in n's data
// directory (raft.FileSnapshotStore layout), ok false when there is none.
func newestSnapshot(n *harness.Node) (snapshotMeta, bool, error) {
	var best snapshotMeta
	found := false
	dirs, err := os.ReadDir(filepath.Join(n.DataDir, "snapshots"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return best, false, nil
		}
		return best, false, err
	}
	for _, d := range dirs {
		if !d.IsDir() || strings.HasSuffix(d.Name(), ".tmp") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(n.DataDir, "snapshots", d.Name(), "meta.json"))
		if err != nil {
			continue // being written or removed
		}
		var m snapshotMeta
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		if !found || m.Index > best.Index {
			best, found = m, true
		}
	}
	return best, found, nil
}

func growthNS(i int) string { return fmt.Sprintf("g%05d", i/growthTablesPerNS) }
func growthTable(i int) string {
	return fmt.Sprintf("t%07d", i)
}

func runGrowth(ctx context.Context, o *SuiteOptions, dir string) (*GrowthBench, error) {
	log := o.log()
	c, err := startCluster(ctx, harness.ClusterConfig{Bin: o.Floe, Dir: dir, Size: ClusterSize, Args: []string{
		"--snapshot-threshold", strconv.Itoa(o.Sizes.SnapshotThreshold), "--snapshot-interval", growthSnapshotInterval.String(),
	}}, log)
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	leader, err := c.Leader(ctx)
	if err != nil {
		return nil, err
	}
	g := &GrowthBench{RecordsStep: -1}
	if g.Empty, err = c.memory(); err != nil {
		return nil, err
	}
	cl := harness.NewHTTPClient(growthFillWorkers, 0)
	defer cl.CloseIdleConnections()

	have := 0
	for _, target := range o.Sizes.GrowthTables {
		if target <= have {
			continue
		}
		step := GrowthStep{Tables: target, Leader: leader.ID}
		// Namespaces first, then the tables, through the leader.
		for ns := have / growthTablesPerNS; ns <= (target-1)/growthTablesPerNS; ns++ {
			if err := ensureNamespace(ctx, cl, leader.BaseURL(), growthNS(ns*growthTablesPerNS)); err != nil {
				return g, err
			}
		}
		t0 := time.Now()
		if err := parallel(ctx, target-have, growthFillWorkers, func(ctx context.Context, k int) error {
			i := have + k
			_, err := createTableAt(ctx, cl, leader.BaseURL(), growthNS(i), growthTable(i))
			return err
		}); err != nil {
			return g, fmt.Errorf("fill to %d tables: %w", target, err)
		}
		step.Fill, step.FillOps = time.Since(t0), target-have
		have = target
		if err := measureStep(ctx, c, leader, cl, have, &step, o); err != nil {
			return g, err
		}
		if target == slices.Max(o.Sizes.GrowthTables) {
			if step.Restore, err = measureRestore(ctx, c, leader, cl, "r1", o); err != nil {
				return g, err
			}
		}
		g.Steps = append(g.Steps, step)
		logStep(o, step)
	}

	// Item 7: idempotency records on top of the largest table count, from
	// keyed updateProperties requests (one log entry each: the change and
	// its record), spread over the namespaces.
	if o.Sizes.IdemRecords > 0 && have > 0 {
		step := GrowthStep{Tables: have, Records: o.Sizes.IdemRecords, Leader: leader.ID}
		nss := (have-1)/growthTablesPerNS + 1
		t0 := time.Now()
		if err := parallel(ctx, o.Sizes.IdemRecords, 2*growthFillWorkers, func(ctx context.Context, k int) error {
			ns := growthNS((k % nss) * growthTablesPerNS)
			body := map[string]any{"updates": map[string]string{"bench": strconv.Itoa(k)}}
			st, rb, err := doRequest(ctx, cl, http.MethodPost, leader.BaseURL()+"/v1/namespaces/"+ns+"/properties", body,
				"Idempotency-Key", uuid.Must(uuid.NewV7()).String())
			return expect("keyed updateProperties on "+ns, http.StatusOK, st, rb, err)
		}); err != nil {
			return g, fmt.Errorf("add %d idempotency records: %w", o.Sizes.IdemRecords, err)
		}
		step.Fill, step.FillOps = time.Since(t0), o.Sizes.IdemRecords
		if err := measureStep(ctx, c, leader, cl, have, &step, o); err != nil {
			return g, err
		}
		if step.Restore, err = measureRestore(ctx, c, leader, cl, "r2", o); err != nil {
			return g, err
		}
		g.Steps = append(g.Steps, step)
		g.RecordsStep = len(g.Steps) - 1
		logStep(o, step)
	}
	return g, nil
}

func logStep(o *SuiteOptions, s GrowthStep) {
	o.log().Info("items 7/8: growth step", "tables", s.Tables, "records", s.Records, "fill_s", fmt.Sprintf("%.1f", s.Fill.Seconds()),
		"commit_p50_ms", ms(median(s.Commits)), "snapshot", mib(s.SnapshotBytes), "snapshots", s.Snapshots, "snapshot_persist_ms", ms(s.SnapshotPersist),
		"restore_ms", ms(s.Restore.Took), "leader_rss", mib(s.Memory[s.Leader].RSS))
}

// measureStep times o.Sizes.GrowthWrites commits (one at a time, to random
// tables, through the leader), waits for a snapshot that holds the whole
// step (writing more commits if Raft has not taken one yet), and reads
// every node's memory.
func measureStep(ctx context.Context, c *Cluster, leader *harness.Node, cl *http.Client, tables int, step *GrowthStep, o *SuiteOptions) error {
	// The gauge is refreshed every 100ms by the node's monitor.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(300 * time.Millisecond):
	}
	// Snapshot times first: a snapshot that covers the step may finish
	// right after the commit index is read.
	sum0, n0, err := snapshotPersist(ctx, cl, leader)
	if err != nil {
		return err
	}
	ci, err := metricValue(ctx, cl, leader, "floe_raft_commit_index")
	if err != nil {
		return err
	}
	last := uint64(ci)
	rng := rand.New(rand.NewPCG(uint64(tables), 7))
	one := func(ctx context.Context, j int) error {
		i := rng.IntN(tables)
		st, body, err := commitURL(ctx, cl, leader.BaseURL()+tablePath(growthNS(i), growthTable(i)), "", j)
		return expect("commit", http.StatusOK, st, []byte(body), err)
	}
	for j := range 5 { // warm-up
		if err := one(ctx, j); err != nil {
			return err
		}
	}
	for j := range o.Sizes.GrowthWrites {
		t0 := time.Now()
		if err := one(ctx, j); err != nil {
			return err
		}
		step.Commits = append(step.Commits, time.Since(t0))
	}
	deadline := time.Now().Add(growthSnapshotWait)
	for round := 0; ; round++ {
		m, ok, err := newestSnapshot(leader)
		if err != nil {
			return err
		}
		if ok && m.Index >= last {
			step.SnapshotBytes, step.SnapshotIndex = m.Size, m.Index
			break
		}
		if round >= growthMaxFillerRounds || time.Now().After(deadline) {
			return fmt.Errorf("no snapshot at index ≥ %d on %s after %d filler rounds", last, leader.ID, round)
		}
		// Give Raft entries past the threshold and time to snapshot.
		if err := parallel(ctx, 64, 16, func(ctx context.Context, k int) error {
			i := (k*7919 + round) % tables
			st, body, err := commitURL(ctx, cl, leader.BaseURL()+tablePath(growthNS(i), growthTable(i)), "", k)
			return expect("filler commit", http.StatusOK, st, []byte(body), err)
		}); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	sum1, n1, err := snapshotPersist(ctx, cl, leader)
	if err != nil {
		return err
	}
	if n1 > n0 {
		step.Snapshots = n1 - n0
		step.SnapshotPersist = time.Duration((sum1 - sum0) / float64(n1-n0) * float64(time.Second))
	}
	step.Memory, err = c.memory()
	return err
}

// snapshotPersist reads the sum and count of n's snapshot write times.
func snapshotPersist(ctx context.Context, cl *http.Client, n *harness.Node) (float64, int, error) {
	sum, err := metricValue(ctx, cl, n, "floe_raft_snapshot_persist_seconds_sum")
	if err != nil {
		return 0, 0, err
	}
	count, err := metricValue(ctx, cl, n, "floe_raft_snapshot_persist_seconds_count")
	return sum, int(count), err
}

// restoreWait bounds one new node's catch-up.
const restoreWait = 10 * time.Minute

// measureRestore starts a new node id that joins c, times it until its
// applied index reaches the leader's commit index read just before, reads
// its memory, then removes it from the cluster and stops it, leaving c as it
// was (healthy, same members).
func measureRestore(ctx context.Context, c *Cluster, leader *harness.Node, cl *http.Client, id string, o *SuiteOptions) (Restore, error) {
	r := Restore{Node: id}
	ci, err := metricValue(ctx, cl, leader, "floe_raft_commit_index")
	if err != nil {
		return r, err
	}
	r.Index = uint64(ci)
	j, err := c.Joiner(id)
	if err != nil {
		return r, err
	}
	t0 := time.Now()
	if err := j.Process.Start(); err != nil {
		return r, err
	}
	defer func() { _ = j.Stop() }()
	deadline := t0.Add(restoreWait)
	for {
		// The gauge is refreshed every 100ms; a node that is still starting
		// does not answer yet.
		if v, err := metricValue(ctx, cl, j, "floe_raft_applied_index"); err == nil && uint64(v) >= r.Index {
			r.Took = time.Since(t0)
			break
		}
		if !j.Running() {
			return r, fmt.Errorf("new node %s exited while catching up: %s", id, j.LogTail(20))
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("new node %s did not reach index %d within %s", id, r.Index, restoreWait)
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if r.Memory, err = nodeMemory(j); err != nil {
		return r, err
	}
	o.log().Info("items 7/8: new node caught up", "node", id, "index", r.Index, "took_ms", ms(r.Took), "rss", mib(r.Memory.RSS))
	if err := leader.RemoveMember(ctx, id); err != nil {
		return r, err
	}
	if err := j.Stop(); err != nil {
		return r, err
	}
	return r, c.WaitHealthy(ctx, harness.HealthyTimeout)
}
