package bench

import (
	"bytes"
	"context"
	"image/png"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSmoke builds floe, runs the whole benchmark with tiny sizes on a real
// 3-node cluster and checks only the shape of the report: every row is
// there and carries positive numbers. It asserts nothing about timings.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster of processes")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build floe with")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	dir := t.TempDir()
	bin := filepath.Join(dir, "floe")
	build := exec.CommandContext(ctx, goBin, "build", "-o", bin, "github.com/floe-catalog/floe/cmd/node")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	rep, err := Run(ctx, Options{
		Floe:         bin,
		Dir:          filepath.Join(dir, "cluster"),
		Failovers:    1,
		Writes:       5,
		ReadDuration: time.Second,
		Clients:      2,
		AckTimeout:   30 * time.Second,
		Command:      "floebench --smoke",
		Logger:       slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	require.NoError(t, err)
	md := rep.Markdown()
	t.Log("\n" + md)

	require.Len(t, rep.Rounds, 1)
	require.Len(t, rep.HealthyWrites, 5)
	require.Zero(t, rep.ReadsLeader.Errors)
	require.Zero(t, rep.ReadsAll.Errors)
	require.Equal(t, []string{"n1", "n2", "n3"}, rep.ReadsAll.Targets)

	// Summary rows: value cell positive; ratio cell positive where there is one.
	for _, tc := range []struct {
		row       string
		unit      string
		withRatio bool
	}{
		{RowHealthyWrite, "ms", false},
		{RowFailoverMedian, "ms", true},
		{RowFailoverMax, "ms", true},
		{RowReadsLeader, "req/s", false},
		{RowReadsAll, "req/s", true},
		{RowCommitPlain, "ms", false},
		{RowCommitKeyedP50, "ms", true},
		{RowCommitKeyedP99, "ms", true},
	} {
		cells := tableRow(t, md, tc.row)
		require.Len(t, cells, 4, tc.row)
		require.Greater(t, number(t, cells[1], tc.unit), 0.0, tc.row)
		if tc.withRatio {
			require.Greater(t, number(t, cells[3], "×"), 0.0, tc.row)
		}
	}
	for _, want := range []string{"| nproc | ", "| Go (driver) | go", "| date | ", "floebench --smoke", "## Failover rounds", "| 1 | n"} {
		require.Contains(t, md, want)
	}
}

// tableRow returns the cells of the Markdown table row whose first cell
// starts with label.
func tableRow(t *testing.T, md, label string) []string {
	t.Helper()
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "| "+label) {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		return cells
	}
	t.Fatalf("no row %q in:\n%s", label, md)
	return nil
}

// number parses a cell such as "12.34 ms" or "1.50×".
func number(t *testing.T, cell, unit string) float64 {
	t.Helper()
	s, ok := strings.CutSuffix(cell, unit)
	require.True(t, ok, "cell %q lacks unit %q", cell, unit)
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	require.NoError(t, err, "cell %q", cell)
	return f
}

// TestSuiteSmoke runs every item of the suite with the smoke sizes (a few
// seconds each) and checks the report's shape: every summary row is there
// with positive numbers, and the drop plot is a PNG. It asserts nothing
// about timings. Without versitygw item 5 reports itself skipped (unless
// FLOE_REQUIRE_S3=1); a floe built without purge jobs reports "purge not
// available in this build".
func TestSuiteSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several clusters of processes")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build floe with")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "floe")
	out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, "github.com/floe-catalog/floe/cmd/node").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	sizes, err := SizesFor("smoke")
	require.NoError(t, err)
	rep, err := RunSuite(ctx, SuiteOptions{
		Floe: bin, Dir: filepath.Join(dir, "suite"), Sizes: sizes, Command: "floebench --suite --size smoke",
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	require.NoError(t, err)
	md := rep.Markdown("benchmarks-drop.png")
	t.Log("\n" + md)
	require.Empty(t, rep.Failures)

	positive := func(label, unit string, withRatio bool) {
		t.Helper()
		cells := tableRow(t, md, label)
		require.Len(t, cells, 5, label)
		require.Greater(t, number(t, firstField(cells[1], unit), unit), 0.0, label)
		if withRatio {
			require.Greater(t, number(t, cells[3], "×"), 0.0, label)
		}
	}
	for _, n := range sizes.CommitClients {
		positive(SumCommit+", "+clientsLabel(n), "commits/s", true)
		positive(SumCommitLat+", "+clientsLabel(n), "ms", true)
	}
	positive(SumLeaderCPU+", "+clientsLabel(slices.Max(sizes.CommitClients)), "ms", true)
	positive(SumReads, "req/s", true)
	positive(SumLoadP50, "ms", true)
	positive(SumLoadP99, "ms", true)
	positive(SumIdemP50, "ms", true)
	positive(SumFailover, "ms", true)
	positive(SumRSS, "MiB", true)
	positive(SumGrowthLatency, "ms", true)
	positive(SumGrowthSnap, "MiB", true)
	positive(SumRecordSize, "B", true)

	require.NotNil(t, rep.Drop)
	switch {
	case rep.Drop.Skipped != "":
		require.NotEqual(t, "1", os.Getenv("FLOE_REQUIRE_S3"), "versitygw is required: %s", rep.Drop.Skipped)
		require.Contains(t, md, "skipped: ")
	case rep.Drop.Unavailable != "":
		require.Contains(t, md, PurgeUnavailable)
	default:
		for _, n := range sizes.DropFiles {
			positive(SumDrop+", "+fmtFiles(n)+" files", "ms", true)
			for _, mode := range []string{"async", "sync"} {
				c, ok := rep.Drop.Case(n, mode)
				require.True(t, ok, "%s drop of %d files", mode, n)
				require.Zero(t, c.Left, "%s drop of %d files left objects behind", mode, n)
				require.GreaterOrEqual(t, c.FilesDeleted, int64(n), "%s drop of %d files", mode, n)
			}
		}
		positive(SumPurge, "files/s", true)
		positive(SumPurgeRSS, "MiB", true)
		img, err := rep.DropPlotPNG()
		require.NoError(t, err)
		cfg, err := png.DecodeConfig(bytes.NewReader(img))
		require.NoError(t, err)
		require.Positive(t, cfg.Width)
	}
	require.NotNil(t, rep.Drops)
	switch d := rep.Drops; {
	case d.Skipped != "":
		require.NotEqual(t, "1", os.Getenv("FLOE_REQUIRE_S3"), "versitygw is required: %s", d.Skipped)
	case d.Unavailable != "":
		require.Contains(t, md, PurgeUnavailable)
	default:
		positive(SumDropsRunning, "ms", true)
		positive(SumDropsDone, "ms", true)
		for _, n := range sizes.DropLatFiles {
			l, ok := d.LatSize(n)
			require.True(t, ok, "drop latency at %d files", n)
			require.Len(t, l.Drops, sizes.DropLatN)
			positive(SumDropsLatP50+d.dropsLatLabel(l), "ms", true)
			positive(SumDropsLatP99+d.dropsLatLabel(l), "ms", true)
		}
		positive(SumDropsFlat, "ms", true)
		positive(SumDropsBg, "commits/s", true)
		positive(SumDropsTput, "drops/s", true)
		positive(SumDropsS3, "DeleteObjects", true)
		// The growth itself may be 0 at smoke sizes: only the ratio (peak
		// against before) must be positive.
		cells := tableRow(t, md, SumDropsRSS)
		require.Len(t, cells, 5)
		require.Greater(t, number(t, cells[3], "×"), 0.0)
		for _, run := range append(d.Start, d.Large) {
			require.Zero(t, run.Left, "%s purge of %d files left objects behind", run.Mode, run.Files)
			require.Positive(t, run.S3.DeleteObjects, "%s purge of %d files: no DeleteObjects counted", run.Mode, run.Files)
			require.Equal(t, run.FloeBatches, float64(run.S3.DeleteObjects), "floe's delete batches against the proxy's DeleteObjects")
		}
		require.Equal(t, 2*sizes.StartRounds, len(d.Start))
		require.Zero(t, d.Tput.Errors)
		require.GreaterOrEqual(t, d.TputEntries, uint64(d.Tput.OK), "the leader's commit index moved at least one entry per drop")
		if d.TputDrained > 0 {
			require.GreaterOrEqual(t, d.EntriesPerPurge(), 1.0, "a purge costs its finish at least")
			require.Contains(t, md, "per purge after its drop's own entry")
		}
	}
	require.NotNil(t, rep.Stability)
	require.Len(t, rep.Stability.Nodes, ClusterSize)
	for _, n := range rep.Stability.Nodes {
		require.Positive(t, n.Poll.Samples, "no cluster status polled on %s", n.ID)
		require.Positive(t, n.LeaderChangesBefore, "%s: %s before the load", n.ID, metricLeaderChanges)
		require.Positive(t, n.TermBefore, "%s: %s before the load", n.ID, metricTerm)
	}
	require.Positive(t, rep.Stability.Commits.OK)
	require.Positive(t, rep.Stability.Reads.OK)
	// The number of leader changes is a measurement, not a test: 0 or more.
	cells := tableRow(t, md, SumStability)
	require.Len(t, cells, 5)
	require.GreaterOrEqual(t, number(t, firstField(cells[1], "leader changes"), "leader changes"), 0.0)
	positive(SumStabilityLat, "ms", true)
	for _, want := range []string{"## Reproduce", "floebench --suite --size smoke", "## 1. Commit throughput", "## 8. Growth", "## 9. Drops", "## 10. Stability", "--items 10", "| nproc | "} {
		require.Contains(t, md, want)
	}
}

// firstField returns the cell up to and including its unit ("12 ms" of
// "12 ms (…)").
func firstField(cell, unit string) string {
	if i := strings.Index(cell, unit); i >= 0 {
		return cell[:i+len(unit)]
	}
	return cell
}
