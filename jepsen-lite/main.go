// Command jepsen-lite is floe's failure-injection harness: it starts 3 or 5
// real floe processes on loopback with versitygw as the warehouse, drives a
// workload at them through random nodes while a nemesis kills, pauses and
// partitions nodes and makes S3 fail, then heals, restarts every node and
// checks the history: linearizability per table (porcupine), idempotency,
// durability of acknowledged writes, purge (from the S3 listing) and
// location ownership (no two tables may share a location). See README.md
// in this directory.
//
//	go run ./jepsen-lite --nodes 3 --duration 60s --seed 1 --workload mixed --nemesis all
//	go run ./jepsen-lite --ci
//	go run ./jepsen-lite --nodes 5 --duration 60s --seeds 1001-1020   # a sweep
//
// Exit status: 0 every check passed (or was skipped); 1 a violation was
// found (in a sweep: for some seed); 2 bad flags; 3 the harness could not
// run (setup failed); 130 interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/floe-catalog/floe/internal/harness"
)

const (
	exitOK        = 0
	exitViolation = 1
	exitUsage     = 2
	exitHarness   = 3
	exitInterrupt = 130
)

// config is one run's settings, from the flags.
type config struct {
	nodes          int
	duration       time.Duration
	seed           uint64
	seedSet        bool
	seeds          []uint64 // --seeds: a sweep, one run per seed
	workload       string
	nemesis        []string
	nemesisFlag    string
	floe           string
	dir            string
	keep           bool
	clients        int
	tables         int
	maxWrites      int
	purgeClients   int
	overlapClients int
	checkTimeout   time.Duration
	ci             bool
	purgeForce     bool
	timing         nemesisTiming
	// tuning holds the flags set on the command line that shape the run
	// beyond those commandLine always names (client counts, fault
	// timings...), as "--name", "value" pairs, so the reproduction command
	// repeats them.
	tuning []string
}

// tuningFlags are the flags commandLine repeats when they were set.
var tuningFlags = map[string]bool{
	"clients": true, "tables": true, "max-writes-per-table": true, "purge-clients": true, "overlap-clients": true,
	"check-timeout": true, "fault-gap-min": true, "fault-gap-max": true, "fault-min": true, "fault-max": true,
	"recover-timeout": true,
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("jepsen-lite", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.nodes, "nodes", 3, "number of floe nodes: 3 or 5")
	fs.DurationVar(&c.duration, "duration", 60*time.Second, "how long the workload and the nemesis run")
	seed := fs.Uint64("seed", 0, "seed of the nemesis schedule and the clients' choices (default: from the clock; printed)")
	seedList := fs.String("seeds", "", "a sweep: run once per seed, in turn, e.g. 1001-1020 or 7,42,100-104; one line per seed, exit 1 if any fails")
	fs.StringVar(&c.workload, "workload", "mixed", "register, purge, overlap (with purge) or mixed (all three)")
	fs.StringVar(&c.nemesisFlag, "nemesis", "all", "comma-separated faults: "+strings.Join(allFaults, ",")+"; all; none")
	fs.StringVar(&c.floe, "floe", "", "floe binary (default: go build ./cmd/node of this module into the run directory)")
	fs.StringVar(&c.dir, "dir", "", "run directory for data, logs and reports (default: a new temporary directory)")
	fs.BoolVar(&c.keep, "keep", false, "keep the run directory after a passing run (a failing run always keeps it)")
	fs.IntVar(&c.clients, "clients", 8, "register workload clients")
	fs.IntVar(&c.tables, "tables", 6, "register tables in use at once")
	fs.IntVar(&c.maxWrites, "max-writes-per-table", 200, "writes after which a register table is replaced by a fresh one")
	fs.IntVar(&c.purgeClients, "purge-clients", 3, "purge workload clients")
	fs.IntVar(&c.overlapClients, "overlap-clients", 2, "overlap workload clients")
	fs.DurationVar(&c.checkTimeout, "check-timeout", 60*time.Second, "porcupine's time limit per table (exceeded: verdict UNKNOWN)")
	fs.BoolVar(&c.ci, "ci", false, "the CI run: 3 nodes, mixed workload, every fault at least once (a fault kind never injected, or an overlap attempt kind never answered, fails the run), seed 1 unless --seed, 100s unless --duration")
	fs.BoolVar(&c.purgeForce, "purge-without-jobs", false, "run the purge workload even when the build has no purge-job API, checking only that acknowledged synchronous purges deleted the files")
	fs.DurationVar(&c.timing.gapMin, "fault-gap-min", 2*time.Second, "least time between two faults")
	fs.DurationVar(&c.timing.gapMax, "fault-gap-max", 5*time.Second, "most time between two faults")
	fs.DurationVar(&c.timing.durMin, "fault-min", 1*time.Second, "shortest fault")
	fs.DurationVar(&c.timing.durMax, "fault-max", 6*time.Second, "longest fault")
	fs.DurationVar(&c.timing.recover, "recover-timeout", 60*time.Second, "how long the cluster may take to become healthy after a fault before that counts as a violation")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: go run ./jepsen-lite [flags]\n\nfloe's failure-injection harness; see jepsen-lite/README.md.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		set[f.Name] = true
		if tuningFlags[f.Name] {
			c.tuning = append(c.tuning, "--"+f.Name, f.Value.String())
		}
	})
	c.seed, c.seedSet = *seed, set["seed"]
	if set["seeds"] {
		if set["seed"] {
			return c, errors.New("--seed and --seeds exclude each other")
		}
		var err error
		if c.seeds, err = parseSeeds(*seedList); err != nil {
			return c, err
		}
	}
	if c.ci {
		if !set["seed"] {
			c.seed, c.seedSet = 1, true
		}
		if !set["duration"] {
			c.duration = 100 * time.Second
		}
		if !set["nemesis"] {
			c.nemesisFlag = "all"
		}
		if !set["workload"] {
			c.workload = "mixed"
		}
		if !set["fault-gap-min"] {
			c.timing.gapMin = time.Second
		}
		if !set["fault-gap-max"] {
			c.timing.gapMax = 2 * time.Second
		}
		if !set["fault-max"] {
			c.timing.durMax = 4 * time.Second
		}
	}
	if !c.seedSet {
		c.seed = uint64(time.Now().UnixNano() % 1_000_000_000)
	}
	if c.nodes != 3 && c.nodes != 5 {
		return c, fmt.Errorf("--nodes must be 3 or 5, not %d", c.nodes)
	}
	switch c.workload {
	case "register", "purge", "overlap", "mixed":
	default:
		return c, fmt.Errorf("--workload must be register, purge, overlap or mixed, not %q", c.workload)
	}
	if c.duration <= 0 || c.duration > 24*time.Hour {
		return c, fmt.Errorf("--duration must be in (0, 24h], not %s", c.duration)
	}
	if c.clients < 1 || c.tables < 1 || c.maxWrites < 1 || c.purgeClients < 1 || c.overlapClients < 1 {
		return c, errors.New("--clients, --tables, --max-writes-per-table, --purge-clients and --overlap-clients must be positive")
	}
	t := c.timing
	if t.gapMin <= 0 || t.gapMax < t.gapMin || t.durMin <= 0 || t.durMax < t.durMin || t.recover <= 0 {
		return c, errors.New("fault timings must be positive, each max at least its min")
	}
	var err error
	if c.nemesis, err = parseNemesis(c.nemesisFlag); err != nil {
		return c, err
	}
	return c, nil
}

// runsRegister, runsPurge and runsOverlap say which workloads the run
// drives: overlap needs purges to race against, so it brings the purge
// workload along; mixed runs all three.
func (c config) runsRegister() bool { return c.workload == "register" || c.workload == "mixed" }
func (c config) runsPurge() bool    { return c.workload != "register" }
func (c config) runsOverlap() bool  { return c.workload == "overlap" || c.workload == "mixed" }

// commandLine is the command that reproduces cfg's run.
func (c config) commandLine() string {
	args := []string{"go", "run", "./jepsen-lite",
		"--nodes", fmt.Sprint(c.nodes), "--duration", c.duration.String(), "--seed", fmt.Sprint(c.seed),
		"--workload", c.workload, "--nemesis", strings.Join(c.nemesis, ",")}
	if len(c.nemesis) == 0 {
		args[len(args)-1] = "none"
	}
	if c.ci {
		args = append(args, "--ci")
	}
	if c.purgeForce {
		args = append(args, "--purge-without-jobs")
	}
	args = append(args, c.tuning...)
	return harness.ShellJoin(args)
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "jepsen-lite: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(cfg.seeds) > 0 {
		return sweep(ctx, cfg, stdout, stderr)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r := &runner{cfg: cfg, log: log, out: stdout}
	code := r.run(ctx)
	if ctx.Err() != nil && code != exitViolation {
		fmt.Fprintln(stderr, "jepsen-lite: interrupted; everything it started is stopped")
		return exitInterrupt
	}
	return code
}
