package bench

import (
	"bytes"
	"image/png"
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

	items, err := ParseItems("1, 3,8,9")
	require.NoError(t, err)
	assert.Equal(t, []int{1, 3, 8, 9}, items)
	_, err = ParseItems("10")
	require.Error(t, err)
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
