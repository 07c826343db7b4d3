package bench

import (
	"bytes"
	"image/png"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
)

func TestNoopOfSize(t *testing.T) {
	for _, size := range []int{20, 100, 566, 1000} {
		b, err := NoopOfSize(size)
		require.NoError(t, err)
		// base64 grows in steps of 4 bytes: at most 3 over.
		assert.GreaterOrEqual(t, len(b), size)
		assert.LessOrEqual(t, len(b), size+3)
		cmd, err := fsm.Decode(b)
		require.NoError(t, err)
		assert.IsType(t, fsm.Noop{}, cmd)
	}
}

func TestSizesAndItems(t *testing.T) {
	for _, name := range []string{"smoke", "default", "large"} {
		s, err := SizesFor(name)
		require.NoError(t, err, name)
		assert.Equal(t, name, s.Name)
		assert.NotEmpty(t, s.CommitClients)
		assert.NotEmpty(t, s.DropFiles)
		assert.NotEmpty(t, s.GrowthTables)
	}
	_, err := SizesFor("huge")
	require.Error(t, err)
	large, _ := SizesFor("large")
	assert.Contains(t, large.DropFiles, 500_000)
	assert.Contains(t, large.GrowthTables, 100_000)
	assert.Equal(t, 1_000_000, large.IdemRecords)

	def, _ := SizesFor("default")
	assert.Equal(t, []int{1000, 50_000}, def.DropLatFiles)
	assert.GreaterOrEqual(t, def.DropLatN, 200)
	assert.Equal(t, 16, def.DropLatClients)
	assert.Equal(t, 64, def.DropTputClients)
	assert.Contains(t, large.DropLatFiles, 500_000)

	assert.Equal(t, 50_000, def.RecordSizeN)
	assert.Equal(t, 200_000, large.RecordSizeN)

	assert.Equal(t, 10*time.Minute, def.StabilityDuration)
	assert.Equal(t, 10*time.Minute, large.StabilityDuration)
	smoke, _ := SizesFor("smoke")
	assert.Positive(t, smoke.StabilityDuration)
	assert.Less(t, smoke.StabilityDuration, time.Minute)
	assert.Positive(t, smoke.RecordSizeN)
	assert.LessOrEqual(t, smoke.RecordSizeN, 5000, "a fraction of a second")

	items, err := ParseItems("1, 3,8,9")
	require.NoError(t, err)
	assert.Equal(t, []int{1, 3, 8, 9}, items)
	items, err = ParseItems("10")
	require.NoError(t, err)
	assert.Equal(t, []int{ItemStability}, items)
	_, err = ParseItems("11")
	require.Error(t, err)
	_, err = ParseItems("0")
	require.Error(t, err)
}

func TestTallyLeaderSamples(t *testing.T) {
	s := func(at int, leader string, term uint64) LeaderSample {
		return LeaderSample{At: time.Duration(at) * time.Second, Node: "n1", Leader: leader, Term: term}
	}
	failed := LeaderSample{At: 3 * time.Second, Node: "n1", Err: "no answer"}

	steady := tallyLeaderSamples([]LeaderSample{s(0, "n2", 4), s(1, "n2", 4), failed, s(4, "n2", 4)})
	assert.Equal(t, 4, steady.Samples)
	assert.Equal(t, 1, steady.Failed)
	assert.Zero(t, steady.Leaderless)
	assert.Zero(t, steady.Changes)
	assert.Empty(t, steady.Events)
	assert.Zero(t, steady.TermIncrease())

	// A spell without a leader, then the same leader again in a new term:
	// no change of leader by the polls, one election by the term.
	same := tallyLeaderSamples([]LeaderSample{s(0, "n2", 4), s(1, "", 5), s(2, "n2", 5)})
	assert.Equal(t, 1, same.Leaderless)
	assert.Zero(t, same.Changes)
	assert.Equal(t, 1, same.TermIncrease())

	moved := tallyLeaderSamples([]LeaderSample{s(0, "n2", 4), s(1, "", 5), s(2, "n3", 5), s(3, "n3", 5), s(4, "n1", 7)})
	assert.Equal(t, 2, moved.Changes)
	assert.Equal(t, 3, moved.TermIncrease())
	require.Len(t, moved.Events, 2)
	assert.Equal(t, LeaderEvent{At: 2 * time.Second, Node: "n1", From: "n2", To: "n3", Term: 5}, moved.Events[0])
	assert.Equal(t, "n1", moved.Events[1].To)

	// The first answered sample sets the starting term.
	late := tallyLeaderSamples([]LeaderSample{failed, s(4, "n2", 9)})
	assert.Equal(t, uint64(9), late.FirstTerm)
	assert.Zero(t, late.TermIncrease())
	assert.Zero(t, tallyLeaderSamples(nil).Samples)
}

func TestStabilityCounts(t *testing.T) {
	assert.Zero(t, counterDelta(3, 3))
	assert.Equal(t, 2, counterDelta(1, 3))
	assert.Zero(t, counterDelta(5, 1), "a counter that went down (a restart) counts nothing")

	sb := &StabilityBench{Nodes: []StabilityNode{
		{ID: "n1", LeaderChangesBefore: 1, LeaderChangesAfter: 1, TermBefore: 2, TermAfter: 2},
		{ID: "n2", LeaderChangesBefore: 1, LeaderChangesAfter: 1, TermBefore: 2, TermAfter: 2},
	}}
	assert.True(t, sb.Stable())
	assert.Zero(t, sb.LeaderChanges())
	assert.Zero(t, sb.Elections())

	// A change only the counter saw (too short for the polls).
	sb.Nodes[1].LeaderChangesAfter = 3
	assert.Equal(t, 2, sb.LeaderChanges())
	assert.False(t, sb.Stable())

	// An election only the polls saw.
	sb.Nodes[1].LeaderChangesAfter = 1
	sb.Nodes[0].Poll = LeaderTally{FirstTerm: 2, LastTerm: 3, Failed: 2}
	assert.Zero(t, sb.LeaderChanges())
	assert.Equal(t, 1, sb.Elections())
	assert.False(t, sb.Stable())
	assert.Equal(t, 2, sb.PollFailures())
}

func TestStabilityReport(t *testing.T) {
	sizes, err := SizesFor("default")
	require.NoError(t, err)
	load := func(ok int) LoadResult {
		return LoadResult{Clients: 16, Elapsed: 10 * time.Minute, OK: ok, P50: 40 * time.Millisecond, P99: 90 * time.Millisecond}
	}
	sb := &StabilityBench{
		Duration: 10 * time.Minute, CommitClients: 16, ReadClients: 16, Tables: 64, PollEvery: time.Second,
		HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond, LeaderLeaseTimeout: 500 * time.Millisecond,
		Leader: "n1", LeaderAfter: "n1", Commits: load(180_000), Reads: load(600_000),
		Nodes: []StabilityNode{{ID: "n1", LeaderChangesBefore: 1, LeaderChangesAfter: 1, TermBefore: 2, TermAfter: 2, Poll: LeaderTally{Samples: 602}}},
	}
	r := &SuiteReport{Options: SuiteOptions{Floe: "bin/floe", Sizes: sizes}, Stability: sb}
	md := r.Markdown("")
	cells := tableRow(t, md, SumStability)
	require.Len(t, cells, 5)
	assert.Equal(t, "0 leader changes, 0 elections", cells[1])
	assert.Contains(t, cells[2], "300 commits/s + 1000 reads/s")
	assert.Contains(t, cells[4], "**met**")
	cells = tableRow(t, md, SumStabilityLat)
	assert.Equal(t, "90.00 ms", cells[1])
	assert.Equal(t, "2.25×", cells[3])
	assert.Contains(t, md, "## 10. Stability: a loaded run without faults")
	assert.Contains(t, md, "10 min")
	assert.Contains(t, md, "--items 10")
	assert.Contains(t, md, "heartbeat **500ms**")

	sb.Commits.Errors, sb.ErrorSpells = 3, []ErrorSpell{{Start: 100 * time.Second, End: 101 * time.Second, Commits: 3}}
	md = r.Markdown("")
	assert.Contains(t, tableRow(t, md, SumStability)[2], "3 errors")
	assert.Contains(t, md, "| 100.0 | 101.0 | 3 | 0 |")
	assert.Contains(t, md, "Leadership held, but 3 commits and 0 reads failed")

	sb.Nodes[0].Poll = LeaderTally{Samples: 602, Changes: 1, FirstTerm: 2, LastTerm: 3,
		Events: []LeaderEvent{{At: 90 * time.Second, Node: "n1", From: "n1", To: "n2", Term: 3}}}
	sb.LeaderAfter = "n2"
	md = r.Markdown("")
	assert.Equal(t, "1 leader changes, 1 elections", tableRow(t, md, SumStability)[1])
	assert.Contains(t, tableRow(t, md, SumStability)[4], "**not met**")
	assert.Contains(t, md, "| 90.0 | n1 | n1 → n2 | 3 |")
}

func TestErrorSpells(t *testing.T) {
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	assert.Empty(t, errorSpells(nil, nil, 2*time.Second))
	spells := errorSpells([]time.Duration{sec(10), sec(11.5), sec(100)}, []time.Duration{sec(12), sec(14.5), sec(99)}, 2*time.Second)
	assert.Equal(t, []ErrorSpell{
		{Start: sec(10), End: sec(12), Commits: 2, Reads: 1},
		{Start: sec(14.5), End: sec(14.5), Reads: 1},
		{Start: sec(99), End: sec(100), Commits: 1, Reads: 1},
	}, spells)
}

func TestFmtRunLength(t *testing.T) {
	assert.Equal(t, "10 min", fmtRunLength(10*time.Minute))
	assert.Equal(t, "2s", fmtRunLength(2*time.Second))
	assert.Equal(t, "1m30s", fmtRunLength(90*time.Second))
}

//go:noinline
func spinForProfile(d time.Duration) int {
	n := 0
	for t0 := time.Now(); time.Since(t0) < d; {
		for i := range 1000 {
			n += i % 7
		}
	}
	return n
}

func TestProfileShares(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, pprof.StartCPUProfile(f))
	spinForProfile(300 * time.Millisecond)
	pprof.StopCPUProfile()
	require.NoError(t, f.Close())

	shares, total, err := profileShares(path, []ProfileShare{
		{Label: "spin", Frame: "bench.spinForProfile"},
		{Label: "absent", Frame: "no.such.function"},
	})
	require.NoError(t, err)
	require.Len(t, shares, 2)
	assert.Positive(t, total)
	assert.Greater(t, shares[0].Share, 0.5, "the spinning function should dominate its own profile")
	assert.Zero(t, shares[1].Share)
}

func TestDropPlotPNG(t *testing.T) {
	sizes, err := SizesFor("default")
	require.NoError(t, err)
	r := &SuiteReport{Options: SuiteOptions{Sizes: sizes}, Drop: &DropBench{Cases: []DropCase{
		{Files: 1000, Mode: "async", Latency: 3 * time.Millisecond},
		{Files: 1000, Mode: "sync", Latency: 200 * time.Millisecond},
		{Files: 50_000, Mode: "async", Latency: 4 * time.Millisecond},
		{Files: 50_000, Mode: "sync", Latency: 6 * time.Second},
	}}}
	b, err := r.DropPlotPNG()
	require.NoError(t, err)
	img, err := png.Decode(bytes.NewReader(b))
	require.NoError(t, err)
	assert.Equal(t, plotW, img.Bounds().Dx())
	assert.Equal(t, plotH, img.Bounds().Dy())

	_, err = (&SuiteReport{Drop: &DropBench{}}).DropPlotPNG()
	require.Error(t, err)
}

// With no time to wait the probe runs once, and its files stay.
func TestFileCreationProbedOnce(t *testing.T) {
	dir := t.TempDir()
	p, err := settleFileCreation(t.Context(), dir, 0, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	assert.Equal(t, 1, p.Probes)
	assert.Positive(t, p.PerFile)
	assert.Equal(t, p.First, p.PerFile)
	assert.Equal(t, p.PerFile <= settledCreate, p.Settled)
	probes, err := filepath.Glob(filepath.Join(dir, "probe-*", "warehouse", "ns", "t*", "metadata", "f*"))
	require.NoError(t, err)
	assert.Len(t, probes, probeFiles)
	dirs, err := filepath.Glob(filepath.Join(dir, "probe-*", "warehouse", "ns", "t*"))
	require.NoError(t, err)
	assert.Len(t, dirs, probeDirs, "files spread over many directories")
}
