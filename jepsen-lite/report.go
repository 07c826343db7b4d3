package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// report prints the summary (and writes it to the run directory) and
// returns the exit code: exitViolation when any check failed.
func (r *runner) report() int {
	var b strings.Builder
	cfg := r.cfg
	fmt.Fprintf(&b, "\n== jepsen-lite summary ==\n")
	fmt.Fprintf(&b, "seed %d, %d nodes, workload %s, nemesis %s, duration %s\n", cfg.seed, cfg.nodes, cfg.workload, strings.Join(cfg.nemesis, ","), cfg.duration)
	fmt.Fprintf(&b, "reproduce: %s\n\n", cfg.commandLine())

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "operations\t")
	fmt.Fprintf(tw, "  client requests\t%d (no answer %d, 5xx %d, idempotent replays %d)\n",
		r.api.requests.Load(), r.api.noAnswer.Load(), r.api.serverErr.Load(), r.api.replays.Load())
	if r.reg != nil {
		fmt.Fprintf(tw, "  register\t%d reads; cas: %d ok, %d 409, %d unknown (%d of them touches: no updates); %d tables\n",
			r.reg.reads.Load(), r.reg.casOK.Load(), r.reg.casFail.Load(), r.reg.casUnknown.Load(), r.reg.touches.Load(), len(r.reg.allTables()))
	}
	if r.purge != nil {
		p := r.purge
		fmt.Fprintf(tw, "  purge\t%d creates (%d refused: name being purged); appends: %d (%d failed, %d unknown); drops: %d (%d async, %d unknown)\n",
			p.created.Load(), p.refused.Load(), p.appends.Load(), p.appendFailed.Load(), p.appendUnknown.Load(),
			p.drops.Load(), p.dropsAsync.Load(), p.dropsUnknown.Load())
	} else if r.purgeSkip != "" {
		fmt.Fprintf(tw, "  purge\tskipped\n")
	}
	if r.ovl != nil {
		o := r.ovl
		fmt.Fprintf(tw, "  overlap\t%d attempts (%d refused, %d accepted, %d unknown, %d skipped: no target); own tables: %d created, %d dropped with purge\n",
			o.tried.Load(), o.refused.Load(), o.accepted.Load(), o.unknown.Load(), o.skipped.Load(), o.ownCreated.Load(), o.ownDrops.Load())
	}
	fmt.Fprintf(tw, "  log padding\t%d entries\n", r.padded.Load())
	tw.Flush()

	n := r.nem
	n.mu.Lock()
	fmt.Fprintf(&b, "\nfaults\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  kind\tinjected\tnot injected (error)")
	total := 0
	for _, k := range allFaults {
		if !contains(n.kinds, k) {
			continue
		}
		total += n.counts[k]
		fmt.Fprintf(tw, "  %s\t%d\t%d\n", k, n.counts[k], n.failed[k])
	}
	fmt.Fprintf(tw, "  total\t%d\t\n", total)
	tw.Flush()
	snaps := n.snapshotInstalls
	failovers := failoverSummary(n.failovers, len(n.cl.Nodes)-1)
	n.mu.Unlock()
	fmt.Fprintf(&b, "  snapshot installs seen in node logs: %d\n", snaps)
	if failovers != "" {
		fmt.Fprintf(&b, "  %s\n", failovers)
	}
	fmt.Fprintf(&b, "  S3 proxy: %d requests, %d SlowDown injected, %d delayed\n", r.s3p.requests.Load(), r.s3p.injected.Load(), r.s3p.delayed.Load())
	fmt.Fprintf(&b, "  %s\n", r.links)

	fmt.Fprintf(&b, "\nchecks\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  check\tverdict\tdetail")
	failed := false
	for _, c := range r.checks {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Name, c.Verdict, c.Summary)
		failed = failed || c.Verdict == verdictFail
	}
	tw.Flush()
	for _, c := range r.checks {
		for i, v := range c.Violations {
			if i == 20 {
				fmt.Fprintf(&b, "  [%s] … %d more in history.json\n", c.Name, len(c.Violations)-20)
				break
			}
			fmt.Fprintf(&b, "  [%s] VIOLATION: %s\n", c.Name, v)
		}
		for _, note := range c.Notes {
			fmt.Fprintf(&b, "  [%s] note: %s\n", c.Name, note)
			r.noted = true
		}
	}
	verdict := "PASS"
	if failed {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "\nresult: %s (seed %d)\n", verdict, cfg.seed)
	fmt.Fprint(r.out, b.String())
	_ = os.WriteFile(filepath.Join(r.dir, "summary.txt"), []byte(b.String()), 0o644)
	if failed {
		return exitViolation
	}
	return exitOK
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
