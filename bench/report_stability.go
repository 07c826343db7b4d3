package bench

import (
	"fmt"
	"strconv"
	"time"

	"github.com/floe-catalog/floe/internal/harness"
)

// Labels of item 10's summary rows (first cell).
const (
	SumStability    = "10. leader changes in a loaded run without faults"
	SumStabilityLat = "10. commit latency p99 in that run"
)

// stabilityEventsShown bounds the leader changes listed in the report.
const stabilityEventsShown = 20

// fmtRunLength prints 10m0s as "10 min" and anything else as
// time.Duration does.
func fmtRunLength(d time.Duration) string {
	if d >= time.Minute && d%time.Minute == 0 {
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return d.String()
}

// itemCommand is the command that runs item alone at this report's sizes,
// with Go and from prebuilt binaries.
func (r *SuiteReport) itemCommand(item int) string {
	o := r.Options
	args := []string{"go", "run", "./bench/cmd/floebench", "--suite", "--floe", o.Floe, "--size", o.Sizes.Name, "--items", strconv.Itoa(item)}
	cmd := "go build -o " + harness.ShellJoin([]string{o.Floe}) + " ./cmd/node && " + harness.ShellJoin(args)
	prebuilt := append([]string{"./bin/floebench"}, args[3:]...)
	return cmd + "\n# or, from prebuilt binaries (make build; no Go toolchain needed):\n" + harness.ShellJoin(prebuilt)
}

func (r *SuiteReport) stabilitySummaryRows(w func(string, ...any)) {
	s := r.Stability
	if s == nil {
		return
	}
	w("| %s (%s, %d committers + %d readers) | %d leader changes, %d elections | the load: %.0f commits/s + %.0f reads/s, %d errors | — | 0 leader changes — %s |\n",
		SumStability, fmtRunLength(s.Duration), s.CommitClients, s.ReadClients, s.LeaderChanges(), s.Elections(),
		s.Commits.PerSecond(), s.Reads.PerSecond(), s.Commits.Errors+s.Reads.Errors, yesNo(s.Stable()))
	if s.Commits.OK > 0 {
		w("| %s (%d committers) | %s ms | its p50: %s ms | %s | — |\n", SumStabilityLat, s.CommitClients, ms(s.Commits.P99), ms(s.Commits.P50),
			ratio(float64(s.Commits.P99), float64(s.Commits.P50)))
	}
}

func (r *SuiteReport) stabilitySection(w func(string, ...any), s *StabilityBench) {
	length := fmtRunLength(s.Duration)
	w("## 10. Stability: a loaded run without faults\n\n")
	w("One 3-node cluster (`file://` warehouse) and nothing done to it: no kill, no pause, no restart. %d tables are created through the leader; then, for **%s**, %d clients commit (`set-properties`, each to its own %d tables, closed loop) **through the node that led at the start** (a follower would forward them if leadership moved), and %d clients load those tables (`GET /v1/namespaces/stab/tables/{t}`, linearizable, the default) **round-robin over the 3 nodes**, closed loop. Every client stops when the time is up.\n\n",
		s.Tables, length, s.CommitClients, s.Tables/max(1, s.CommitClients), s.ReadClients)
	w("Leadership is watched three ways: every node's `%s` (a node counts each leader it observes, itself included; the same leader again after a spell with none counts too) and `%s` are read from its `/metrics` just before the load starts and just after it stops; and every node is asked `GET /management/v1/cluster` (its `leader-id` and `term`) every %s throughout, each node by its own poller, to see when and where a change happened. Leader changes below are the most any node counted by either means; elections are the largest term increase any node showed.\n\n",
		metricLeaderChanges, metricTerm, s.PollEvery)
	w("Raft timeouts in effect — raftnode's defaults (`internal/raftnode`, as compiled into this driver; the floe command line has no flags for them): heartbeat **%s**, election **%s**, leader lease **%s**. A follower that has heard nothing from the leader for one to two heartbeat timeouts (hashicorp/raft randomises it) starts an election; a leader that has not heard from a quorum for the lease timeout steps down.\n\n",
		s.HeartbeatTimeout, s.ElectionTimeout, s.LeaderLeaseTimeout)

	w("| load | clients | ops/s | p50 (ms) | p99 (ms) | ok | errors | machine busy / iowait |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	w("| commits (`set-properties`, to the leader) | %d | %.0f | %s | %s | %d | %d | %s |\n", s.CommitClients, s.Commits.PerSecond(), ms(s.Commits.P50),
		ms(s.Commits.P99), s.Commits.OK, s.Commits.Errors, machineCell(s.Commits.Machine))
	w("| linearizable loadTable, round-robin | %d | %.0f | %s | %s | %d | %d | %s |\n\n", s.ReadClients, s.Reads.PerSecond(), ms(s.Reads.P50),
		ms(s.Reads.P99), s.Reads.OK, s.Reads.Errors, machineCell(s.Reads.Machine))
	if s.Commits.FirstError != "" {
		w("First commit error: `%s`\n\n", truncate(s.Commits.FirstError, 300))
	}
	if s.Conflicts > 0 {
		w("%d commits answered 409.\n\n", s.Conflicts)
	}
	if s.Reads.FirstError != "" {
		w("First read error: `%s`\n\n", truncate(s.Reads.FirstError, 300))
	}
	w("Slowest answered: commit %s ms, read %s ms (the driver gives up on a commit after %s and on a read after %s).\n\n",
		ms(s.CommitMax), ms(s.ReadMax), writeTimeout, readTimeout)
	if len(s.ErrorSpells) > 0 {
		w("The failures fell in %d spells (failures at most %s apart; seconds since the load started, when each failure was seen: a request that timed out was sent that much earlier):\n\n",
			len(s.ErrorSpells), stabilitySpellGap)
		w("| from (s) | to (s) | commits failed | reads failed |\n| ---: | ---: | ---: | ---: |\n")
		for i, sp := range s.ErrorSpells {
			if i == stabilityEventsShown {
				w("| … | %d more | | |\n", len(s.ErrorSpells)-stabilityEventsShown)
				break
			}
			w("| %.1f | %.1f | %d | %d |\n", sp.Start.Seconds(), sp.End.Seconds(), sp.Commits, sp.Reads)
		}
		w("\n")
	}

	w("| node | role at start | leader changes (counter, before → after) | term (gauge, before → after) | polls | not answered | answered with no leader | leader changes seen by the polls | term increase seen by the polls |\n")
	w("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, n := range s.Nodes {
		role := "follower"
		if n.ID == s.Leader {
			role = "leader"
		}
		w("| %s | %s | %d (%.0f → %.0f) | %d (%.0f → %.0f) | %d | %d | %d | %d | %d |\n", n.ID, role,
			n.MetricLeaderChanges(), n.LeaderChangesBefore, n.LeaderChangesAfter, n.MetricTermIncrease(), n.TermBefore, n.TermAfter,
			n.Poll.Samples, n.Poll.Failed, n.Poll.Leaderless, n.Poll.Changes, n.Poll.TermIncrease())
	}
	w("\n")
	if ev := s.Events(); len(ev) > 0 {
		w("Leader changes the polls saw (time since the load started, the node that saw it):\n\n")
		w("| at (s) | node | from → to | term |\n| ---: | --- | --- | ---: |\n")
		for i, e := range ev {
			if i == stabilityEventsShown {
				w("| … | %d more | | |\n", len(ev)-stabilityEventsShown)
				break
			}
			w("| %.1f | %s | %s → %s | %d |\n", e.At.Seconds(), e.Node, e.From, e.To, e.Term)
		}
		w("\n")
	}

	w("**Aim: no leader change in a %s loaded run without faults — %s** (%d leader changes, %d elections; leader %s at the start, %s at the end; %d of the polls not answered).",
		length, metText(s.Stable()), s.LeaderChanges(), s.Elections(), s.Leader, orDash(s.LeaderAfter), s.PollFailures())
	if failed := s.Commits.Errors + s.Reads.Errors; s.Stable() && failed > 0 {
		w(" Leadership held, but %d commits and %d reads failed (above) while every node kept naming the same leader in the same term: whatever held those requests did not stop Raft's heartbeats.",
			s.Commits.Errors, s.Reads.Errors)
	}
	if !s.Stable() {
		w(" Nothing was done to the cluster, so every election here is a follower that went one to two heartbeat timeouts (%s) without hearing from a leader that was alive, or a leader that went a lease timeout (%s) without a quorum's answer: on this machine the three nodes, their fsyncs and the %d clients share the CPUs and the disk, and a heartbeat delayed behind them that long costs the leadership. The nodes' logs (`raft state changed`, `raft leader lost`, `raft leader changed`) say which node started each election and when. Longer heartbeat and election timeouts would make it rarer at the price of slower failover (item 6).",
			s.HeartbeatTimeout, s.LeaderLeaseTimeout, s.CommitClients+s.ReadClients)
	}
	w("\n\nThis item alone, at these sizes:\n\n```sh\n%s\n```\n\n", r.itemCommand(ItemStability))
}

// orDash is s, or "—" when empty.
func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
