package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// parseSeeds parses a seed list: comma-separated seeds and inclusive
// ranges, e.g. "1001-1020" or "7,42,100-104". At most 10000 seeds.
func parseSeeds(s string) ([]uint64, error) {
	var out []uint64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(strings.TrimSpace(lo), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--seeds: %q is not a seed or a range of seeds", part)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(strings.TrimSpace(hi), 10, 64); err != nil || b < a {
				return nil, fmt.Errorf("--seeds: %q is not a range lo-hi with lo <= hi", part)
			}
		}
		if b-a >= 10000 || len(out)+int(b-a+1) > 10000 {
			return nil, fmt.Errorf("--seeds: more than 10000 seeds")
		}
		for v := a; ; v++ {
			out = append(out, v)
			if v == b {
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--seeds: no seed in %q", s)
	}
	return out, nil
}

// sweepResult is one seed's run.
type sweepResult struct {
	seed     uint64
	verdict  string // PASS, FAIL, UNKNOWN
	detail   string // the checks that failed or were undecided, or why the run did not complete
	duration time.Duration
	ops      int64
	faults   int
	dir      string
	command  string
}

func (s sweepResult) line() string {
	extra := ""
	if s.detail != "" {
		extra = "; " + s.detail
	}
	return fmt.Sprintf("seed %d: %s (%s, %d ops, %d faults%s) %s",
		s.seed, s.verdict, s.duration.Round(time.Second), s.ops, s.faults, extra, s.dir)
}

// sweep runs the harness once per seed of cfg.seeds, in turn, each in its
// own directory under cfg.dir (default: a new temporary directory, kept),
// with its output in <dir>/output.txt. It prints one line per seed and a
// summary, and returns exitViolation if any seed failed.
//
// A passing seed's bulky state (node data directories and the bucket) is
// removed unless --keep; its logs, history.json and summary.txt stay. A
// failing or undecided seed keeps everything.
func sweep(ctx context.Context, cfg config, stdout, stderr io.Writer) int {
	base := cfg.dir
	var err error
	if base == "" {
		base, err = os.MkdirTemp("", "jepsen-sweep-")
	} else if base, err = filepath.Abs(base); err == nil {
		err = os.MkdirAll(base, 0o755)
	}
	if err != nil {
		fmt.Fprintf(stderr, "jepsen-lite: sweep directory: %v\n", err)
		return exitHarness
	}
	if cfg.floe == "" {
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		if cfg.floe, err = buildFloe(ctx, base, log); err != nil {
			fmt.Fprintf(stderr, "jepsen-lite: %v\n", err)
			return exitHarness
		}
	}
	fmt.Fprintf(stdout, "jepsen-lite sweep: %d seeds, %d nodes, workload %s, nemesis %s, %s each; run directories under %s\n",
		len(cfg.seeds), cfg.nodes, cfg.workload, strings.Join(cfg.nemesis, ","), cfg.duration, base)
	start := time.Now()
	var results []sweepResult
	interrupted := false
	for _, seed := range cfg.seeds {
		if ctx.Err() != nil {
			interrupted = true
			break
		}
		res := runSeed(ctx, cfg, seed, filepath.Join(base, fmt.Sprintf("seed-%d", seed)))
		if res.verdict == "" {
			interrupted = true
			break
		}
		results = append(results, res)
		fmt.Fprintln(stdout, res.line())
	}
	counts := map[string]int{}
	for _, r := range results {
		counts[r.verdict]++
	}
	fmt.Fprintf(stdout, "\nsweep: %d of %d seeds run in %s: %d PASS, %d FAIL, %d UNKNOWN\n",
		len(results), len(cfg.seeds), time.Since(start).Round(time.Second), counts["PASS"], counts["FAIL"], counts["UNKNOWN"])
	for _, r := range results {
		if r.verdict != "PASS" {
			fmt.Fprintf(stdout, "  seed %d %s: %s\n    reproduce: %s\n    evidence: %s (summary.txt, history.json, nN.log)\n",
				r.seed, r.verdict, r.detail, r.command, r.dir)
		}
	}
	switch {
	case counts["FAIL"] > 0:
		return exitViolation
	case interrupted:
		fmt.Fprintln(stdout, "sweep interrupted")
		return exitInterrupt
	}
	return exitOK
}

// runSeed runs one seed of a sweep in dir. The verdict is "" when the run
// was interrupted.
func runSeed(ctx context.Context, cfg config, seed uint64, dir string) sweepResult {
	c := cfg
	c.seeds = nil
	c.seed, c.seedSet = seed, true
	c.dir = dir
	res := sweepResult{seed: seed, dir: dir, command: c.commandLine()}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		res.verdict, res.detail = "UNKNOWN", err.Error()
		return res
	}
	out, err := os.Create(filepath.Join(dir, "output.txt"))
	if err != nil {
		res.verdict, res.detail = "UNKNOWN", err.Error()
		return res
	}
	defer out.Close()
	r := &runner{cfg: c, log: slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelInfo})), out: out}
	start := time.Now()
	code := r.run(ctx)
	res.duration = time.Since(start)
	if r.api != nil {
		res.ops = r.api.requests.Load()
	}
	if r.nem != nil {
		r.nem.mu.Lock()
		for _, n := range r.nem.counts {
			res.faults += n
		}
		r.nem.mu.Unlock()
	}
	var failed, undecided []string
	for _, ch := range r.checks {
		switch ch.Verdict {
		case verdictFail:
			failed = append(failed, ch.Name)
		case verdictUnknown:
			undecided = append(undecided, ch.Name)
		}
	}
	switch {
	case code == exitViolation:
		res.verdict, res.detail = "FAIL", "failed: "+strings.Join(failed, ", ")
	case code == exitInterrupt || ctx.Err() != nil:
		return sweepResult{}
	case code != exitOK:
		res.verdict, res.detail = "UNKNOWN", "the harness could not run (see output.txt)"
	case len(undecided) > 0:
		res.verdict, res.detail = "UNKNOWN", "undecided: "+strings.Join(undecided, ", ")
	default:
		res.verdict = "PASS"
	}
	if res.verdict == "PASS" && !cfg.keep {
		_ = os.RemoveAll(filepath.Join(dir, "s3"))
		if r.cl != nil {
			for _, n := range r.cl.Nodes {
				_ = os.RemoveAll(n.DataDir)
			}
		}
	}
	return res
}
