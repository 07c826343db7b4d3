// Package bench measures a real floe cluster: three node processes on
// loopback, started from a binary built beforehand. Run measures how long
// writes stop after the leader is killed, how linearizable reads scale when
// spread over all nodes and what an Idempotency-Key costs a commit.
// RunSuite runs the whole benchmark suite of issue 7 (make bench): commit
// throughput against a raw hashicorp/raft cluster built from floe's own log
// store and transport, loadTable latency with and without the metadata
// cache, drop and purge on a versitygw S3 server, memory, and growth with
// the number of tables, and (item 9, issue 14) when an async purge starts,
// drop latency under load, drop throughput and what a purge costs in S3
// requests and memory, and (item 10) leader changes in a loaded run
// without faults. Every figure is reported next to a baseline
// measured in the same run, because the machines it runs on are noisy and
// absolute numbers from different runs do not compare.
//
// The command is ./cmd/floebench (--suite for the suite); the smoke tests
// run Run and RunSuite with tiny sizes and check only the reports' shape.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"debug/buildinfo"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/floe-catalog/floe/internal/harness"
)

// ClusterSize is the number of nodes Run starts.
const ClusterSize = 3

// Options sets the sizes of one run.
type Options struct {
	Floe string // path to a floe binary (go build -o … ./cmd/node)
	// Dir holds the nodes' data and logs. Empty: a temporary directory,
	// removed after a successful run and kept after a failed one.
	Dir string

	Failovers    int           // leader kills
	Writes       int           // healthy writes timed for the baseline
	ReadDuration time.Duration // of each read measurement
	Clients      int           // concurrent read clients
	// AckTimeout bounds one failover round from the kill to the first
	// acknowledged write; a round that reaches it fails the run.
	AckTimeout time.Duration
	// ReadsOnly skips the commits and the failover rounds (Failovers may
	// then be 0): the healthy writes and the read measurements only.
	ReadsOnly bool

	// Command is the command line that reproduces the run, printed verbatim
	// in the report; empty leaves the section out.
	Command string
	Logger  *slog.Logger `json:"-"`
}

// Report holds everything one run measured.
type Report struct {
	Options Options
	Date    time.Time
	Machine Machine

	HealthyWrites []time.Duration
	Rounds        []FailoverRound
	ReadsLeader   ReadResult // all requests to the leader
	ReadsAll      ReadResult // round-robin over all nodes
	// CPUs is where the nodes and the clients ran during the reads.
	CPUs    CPUPlacement
	Commits CommitResult
}

// Machine describes where the run happened.
type Machine struct {
	NumCPU       int    // what nproc prints: CPUs usable by this process
	CPUModel     string // from /proc/cpuinfo when available
	OSArch       string
	GoVersion    string // of the driver
	FloeGo       string // Go version the floe binary was built with
	FloeRevision string // VCS revision stamped into the floe binary
	// SourceRevision is git HEAD of the directory the driver ran in, for
	// binaries built without VCS stamping (-buildvcs=false).
	SourceRevision string
}

// Run starts a ClusterSize-node cluster, measures, stops the cluster and
// returns the report. The measurements run in this order: healthy write
// baseline, reads to the leader, reads round-robin, failover rounds.
func Run(ctx context.Context, o Options) (rep *Report, err error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	rep = &Report{Options: o, Date: time.Now().UTC(), Machine: describeMachine(o.Floe)}

	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "floebench-"); err != nil {
			return nil, err
		}
		defer func() {
			if err == nil {
				os.RemoveAll(dir)
			} else {
				log.Warn("keeping the cluster directory for inspection", "dir", dir)
			}
		}()
	}
	runID := randomID()

	log.Info("starting cluster", "nodes", ClusterSize, "dir", dir, "floe", o.Floe)
	c, err := startCluster(ctx, harness.ClusterConfig{Bin: o.Floe, Dir: dir, Size: ClusterSize}, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, c.LogTails(15))
		}
		log.Info("stopping cluster")
		c.Stop()
	}()
	leader, err := c.Leader(ctx)
	if err != nil {
		return nil, err
	}
	log.Info("cluster healthy", "leader", leader.ID)

	writer := harness.NewHTTPClient(4, 0)
	defer writer.CloseIdleConnections()

	// Baseline: acknowledged writes on the healthy cluster.
	if rep.HealthyWrites, err = c.HealthyWrites(ctx, writer, runID, o.Writes); err != nil {
		return nil, err
	}
	log.Info("healthy writes", "n", o.Writes, "median_ms", ms(median(rep.HealthyWrites)), "max_ms", ms(slices.Max(rep.HealthyWrites)))

	// Reads: one table, loaded by every client.
	const ns, table = "bench", "t"
	if err := c.SetupTable(ctx, writer, leader, ns+"_"+runID, table); err != nil {
		return nil, err
	}
	path := tablePath(ns+"_"+runID, table)
	if leader, err = c.Leader(ctx); err != nil {
		return nil, err
	}
	// On a machine with enough CPUs each node and the clients get their
	// own CPUs, so that "three nodes vs the leader alone" measures scaling,
	// not sharing.
	var unpin func()
	rep.CPUs, unpin = c.pinForReads(ctx, log)
	defer unpin()
	measure := func(targets []*harness.Node) (ReadResult, error) {
		cpu0, lcpu0, drv0, m0 := c.clusterCPU(), procCPU(leader.Pid()), procCPU(0), readMachineCPU()
		r, err := Reads(ctx, targets, path, o.Clients, o.ReadDuration)
		r.ServerCPU, r.LeaderCPU, r.DriverCPU, r.Machine = c.clusterCPU()-cpu0, procCPU(leader.Pid())-lcpu0, procCPU(0)-drv0, machineLoadSince(m0)
		r.Leader, r.LeaderCPUs = leader.ID, rep.CPUs.CPUs(leader.Index)
		return r, err
	}
	if rep.ReadsLeader, err = measure([]*harness.Node{leader}); err != nil {
		return nil, err
	}
	logReads(log, "reads, all to the leader", rep.ReadsLeader)
	if rep.ReadsAll, err = measure(c.Nodes); err != nil {
		return nil, err
	}
	logReads(log, "reads, round-robin over all nodes", rep.ReadsAll)
	unpin()
	if o.ReadsOnly {
		if n := rep.ReadsLeader.Errors + rep.ReadsAll.Errors; n > 0 {
			return rep, fmt.Errorf("%d loadTable requests failed during the read measurements; first: leader-only: %q; round-robin: %q",
				n, rep.ReadsLeader.FirstError, rep.ReadsAll.FirstError)
		}
		return rep, nil
	}

	// Commits with and without an Idempotency-Key, interleaved.
	if rep.Commits, err = c.Commits(ctx, writer, path, o.Writes); err != nil {
		return nil, err
	}
	log.Info("commits", "n", o.Writes, "plain_p50_ms", ms(median(rep.Commits.Plain)), "keyed_p50_ms", ms(median(rep.Commits.Keyed)))

	// Failover rounds.
	for i := range o.Failovers {
		r, err := c.Failover(ctx, writer, runID, i+1, o.AckTimeout)
		if err != nil {
			return nil, err
		}
		rep.Rounds = append(rep.Rounds, r)
		log.Info("failover round", "round", r.Round, "of", o.Failovers, "killed", r.Killed, "via", r.Via,
			"new_leader", r.NewLeader, "kill_to_ack_ms", ms(r.KillToAck), "attempts", r.Attempts,
			"rejected", formatRejected(r.Rejected), "rejoin_ms", ms(r.Rejoin))
	}

	if n := rep.ReadsLeader.Errors + rep.ReadsAll.Errors; n > 0 {
		return rep, fmt.Errorf("%d loadTable requests failed during the read measurements; first: leader-only: %q; round-robin: %q",
			n, rep.ReadsLeader.FirstError, rep.ReadsAll.FirstError)
	}
	return rep, nil
}

func (o Options) validate() error {
	var errs []error
	if o.Floe == "" {
		errs = append(errs, errors.New("the floe binary is required (--floe)"))
	} else if st, err := os.Stat(o.Floe); err != nil {
		errs = append(errs, fmt.Errorf("floe binary: %w", err))
	} else if st.IsDir() {
		errs = append(errs, fmt.Errorf("floe binary %s is a directory", o.Floe))
	}
	if o.Failovers < 1 && !o.ReadsOnly {
		errs = append(errs, fmt.Errorf("failovers must be at least 1, not %d", o.Failovers))
	}
	if o.Writes < 1 {
		errs = append(errs, fmt.Errorf("writes must be at least 1, not %d", o.Writes))
	}
	if o.Clients < 1 {
		errs = append(errs, fmt.Errorf("clients must be at least 1, not %d", o.Clients))
	}
	if o.ReadDuration <= 0 {
		errs = append(errs, fmt.Errorf("read duration must be positive, not %s", o.ReadDuration))
	}
	if o.AckTimeout <= 0 {
		errs = append(errs, fmt.Errorf("ack timeout must be positive, not %s", o.AckTimeout))
	}
	return errors.Join(errs...)
}

func logReads(log *slog.Logger, msg string, r ReadResult) {
	log.Info(msg, "targets", strings.Join(r.Targets, ","), "clients", r.Clients, "ok", r.OK, "errors", r.Errors,
		"req_per_s", fmt.Sprintf("%.0f", r.PerSecond()), "p50_ms", ms(r.P50), "p99_ms", ms(r.P99),
		"leader_busy", fmt.Sprintf("%.0f%% of %d CPUs", 100*r.LeaderBusy(), r.LeaderCPUs))
}

// HealthyWriteMedian is the baseline of the failover figures.
func (r *Report) HealthyWriteMedian() time.Duration { return median(r.HealthyWrites) }

// FailoverMedian and FailoverMax summarise the kill → acknowledged write times.
func (r *Report) FailoverMedian() time.Duration { return median(r.killToAck()) }

// FailoverMax is the longest kill → acknowledged write time.
func (r *Report) FailoverMax() time.Duration {
	if len(r.Rounds) == 0 {
		return 0
	}
	return slices.Max(r.killToAck())
}

func (r *Report) killToAck() []time.Duration {
	ds := make([]time.Duration, len(r.Rounds))
	for i, x := range r.Rounds {
		ds[i] = x.KillToAck
	}
	return ds
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile returns the nearest-rank p-quantile of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func describeMachine(floe string) Machine {
	m := Machine{
		NumCPU:    runtime.NumCPU(),
		OSArch:    runtime.GOOS + "/" + runtime.GOARCH,
		GoVersion: runtime.Version(),
		CPUModel:  cpuModel(),
	}
	if bi, err := buildinfo.ReadFile(floe); err == nil {
		m.FloeGo = bi.GoVersion
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			m.FloeRevision = rev
			if modified == "true" {
				m.FloeRevision += " (with uncommitted changes)"
			}
		}
	}
	if m.FloeRevision == "" {
		m.SourceRevision = gitRevision()
	}
	return m
}

// gitRevision returns "HEAD (with uncommitted changes)" for the current
// directory's git work tree, or "" when git is unavailable.
func gitRevision() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		rev += " (with uncommitted changes)"
	}
	return rev
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
