package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Verdicts of a check.
const (
	verdictPass    = "PASS"
	verdictFail    = "FAIL"
	verdictUnknown = "UNKNOWN" // the checker ran out of time; nothing found
	verdictSkipped = "SKIPPED"
)

// checkResult is one checker's verdict.
type checkResult struct {
	Name       string   `json:"name"`
	Verdict    string   `json:"verdict"`
	Summary    string   `json:"summary"`
	Violations []string `json:"violations,omitempty"`
	Notes      []string `json:"notes,omitempty"`
	Files      []string `json:"files,omitempty"` // reports written, e.g. porcupine HTML
}

func (c *checkResult) fail(format string, args ...any) {
	c.Violations = append(c.Violations, fmt.Sprintf(format, args...))
}

func (c *checkResult) finish(ok string) {
	if len(c.Violations) > 0 {
		c.Verdict = verdictFail
		c.Summary = fmt.Sprintf("%d violation(s)", len(c.Violations))
		return
	}
	if c.Verdict == "" {
		c.Verdict = verdictPass
	}
	if c.Summary == "" {
		c.Summary = ok
	}
}

// ---------------------------------------------------------------------------
// Linearizability: one compare-and-set register per table.

type regInput struct {
	Kind     string
	Old, New int64
}

type regOutput struct {
	Value   int64
	Outcome string
}

// registerModel is the sequential specification of a table's main branch as
// a compare-and-set register over snapshot ids (0: no snapshot yet).
//
// A cas with an unknown outcome is "maybe applied": the checker is given it
// with an open end (return = +inf), so it may be linearised at any point
// after its call — including after every other operation, where it is
// observed by no one — and at its linearisation point it takes effect iff
// the register holds Old, as the catalog's requirement check would decide.
// A cas answered 409 is "not applied": it must be linearised at a point
// where the register did not hold Old (every commit in this workload moves
// main, so a requirement can only fail because main moved).
var registerModel = porcupine.Model{
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		st := state.(int64)
		in := input.(regInput)
		out := output.(regOutput)
		switch in.Kind {
		case "read":
			return out.Value == st, st
		case "cas":
			switch out.Outcome {
			case outcomeOK:
				return st == in.Old, in.New
			case outcomeFail:
				return st != in.Old, st
			default: // unknown
				if st == in.Old {
					return true, in.New
				}
				return true, st
			}
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		in := input.(regInput)
		out := output.(regOutput)
		if in.Kind == "read" {
			if out.Value < 0 {
				return "read() -> table not found"
			}
			return fmt.Sprintf("read() -> %d", out.Value)
		}
		return fmt.Sprintf("cas(%d→%d) %s", in.Old, in.New, out.Outcome)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("main=%d", state.(int64)) },
}

// checkLinearizable checks each table's history against registerModel with
// porcupine, giving up on a table after timeout (verdict UNKNOWN). For each
// table that is not linearizable it writes porcupine's HTML visualisation to
// outDir (when set), with the faults drawn as annotations.
func checkLinearizable(ops []regOp, faults []faultEvent, timeout time.Duration, outDir string) checkResult {
	res := checkResult{Name: "linearizability"}
	byTable := map[string][]regOp{}
	var maxReturn int64
	for _, op := range ops {
		byTable[op.Table] = append(byTable[op.Table], op)
		maxReturn = max(maxReturn, op.Return, op.Call)
	}
	// An open end: later than anything in the history, and far below the
	// int64 limit so the visualisation's arithmetic cannot overflow.
	open := maxReturn + int64(time.Hour)
	tables := sortedKeys(byTable)
	var unknownTables []string
	checked := 0
	for _, t := range tables {
		var hist []porcupine.Operation
		for _, op := range byTable[t] {
			ret := op.Return
			if op.Kind == "cas" && op.Outcome == outcomeUnknown {
				ret = open
			}
			if op.Kind == "read" && op.Outcome != outcomeOK {
				continue // a read without an answer observed nothing
			}
			hist = append(hist, porcupine.Operation{
				ClientId: op.Client,
				Input:    regInput{Kind: op.Kind, Old: op.Old, New: op.New},
				Call:     op.Call,
				Output:   regOutput{Value: op.Value, Outcome: op.Outcome},
				Return:   ret,
			})
		}
		if len(hist) == 0 {
			continue
		}
		checked++
		result, info := porcupine.CheckOperationsVerbose(registerModel, hist, timeout)
		switch result {
		case porcupine.Illegal:
			msg := fmt.Sprintf("table %s: history of %d operations is not linearizable", t, len(hist))
			if outDir != "" {
				info.AddAnnotations(faultAnnotations(faults))
				path := filepath.Join(outDir, "linearizability-"+sanitize(t)+".html")
				if err := porcupine.VisualizePath(registerModel, info, path); err != nil {
					res.Notes = append(res.Notes, fmt.Sprintf("visualisation of %s: %v", t, err))
				} else {
					res.Files = append(res.Files, path)
					msg += " (see " + path + ")"
				}
			}
			res.fail("%s", msg)
		case porcupine.Unknown:
			unknownTables = append(unknownTables, t)
		}
	}
	if len(unknownTables) > 0 && len(res.Violations) == 0 {
		res.Verdict = verdictUnknown
		res.Summary = fmt.Sprintf("%d of %d tables not decided within %s: %s", len(unknownTables), checked, timeout, strings.Join(unknownTables, ", "))
	}
	res.finish(fmt.Sprintf("%d tables, %d operations linearizable", checked, len(ops)))
	return res
}

func faultAnnotations(faults []faultEvent) []porcupine.Annotation {
	var out []porcupine.Annotation
	for _, f := range faults {
		out = append(out, porcupine.Annotation{
			Tag: "nemesis", Start: f.Start, End: f.End,
			Description: f.Kind, Details: f.Detail, BackgroundColor: "#fde2e2",
		})
	}
	return out
}

// ---------------------------------------------------------------------------
// Idempotency and durability, from the tables' final metadata.

// checkIdempotency checks that no keyed operation took effect twice, that
// no operation answered 409 took effect (a retry that re-executed instead of
// replaying would look like that), and that no effect appears that no
// operation asked for. finals holds each table as every node reports it;
// one answering node per table is enough here (durability compares them).
func checkIdempotency(ops []regOp, finals []tableState) checkResult {
	res := checkResult{Name: "idempotency"}
	opByKey := map[string]regOp{}
	for _, op := range ops {
		if op.Kind == "cas" && op.Key != "" {
			opByKey[op.Key] = op
		}
	}
	effects := 0
	for _, st := range firstFound(finals) {
		count := map[string][]int64{}
		for _, s := range st.Snapshots {
			count[s.Key] = append(count[s.Key], s.ID)
			effects++
		}
		for _, key := range sortedKeys(count) {
			ids := count[key]
			op, known := opByKey[key]
			switch {
			case key == "":
				res.fail("table %s: snapshot(s) %v carry no Idempotency-Key", st.Table, ids)
			case !known:
				res.fail("table %s: snapshot(s) %v carry key %s that no operation of this run used", st.Table, ids, key)
			case len(ids) > 1:
				res.fail("table %s: key %s took effect %d times (snapshots %v)", st.Table, key, len(ids), ids)
			case op.Outcome == outcomeFail:
				res.fail("table %s: key %s was answered %d (not applied) but took effect as snapshot %d", st.Table, key, op.Status, ids[0])
			}
		}
	}
	res.finish(fmt.Sprintf("%d effects, each from exactly one keyed operation", effects))
	return res
}

// checkDurability checks that, after healing and a full restart, every node
// reports the same state for each table and every acknowledged write is in
// it. Reads have already been checked by the linearizability checker, which
// is also given the final reads.
//
// listing, when not nil, is the bucket's listing under the register
// namespace: each table's current metadata file must be in it (nodes serve
// loads from a cache, so a deleted metadata file is otherwise invisible).
func checkDurability(ops []regOp, finals []tableState, tables []string, listing map[string]bool) checkResult {
	res := checkResult{Name: "durability"}
	if listing != nil {
		for _, st := range firstFound(finals) {
			if !listing[st.MetadataLocation] {
				res.fail("table %s: its current metadata file %s is not in the bucket", st.Table, st.MetadataLocation)
			}
		}
	}
	byTable := map[string][]tableState{}
	for _, st := range finals {
		byTable[st.Table] = append(byTable[st.Table], st)
	}
	for _, t := range tables {
		sts := byTable[t]
		if len(sts) == 0 {
			res.fail("table %s: no node reported it after the restart", t)
			continue
		}
		for _, st := range sts {
			if !st.Found {
				res.fail("table %s: node %s does not have it after the restart", t, st.Node)
				continue
			}
			if st.MetadataLocation != sts[0].MetadataLocation || st.Current != sts[0].Current {
				res.fail("table %s: nodes disagree after the restart: %s has %s (main=%d), %s has %s (main=%d)",
					t, sts[0].Node, sts[0].MetadataLocation, sts[0].Current, st.Node, st.MetadataLocation, st.Current)
			}
		}
	}
	have := map[string]map[int64]bool{}
	for _, st := range firstFound(finals) {
		have[st.Table] = map[int64]bool{}
		for _, s := range st.Snapshots {
			have[st.Table][s.ID] = true
		}
	}
	acked := 0
	for _, op := range ops {
		if op.Kind != "cas" || op.Outcome != outcomeOK || op.Touch {
			continue // a touch adds no snapshot
		}
		acked++
		if h, ok := have[op.Table]; ok && !h[op.New] {
			res.fail("table %s: acknowledged write %d (key %s, client %d, answered by %v) is lost", op.Table, op.New, op.Key, op.Client, op.Nodes)
		}
	}
	res.finish(fmt.Sprintf("%d acknowledged writes present on every node", acked))
	return res
}

// firstFound returns, per table, the first node's report that has the table.
func firstFound(finals []tableState) []tableState {
	seen := map[string]bool{}
	var out []tableState
	for _, st := range finals {
		if st.Found && !seen[st.Table] {
			seen[st.Table] = true
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Table < out[j].Table })
	return out
}

// ---------------------------------------------------------------------------
// Purge, from the S3 listing after quiescence.

// droppedTable is one incarnation of a table the purge workload dropped
// with purgeRequested=true.
type droppedTable struct {
	Namespace string   `json:"namespace,omitempty"`
	Name      string   `json:"name"`
	UUID      string   `json:"uuid"`
	Location  string   `json:"location"`
	Reachable []string `json:"reachable"` // files reachable from its last metadata, as loaded before the drop
	Async     bool     `json:"async"`
	Query     string   `json:"query,omitempty"` // e.g. purgeRequested=True
	Outcome   string   `json:"outcome"`         // of the drop request
	Status    int      `json:"status,omitempty"`
	Key       string   `json:"key,omitempty"`
	Call      int64    `json:"call,omitempty"` // ns since the run started
	Return    int64    `json:"return,omitempty"`
	Attempts  []string `json:"attempts,omitempty"` // node: status, per try
	Replayed  bool     `json:"replayed,omitempty"`
	// MissingAtDrop are reachable files that were already gone from the
	// bucket when the table was loaded for the drop, while it was live.
	MissingAtDrop []string `json:"missing-at-drop,omitempty"`
}

// liveTable is a table of the purge workload that exists at the end.
type liveTable struct {
	Name      string   `json:"name"`
	UUID      string   `json:"uuid"`
	Reachable []string `json:"reachable"`
}

// purgeJob is the part of a purge job the checker reads.
type purgeJob struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	TableUUID string `json:"table-uuid"`
	LastError string `json:"last-error,omitempty"`
	Released  bool   `json:"released,omitempty"`
	UpdatedMs int64  `json:"updated-ms,omitempty"` // the proposer's clock at the job's last change
}

// checkPurge checks the warehouse listing taken after every purge job
// settled. A live table must have every file reachable from its metadata. A
// dropped incarnation that is gone must have a purge job; when the job
// SUCCEEDED, none of its reachable files may remain; a FAILED job is
// reported, not a violation; a job still PENDING or RUNNING after
// quiescence is. jobsAPI false means the build has no purge-job API
// (synchronous purge only): then an acknowledged drop must have left none of
// its files, and an unknown one is not judged.
func checkPurge(dropped []droppedTable, live []liveTable, jobs []purgeJob, listing map[string]bool, jobsAPI bool) checkResult {
	res := checkResult{Name: "purge"}
	liveUUID := map[string]bool{}
	liveFile := map[string]bool{}
	files := 0
	for _, t := range live {
		liveUUID[t.UUID] = true
		for _, f := range t.Reachable {
			liveFile[f] = true
			files++
			if !listing[f] {
				res.fail("live table %s (uuid %s): file %s is missing", t.Name, t.UUID, f)
			}
		}
	}
	jobByUUID := map[string]purgeJob{}
	for _, j := range jobs {
		jobByUUID[j.TableUUID] = j
	}
	purged, failed := 0, 0
	for _, d := range dropped {
		for _, f := range d.MissingAtDrop {
			res.fail("table %s (uuid %s): file %s was already missing while the table was live (before its drop)", d.Name, d.UUID, f)
		}
		if liveUUID[d.UUID] {
			continue // the drop did not take effect; checked as live
		}
		var remaining []string
		for _, f := range d.Reachable {
			if listing[f] && !liveFile[f] {
				remaining = append(remaining, f)
			}
		}
		if !jobsAPI {
			if d.Outcome == outcomeOK && len(remaining) > 0 {
				res.fail("dropped table %s (uuid %s): drop answered %d (tries: %s; replayed: %v) but %d of %d files remain, e.g. %s",
					d.Name, d.UUID, d.Status, strings.Join(d.Attempts, ", "), d.Replayed, len(remaining), len(d.Reachable), remaining[0])
			}
			if d.Outcome == outcomeOK {
				purged++
			}
			continue
		}
		j, ok := jobByUUID[d.UUID]
		switch {
		case !ok:
			res.fail("dropped table %s (uuid %s, drop %s): the table is gone but there is no purge job for it", d.Name, d.UUID, d.Outcome)
		case j.State == "SUCCEEDED":
			purged++
			if len(remaining) > 0 {
				res.fail("dropped table %s (uuid %s): job %s SUCCEEDED but %d of %d files remain, e.g. %s",
					d.Name, d.UUID, j.ID, len(remaining), len(d.Reachable), remaining[0])
			}
		case j.State == "FAILED":
			failed++
			res.Notes = append(res.Notes, fmt.Sprintf("dropped table %s (uuid %s): job %s FAILED (%s); %d files left",
				d.Name, d.UUID, j.ID, j.LastError, len(remaining)))
		default:
			res.fail("dropped table %s (uuid %s): job %s still %s after quiescence", d.Name, d.UUID, j.ID, j.State)
		}
	}
	res.finish(fmt.Sprintf("%d live tables with all %d files, %d dropped incarnations purged, %d FAILED jobs reported",
		len(live), files, purged, failed))
	return res
}

// ---------------------------------------------------------------------------

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}
