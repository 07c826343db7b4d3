// Command floebench starts a 3-node floe cluster of real processes on
// loopback from a prebuilt binary and measures, in one run, failover (leader
// SIGKILL → first acknowledged write, against a healthy write) and
// linearizable read throughput (round-robin over all nodes, against all to
// the leader). It prints a Markdown report on stdout and logs progress to
// stderr.
//
//	go build -o /tmp/floe ./cmd/node
//	go run ./bench/cmd/floebench --floe /tmp/floe --out docs/benchmarks-cluster.md
//
// With --suite it runs the whole benchmark suite (items 1–8 of issue 7,
// item 9, the drop measurements of issue 14, and item 10, its loaded run
// without faults; what make bench runs) and
// writes docs/benchmarks.md and the drop-latency plot next to it;
// --size smoke|default|large (env BENCH_SIZE) picks the sizes and --items
// runs a subset:
//
//	go run ./bench/cmd/floebench --suite --floe /tmp/floe --out docs/benchmarks.md
//	go run ./bench/cmd/floebench --suite --floe /tmp/floe --items 9 --out docs/benchmarks-drop.md
//	go run ./bench/cmd/floebench --suite --floe /tmp/floe --items 10 --out /tmp/stability.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/floe-catalog/floe/bench"
	"github.com/floe-catalog/floe/internal/harness"
)

func main() { os.Exit(run()) }

func run() int {
	fs := flag.NewFlagSet("floebench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: floebench --floe path/to/floe [flags]\n\n"+
			"Starts a %d-node floe cluster on loopback, measures failover and read\n"+
			"throughput against baselines from the same run, and prints a Markdown report.\n\nFlags:\n", bench.ClusterSize)
		fs.PrintDefaults()
	}
	floe := fs.String("floe", "", "path to a floe binary (go build -o /tmp/floe ./cmd/node); required")
	failovers := fs.Int("failovers", 10, "number of leader kills")
	writes := fs.Int("writes", 50, "healthy writes timed for the failover baseline")
	readDur := fs.Duration("read-duration", 5*time.Second, "duration of each read measurement")
	clients := fs.Int("clients", 16, "concurrent keep-alive read clients")
	out := fs.String("out", "", "also write the Markdown report to this file")
	dir := fs.String("dir", "", "directory for the nodes' data and logs (default: a temporary directory, removed after a successful run)")
	ackTimeout := fs.Duration("ack-timeout", 30*time.Second, "longest wait, per round, from the kill to an acknowledged write")
	timeout := fs.Duration("timeout", 15*time.Minute, "stop the whole run after this long (--suite: default 40m; 4h for --size large)")
	suite := fs.Bool("suite", false, "run the whole benchmark suite (items 1–8 of issue 7, items 9 and 10 of issue 14) and write its report (make bench)")
	size := fs.String("size", envOr("BENCH_SIZE", "default"), "--suite sizes: smoke (seconds), default or large (env BENCH_SIZE)")
	items := fs.String("items", "", "--suite: run only these items, e.g. 1,3 or 10 (default: all)")
	profileDir := fs.String("profile-dir", "", "--suite: write a CPU profile of item 1's in-process floe node (64 clients) into this directory")
	jsonOut := fs.String("json", "", "--suite: also write the raw results as JSON here")
	render := fs.String("render", "", "--suite: do not measure; render the report (--out, plot) from results written by --json")
	plot := fs.String("plot", "", "--suite: write the drop-latency plot (PNG) here (default: next to --out, as benchmarks-drop.png)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "floebench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *suite {
		to := *timeout
		if !flagSet(fs, "timeout") {
			switch *size {
			case "large":
				to = 4 * time.Hour
			case "smoke":
				to = 10 * time.Minute
			default:
				to = 40 * time.Minute
			}
		}
		return runSuite(log, suiteArgs{floe: *floe, dir: *dir, size: *size, items: *items, out: *out, plot: *plot, profileDir: *profileDir, json: *jsonOut, render: *render}, to)
	}

	// The reproduce line spells out every flag that shapes the figures, so
	// it means the same thing if the defaults change.
	args := []string{"go", "run", "./bench/cmd/floebench",
		"--floe", *floe,
		"--failovers", strconv.Itoa(*failovers),
		"--writes", strconv.Itoa(*writes),
		"--read-duration", readDur.String(),
		"--clients", strconv.Itoa(*clients),
	}
	if *out != "" {
		args = append(args, "--out", *out)
	}
	command := "go build -o " + harness.ShellJoin([]string{*floe}) + " ./cmd/node && " + harness.ShellJoin(args)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	rep, err := bench.Run(ctx, bench.Options{
		Floe:         *floe,
		Dir:          *dir,
		Failovers:    *failovers,
		Writes:       *writes,
		ReadDuration: *readDur,
		Clients:      *clients,
		AckTimeout:   *ackTimeout,
		Command:      command,
		Logger:       log,
	})
	if rep != nil && len(rep.Rounds) > 0 {
		md := rep.Markdown()
		fmt.Print(md)
		if *out != "" {
			if werr := writeFile(*out, md); werr != nil {
				log.Error("write report", "file", *out, "error", werr)
				return 1
			}
			log.Info("report written", "file", *out)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "floebench: %v\n", err)
		return 1
	}
	return 0
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
