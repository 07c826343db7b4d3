package bench

import (
	"fmt"
	"strings"
	"time"
)

// Row labels of the summary table. The smoke test finds the rows by them.
const (
	RowHealthyWrite   = "healthy write, median"
	RowFailoverMedian = "failover: SIGKILL leader → first acknowledged write, median"
	RowFailoverMax    = "failover: SIGKILL leader → first acknowledged write, max"
	RowReadsLeader    = "linearizable loadTable, all to the leader"
	RowReadsAll       = "linearizable loadTable, round-robin over all nodes"
	RowCommitPlain    = "table commit without Idempotency-Key, p50"
	RowCommitKeyedP50 = "table commit with Idempotency-Key, p50"
	RowCommitKeyedP99 = "table commit with Idempotency-Key, p99"
)

// Markdown renders the report: the summary table first (figure, baseline
// from the same run, ratio), then the machine, the command that reproduces
// the run, the details per failover round and per read measurement, and how
// each figure is measured.
func (r *Report) Markdown() string {
	var b strings.Builder
	o := r.Options
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }

	w("# floe cluster benchmark\n\n")
	w("A %d-node floe cluster of real processes on loopback, measured by `floebench` on %s. ",
		ClusterSize, r.Date.Format("2006-01-02 15:04 MST"))
	w("Each ratio divides a figure by a baseline measured in the same run; compare ratios across runs, not absolute numbers (the machine is shared and noisy).\n\n")

	hw := r.HealthyWriteMedian()
	fm, fx := r.FailoverMedian(), r.FailoverMax()
	rl, ra := r.ReadsLeader.PerSecond(), r.ReadsAll.PerSecond()
	w("| measurement | value | baseline (same run) | ratio |\n")
	w("| --- | ---: | ---: | ---: |\n")
	w("| %s (n=%d) | %s ms | — | — |\n", RowHealthyWrite, len(r.HealthyWrites), ms(hw))
	w("| %s (n=%d) | %s ms | healthy write median %s ms | %s |\n", RowFailoverMedian, len(r.Rounds), ms(fm), ms(hw), ratio(float64(fm), float64(hw)))
	w("| %s (n=%d) | %s ms | healthy write median %s ms | %s |\n", RowFailoverMax, len(r.Rounds), ms(fx), ms(hw), ratio(float64(fx), float64(hw)))
	w("| %s (%d clients, %s) | %.0f req/s | — | — |\n", RowReadsLeader, r.ReadsLeader.Clients, o.ReadDuration, rl)
	w("| %s (%d clients, %s) | %.0f req/s | all to the leader %.0f req/s | %s |\n", RowReadsAll, r.ReadsAll.Clients, o.ReadDuration, ra, rl, ratio(ra, rl))
	if len(r.Commits.Plain) > 0 {
		cp50, cp99 := median(r.Commits.Plain), percentile(r.Commits.Plain, 0.99)
		kp50, kp99 := median(r.Commits.Keyed), percentile(r.Commits.Keyed, 0.99)
		w("| %s (n=%d) | %s ms | — | — |\n", RowCommitPlain, len(r.Commits.Plain), ms(cp50))
		w("| %s (n=%d) | %s ms | without key %s ms | %s |\n", RowCommitKeyedP50, len(r.Commits.Keyed), ms(kp50), ms(cp50), ratio(float64(kp50), float64(cp50)))
		w("| %s (n=%d) | %s ms | without key %s ms | %s |\n", RowCommitKeyedP99, len(r.Commits.Keyed), ms(kp99), ms(cp99), ratio(float64(kp99), float64(cp99)))
	}
	w("\n")

	w("## Machine\n\n")
	w("| | |\n| --- | --- |\n")
	w("| nproc | %d |\n", r.Machine.NumCPU)
	if r.Machine.CPUModel != "" {
		w("| CPU | %s |\n", r.Machine.CPUModel)
	}
	w("| OS/arch | %s |\n", r.Machine.OSArch)
	w("| Go (driver) | %s |\n", r.Machine.GoVersion)
	if r.Machine.FloeGo != "" {
		w("| Go (floe binary) | %s |\n", r.Machine.FloeGo)
	}
	if r.Machine.FloeRevision != "" {
		w("| floe revision | %s |\n", r.Machine.FloeRevision)
	}
	if r.Machine.SourceRevision != "" {
		w("| git HEAD where the driver ran (binary not VCS-stamped) | %s |\n", r.Machine.SourceRevision)
	}
	w("| date | %s |\n", r.Date.Format(time.RFC3339))
	w("\n")

	if o.Command != "" {
		w("## Reproduce\n\nFrom the module root:\n\n```sh\n%s\n```\n\n", o.Command)
	}

	w("## Failover rounds\n\n")
	w("| round | killed leader | writes via | new leader | kill → ack (ms) | attempts | rejected attempts | restart → healthy (ms) |\n")
	w("| ---: | --- | --- | --- | ---: | ---: | --- | ---: |\n")
	for _, x := range r.Rounds {
		rej := formatRejected(x.Rejected)
		if rej == "" {
			rej = "—"
		}
		w("| %d | %s | %s | %s | %s | %d | %s | %s |\n", x.Round, x.Killed, x.Via, x.NewLeader, ms(x.KillToAck), x.Attempts, rej, ms(x.Rejoin))
	}
	w("\n")

	w("## Reads\n\n")
	w("| run | nodes | clients | elapsed | ok | errors | req/s | p50 (ms) | p99 (ms) |\n")
	w("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, x := range []struct {
		name string
		r    ReadResult
	}{{"all to the leader", r.ReadsLeader}, {"round-robin", r.ReadsAll}} {
		w("| %s | %s | %d | %s | %d | %d | %.0f | %s | %s |\n", x.name, strings.Join(x.r.Targets, ", "), x.r.Clients,
			x.r.Elapsed.Round(time.Millisecond), x.r.OK, x.r.Errors, x.r.PerSecond(), ms(x.r.P50), ms(x.r.P99))
	}
	for _, x := range []ReadResult{r.ReadsLeader, r.ReadsAll} {
		if x.FirstError != "" {
			w("\nFirst failed read (%s): `%s`\n", strings.Join(x.Targets, ", "), x.FirstError)
		}
	}
	w("\n")

	w("## Method\n\n")
	w("- The driver starts %d `floe` processes from a prebuilt binary, each with `--join` naming the others, `--bootstrap-expect %d` and one shared `file://` warehouse, and waits until every node answers `/readyz` with 200, all name the same leader and the leader sees every member reachable.\n", ClusterSize, ClusterSize)
	w("- **Healthy write**: %d `POST /v1/namespaces` (a new name each), one at a time with a keep-alive client, sent round-robin over the nodes (so about two in three are forwarded to the leader by a follower), after %d untimed warm-up writes. The median is the baseline of the failover rows.\n", len(r.HealthyWrites), 3*ClusterSize)
	w("- **Failover**: find the leader with `GET /management/v1/cluster` (every node must name it), send it SIGKILL, and from that instant send `POST /v1/namespaces` (a new name each attempt, %s per attempt, %s between attempts) to one surviving node until one is answered 200. The figure is the time from just before the kill to that answer. The killed node is then restarted with the same command line, and the next round waits until the cluster is healthy again. The surviving node alternates between rounds.\n", writeTimeout, retryPause)
	w("- **Reads**: one table; each client has its own keep-alive HTTP client and loops `GET /v1/namespaces/{ns}/tables/t` (linearizable: the default, no stale-read option) for the duration, sending either every request to the leader or its i-th request to node (client+i) mod %d. Each client first loads the table once from each target, uncounted. req/s counts 200 answers with the body read, divided by the time from the start signal to the last client's stop.\n", ClusterSize)
	w("- **Commits**: %d table commits (`set-properties`) without and %d with an `Idempotency-Key`, alternating one of each kind, sent one at a time round-robin over the nodes. The keyed commit carries its record in the same log entry as the change; the ratio is the key's cost.\n", len(r.Commits.Plain), len(r.Commits.Keyed))
	if p := r.CPUs; p.Pinned {
		w("- During the reads each node and the driver (the clients) ran on their own CPUs, pinned with `taskset -a -p -c`: nodes %s on %s, clients on %s (available: %s).\n",
			strings.Join(p.NodeIDs, ", "), strings.Join(p.NodeCPUs, " | "), p.ClientCPUs, p.Available)
	} else {
		w("- Not pinned (%s): driver, clients and the %d nodes share the same %d CPUs, so the round-robin ratio shows how much read work moves off the leader here, not what separate machines would give.\n", p.NotPinned, ClusterSize, r.Machine.NumCPU)
	}
	return b.String()
}

func ratio(a, b float64) string {
	if b <= 0 {
		return "—"
	}
	if r := a / b; r > 0 && r < 0.01 {
		return fmt.Sprintf("%.2g×", r) // two significant digits, not 0.00×
	}
	return fmt.Sprintf("%.2f×", a/b)
}
