package bench

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/floe-catalog/floe/internal/idemmodel"
	"github.com/floe-catalog/floe/internal/raftnode"
)

// Labels of the suite's summary rows (first cell). The smoke test finds
// the rows by them.
const (
	SumCommit        = "1. commit throughput"     // + ", 64 clients"
	SumCommitLat     = "1. commit latency p50"    // + ", 64 clients"
	SumLeaderCPU     = "1. leader CPU per commit" // + ", 64 clients"
	SumReads         = "2. linearizable loadTable throughput, all nodes"
	SumLoadP50       = "3. loadTable p50, warm, metadata cache on"
	SumLoadP99       = "3. loadTable p99, warm, metadata cache on"
	SumIdemP50       = "4. commit p50 with Idempotency-Key"
	SumDrop          = "5. drop latency, async"
	SumPurge         = "5. purge throughput"
	SumFailover      = "6. failover, SIGKILL leader → first acknowledged write, median"
	SumRSS           = "7. RSS of the leader"
	SumPurgeRSS      = "7. peak RSS during the largest purge"
	SumGrowthLatency = "8. commit latency p50"
	SumGrowthSnap    = "8. snapshot size"
	SumRecordsState  = "8. with idempotency records"
	SumRecordSize    = "8. idempotency record at rest, commit outcome"
)

// Aims of issue 7.
const (
	aimCommitRatio = 0.50
	aimLeaderCPU   = 300 * time.Microsecond // issue 14, part 1
	aimReadRatio   = 2.0
	aimLoadP50     = time.Millisecond
	aimIdemRatio   = 1.05
	aimRecordBytes = 200.0 // bytes per Idempotency-Key record at rest
)

// clientsLabel is "64 clients" or "1 client".
func clientsLabel(n int) string {
	if n == 1 {
		return "1 client"
	}
	return fmt.Sprintf("%d clients", n)
}

func yesNo(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**not met** (see below)"
}

// metText is yesNo for running text.
func metText(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

func ratioF(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// fmtFiles prints 1000 as 1K and 50000 as 50K.
func fmtFiles(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return fmt.Sprintf("%dK", n/1000)
	}
	return fmt.Sprint(n)
}

// Markdown renders the suite report: a summary (figure, same-run baseline,
// ratio, aim), the command, then one section per item with its details, its
// method and, for an aim not met, the bottleneck and what would lift it.
// plot is the path of the drop-latency PNG relative to the report, "" when
// none is written.
func (r *SuiteReport) Markdown(plot string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	o := r.Options

	w("# floe benchmarks\n\n")
	w("Measured by `floebench --suite` (bench/) on %s, sizes **%s**, in %s. ",
		r.Date.Format("2006-01-02 15:04 MST"), o.Sizes.Name, r.Duration.Round(time.Second))
	w("Every figure sits next to a baseline measured in the same run on the same machine, and the ratio between them is the number to compare across runs: the machine is shared and noisy, and no absolute time here is a pass/fail bar.\n\n")
	if len(r.Failures) > 0 {
		w("**Some items failed in this run:**\n\n")
		for _, it := range slices.Sorted(maps.Keys(r.Failures)) {
			w("- item %d: `%s`\n", it, truncate(r.Failures[it], 600))
		}
		w("\n")
	}

	w("## Summary\n\n")
	w("| measurement | figure | baseline (same run) | ratio | aim |\n")
	w("| --- | ---: | ---: | ---: | --- |\n")
	r.summaryRows(w)
	w("\n")

	w("## Reproduce\n\nFrom the module root (`make bench` runs this with the default sizes; `make bench BENCH_SIZE=large` with the large ones):\n\n```sh\n%s\n```\n\n", o.Command)
	r.machineSection(w)

	if ct := r.Commits; ct != nil {
		r.commitSection(w, ct)
	}
	if c := r.Cluster; c != nil {
		r.readsSection(w, c)
	}
	if lt := r.LoadTable; lt != nil {
		r.loadTableSection(w, lt)
	}
	if c := r.Cluster; c != nil {
		r.idempotencySection(w, c)
	}
	if d := r.Drop; d != nil {
		r.dropSection(w, d, plot)
	}
	if c := r.Cluster; c != nil {
		r.failoverSection(w, c)
	}
	if g := r.Growth; g != nil {
		r.memorySection(w, g)
		r.growthSection(w, g)
	}
	if rs := r.RecordSize; rs != nil && (r.Growth == nil || len(r.Growth.Steps) == 0) {
		// The growth cluster did not run or measured nothing: the record
		// size stands alone under item 8.
		w("## 8. Idempotency record at rest\n\n")
		r.recordSizeSection(w, rs)
	}
	if d := r.Drops; d != nil {
		r.dropsSection(w, d)
	}
	if s := r.Stability; s != nil {
		r.stabilitySection(w, s)
	}
	return b.String()
}

func (r *SuiteReport) maxCommitClients() int {
	n := 0
	for _, c := range r.Options.Sizes.CommitClients {
		n = max(n, c)
	}
	return n
}

func (r *SuiteReport) summaryRows(w func(string, ...any)) {
	if ct := r.Commits; ct != nil {
		maxC := r.maxCommitClients()
		counts := slices.Clone(r.Options.Sizes.CommitClients)
		slices.Sort(counts)
		slices.Reverse(counts)
		for _, clients := range counts {
			raw, ok1 := ct.Row(TputRaw, clients)
			fl, ok2 := ct.Row(TputFloeLeader, clients)
			if !ok1 || !ok2 {
				continue
			}
			aim := "—"
			if clients == maxC {
				rt := ratioF(fl.Result.PerSecond(), raw.Result.PerSecond())
				aim = fmt.Sprintf("≥ %.2f× — %s", aimCommitRatio, yesNo(rt >= aimCommitRatio))
			}
			w("| %s, %s (REST, 3 nodes, to the leader) | %.0f commits/s | raw Raft, same-size no-ops: %.0f entries/s | %s | %s |\n",
				SumCommit, clientsLabel(clients), fl.Result.PerSecond(), raw.Result.PerSecond(), ratio(fl.Result.PerSecond(), raw.Result.PerSecond()), aim)
		}
		if raw, ok1 := ct.Row(TputRaw, maxC); ok1 {
			if fl, ok2 := ct.Row(TputFloeLeader, maxC); ok2 && fl.Leader.Total() > 0 {
				per := fl.LeaderPerOp()
				w("| %s, %s (user %s ms, kernel %s ms) | %s ms | raw Raft CPU per entry (3 nodes and clients together): %s ms | %s | ≤ %s ms — %s |\n",
					SumLeaderCPU, clientsLabel(maxC), msPrec(per.User), msPrec(per.System), msPrec(per.Total()), msPrec(raw.Result.CPUPerOp()),
					ratio(float64(per.Total()), float64(raw.Result.CPUPerOp())), msPrec(aimLeaderCPU), yesNo(per.Total() <= aimLeaderCPU))
			}
		}
		for _, clients := range counts {
			raw, ok1 := ct.Row(TputRaw, clients)
			fl, ok2 := ct.Row(TputFloeLeader, clients)
			if !ok1 || !ok2 {
				continue
			}
			w("| %s, %s | %s ms | raw Raft no-op p50: %s ms | %s | — |\n", SumCommitLat, clientsLabel(clients), ms(fl.Result.P50), ms(raw.Result.P50),
				ratio(float64(fl.Result.P50), float64(raw.Result.P50)))
		}
	}
	if c := r.Cluster; c != nil && c.ReadsLeader.OK > 0 {
		rl, ra := c.ReadsLeader.PerSecond(), c.ReadsAll.PerSecond()
		w("| %s (%d clients, %s) | %.0f req/s | all to the leader: %.0f req/s | %s | ≥ %.0f× with pinned CPUs — %s |\n", SumReads, c.ReadsAll.Clients, placementLabel(c.CPUs), ra, rl,
			ratio(ra, rl), aimReadRatio, readAimVerdict(c))
	}
	if lt := r.LoadTable; lt != nil {
		on50, off50 := median(lt.CacheOn), median(lt.CacheOff)
		on99, off99 := percentile(lt.CacheOn, 0.99), percentile(lt.CacheOff, 0.99)
		w("| %s (n=%d) | %s ms | cache off: %s ms | %s | p50 < 1 ms — %s |\n", SumLoadP50, lt.N, msPrec(on50), msPrec(off50),
			ratio(float64(on50), float64(off50)), yesNo(on50 < aimLoadP50))
		w("| %s (n=%d) | %s ms | cache off: %s ms | %s | — |\n", SumLoadP99, lt.N, msPrec(on99), msPrec(off99), ratio(float64(on99), float64(off99)))
	}
	if c := r.Cluster; c != nil && len(c.Commits.Plain) > 0 {
		kp, pp := median(c.Commits.Keyed), median(c.Commits.Plain)
		w("| %s (n=%d) | %s ms | without key: %s ms | %s | < %.2f× — %s |\n", SumIdemP50, len(c.Commits.Keyed), ms(kp), ms(pp),
			ratio(float64(kp), float64(pp)), aimIdemRatio, yesNo(ratioF(float64(kp), float64(pp)) < aimIdemRatio))
	}
	if d := r.Drop; d != nil {
		switch {
		case d.Skipped != "":
			w("| 5. drop latency and purge throughput | skipped: %s | — | — | — |\n", d.Skipped)
		case d.Unavailable != "":
			w("| 5. drop latency and purge throughput | %s (%s) | — | — | — |\n", PurgeUnavailable, d.Unavailable)
		default:
			for _, files := range r.Options.Sizes.DropFiles {
				a, ok1 := d.Case(files, "async")
				s, ok2 := d.Case(files, "sync")
				if ok1 && ok2 {
					w("| %s, %s files | %s ms | sync drop (purge awaited): %s ms | %s | — |\n", SumDrop, fmtFiles(files), ms(a.Latency), ms(s.Latency),
						ratio(float64(a.Latency), float64(s.Latency)))
				}
			}
			if s, ok := d.LargestSync(); ok && d.RawDelete > 0 {
				fp, rp := float64(s.Objects)/s.Latency.Seconds(), float64(d.RawFiles)/d.RawDelete.Seconds()
				w("| %s (sync drop, %s files) | %.0f files/s | raw DeleteObjects loop, same server: %.0f files/s | %s | — |\n",
					SumPurge, fmtFiles(s.Files), fp, rp, ratio(fp, rp))
			}
		}
	}
	if c := r.Cluster; c != nil && len(c.Rounds) > 0 {
		fm, hw := c.FailoverMedian(), c.HealthyWriteMedian()
		w("| %s (n=%d) | %s ms | healthy write median: %s ms | %s | ≤ %s — %s |\n", SumFailover, len(c.Rounds), ms(fm), ms(hw), ratio(float64(fm), float64(hw)),
			aimFailoverMedian, yesNo(fm <= aimFailoverMedian))
	}
	if g := r.Growth; g != nil && len(g.Steps) > 0 {
		last := g.Steps[len(g.Steps)-1]
		empty := g.Empty[last.Leader]
		what := fmt.Sprintf("%s tables", fmtFiles(last.Tables))
		if last.Records > 0 {
			what += fmt.Sprintf(" + %s idempotency records", fmtFiles(last.Records))
		}
		w("| %s, %s | %s | same node, empty: %s | %s | — |\n", SumRSS, what, mib(last.Memory[last.Leader].RSS), mib(empty.RSS),
			ratio(float64(last.Memory[last.Leader].RSS), float64(empty.RSS)))
	}
	if d := r.Drop; d != nil && d.PurgeRSSPeak > 0 {
		w("| %s (%s files, node %s) | %s | same node before the drop: %s | %s | — |\n", SumPurgeRSS, fmtFiles(d.PurgeRSSFiles), d.PurgeRSSNode,
			mib(d.PurgeRSSPeak), mib(d.PurgeRSSBefore), ratio(float64(d.PurgeRSSPeak), float64(d.PurgeRSSBefore)))
	}
	if g := r.Growth; g != nil {
		steps := g.tableSteps()
		if len(steps) >= 2 {
			first, last := steps[0], steps[len(steps)-1]
			w("| %s at %s tables | %s ms | at %s tables: %s ms | %s | — |\n", SumGrowthLatency, fmtFiles(last.Tables), ms(median(last.Commits)),
				fmtFiles(first.Tables), ms(median(first.Commits)), ratio(float64(median(last.Commits)), float64(median(first.Commits))))
			w("| %s at %s tables | %s | at %s tables (%.0f× fewer): %s | %s | — |\n", SumGrowthSnap, fmtFiles(last.Tables), mib(last.SnapshotBytes),
				fmtFiles(first.Tables), float64(last.Tables)/float64(first.Tables), mib(first.SnapshotBytes),
				ratio(float64(last.SnapshotBytes), float64(first.SnapshotBytes)))
		}
	}
	if g := r.Growth; g != nil && g.RecordsStep > 0 {
		rs, ts := g.Steps[g.RecordsStep], g.Steps[g.RecordsStep-1]
		with := fmt.Sprintf("%s tables + %s records", fmtFiles(rs.Tables), fmtFiles(rs.Records))
		alone := fmt.Sprintf("%s tables alone", fmtFiles(ts.Tables))
		w("| %s: snapshot size, %s | %s | %s: %s | %s | — |\n", SumRecordsState, with, mib(rs.SnapshotBytes), alone, mib(ts.SnapshotBytes), ratio(float64(rs.SnapshotBytes), float64(ts.SnapshotBytes)))
		if rs.Snapshots > 0 && ts.Snapshots > 0 {
			w("| %s: snapshot write time, %s | %s ms | %s: %s ms | %s | — |\n", SumRecordsState, with, ms(rs.SnapshotPersist), alone, ms(ts.SnapshotPersist), ratio(float64(rs.SnapshotPersist), float64(ts.SnapshotPersist)))
		}
		if rs.Restore.Took > 0 && ts.Restore.Took > 0 {
			w("| %s: restore on a new node, %s | %s ms | %s: %s ms | %s | — |\n", SumRecordsState, with, ms(rs.Restore.Took), alone, ms(ts.Restore.Took), ratio(float64(rs.Restore.Took), float64(ts.Restore.Took)))
		}
		w("| %s: leader RSS, %s | %s | %s: %s | %s | — |\n", SumRecordsState, with, mib(rs.Memory[rs.Leader].RSS), alone, mib(ts.Memory[ts.Leader].RSS), ratio(float64(rs.Memory[rs.Leader].RSS), float64(ts.Memory[ts.Leader].RSS)))
	}
	if rs := r.RecordSize; rs != nil {
		w("| %s (%s records) | %.1f B | `updateProperties` outcome: %.1f B | %s | ≤ %.0f B — %s |\n", SumRecordSize, fmtFiles(rs.Records), rs.Commit, rs.Properties,
			ratio(rs.Commit, rs.Properties), aimRecordBytes, yesNo(rs.Commit <= aimRecordBytes))
	}
	r.dropsSummaryRows(w)
	r.stabilitySummaryRows(w)
}

// machineCell prints a MachineLoad as "93% / 4%".
func machineCell(m MachineLoad) string {
	return fmt.Sprintf("%.0f%% / %.0f%%", 100*m.Busy, 100*m.IOWait)
}

// msPrec prints milliseconds with three decimals (sub-millisecond figures).
func msPrec(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

func (r *SuiteReport) machineSection(w func(string, ...any)) {
	m := r.Machine
	w("## Machine\n\n| | |\n| --- | --- |\n")
	w("| nproc | %d |\n", m.NumCPU)
	if m.CPUModel != "" {
		w("| CPU | %s |\n", m.CPUModel)
	}
	w("| OS/arch | %s |\n| Go (driver) | %s |\n", m.OSArch, m.GoVersion)
	if m.FloeGo != "" {
		w("| Go (floe binary) | %s |\n", m.FloeGo)
	}
	if m.FloeRevision != "" {
		w("| floe revision | %s |\n", m.FloeRevision)
	}
	if m.SourceRevision != "" {
		w("| git HEAD where the driver ran (binary not VCS-stamped) | %s |\n", m.SourceRevision)
	}
	if fc := r.FileCreate; fc != nil {
		state := fmt.Sprintf("settled (≤ %d µs)", settledCreate.Microseconds())
		switch {
		case fc.Settled:
		case fc.Limit == 0:
			state = fmt.Sprintf("**not settled** (aim ≤ %d µs; no wait at these sizes)", settledCreate.Microseconds())
		default:
			state = fmt.Sprintf("**not settled** (aim ≤ %d µs; waited the limit, %s): file creation, and so every commit, costs more than on a quiet disk", settledCreate.Microseconds(), fc.Limit)
		}
		probes := "1 probe"
		if fc.Probes != 1 {
			probes = fmt.Sprintf("%d probes over %s, the first %d µs", fc.Probes, fc.Waited.Round(time.Second), fc.First.Microseconds())
		}
		w("| file creation before the run (open O_CREAT + %d KiB write, %d files a probe) | %d µs per file at the start, %s; %s |\n",
			probeFileBytes>>10, probeFiles, fc.PerFile.Microseconds(), state, probes)
	}
	w("| date | %s |\n\n", r.Date.Format(time.RFC3339))
	w("Everything — the nodes, versitygw, the raw Raft clusters and the load clients — shares these %d CPUs and one disk, so a ratio here says how floe compares with its baseline on one small machine, not what separate machines would give.\n\n", m.NumCPU)
	if r.FileCreate != nil {
		w("Before the first item the suite creates files, spread over %d new table-like directories, until doing so costs at most %d µs each in two probes %s apart (or %s has passed): on ext4 without a journal, for minutes after many files were deleted (a previous run's work directory, a test suite), creating one costs up to a millisecond, because the allocator passes over every recently freed inode; every commit creates its metadata file, so a run started then would charge that to floe.\n\n",
			probeDirs, settledCreate.Microseconds(), settleEvery, r.FileCreate.Limit)
	}
}

func (r *SuiteReport) commitSection(w func(string, ...any), ct *CommitThroughput) {
	maxC := r.maxCommitClients()
	w("## 1. Commit throughput and latency\n\n")
	w("Closed loop: each client sends its next request when the previous one is answered, for %s per row. A floe commit is `POST /v1/namespaces/tput/tables/{t}` with one `set-properties` update, no requirements; %d tables, each client committing only to its own %d (no two clients race for one table's compare-and-set). ", ct.Duration, ct.Tables, throughputTablesPerClient)
	w("One such commit is a CommitTables log entry of **%d bytes** and writes a new metadata file (%d bytes for a new table, %d bytes after the floe rows: it grows with the metadata log). ", ct.EntryBytes, ct.MetadataBytes, ct.MetadataBytesEnd)
	w("The baseline is a raw hashicorp/raft cluster of 3 nodes in the driver's process, built from floe's own parts — the `internal/raftlog` bbolt log and stable store, `transport.Listen` with `raftnode.NewNetworkTransport(mux.RaftLayer())` (floe's transport: 3 pooled connections, 10 s deadline, no pipelined replication), `internal/raftnode`'s default Raft settings — applying `fsm.Noop` entries padded to the same size through the leader.\n\n")
	w("| row | clients | ops/s | p50 (ms) | p99 (ms) | errors | CPU per op (ms) | CPU measured in | machine busy / iowait | ops/s ÷ raw Raft |\n")
	w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |\n")
	for _, clients := range r.Options.Sizes.CommitClients {
		raw, _ := ct.Row(TputRaw, clients)
		for _, row := range ct.Rows {
			if row.Clients != clients {
				continue
			}
			w("| %s | %d | %.0f | %s | %s | %d | %s | %s | %s | %s |\n", row.Label, row.Clients, row.Result.PerSecond(), ms(row.Result.P50),
				ms(row.Result.P99), row.Result.Errors, ms(row.Result.CPUPerOp()), row.CPUOf, machineCell(row.Result.Machine), ratio(row.Result.PerSecond(), raw.Result.PerSecond()))
		}
	}
	w("\n")
	for _, row := range ct.Rows {
		if row.Result.FirstError != "" {
			w("First error (%s, %d clients): `%s`\n\n", row.Label, row.Clients, truncate(row.Result.FirstError, 300))
		}
		if row.Conflicts > 0 {
			w("%s, %d clients: %d commits answered 409.\n\n", row.Label, row.Clients, row.Conflicts)
		}
	}
	w("- **raw Raft + floe's state machine**: the same raw cluster, but applying through `fsm.FSM` (bbolt; one read-write transaction and fdatasync per applied batch): the state machine's own cost.\n")
	w("- **metadata file writes alone**: the driver writes one new %d-byte file per operation through `internal/storage` into a `file://` directory, exactly as a commit writes its metadata file (temporary file, fsync, rename, directory fsync), spread over the same number of table directories. No Raft, no catalog; run last, with the cluster stopped.\n", ct.MetadataBytesEnd)
	w("- **floe in-process**: one floe node (raftnode + catalog, the binary's code) inside the driver, a cluster of one: the whole commit path without replication or a process boundary. At %s its CPU is profiled (below).\n", clientsLabel(maxC))
	w("- **metadata files in memory**: the same in-process node with the catalog's files kept in a map instead of floe's storage layer. Not something floe offers (it is not durable): it measures what the durable metadata write costs.\n")
	w("- **floe, 3 nodes**: three `floe` processes with a shared `file://` warehouse. To the leader: like the raw baseline, which applies at the leader. Round-robin: what a load balancer gives; two commits in three are forwarded by a follower.\n\n")

	raw, ok1 := ct.Row(TputRaw, maxC)
	fl, ok2 := ct.Row(TputFloeLeader, maxC)
	if !ok1 || !ok2 {
		return
	}
	rt := ratioF(fl.Result.PerSecond(), raw.Result.PerSecond())
	w("**Aim: ≥ %.0f%% of the baseline's throughput at %s — %s.** floe: %.0f commits/s, raw Raft: %.0f entries/s (%.0f%%).\n\n",
		100*aimCommitRatio, clientsLabel(maxC), metText(rt >= aimCommitRatio), fl.Result.PerSecond(), raw.Result.PerSecond(), 100*rt)
	if fl.Leader.Total() > 0 {
		per := fl.LeaderPerOp()
		w("**Aim: leader CPU per commit ≤ %s ms at %s — %s.** The leader process spent %s ms per commit (utime and stime of `/proc/<pid>/stat` over the row): %s ms in user space and %s ms (%.0f%%) in the kernel, which counts the system calls of file creation, fsync and the network. Raw Raft spent %s ms per entry, its 3 nodes and clients together.\n\n",
			msPrec(aimLeaderCPU), clientsLabel(maxC), metText(per.Total() <= aimLeaderCPU), msPrec(per.Total()), msPrec(per.User), msPrec(per.System),
			100*float64(per.System)/float64(per.Total()), msPrec(raw.Result.CPUPerOp()))
	}
	if rt >= aimCommitRatio {
		return
	}
	fsmRow, _ := ct.Row(TputRawFloeFSM, maxC)
	meta, _ := ct.Row(TputMetaWrites, maxC)
	inproc, _ := ct.Row(TputFloeInProc, maxC)
	inmem, _ := ct.Row(TputFloeInMem, maxC)
	rawPS := raw.Result.PerSecond()
	util := (fl.Result.CPU + fl.DriverCPU).Seconds() / fl.Result.Elapsed.Seconds() / float64(max(1, r.Machine.NumCPU))
	w("### Where the commit rate goes\n\n")
	w("A floe commit is not one log entry and nothing else. Before proposing, the node that takes it reads the table linearizably, loads its current metadata, applies the updates with iceberg-go, serialises the new metadata and **writes it as a new file, durably** (design brief: the state machine only swaps the pointer); then the entry goes through Raft and floe's state machine, and the answer carries the new metadata back. Raft batches its own fsyncs — concurrent entries share one log append and one state machine transaction — but each commit's metadata file is a durable write of its own that batching never sees.\n\n")
	w("Adding floe's parts to the raw baseline one at a time, at %s:\n\n", clientsLabel(maxC))
	w("| step | ops/s before → after | factor |\n| --- | ---: | ---: |\n")
	type step struct {
		what     string
		from, to float64
	}
	steps := []step{
		{"raw Raft → + floe's state machine (bbolt transaction and fdatasync per applied batch)", rawPS, fsmRow.Result.PerSecond()},
		{"→ + the catalog on a one-node cluster (HTTP, linearizable read, iceberg-go, JSON), metadata files kept in memory", fsmRow.Result.PerSecond(), inmem.Result.PerSecond()},
		{"→ + the durable metadata file per commit (floe's storage layer: temp file, fsync, rename, directory fsync)", inmem.Result.PerSecond(), inproc.Result.PerSecond()},
		{"→ + replication to 3 nodes in separate processes (floe as deployed)", inproc.Result.PerSecond(), fl.Result.PerSecond()},
	}
	prod := 1.0
	for _, st := range steps {
		f := ratioF(st.to, st.from)
		prod *= f
		w("| %s | %.0f → %.0f | %.2f× |\n", st.what, st.from, st.to, f)
	}
	w("| **all together** (floe ÷ raw Raft) | %.0f → %.0f | **%.2f×** |\n\n", rawPS, fl.Result.PerSecond(), prod)
	w("The factors multiply to the headline ratio; each comes from rows measured above in this run, so noise between rows shows up here too. ")
	w("The durable metadata write on its own (the metadata-file row, no Raft) manages %.0f files/s at p50 %s ms: by itself it is not the ceiling, but every commit waits for it *before* proposing, in series with Raft's and the state machine's fsyncs on the same disk. ", meta.Result.PerSecond(), ms(meta.Result.P50))
	w("CPU per operation, clients included: %s ms for raw Raft, %s ms with floe's state machine, %s ms for floe's catalog with metadata in memory, %s ms with the durable metadata file; the three floe processes spent %s ms per commit. During that row the nodes and the driver used %.0f%% of the machine's %d CPUs, while the machine as a whole (every process on it) was %.0f%% busy and %.0f%% in iowait.\n\n",
		ms(raw.Result.CPUPerOp()), ms(fsmRow.Result.CPUPerOp()), ms(inmem.Result.CPUPerOp()), ms(inproc.Result.CPUPerOp()), ms(fl.Result.CPUPerOp()),
		100*util, r.Machine.NumCPU, 100*fl.Result.Machine.Busy, 100*fl.Result.Machine.IOWait)
	if len(ct.Profile) > 0 {
		w("CPU profile of the in-process node at %s (%s of samples; a sample counts under every row whose frame is on its stack, so rows overlap):\n\n", clientsLabel(maxC), ct.ProfileTotal.Round(time.Millisecond))
		w("| part | share of CPU |\n| --- | ---: |\n")
		for _, p := range ct.Profile {
			w("| %s | %.1f%% |\n", p.Label, 100*p.Share)
		}
		w("\n")
		if ct.ProfilePath != "" {
			w("Profile kept at `%s` (`go tool pprof -top -cum %s`).\n\n", ct.ProfilePath, ct.ProfilePath)
		} else {
			w("To keep the profile, add `--profile-dir DIR` to the command (then `go tool pprof -top -cum DIR/%s`).\n\n", tputProfileFile)
		}
	}
	sorted := slices.Clone(steps)
	slices.SortFunc(sorted, func(x, y step) int {
		fx, fy := ratioF(x.to, x.from), ratioF(y.to, y.from)
		switch {
		case fx < fy:
			return -1
		case fx > fy:
			return 1
		}
		return 0
	})
	name := func(st step) string {
		switch st.what {
		case steps[0].what:
			return "floe's state machine"
		case steps[1].what:
			return "the catalog's per-commit work (CPU: HTTP, JSON, iceberg-go, the linearizable read)"
		case steps[2].what:
			return "the durable metadata file write per commit"
		}
		return "replication across processes"
	}
	w("**Bottleneck: not Raft, but what floe does around each entry — first %s (%.2f×), then %s (%.2f×).**",
		name(sorted[0]), ratioF(sorted[0].to, sorted[0].from), name(sorted[1]), ratioF(sorted[1].to, sorted[1].from))
	if fl.Result.Machine.Busy >= 0.85 {
		w(" During the floe row the machine's CPUs were saturated (%.0f%% busy, every process counted), so here CPU is the binding resource: a floe commit costs %s raw Raft's CPU per entry.",
			100*fl.Result.Machine.Busy, ratio(float64(fl.Result.CPUPerOp()), float64(raw.Result.CPUPerOp())))
	} else {
		w(" The machine's CPUs were not saturated during the floe row (%.0f%% busy, every process counted; %.0f%% iowait): commits queue on fsyncs — the metadata file's, then Raft's log and the state machine's, which batch less when requests arrive spread out by the catalog's work than when a tight loop feeds Raft.",
			100*fl.Result.Machine.Busy, 100*fl.Result.Machine.IOWait)
	}
	w(" Already in place (`catalog/DESIGN.md`, `docs/benchmarks-commit-path.md`): concurrent metadata writes on a node share their fsyncs (group commit in `internal/storage`), a new metadata version is serialised once and cached parsed, and the preparation runs on the node that took the request. What could lift it further:\n\n")
	w("- Drop the directory fsync where the file system makes a rename durable with its next journal commit, or keep each table's metadata files in one preallocated directory; both trade portability for one fsync fewer per commit (group commit shares a directory's fsync only among commits to the same table).\n")
	w("- An S3 warehouse replaces the local fsyncs with a PUT whose durability is the object store's: the rate is then bounded by the store's PUT latency and concurrency, not by this disk.\n")
	w("- CPU: iceberg-go parses and rebuilds the whole metadata document per commit and encoding/json serialises it (both in the profile), and on this machine the three nodes share two CPUs with the clients: separate machines would lift the 3-node row; encoding only the changed parts of a version would lift the in-process row.\n\n")
}

// placementLabel is "CPUs pinned" or "CPUs shared" for the summary.
func placementLabel(p CPUPlacement) string {
	if p.Pinned {
		return "CPUs pinned"
	}
	return "CPUs shared"
}

// readAimVerdict judges item 2's aim: only with pinned CPUs, since three
// nodes sharing the leader's CPUs measure sharing, not scaling.
func readAimVerdict(c *Report) string {
	if !c.CPUs.Pinned {
		return "not judged (" + c.CPUs.NotPinned + ")"
	}
	return yesNo(ratioF(c.ReadsAll.PerSecond(), c.ReadsLeader.PerSecond()) >= aimReadRatio)
}

// leaderSaturated is the share of its CPUs above which the leader alone
// counts as saturated.
const leaderSaturated = 0.8

func (r *SuiteReport) readsSection(w func(string, ...any), c *Report) {
	if c.ReadsLeader.OK == 0 {
		return
	}
	w("## 2. Linearizable read throughput: leader alone vs all nodes\n\n")
	w("From the cluster benchmark (`floebench` without `--suite`, run here as part of the suite): one table; %d clients, each with its own keep-alive connection, loop `GET /v1/namespaces/{ns}/tables/t` (linearizable, the default) for %s, either all to the leader or round-robin over the 3 nodes. ", c.ReadsAll.Clients, c.Options.ReadDuration)
	w("A linearizable read costs a share of a ReadIndex round: on the leader one quorum heartbeat round, shared by every read that arrived while the previous round was in flight; on a follower one read-index call to the leader, shared the same way (`floe_raft_read_index_batch_size`), then its own wait until the follower has applied up to the index.\n\n")
	p := c.CPUs
	if p.Pinned {
		var nodes []string
		for i := range p.NodeIDs {
			nodes = append(nodes, fmt.Sprintf("%s on CPUs %s", p.NodeIDs[i], p.NodeCPUs[i]))
		}
		w("**CPU placement: pinned.** Before the measurement every thread of each process was pinned with `taskset -a -p -c`: %s; the driver and its %d clients on CPUs %s (CPUs available: %s). ", strings.Join(nodes, ", "), c.ReadsAll.Clients, p.ClientCPUs, p.Available)
		w("GOMAXPROCS afterwards, as the nodes' `/metrics` report it (0: not read): %s; the driver's: %d. The pinning is undone after the reads.\n\n", strings.Trim(fmt.Sprint(p.GOMAXPROCS), "[]"), p.DriverGOMAXPROCS)
	} else {
		w("**CPU placement: not pinned** — %s. The nodes, the driver and its clients share all %d CPUs, so this measures how read work is shared out on one machine, not how it scales.\n\n", p.NotPinned, r.Machine.NumCPU)
	}
	w("| run | nodes | clients | req/s | p50 (ms) | p99 (ms) | errors | node CPU per read (ms) | leader busy (of its CPUs) | nodes + clients CPU (of %d) | machine busy / iowait |\n", r.Machine.NumCPU)
	w("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, x := range []struct {
		name string
		r    ReadResult
	}{{"all to the leader", c.ReadsLeader}, {"round-robin", c.ReadsAll}} {
		busy := (x.r.ServerCPU + x.r.DriverCPU).Seconds() / x.r.Elapsed.Seconds()
		w("| %s | %s | %d | %.0f | %s | %s | %d | %s | %.0f%% of %d | %.0f%% | %s |\n", x.name, strings.Join(x.r.Targets, ", "), x.r.Clients, x.r.PerSecond(),
			ms(x.r.P50), ms(x.r.P99), x.r.Errors, msPrec(x.r.CPUPerRead()), 100*x.r.LeaderBusy(), x.r.LeaderCPUs,
			100*busy/float64(max(1, r.Machine.NumCPU)), machineCell(x.r.Machine))
	}
	rl, ra := c.ReadsLeader.PerSecond(), c.ReadsAll.PerSecond()
	rt := ratioF(ra, rl)
	lb := c.ReadsLeader.LeaderBusy()
	if lb >= leaderSaturated {
		w("\nThe leader alone was saturated: it used %.0f%% of its %d CPUs.\n", 100*lb, c.ReadsLeader.LeaderCPUs)
	} else {
		w("\nThe leader alone used %.0f%% of its %d CPUs, under the %.0f%% taken as saturated: the leader-only figure may be limited by the clients or by CPUs shared with them, not by the leader.\n", 100*lb, c.ReadsLeader.LeaderCPUs, 100*leaderSaturated)
	}
	if !p.Pinned {
		w("\n**Aim: ≥ %.0f× the leader alone with pinned CPUs — not judged** (%s); the ratio here is %s.\n\n", aimReadRatio, p.NotPinned, ratio(ra, rl))
		busyL := (c.ReadsLeader.ServerCPU + c.ReadsLeader.DriverCPU).Seconds() / c.ReadsLeader.Elapsed.Seconds() / float64(max(1, r.Machine.NumCPU))
		w("**Why the ratio is low here: the CPUs, not the leader.** The aim assumes each node brings its own CPUs. Here the three nodes and the %d clients share %d CPUs; in the leader-only run they used %.0f%% of them and the machine as a whole was %.0f%% busy: there is little idle capacity for followers to add. ", c.ReadsLeader.Clients, r.Machine.NumCPU, 100*busyL, 100*c.ReadsLeader.Machine.Busy)
		w("Spreading reads moves no work off the machine; it adds work: a read on a follower also costs its share of a read-index call to the leader over the cluster port and the wait for the follower to apply up to that index (node CPU per read %s ms round-robin vs %s ms leader-only). ", msPrec(c.ReadsAll.CPUPerRead()), msPrec(c.ReadsLeader.CPUPerRead()))
		w("Run the suite on a machine with at least %d CPUs (and `taskset`) to judge the aim.\n\n", minPinCPUs)
		return
	}
	w("\n**Aim: ≥ %.0f× the leader alone with pinned CPUs — %s** (%s).\n\n", aimReadRatio, metText(rt >= aimReadRatio), ratio(ra, rl))
	if rt >= aimReadRatio {
		return
	}
	w("**Bottleneck.** Each node had its own %d CPUs. Round-robin, the leader used %.0f%% of its CPUs and served a third of the reads plus one read-index call per follower batch; node CPU per read was %s ms round-robin vs %s ms leader-only. ", c.ReadsAll.LeaderCPUs, 100*c.ReadsAll.LeaderBusy(), msPrec(c.ReadsAll.CPUPerRead()), msPrec(c.ReadsLeader.CPUPerRead()))
	w("If the leader is near saturation round-robin, its quorum rounds and read-index answers are the limit and a leader lease would lift it; if not, the clients' CPUs (%s) are, and more client CPUs or clients would.\n\n", p.ClientCPUs)
}

func (r *SuiteReport) loadTableSection(w func(string, ...any), lt *LoadTableLatency) {
	w("## 3. loadTable latency, warm: metadata cache on vs off\n\n")
	w("One floe node inside the driver (a single-voter raftnode and the catalog, the binary's code), serving the catalog twice over loopback HTTP on the same Raft node and `file://` warehouse: once with the metadata cache (the default, 1024 parsed files keyed by metadata location) and once built with `catalog.Config{MetadataCacheSize: -1}`, which reads and parses the metadata file on every call. ")
	w("%d tables, each given %d commits so that its metadata file (%d bytes) carries a metadata log like a table in use. After 3 untimed rounds over every table through both, %d loads through each, one at a time, alternating cache on and off. Every load is linearizable (ReadIndex on a cluster of one).\n\n", lt.Tables, loadTableCommits, lt.MetadataBytes, lt.N)
	w("| cache | n | p50 (ms) | p90 (ms) | p99 (ms) | max (ms) |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, x := range []struct {
		name string
		d    []time.Duration
	}{{"on (default)", lt.CacheOn}, {"off (MetadataCacheSize: -1)", lt.CacheOff}} {
		w("| %s | %d | %s | %s | %s | %s |\n", x.name, len(x.d), msPrec(median(x.d)), msPrec(percentile(x.d, 0.9)), msPrec(percentile(x.d, 0.99)), msPrec(slices.Max(x.d)))
	}
	on := median(lt.CacheOn)
	w("\n**Aim: p50 under 1 ms warm — %s** (%s ms with the cache).", metText(on < aimLoadP50), msPrec(on))
	if on >= aimLoadP50 {
		w(" The cache removes the read and parse of the metadata file (the cache-off row); what is left is the linearizable read (a ReadIndex round), the bbolt read transaction, encoding the response and loopback HTTP on a shared 2-CPU machine. Serving reads from a leader lease instead of a ReadIndex round, and caching the encoded response per metadata location, would lift it.")
	}
	w("\n\n")
}

func (r *SuiteReport) idempotencySection(w func(string, ...any), c *Report) {
	if len(c.Commits.Plain) == 0 {
		return
	}
	w("## 4. Idempotency-Key overhead on commit latency\n\n")
	kp, pp := median(c.Commits.Keyed), median(c.Commits.Plain)
	w("From the cluster benchmark: %d table commits (`set-properties`) without and %d with an `Idempotency-Key`, alternating one of each kind, one at a time, round-robin over the 3 nodes. The keyed commit carries its record in the same log entry as the change.\n\n", len(c.Commits.Plain), len(c.Commits.Keyed))
	w("| commit | n | p50 (ms) | p99 (ms) |\n| --- | ---: | ---: | ---: |\n")
	w("| without key | %d | %s | %s |\n| with key | %d | %s | %s |\n\n", len(c.Commits.Plain), ms(pp), ms(percentile(c.Commits.Plain, 0.99)),
		len(c.Commits.Keyed), ms(kp), ms(percentile(c.Commits.Keyed, 0.99)))
	rt := ratioF(float64(kp), float64(pp))
	w("**Aim: under 5%% — %s** (p50 ratio %s).", metText(rt < aimIdemRatio), ratio(float64(kp), float64(pp)))
	if rt >= aimIdemRatio {
		w(" The key adds, on the request thread, a linearizable lookup of the key and a body digest, and in Apply one more bbolt put and one index entry in the same transaction. With n=%d one-at-a-time commits on a shared machine the p50s differ by %s ms, within the run's noise (compare the p99s); more commits per kind (`--writes`) narrow it. If it persists, the lookup — one linearizable read (a ReadIndex round, through the leader when a follower took the request) before the commit is even prepared — is the part to shrink: the state machine already decides replays inside Apply (a Keyed command whose key has a live record changes nothing and returns the stored outcome), so the pre-check could be a stale read; a miss would only cost a discarded metadata file.", len(c.Commits.Keyed), ms(kp-pp))
	}
	w("\n\n")
}

func (r *SuiteReport) dropSection(w func(string, ...any), d *DropBench, plot string) {
	w("## 5. Drop latency (async vs sync) and purge throughput\n\n")
	switch {
	case d.Skipped != "":
		w("Skipped: %s.\n\n", d.Skipped)
		return
	case d.Unavailable != "":
		w("**%s** (%s).\n\n", PurgeUnavailable, d.Unavailable)
		return
	}
	w("A 3-node floe cluster whose warehouse is a bucket on versitygw (posix backend, same machine). Each table is created with the iceberg-go REST client; the driver writes N tiny data-file objects (%d bytes each, %d PutObject at a time) under the table's location through floe's storage layer, and commits one append listing all N (`Transaction.AddDataFiles`: one manifest, one manifest list, a new metadata file), as an engine would. Then `DELETE /v1/namespaces/drops/tables/{t}?purgeRequested=true` through the leader, with `%s: true` (async) or without it (sync: the node that took the request runs the purge job and answers when it has SUCCEEDED). Latency: the DELETE until 204. Purged: the DELETE until the job is seen SUCCEEDED in `GET /management/v1/purge-jobs` (polled every 20 ms); for async this includes the leader's scheduler leasing the job to a node (it is woken when the drop's entry applies) and that node starting it (its workers are woken when it applies the lease); item 9 splits that time up.\n\n",
		len(dataFileContent), putWorkers, asyncPurgeHeader)
	w("| files | mode | objects under the location | drop latency (ms) | until purged (ms) | files deleted (job) | left after |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, c := range d.Cases {
		w("| %s | %s | %d | %s | %s | %d | %d |\n", fmtFiles(c.Files), c.Mode, c.Objects, ms(c.Latency), ms(c.Purged), c.FilesDeleted, c.Left)
	}
	w("\n")
	if plot != "" {
		w("![Drop latency against table size](%s)\n\n", plot)
	}
	if s, ok := d.LargestSync(); ok && d.RawDelete > 0 {
		fp, rp := float64(s.Objects)/s.Latency.Seconds(), float64(d.RawFiles)/d.RawDelete.Seconds()
		w("**Purge throughput**: the sync drop of the %s-file table deleted %d objects in %s ms: **%.0f files/s**. Baseline: the driver writes %d objects the same way and deletes them with a plain loop of S3 `DeleteObjects` requests, 1000 keys each, one at a time, on the same server: %s ms, %.0f files/s. Ratio **%s**. ",
			fmtFiles(s.Files), s.Objects, ms(s.Latency), fp, d.RawFiles, ms(d.RawDelete), rp, ratio(fp, rp))
		w("The purge also reads the metadata, manifest list and manifest to find the files, checkpoints its progress through the Raft log, and records the job's end; its deletes run on the node's bulk-delete pool (4 threads, 1000 keys a request by default), so it may beat the one-at-a-time loop when the server deletes in parallel.\n\n")
	}
}

func (r *SuiteReport) failoverSection(w func(string, ...any), c *Report) {
	if len(c.Rounds) == 0 {
		return
	}
	w("## 6. Failover\n\n")
	w("From the cluster benchmark: SIGKILL the leader, then send `POST /v1/namespaces` (a new name each attempt, %s per attempt, %s between attempts) to a surviving node until one is answered 200; the killed node is restarted and the cluster must be healthy before the next round. Baseline: %d healthy writes sent the same way, median %s ms. Raft's heartbeat and election timeouts are %s and %s (raftnode defaults): a follower notices the dead leader after one to two heartbeat timeouts, which bounds the figure from below.\n\n",
		writeTimeout, retryPause, len(c.HealthyWrites), ms(c.HealthyWriteMedian()), raftnode.DefaultHeartbeatTimeout, raftnode.DefaultElectionTimeout)
	w("| round | killed | writes via | new leader | kill → ack (ms) | attempts | restart → healthy (ms) |\n| ---: | --- | --- | --- | ---: | ---: | ---: |\n")
	for _, x := range c.Rounds {
		w("| %d | %s | %s | %s | %s | %d | %s |\n", x.Round, x.Killed, x.Via, x.NewLeader, ms(x.KillToAck), x.Attempts, ms(x.Rejoin))
	}
	w("\nMedian %s ms, max %s ms (%s and %s the healthy write). **Aim: median ≤ %s — %s.** hashicorp/raft's follower refuses to vote while it still knows a leader, so an election succeeds once both survivors have noticed the silence; the timeouts set how long that takes (`--raft-heartbeat-timeout`, `internal/raftnode/DESIGN.md`, Timings). Item 10 checks the other side of short timeouts: no needless election under load.\n\n", ms(c.FailoverMedian()), ms(c.FailoverMax()),
		ratio(float64(c.FailoverMedian()), float64(c.HealthyWriteMedian())), ratio(float64(c.FailoverMax()), float64(c.HealthyWriteMedian())),
		aimFailoverMedian, metText(c.FailoverMedian() <= aimFailoverMedian))
}

// aimFailoverMedian is issue 14's aim for the median failover.
const aimFailoverMedian = time.Second

// tableSteps are the growth steps without idempotency records.
func (g *GrowthBench) tableSteps() []GrowthStep {
	var out []GrowthStep
	for _, s := range g.Steps {
		if s.Records == 0 {
			out = append(out, s)
		}
	}
	return out
}

func (r *SuiteReport) memorySection(w func(string, ...any), g *GrowthBench) {
	if len(g.Steps) == 0 {
		return
	}
	w("## 7. Memory\n\n")
	w("VmRSS (and its anonymous and file-backed parts, RssAnon and RssFile) from `/proc/<pid>/status` of each node of the growth cluster (item 8), first right after it started, then after each step. The state machine's bbolt file is memory-mapped, so pages of it that were touched count as RssFile; the kernel may drop those under pressure, the anonymous part it cannot.\n\n")
	w("| state | node | role | VmRSS | RssAnon | RssFile | ratio to empty |\n| --- | --- | --- | ---: | ---: | ---: | ---: |\n")
	ids := slices.Sorted(maps.Keys(g.Empty))
	leader := g.Steps[0].Leader
	role := func(id string) string {
		if id == leader {
			return "leader"
		}
		return "follower"
	}
	for _, id := range ids {
		m := g.Empty[id]
		w("| empty | %s | %s | %s | %s | %s | 1.00× |\n", id, role(id), mib(m.RSS), mib(m.Anon), mib(m.File))
	}
	for _, s := range g.Steps {
		state := fmt.Sprintf("%s tables", fmtFiles(s.Tables))
		if s.Records > 0 {
			state += fmt.Sprintf(" + %s records", fmtFiles(s.Records))
		}
		for _, id := range ids {
			m := s.Memory[id]
			w("| %s | %s | %s | %s | %s | %s | %s |\n", state, id, role(id), mib(m.RSS), mib(m.Anon), mib(m.File), ratio(float64(m.RSS), float64(g.Empty[id].RSS)))
		}
	}
	w("\n")
	if ts := g.tableSteps(); len(ts) > 0 {
		last := ts[len(ts)-1]
		d := last.Memory[leader].RSS - g.Empty[leader].RSS
		w("The leader holds %s tables in %s more than when empty: about %.0f bytes of RSS per table. ", fmtFiles(last.Tables), mib(d), float64(d)/float64(last.Tables))
	}
	if g.RecordsStep >= 0 && g.RecordsStep > 0 {
		rs, prev := g.Steps[g.RecordsStep], g.Steps[g.RecordsStep-1]
		d := rs.Memory[leader].RSS - prev.Memory[leader].RSS
		w("Adding %s idempotency records (keyed `updateProperties` requests, one log entry each holding the change and its record) took %.1f s (%.0f requests/s at %d concurrent clients) and %s of RSS, about %.0f bytes per record, of which %s anonymous: the records live in the memory-mapped state machine file (see the snapshot size in item 8), not on the Go heap. ",
			fmtFiles(rs.Records), rs.Fill.Seconds(), float64(rs.FillOps)/rs.Fill.Seconds(), 2*growthFillWorkers, mib(d), float64(d)/float64(rs.Records),
			mib(rs.Memory[leader].Anon-prev.Memory[leader].Anon))
	}
	if d := r.Drop; d != nil && d.PurgeRSSPeak > 0 {
		w("During the largest sync purge (item 5, %s files) node %s peaked at %s against %s just before the drop (%s; %d samples, every %s).",
			fmtFiles(d.PurgeRSSFiles), d.PurgeRSSNode, mib(d.PurgeRSSPeak), mib(d.PurgeRSSBefore), ratio(float64(d.PurgeRSSPeak), float64(d.PurgeRSSBefore)), d.PurgeRSSSamples, rssSampleEvery)
	}
	w("\n\n")
	if r.Options.Sizes.Name != "large" {
		w("The issue's figures (100K tables, 1M idempotency records, a 500K-file purge) are the large sizes: `make bench BENCH_SIZE=large`.\n\n")
	}
}

func (r *SuiteReport) growthSection(w func(string, ...any), g *GrowthBench) {
	steps := g.Steps
	if len(steps) == 0 {
		return
	}
	w("## 8. Growth: commit latency and snapshot size against table count\n\n")
	w("One 3-node cluster (`file://` warehouse) started with `--snapshot-threshold %d --snapshot-interval %s` so that Raft snapshots at every step (the defaults, 8192 entries checked every 2 minutes, would skip the small steps). Tables are created through the leader's REST API (%d concurrent clients, %d tables per namespace). At each step: %d commits (`set-properties`, one at a time, to random tables, through the leader) after 5 untimed ones; then the driver waits for the leader to take a snapshot whose index covers the step (sending more commits if needed) and reads its size from the snapshot's `meta.json` under `<data-dir>/snapshots/`. The snapshot is the state machine's bbolt file as written by `tx.WriteTo`, free pages included.\n\n",
		r.Options.Sizes.SnapshotThreshold, growthSnapshotInterval, growthFillWorkers, growthTablesPerNS, r.Options.Sizes.GrowthWrites)
	first := steps[0]
	w("| tables | idempotency records | fill rate (req/s) | commit p50 (ms) | commit p99 (ms) | p50 ratio to %s tables | snapshot | snapshot ratio | snapshot bytes per table |\n", fmtFiles(first.Tables))
	w("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range steps {
		perTable := fmt.Sprintf("%.0f", float64(s.SnapshotBytes)/float64(s.Tables))
		if s.Records > 0 {
			perTable = "—"
		}
		w("| %s | %s | %.0f | %s | %s | %s | %s | %s | %s |\n", fmtFiles(s.Tables), fmtFiles(s.Records), float64(s.FillOps)/s.Fill.Seconds(),
			ms(median(s.Commits)), ms(percentile(s.Commits, 0.99)), ratio(float64(median(s.Commits)), float64(median(first.Commits))),
			mib(s.SnapshotBytes), ratio(float64(s.SnapshotBytes), float64(first.SnapshotBytes)), perTable)
	}
	w("\nA commit's work does not depend on how many other tables exist (one B+tree lookup and put in bbolt), so its latency should stay flat while the snapshot grows linearly with the state; the ratios above are the check.")
	if g.RecordsStep > 0 {
		rs, prev := g.Steps[g.RecordsStep], g.Steps[g.RecordsStep-1]
		w(" The idempotency records take about %.0f bytes each in the snapshot ((%s − %s) ÷ %s): this delta also holds the change-feed events those requests added (the feed keeps the last 100K). A record is stored compactly (`fsm/DESIGN.md`, Idempotency records): the key, a digest of its binding, its times and what of the outcome an answer is rebuilt from (an identifier the request's route gives back and an interned warehouse root are left out), in a records bucket filled to 95%% and a key index filled to 85%%; %s. Records are pruned once expired (the default lifetime is 30 minutes), so in steady state they are bounded by the keyed write rate times the lifetime.",
			float64(rs.SnapshotBytes-prev.SnapshotBytes)/float64(rs.Records), mib(rs.SnapshotBytes), mib(prev.SnapshotBytes), fmtFiles(rs.Records), r.recordSizeClause())
	}
	w("\n\n")
	if rs := r.RecordSize; rs != nil {
		w("### Idempotency record at rest\n\n")
		r.recordSizeSection(w, rs)
	}
	r.restoreSection(w, g)
}

// recordSizeClause quotes this run's record sizes at rest for the growth
// text.
func (r *SuiteReport) recordSizeClause() string {
	rs := r.RecordSize
	if rs == nil {
		return "a record's size alone (item 8's record-size step) was not measured in this run"
	}
	return fmt.Sprintf("measured alone in this run (below), an `updateProperties` record takes %.1f bytes and a commit's %.1f", rs.Properties, rs.Commit)
}

// recordSizeSection is item 8's Idempotency-Key record at rest: method,
// model, figures, aim and how to reproduce them.
func (r *SuiteReport) recordSizeSection(w func(string, ...any), rs *RecordSize) {
	w("The driver stores %s records of each kind of outcome in a new state machine in its own process, with the code a node runs: `fsm.RecordOutcome` entries, %d to an `ApplyBatch` (one bbolt transaction, as Raft hands over a batch), then divides what they added to its snapshot (`Reader.WriteTo`: the bytes a Raft snapshot holds, free pages included) by their number. Both kinds took %.1f s. ",
		fmtFiles(rs.Records), recordSizeBatch, rs.Took.Seconds())
	w("The records come from `internal/idemmodel`, a fixed model of a busy catalog: 3000 keyed requests a second stamped up to 20 ms off the order they apply in, UUIDv7 keys from 16 clients whose clocks differ by up to 10 ms, outcomes that commit to 2000 tables in 20 namespaces of the S3 warehouse `%s` (90%% `updateTable`, 10%% `createTable`, each with the table's entry) or set one namespace property (`updateProperties`).\n\n", idemmodel.Warehouse)
	w("| outcome | records | bytes per record at rest | ≤ %.0f bytes |\n| --- | ---: | ---: | --- |\n", aimRecordBytes)
	w("| commit | %s | %.1f | %s |\n", fmtFiles(rs.Records), rs.Commit, metText(rs.Commit <= aimRecordBytes))
	w("| `updateProperties` | %s | %.1f | %s |\n\n", fmtFiles(rs.Records), rs.Properties, metText(rs.Properties <= aimRecordBytes))
	met := rs.Commit <= aimRecordBytes && rs.Properties <= aimRecordBytes
	w("**Aim: ≤ %.0f bytes per record at rest — %s** (a commit's record %.1f bytes, an `updateProperties` record %.1f).", aimRecordBytes, metText(met), rs.Commit, rs.Properties)
	if rs.Records < recordSizeDefaultN {
		w(" With only %s records the partly filled last pages of the buckets and the B+trees' branch pages are a larger share of each record, which raises the figure: the aim is judged at the default size, %s records.", fmtFiles(rs.Records), fmtFiles(recordSizeDefaultN))
	} else if !met {
		w(" `fsm/DESIGN.md` (Idempotency records, Size at rest) takes a record apart: what lifts the figure is a shorter stored value (the compact format's layout) or fuller pages (the buckets' fill percent).")
	}
	w("\n\nReproduce: `make bench` (this item alone: `./bin/floebench --suite --floe bin/floe --items 8`). The model is deterministic: at the default size (%s records) these are exactly the records of the state machine's unit benchmark, so the figures equal its `compact-B/record`; it also measures the format before the compact one: `go test ./fsm -run '^$' -bench IdempotencyRecordSize -benchtime 1x`.\n\n", fmtFiles(recordSizeDefaultN))
}

// restoreSection is item 8's snapshot write and new-node restore figures:
// the largest table step against the same tables with the records.
func (r *SuiteReport) restoreSection(w func(string, ...any), g *GrowthBench) {
	var rows []GrowthStep
	for _, s := range g.Steps {
		if s.Snapshots > 0 || s.Restore.Took > 0 {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	w("### Snapshot write and restore on a new node\n\n")
	w("*Snapshot write* is the leader's mean `floe_raft_snapshot_persist_seconds` (sum ÷ count) over the snapshots it wrote while the step was measured, the last of which holds the whole step. *Restore* is a new node (started with `--join`, the same flags) from its process start until its `floe_raft_applied_index` reaches the leader's commit index read just before: the leader sends it its newest snapshot, which it restores, then the log after it. The gauge is refreshed every 100 ms, so the figure is that coarse. Once caught up the node is removed from the cluster and stopped.\n\n")
	w("| state | snapshot | snapshots written | snapshot write (ms) | restore on a new node (ms) | new node RSS | leader RSS |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range rows {
		state := fmt.Sprintf("%s tables", fmtFiles(s.Tables))
		if s.Records > 0 {
			state += fmt.Sprintf(" + %s records", fmtFiles(s.Records))
		}
		restore, rss := "—", "—"
		if s.Restore.Took > 0 {
			restore, rss = ms(s.Restore.Took), mib(s.Restore.Memory.RSS)
		}
		persist := "—"
		if s.Snapshots > 0 {
			persist = ms(s.SnapshotPersist)
		}
		w("| %s | %s | %d | %s | %s | %s | %s |\n", state, mib(s.SnapshotBytes), s.Snapshots, persist, restore, rss, mib(s.Memory[s.Leader].RSS))
	}
	w("\n")
	if r.Options.Sizes.Name != "large" {
		w("The issue asks for these at 100K tables and 1M records: `make bench BENCH_SIZE=large`.\n\n")
	}
}
