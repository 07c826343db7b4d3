package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// File creation is probed before the suite measures anything. Every floe
// commit creates a file (its new metadata version), and on some file
// systems creating one costs far more for minutes after many files were
// deleted: ext4 without a journal passes over every inode freed in the last
// minute (five when its inode-table block is still dirty), reading the
// block to find out, before it hands out a free one. A run started right
// after a large cleanup (a previous run's work directory, a test suite)
// would charge that to floe.
//
// Which block group of the file system a new file's inode comes from
// depends on its directory, and a probe in one directory can find its group
// quiet while the tables' directories land in one still full of freed
// inodes. So a probe spreads its files over many new table-like
// directories (warehouse/ns/tN/metadata), as item 1's tables do, and the
// suite waits for two settled probes in a row.
const (
	probeDirs      = 64
	probeFiles     = probeDirs * 8
	probeFileBytes = 10 << 10 // about a metadata file after item 1's commits
	// settledCreate is the cost per file under which the file system is
	// taken as settled: tens of µs on an idle disk; about 1 ms on this
	// project's 2-CPU machine right after a 50K-file directory was removed.
	settledCreate = 100 * time.Microsecond
	settleEvery   = 15 * time.Second
)

// FileCreateProbe is what the suite saw of the cost of creating a file
// before it started.
type FileCreateProbe struct {
	First   time.Duration // mean time per file of the first probe
	PerFile time.Duration // of the last probe, when the measurements began
	Probes  int
	Waited  time.Duration // from the first probe to the start
	Settled bool          // the last two probes (the only one when Limit leaves no time for two) ≤ settledCreate
	Limit   time.Duration // the longest the suite would wait (Sizes.SettleWait)
}

// probeFileCreates creates probeFiles files of probeFileBytes, spread over
// probeDirs new directories under a new directory in dir, without fsync
// (the cost looked at is the inode allocation, not the disk), and returns
// the mean time per file; the directories are made before the clock
// starts. The files stay until the suite's work directory goes: removing
// them now would itself leave inodes freed a moment ago.
func probeFileCreates(dir string) (time.Duration, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	d, err := os.MkdirTemp(dir, "probe-")
	if err != nil {
		return 0, err
	}
	dirs := make([]string, probeDirs)
	for i := range dirs {
		dirs[i] = filepath.Join(d, "warehouse", "ns", fmt.Sprintf("t%02d", i), "metadata")
		if err := os.MkdirAll(dirs[i], 0o755); err != nil {
			return 0, err
		}
	}
	buf := make([]byte, probeFileBytes)
	t0 := time.Now()
	for i := range probeFiles {
		name := filepath.Join(dirs[i%probeDirs], fmt.Sprintf("f%04d", i))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return 0, err
		}
		_, werr := f.Write(buf)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return 0, werr
		}
	}
	return time.Since(t0) / probeFiles, nil
}

// settleFileCreation probes file creation under dir every settleEvery until
// two probes in a row cost at most settledCreate per file or limit has
// passed (under settleEvery: probe once, settled if that one is), logging
// each probe. It ends early, with what it has, when ctx
// ends.
func settleFileCreation(ctx context.Context, dir string, limit time.Duration, log *slog.Logger) (FileCreateProbe, error) {
	p := FileCreateProbe{Limit: limit}
	start := time.Now()
	quietBefore := false // the probe before this one was under settledCreate
	for {
		d, err := probeFileCreates(dir)
		if err != nil {
			return p, fmt.Errorf("file creation probe: %w", err)
		}
		if p.Probes == 0 {
			p.First = d
		}
		p.Probes++
		quiet := d <= settledCreate
		p.PerFile, p.Waited, p.Settled = d, time.Since(start), quiet && (quietBefore || limit < settleEvery)
		quietBefore = quiet
		if p.Settled || p.Waited+settleEvery > limit {
			log.Info("file creation probed", "per_file_us", d.Microseconds(), "settled", p.Settled, "waited", p.Waited.Round(time.Second))
			return p, nil
		}
		log.Info("waiting for file creation to settle (recently deleted files on this file system)",
			"per_file_us", d.Microseconds(), "aim_us", settledCreate.Microseconds(), "waited", p.Waited.Round(time.Second), "limit", limit)
		select {
		case <-ctx.Done():
			return p, nil
		case <-time.After(settleEvery):
		}
	}
}
