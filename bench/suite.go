package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sizes are the knobs of one suite run; SizesFor returns the presets.
type Sizes struct {
	Name string // smoke, default or large

	// Items 2, 4 and 6 (the cluster benchmark, Run). ReadClients must be
	// enough to saturate the leader alone (the report shows how busy its
	// CPUs were).
	Failovers    int
	Writes       int
	ReadDuration time.Duration
	ReadClients  int

	// Item 1.
	CommitClients  []int
	CommitDuration time.Duration

	// Item 3.
	LoadTableN int // timed loads per configuration

	// Item 5: files per dropped table, for each size measured.
	DropFiles []int

	// Items 7 and 8: table counts at which growth is measured (the last
	// is the memory figure), idempotency records added after the last, and
	// commits timed at each step.
	GrowthTables []int
	IdemRecords  int
	GrowthWrites int
	// SnapshotThreshold is the growth cluster's --snapshot-threshold.
	SnapshotThreshold int
	// RecordSizeN is how many Idempotency-Key records of each kind item 8
	// stores in a state machine in the driver's process to measure a
	// record's size at rest (RecordSize).
	RecordSizeN int

	// Item 9. StartRounds async and as many sync purges of StartFiles-file
	// tables, one at a time; DropLatN async drops at each size of
	// DropLatFiles (the largest is also purged for real, its node's RSS
	// sampled) while DropLatClients commit to other tables, after
	// DropLatQuiet of those commits alone; DropTputClients clients each
	// dropping DropTputPerClient empty tables, against raw Raft no-ops for
	// DropTputRawDuration; DropDrainWait bounds the wait for their purges.
	StartRounds         int
	StartFiles          int
	DropLatFiles        []int
	DropLatN            int
	DropLatClients      int
	DropLatQuiet        time.Duration
	DropTputClients     int
	DropTputPerClient   int
	DropTputRawDuration time.Duration
	DropDrainWait       time.Duration

	// Item 10: how long the loaded run without faults lasts.
	StabilityDuration time.Duration

	// SettleWait bounds the wait, before the first item, for file
	// creation to cost what it does on a quiet file system (fsprobe.go);
	// 0 probes once and waits for nothing. 7 minutes outlasts the longest
	// an ext4 without a journal counts a freed inode as recent (6 minutes,
	// while its inode-table block is dirty).
	SettleWait time.Duration
}

// SizesFor returns the preset named smoke (seconds, for the test),
// default (what make bench runs) or large (BENCH_SIZE=large).
func SizesFor(name string) (Sizes, error) {
	switch name {
	case "smoke":
		return Sizes{
			Name: name, Failovers: 1, Writes: 5, ReadDuration: 500 * time.Millisecond, ReadClients: 2,
			CommitClients: []int{1, 4}, CommitDuration: 500 * time.Millisecond,
			LoadTableN:   50,
			DropFiles:    []int{20, 60},
			GrowthTables: []int{20, 60}, IdemRecords: 100, GrowthWrites: 10, SnapshotThreshold: 64, RecordSizeN: 5000,
			StartRounds: 2, StartFiles: 20, DropLatFiles: []int{20, 60}, DropLatN: 10, DropLatClients: 2,
			DropLatQuiet: 500 * time.Millisecond, DropTputClients: 4, DropTputPerClient: 5,
			DropTputRawDuration: 500 * time.Millisecond, DropDrainWait: 5 * time.Second,
			StabilityDuration: 2 * time.Second,
		}, nil
	case "", "default":
		return Sizes{
			Name: "default", Failovers: 10, Writes: 200, ReadDuration: 5 * time.Second, ReadClients: 256,
			CommitClients: []int{1, 64}, CommitDuration: 10 * time.Second,
			LoadTableN:   2000,
			DropFiles:    []int{1000, 50_000},
			GrowthTables: []int{1000, 5000, 20_000}, IdemRecords: 200_000, GrowthWrites: 200, SnapshotThreshold: 1024, RecordSizeN: recordSizeDefaultN,
			StartRounds: 15, StartFiles: 1000, DropLatFiles: []int{1000, 50_000}, DropLatN: 200, DropLatClients: 16,
			DropLatQuiet: 5 * time.Second, DropTputClients: 64, DropTputPerClient: 128,
			DropTputRawDuration: 5 * time.Second, DropDrainWait: 10 * time.Second,
			StabilityDuration: 10 * time.Minute, SettleWait: 7 * time.Minute,
		}, nil
	case "large":
		return Sizes{
			Name: name, Failovers: 10, Writes: 200, ReadDuration: 5 * time.Second, ReadClients: 256,
			CommitClients: []int{1, 64}, CommitDuration: 10 * time.Second,
			LoadTableN:   2000,
			DropFiles:    []int{1000, 50_000, 500_000},
			GrowthTables: []int{1000, 10_000, 100_000}, IdemRecords: 1_000_000, GrowthWrites: 200, SnapshotThreshold: 1024, RecordSizeN: 200_000,
			StartRounds: 15, StartFiles: 1000, DropLatFiles: []int{1000, 50_000, 500_000}, DropLatN: 200, DropLatClients: 16,
			DropLatQuiet: 5 * time.Second, DropTputClients: 64, DropTputPerClient: 128,
			DropTputRawDuration: 5 * time.Second, DropDrainWait: 10 * time.Second,
			StabilityDuration: 10 * time.Minute, SettleWait: 7 * time.Minute,
		}, nil
	}
	return Sizes{}, fmt.Errorf("unknown size %q (smoke, default or large)", name)
}

// Item numbers, as in issue 7 (1–8) and issue 14 (9, 10).
const (
	ItemCommits     = 1
	ItemReads       = 2
	ItemLoadTable   = 3
	ItemIdempotency = 4
	ItemDrop        = 5
	ItemFailover    = 6
	ItemMemory      = 7
	ItemGrowth      = 8
	// ItemDrops is issue 14's drop measurements: when an async purge
	// starts, drop latency as a distribution under load, drop throughput,
	// S3 requests per file deleted and the purging node's memory.
	ItemDrops = 9
	// ItemStability is issue 14's part 5 without faults: leader changes
	// and elections in a loaded run of a healthy cluster.
	ItemStability = 10
)

// SuiteOptions configures RunSuite.
type SuiteOptions struct {
	Floe  string // floe binary
	Dir   string // work directory; empty: a temporary one, removed after a successful run
	Sizes Sizes
	// Items to run; empty means all. Items 2, 4 and 6 share one cluster
	// run (item 2 alone skips the commits and failovers), as do 7 and 8.
	Items []int
	// Versitygw is the S3 server binary for item 5; empty:
	// harness.FindVersitygw. Without one, item 5 is reported as skipped.
	Versitygw string
	Command   string // reproduces the run; printed in the report
	// ProfileDir, if set, receives a CPU profile of item 1's in-process
	// floe node at the most clients (go tool pprof -top -cum FILE).
	ProfileDir string
	Logger     *slog.Logger
}

func (o *SuiteOptions) log() *slog.Logger {
	if o.Logger == nil {
		return slog.Default()
	}
	return o.Logger
}

func (o *SuiteOptions) wants(items ...int) bool {
	if len(o.Items) == 0 {
		return true
	}
	for _, it := range items {
		if slices.Contains(o.Items, it) {
			return true
		}
	}
	return false
}

// ParseItems parses "1,3,5" into item numbers.
func ParseItems(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < ItemCommits || n > ItemStability {
			return nil, fmt.Errorf("item %q: want a number from %d to %d", f, ItemCommits, ItemStability)
		}
		out = append(out, n)
	}
	return out, nil
}

// SuiteReport is what RunSuite measured. A nil part was not run.
type SuiteReport struct {
	Options  SuiteOptions
	Date     time.Time
	Machine  Machine
	Duration time.Duration

	Commits    *CommitThroughput // item 1
	Cluster    *Report           // items 2, 4, 6
	LoadTable  *LoadTableLatency // item 3
	Drop       *DropBench        // item 5 (and the purge half of 7)
	Growth     *GrowthBench      // items 8 and 7
	RecordSize *RecordSize       // item 8: an Idempotency-Key record at rest
	Drops      *DropsBench       // item 9
	Stability  *StabilityBench   // item 10
	// FileCreate is the file-creation probe taken before the first item.
	FileCreate *FileCreateProbe
	// Failures records items that failed; the rest of the suite still ran.
	Failures map[int]string
}

// RunSuite runs the items of issues 7 and 14 in order, each against a baseline
// measured in the same run. An item that fails is recorded in
// Failures and the suite goes on; the returned error joins them.
func RunSuite(ctx context.Context, o SuiteOptions) (rep *SuiteReport, err error) {
	if o.Floe == "" {
		return nil, errors.New("the floe binary is required (--floe)")
	}
	if _, err := os.Stat(o.Floe); err != nil {
		return nil, fmt.Errorf("floe binary: %w", err)
	}
	log := o.log()
	start := time.Now()
	rep = &SuiteReport{Options: o, Date: start.UTC(), Machine: describeMachine(o.Floe), Failures: map[int]string{}}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "floebench-suite-"); err != nil {
			return nil, err
		}
		defer func() {
			if err == nil {
				os.RemoveAll(dir)
			} else {
				log.Warn("keeping the work directory for inspection", "dir", dir)
			}
		}()
	}
	var errs []error
	fail := func(items []int, e error) {
		for _, it := range items {
			if prev := rep.Failures[it]; prev != "" {
				rep.Failures[it] = prev + "; " + e.Error()
			} else {
				rep.Failures[it] = e.Error()
			}
		}
		errs = append(errs, fmt.Errorf("item %v: %w", items, e))
		log.Error("item failed", "items", items, "error", e)
	}

	if fc, err := settleFileCreation(ctx, filepath.Join(dir, "fsprobe"), o.Sizes.SettleWait, log); err != nil {
		log.Warn("file creation not probed", "error", err)
	} else {
		rep.FileCreate = &fc
	}
	if o.wants(ItemCommits) && ctx.Err() == nil {
		if rep.Commits, err = runCommitThroughput(ctx, &o, filepath.Join(dir, "commits")); err != nil {
			fail([]int{ItemCommits}, err)
		}
	}
	if o.wants(ItemReads, ItemIdempotency, ItemFailover) && ctx.Err() == nil {
		r, err := Run(ctx, Options{
			Floe: o.Floe, Dir: filepath.Join(dir, "cluster"), Failovers: o.Sizes.Failovers, Writes: o.Sizes.Writes,
			ReadDuration: o.Sizes.ReadDuration, Clients: o.Sizes.ReadClients, AckTimeout: 30 * time.Second, Logger: log,
			ReadsOnly: !o.wants(ItemIdempotency, ItemFailover),
		})
		rep.Cluster = r
		if err != nil {
			fail([]int{ItemReads, ItemIdempotency, ItemFailover}, err)
		}
	}
	if o.wants(ItemLoadTable) && ctx.Err() == nil {
		if rep.LoadTable, err = runLoadTableLatency(ctx, &o, filepath.Join(dir, "loadtable")); err != nil {
			fail([]int{ItemLoadTable}, err)
		}
	}
	if o.wants(ItemDrop, ItemMemory) && ctx.Err() == nil {
		if rep.Drop, err = runDropBench(ctx, &o, filepath.Join(dir, "drop")); err != nil {
			fail([]int{ItemDrop}, err)
		}
	}
	if o.wants(ItemGrowth, ItemMemory) && ctx.Err() == nil {
		if rep.Growth, err = runGrowth(ctx, &o, filepath.Join(dir, "growth")); err != nil {
			fail([]int{ItemGrowth, ItemMemory}, err)
		}
	}
	if o.wants(ItemGrowth) && ctx.Err() == nil {
		if rep.RecordSize, err = runRecordSize(ctx, &o, filepath.Join(dir, "recordsize")); err != nil {
			fail([]int{ItemGrowth}, err)
		}
	}
	if o.wants(ItemDrops) && ctx.Err() == nil {
		if rep.Drops, err = runDropsBench(ctx, &o, filepath.Join(dir, "drops")); err != nil {
			fail([]int{ItemDrops}, err)
		}
	}
	if o.wants(ItemStability) && ctx.Err() == nil {
		if rep.Stability, err = runStability(ctx, &o, filepath.Join(dir, "stability")); err != nil {
			fail([]int{ItemStability}, err)
		}
	}
	rep.Duration = time.Since(start)
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	return rep, errors.Join(errs...)
}
