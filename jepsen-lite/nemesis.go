package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/floe-catalog/floe/internal/harness"
)

// Nemesis kinds. "all" selects every one.
const (
	faultKill        = "kill"             // SIGKILL a random node, restart it
	faultKillLeader  = "kill-leader"      // SIGKILL the leader, restart it
	faultPauseLeader = "pause-leader"     // SIGSTOP the leader, SIGCONT it
	faultFailover    = "failover"         // SIGSTOP the leader, time writes and reads through the others
	faultPartition   = "partition"        // cut a minority (often the leader) off
	faultDelay       = "delay"            // slow every link of one node
	faultSnapshot    = "snapshot-install" // lag a follower past the log, kill it while it catches up
	faultS3          = "s3-faults"        // 503 SlowDown and latency from S3
)

var allFaults = []string{faultKill, faultKillLeader, faultPauseLeader, faultFailover, faultPartition, faultDelay, faultSnapshot, faultS3}

// parseNemesis turns the --nemesis list into fault kinds.
func parseNemesis(s string) ([]string, error) {
	var out []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		switch {
		case k == "" || k == "none":
		case k == "all":
			out = append(out, allFaults...)
		case slices.Contains(allFaults, k):
			out = append(out, k)
		default:
			return nil, fmt.Errorf("unknown nemesis %q (want a comma-separated list of %s, all or none)", k, strings.Join(allFaults, ", "))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// nemesisTiming bounds the schedule: the gap between two faults and how
// long one lasts are drawn uniformly from these ranges.
type nemesisTiming struct {
	gapMin, gapMax time.Duration
	durMin, durMax time.Duration
	recover        time.Duration // longest wait for the cluster to heal after a fault
}

// nemesis injects one fault at a time on a schedule drawn from its seed:
// first every enabled kind once (in a seeded order), then kinds at random.
// After each fault it heals everything and waits until the cluster is
// healthy again; a cluster that does not heal within timing.recover is a
// violation (liveness), as is a node exiting on its own.
type nemesis struct {
	cl     *harness.Cluster
	api    *api // the failover fault's probe requests
	links  *linkNet
	s3p    *s3Proxy
	hist   *history
	log    *slog.Logger
	kinds  []string
	rng    *rand.Rand
	timing nemesisTiming
	// padLog appends cheap entries to the Raft log until done reports true
	// or ctx ends, returning how many it appended.
	padLog func(ctx context.Context, done func() bool) int
	// snapshotThreshold is the --snapshot-threshold the nodes run with.
	snapshotThreshold uint64

	// firstRound is closed once every kind has been tried once (the
	// first len(kinds) faults are one of each, in a shuffled order).
	firstRound chan struct{}

	mu               sync.Mutex
	counts           map[string]int
	failed           map[string]int // faults whose injection failed (e.g. no leader to kill)
	violations       []string
	snapshotInstalls int // restarts after which the node's log shows an installed snapshot
	failovers        []failoverProbe
}

func (n *nemesis) sleep(ctx context.Context, lo, hi time.Duration) time.Duration {
	d := lo
	if hi > lo {
		d += time.Duration(n.rng.Int64N(int64(hi - lo)))
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	return d
}

func (n *nemesis) draw(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(n.rng.Int64N(int64(hi-lo)))
}

// run injects faults until ctx ends (at most 10000). It returns after the
// last fault is healed.
func (n *nemesis) run(ctx context.Context) {
	if len(n.kinds) == 0 {
		return
	}
	first := slices.Clone(n.kinds)
	n.rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	for i := range 10000 {
		n.sleep(ctx, n.timing.gapMin, n.timing.gapMax)
		if ctx.Err() != nil {
			return
		}
		kind := n.kinds[n.rng.IntN(len(n.kinds))]
		if kind == faultSnapshot && len(n.kinds) > 1 && n.rng.IntN(3) > 0 {
			// It pads the log by ~11k entries each time: draw it a third
			// as often as the others.
			kind = n.kinds[n.rng.IntN(len(n.kinds))]
		}
		if i < len(first) {
			kind = first[i]
		}
		ev := faultEvent{Kind: kind, Start: n.hist.now()}
		detail, err := n.inject(ctx, kind)
		ev.End, ev.Detail = n.hist.now(), detail
		n.mu.Lock()
		if err != nil {
			ev.Err = err.Error()
			n.failed[kind]++
		} else {
			n.counts[kind]++
		}
		n.mu.Unlock()
		n.hist.addFault(ev)
		if err != nil {
			n.log.Warn("fault not injected", "kind", kind, "error", err)
		} else {
			n.log.Info("fault", "kind", kind, "detail", detail)
		}
		n.healAndWait(kind)
		if i == len(first)-1 && n.firstRound != nil {
			close(n.firstRound)
		}
	}
}

// healAndWait removes every fault and waits for the cluster to be healthy.
// It uses its own context: healing must happen even after the run ends.
func (n *nemesis) healAndWait(after string) {
	n.healAll()
	ctx, cancel := context.WithTimeout(context.Background(), n.timing.recover+5*time.Second)
	defer cancel()
	if err := waitHealthy(ctx, n.cl, n.timing.recover); err != nil {
		n.violate("cluster did not recover within %s after %s: %v", n.timing.recover, after, err)
		// Start whatever is down so the run can go on.
		for _, nd := range n.cl.Nodes {
			if !nd.Running() {
				_ = nd.Start()
			}
		}
	}
	for _, c := range n.cl.TakeCrashes() {
		n.violate("node crashed: %s", c)
	}
}

// healAll resumes paused nodes, starts stopped ones, and clears every
// network and S3 fault.
func (n *nemesis) healAll() {
	n.links.heal()
	n.s3p.set(0, 0)
	for _, nd := range n.cl.Nodes {
		if nd.Running() {
			_ = nd.Continue()
		} else if err := nd.Start(); err != nil {
			n.violate("restart %s: %v", nd.ID, err)
		}
	}
}

func (n *nemesis) violate(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.violations = append(n.violations, fmt.Sprintf(format, args...))
}

func (n *nemesis) leader(ctx context.Context) (*harness.Node, error) {
	return waitLeader(ctx, n.cl, 10*time.Second)
}

func (n *nemesis) inject(ctx context.Context, kind string) (string, error) {
	t := n.timing
	switch kind {
	case faultKill, faultKillLeader:
		var victim *harness.Node
		if kind == faultKillLeader {
			var err error
			if victim, err = n.leader(ctx); err != nil {
				return "", err
			}
		} else {
			victim = n.cl.Nodes[n.rng.IntN(len(n.cl.Nodes))]
		}
		if err := victim.Kill(); err != nil {
			return "", err
		}
		down := n.sleep(ctx, t.durMin/4, t.durMax/2)
		if err := victim.Start(); err != nil {
			return "", err
		}
		return fmt.Sprintf("SIGKILL %s, restarted after %s", victim.ID, down.Round(time.Millisecond)), nil

	case faultPauseLeader:
		victim, err := n.leader(ctx)
		if err != nil {
			return "", err
		}
		if err := victim.Pause(); err != nil {
			return "", err
		}
		d := n.sleep(ctx, t.durMin, t.durMax)
		if err := victim.Continue(); err != nil {
			return "", err
		}
		return fmt.Sprintf("SIGSTOP %s for %s", victim.ID, d.Round(time.Millisecond)), nil

	case faultFailover:
		return n.failover(ctx)

	case faultPartition:
		size := len(n.cl.Nodes)
		minority := 1
		if size >= 5 && n.rng.IntN(2) == 0 {
			minority = 2
		}
		var cutoff []int
		if n.rng.IntN(2) == 0 {
			if ln, err := n.leader(ctx); err == nil {
				cutoff = append(cutoff, ln.Index)
			}
		}
		for _, i := range n.rng.Perm(size) {
			if len(cutoff) < minority && !slices.Contains(cutoff, i) {
				cutoff = append(cutoff, i)
			}
		}
		var rest []int
		for i := range size {
			if !slices.Contains(cutoff, i) {
				rest = append(rest, i)
			}
		}
		n.links.partition(cutoff, rest)
		d := n.sleep(ctx, t.durMin, t.durMax)
		n.links.heal()
		return fmt.Sprintf("%s | %s for %s", nodeSet(n.cl, cutoff), nodeSet(n.cl, rest), d.Round(time.Millisecond)), nil

	case faultDelay:
		victim := n.cl.Nodes[n.rng.IntN(len(n.cl.Nodes))]
		lat := n.draw(20*time.Millisecond, 250*time.Millisecond)
		n.links.slow(victim.Index, lat)
		d := n.sleep(ctx, t.durMin, t.durMax)
		n.links.heal()
		return fmt.Sprintf("links of %s delayed %s for %s", victim.ID, lat.Round(time.Millisecond), d.Round(time.Millisecond)), nil

	case faultS3:
		rate := 0.2 + 0.5*n.rng.Float64()
		lat := n.draw(0, 300*time.Millisecond)
		n.s3p.set(rate, lat)
		d := n.sleep(ctx, t.durMin, t.durMax)
		n.s3p.set(0, 0)
		return fmt.Sprintf("S3: %.0f%% SlowDown, up to %s latency, for %s", rate*100, lat.Round(time.Millisecond), d.Round(time.Millisecond)), nil

	case faultSnapshot:
		return n.snapshotInstall(ctx)
	}
	return "", fmt.Errorf("unknown fault %q", kind)
}

// hashicorp/raft keeps this many entries after a snapshot (floe does not
// change the default), so a follower lagging by fewer catches up from the
// log, not from a snapshot.
const raftTrailingLogs = 10240

// snapshotThrottle is the bandwidth of the follower's links while it is
// sent a snapshot (bytes per second).
const snapshotThrottle = 1 << 20

// snapshotInstall makes a follower need an InstallSnapshot and kills it
// while it catches up: SIGKILL a follower (its data directory is kept: a
// node that forgets its votes breaks Raft's assumptions, so wiping it would
// test the operator, not floe); append enough entries that the leader's
// next snapshot compacts the log past the follower's last index; restart
// the follower with its links throttled to 1 MiB/s, SIGKILL it again
// 50-1500ms after the leader starts sending it the snapshot (so during the
// transfer), and restart it once more with full bandwidth. The node log tells whether a snapshot was installed; the
// summary counts those.
func (n *nemesis) snapshotInstall(ctx context.Context) (string, error) {
	ln, err := n.leader(ctx)
	if err != nil {
		return "", err
	}
	var followers []*harness.Node
	for _, nd := range n.cl.Nodes {
		if nd != ln {
			followers = append(followers, nd)
		}
	}
	victim := followers[n.rng.IntN(len(followers))]
	st, err := ln.Status(ctx)
	if err != nil {
		return "", err
	}
	if err := victim.Kill(); err != nil {
		return "", err
	}
	target := st.CommitIndex + raftTrailingLogs + 2*n.snapshotThreshold + 64
	padStart := time.Now()
	var last uint64
	check := 0
	padded := n.padLog(ctx, func() bool {
		check++
		if check%64 != 0 {
			return false
		}
		if s, err := ln.Status(ctx); err == nil {
			last = s.CommitIndex
		}
		return last >= target
	})
	if ctx.Err() != nil { // the run ended while padding: just bring it back
		return fmt.Sprintf("SIGKILL follower %s; run ended while padding the log (%d entries); restarted", victim.ID, padded), victim.Start()
	}
	// The leader snapshots at most every --snapshot-interval (the harness
	// sets 1s); give it a few, so the log is compacted past the follower.
	n.sleep(ctx, 3*time.Second, 3*time.Second)
	offsets := map[*harness.Node]int64{}
	var watches []*logWatch
	for _, nd := range n.cl.Nodes {
		offsets[nd] = nd.LogSize()
		if nd != victim {
			watches = append(watches, &logWatch{path: nd.LogPath(), off: offsets[nd]})
		}
	}
	// Throttle the follower's links so that the transfer of the snapshot
	// (a few MB) takes seconds, not milliseconds: the kill below then
	// lands in the middle of it.
	n.links.throttle(victim.Index, snapshotThrottle)
	defer n.links.heal()
	if err := victim.Start(); err != nil {
		return "", err
	}
	// Kill the follower as soon as a leader starts sending it the snapshot
	// ("installing snapshot on" in the leader's log; the leader may first
	// wait out up to ~10s of replication backoff). Tail the other nodes'
	// logs every 2ms, at most 30s; without a sighting kill it anyway.
	sent := false
	start := time.Now()
	isSend := func(line string) bool {
		return strings.Contains(line, `"installing snapshot on"`) && strings.Contains(line, `"peer":"`+victim.ID+`"`)
	}
	for range 15000 {
		for _, w := range watches {
			sent = sent || w.scan(isSend)
		}
		if sent || time.Since(start) > 30*time.Second || ctx.Err() != nil {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	killAfter := time.Since(start)
	if sent {
		extra := n.draw(50*time.Millisecond, 1500*time.Millisecond)
		time.Sleep(extra)
		killAfter += extra
	}
	installedBeforeKill := victim.LogContains(offsets[victim], "Installed remote snapshot")
	if err := victim.Kill(); err != nil {
		return "", err
	}
	n.links.heal()
	restartOff := victim.LogSize()
	if err := victim.Start(); err != nil {
		return "", err
	}
	// Wait until the follower has installed a snapshot after the second
	// start and is ready; the leader may first wait out its replication
	// backoff again. A follower that is ready without a new install (the
	// first one completed before the kill) is accepted after 40s.
	restarted := time.Now()
	waitCtx, cancel := context.WithTimeout(context.Background(), n.timing.recover+5*time.Second)
	defer cancel()
	rerr := harness.Poll(waitCtx, n.timing.recover, pollInterval, func(ctx context.Context) error {
		if err := victim.Ready(ctx); err != nil {
			return err
		}
		if victim.LogContains(restartOff, "Installed remote snapshot") || time.Since(restarted) > 40*time.Second {
			return nil
		}
		return fmt.Errorf("no snapshot installed yet")
	})
	installedAfter := victim.LogContains(restartOff, "Installed remote snapshot")
	if installedBeforeKill || installedAfter {
		n.mu.Lock()
		n.snapshotInstalls++
		n.mu.Unlock()
	}
	when := "no snapshot send seen; killed"
	if sent {
		when = "killed " + killAfter.Round(time.Millisecond).String() + " after restart, during the snapshot transfer"
		if installedBeforeKill {
			when += " (the install had already completed)"
		}
	}
	detail := fmt.Sprintf("SIGKILL follower %s; %d entries padded in %s (commit index %d, target %d); restarted, %s; restarted again; snapshot installed after that: %v",
		victim.ID, padded, time.Since(padStart).Round(time.Millisecond), last, target, when, installedAfter)
	if rerr != nil {
		return detail, fmt.Errorf("%s not ready after the snapshot install: %w", victim.ID, rerr)
	}
	return detail, nil
}

// logWatch tails a log file: each scan reads what was appended since the
// last one (at most 8 MiB) and reports whether a complete new line matches.
type logWatch struct {
	path    string
	off     int64
	partial []byte
}

func (w *logWatch) scan(match func(line string) bool) bool {
	f, err := os.Open(w.path)
	if err != nil {
		return false
	}
	defer f.Close()
	buf := make([]byte, 8<<20)
	k, _ := f.ReadAt(buf, w.off)
	if k <= 0 {
		return false
	}
	w.off += int64(k)
	data := append(w.partial, buf[:k]...)
	lines := bytes.Split(data, []byte("\n"))
	w.partial = append([]byte(nil), lines[len(lines)-1]...)
	found := false
	for _, l := range lines[:len(lines)-1] {
		found = found || match(string(l))
	}
	return found
}

func nodeSet(cl *harness.Cluster, idx []int) string {
	var ids []string
	for _, i := range idx {
		ids = append(ids, cl.Nodes[i].ID)
	}
	slices.Sort(ids)
	return "{" + strings.Join(ids, ",") + "}"
}
