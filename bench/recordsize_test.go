package bench

import (
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRecordSize(t *testing.T) {
	dir := t.TempDir()
	o := &SuiteOptions{Sizes: Sizes{RecordSizeN: 300}, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	rs, err := runRecordSize(t.Context(), o, dir)
	require.NoError(t, err)
	t.Logf("commit %.1f B/record, updateProperties %.1f B/record", rs.Commit, rs.Properties)
	assert.Equal(t, 300, rs.Records)
	for _, v := range []float64{rs.Commit, rs.Properties} {
		assert.Positive(t, v)
		assert.Less(t, v, 1000.0)
	}
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, left, "the state machines are removed")

	// The model is deterministic: the same records, the same size.
	again, err := runRecordSize(t.Context(), o, dir)
	require.NoError(t, err)
	assert.Equal(t, rs.Commit, again.Commit)
	assert.Equal(t, rs.Properties, again.Properties)

	_, err = runRecordSize(t.Context(), &SuiteOptions{}, dir)
	require.Error(t, err)
}

func TestRecordSizeReport(t *testing.T) {
	sizes, err := SizesFor("default")
	require.NoError(t, err)
	rs := &RecordSize{Records: 50_000, Commit: 162.5, Properties: 144.8, Took: 3 * time.Second}
	r := &SuiteReport{Options: SuiteOptions{Floe: "bin/floe", Sizes: sizes}, RecordSize: rs}

	// Alone: the growth cluster did not run.
	md := r.Markdown("")
	cells := tableRow(t, md, SumRecordSize)
	require.Len(t, cells, 5)
	assert.Equal(t, SumRecordSize+" (50K records)", cells[0])
	assert.Equal(t, "162.5 B", cells[1])
	assert.Equal(t, "`updateProperties` outcome: 144.8 B", cells[2])
	assert.Equal(t, "1.12×", cells[3])
	assert.Equal(t, "≤ 200 B — **met**", cells[4])
	assert.Contains(t, md, "## 8. Idempotency record at rest")
	assert.Contains(t, md, "| commit | 50K | 162.5 | met |")
	assert.Contains(t, md, "| `updateProperties` | 50K | 144.8 | met |")
	assert.Contains(t, md, "**Aim: ≤ 200 bytes per record at rest — met**")
	assert.Contains(t, md, "`make bench`")
	assert.Contains(t, md, "go test ./fsm -run '^$' -bench IdempotencyRecordSize -benchtime 1x")
	assert.NotContains(t, md, "With only")

	// Within the growth section, whose text quotes this run's figures.
	mem := map[string]NodeMemory{"n1": {RSS: 100 << 20}}
	step := func(records int, snapshot int64) GrowthStep {
		return GrowthStep{Tables: 1000, Records: records, Fill: time.Second, FillOps: 1000, Commits: []time.Duration{time.Millisecond},
			SnapshotBytes: snapshot, Memory: mem, Leader: "n1"}
	}
	r.Growth = &GrowthBench{Empty: mem, Steps: []GrowthStep{step(0, 1<<20), step(200_000, 60<<20)}, RecordsStep: 1}
	md = r.Markdown("")
	assert.Contains(t, md, "### Idempotency record at rest")
	assert.NotContains(t, md, "## 8. Idempotency record at rest")
	assert.Contains(t, md, "an `updateProperties` record takes 144.8 bytes and a commit's 162.5")
	assert.NotContains(t, md, "145 bytes")

	rs.Commit = 250
	md = r.Markdown("")
	assert.Equal(t, "≤ 200 B — **not met** (see below)", tableRow(t, md, SumRecordSize)[4])
	assert.Contains(t, md, "| commit | 50K | 250.0 | not met |")
	assert.Contains(t, md, "**Aim: ≤ 200 bytes per record at rest — not met**")

	// A smoke run's few records: the figure is said to be coarse.
	rs.Commit, rs.Records = 221, 500
	md = r.Markdown("")
	assert.Contains(t, md, "With only 500 records")

	// Not measured: the growth text says so.
	r.RecordSize = nil
	md = r.Markdown("")
	assert.NotContains(t, md, "| "+SumRecordSize)
	assert.NotContains(t, md, "Idempotency record at rest")
	assert.Contains(t, md, "was not measured in this run")
}
