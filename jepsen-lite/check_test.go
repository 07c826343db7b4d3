package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Checking the checkers: each is fed a hand-made history with one known
// defect (and a clean one), and must catch exactly that.

const ms = int64(1_000_000) // ns

func cas(client int, table string, old, new int64, outcome string, call, ret int64, key string) regOp {
	status := map[string]int{outcomeOK: 200, outcomeFail: 409, outcomeUnknown: 503}[outcome]
	return regOp{Client: client, Table: table, Kind: "cas", Old: old, New: new, Outcome: outcome, Status: status,
		Call: call * ms, Return: ret * ms, Key: key}
}

func read(client int, table string, value int64, call, ret int64) regOp {
	return regOp{Client: client, Table: table, Kind: "read", Value: value, Outcome: outcomeOK, Call: call * ms, Return: ret * ms}
}

func final(node, table string, current int64, snaps ...snapInfo) tableState {
	return tableState{Node: node, Table: table, Found: true, MetadataLocation: "s3://b/wh/t/metadata/x.json", Current: current, Snapshots: snaps}
}

// goodHistory: two clients, a conflict, an unknown write that took effect
// and one that did not, a final read.
func goodHistory() ([]regOp, []tableState) {
	ops := []regOp{
		cas(0, "t", 0, 1, outcomeOK, 0, 10, "k1"),
		read(1, "t", 1, 11, 12),
		cas(0, "t", 1, 2, outcomeUnknown, 20, 30, "k2"), // took effect, answer lost
		cas(1, "t", 1, 3, outcomeFail, 25, 35, "k3"),    // lost the race to k2
		read(1, "t", 2, 40, 41),
		cas(0, "t", 1, 4, outcomeUnknown, 42, 50, "k4"), // never took effect
		cas(1, "t", 2, 5, outcomeOK, 60, 70, "k5"),
		read(2, "t", 5, 100, 101), // final read after the restart
	}
	ops[len(ops)-1].Final = true
	snaps := []snapInfo{{1, "k1"}, {2, "k2"}, {5, "k5"}}
	return ops, []tableState{final("n1", "t", 5, snaps...), final("n2", "t", 5, snaps...)}
}

func TestCheckersPassGoodHistory(t *testing.T) {
	ops, finals := goodHistory()
	for _, res := range []checkResult{
		checkLinearizable(ops, nil, 0, ""),
		checkIdempotency(ops, finals),
		checkDurability(ops, finals, []string{"t"}, map[string]bool{"s3://b/wh/t/metadata/x.json": true}),
	} {
		assert.Equal(t, verdictPass, res.Verdict, "%s: %v", res.Name, res.Violations)
		assert.Empty(t, res.Violations, res.Name)
	}
}

func TestLinearizabilityCatchesStaleRead(t *testing.T) {
	ops := []regOp{
		cas(0, "t", 0, 1, outcomeOK, 0, 10, "k1"),
		read(1, "t", 0, 20, 30), // starts after the write was acknowledged, sees the old value
	}
	dir := t.TempDir()
	res := checkLinearizable(ops, []faultEvent{{Kind: faultPartition, Start: 5 * ms, End: 25 * ms}}, 0, dir)
	assert.Equal(t, verdictFail, res.Verdict)
	require.Len(t, res.Violations, 1)
	assert.Contains(t, res.Violations[0], "table t")
	require.Len(t, res.Files, 1, "porcupine's visualisation is written on failure")
	html, err := os.ReadFile(res.Files[0])
	require.NoError(t, err)
	assert.Contains(t, string(html), "<html")
}

func TestLinearizabilityCatchesLostWrite(t *testing.T) {
	ops := []regOp{
		cas(0, "t", 0, 1, outcomeOK, 0, 10, "k1"),
		cas(0, "t", 1, 2, outcomeOK, 20, 30, "k2"),
		read(1, "t", 1, 100, 101), // after the restart the second write is gone
	}
	res := checkLinearizable(ops, nil, 0, "")
	assert.Equal(t, verdictFail, res.Verdict)

	finals := []tableState{final("n1", "t", 1, snapInfo{1, "k1"})}
	dur := checkDurability(ops, finals, []string{"t"}, nil)
	assert.Equal(t, verdictFail, dur.Verdict)
	require.Len(t, dur.Violations, 1)
	assert.Contains(t, dur.Violations[0], "acknowledged write 2")
}

func TestLinearizabilityCatchesFailedWriteThatTookEffect(t *testing.T) {
	ops := []regOp{
		cas(0, "t", 0, 1, outcomeFail, 0, 10, "k1"), // answered 409...
		read(1, "t", 1, 20, 30),                     // ...but its value is there
	}
	assert.Equal(t, verdictFail, checkLinearizable(ops, nil, 0, "").Verdict)
}

func TestLinearizabilityCatchesVanishedTable(t *testing.T) {
	ops := []regOp{
		cas(0, "t", 0, 1, outcomeOK, 0, 10, "k1"),
		read(1, "t", -1, 20, 30), // 404
	}
	assert.Equal(t, verdictFail, checkLinearizable(ops, nil, 0, "").Verdict)
}

func TestLinearizabilityUnknownWriteMayApplyLate(t *testing.T) {
	// An unknown write may take effect after the client gave up (it sat in
	// the leader's log): a later read seeing it is fine.
	ops := []regOp{
		cas(0, "t", 0, 1, outcomeUnknown, 0, 10, "k1"),
		read(1, "t", 0, 20, 30),
		read(1, "t", 1, 40, 50),
	}
	assert.Equal(t, verdictPass, checkLinearizable(ops, nil, 0, "").Verdict)
	// But not un-happen once seen.
	ops = append(ops, read(1, "t", 0, 60, 70))
	assert.Equal(t, verdictFail, checkLinearizable(ops, nil, 0, "").Verdict)
}

func TestIdempotencyCatchesDoubleEffect(t *testing.T) {
	ops := []regOp{cas(0, "t", 0, 1, outcomeUnknown, 0, 10, "k1")}
	finals := []tableState{final("n1", "t", 7, snapInfo{1, "k1"}, snapInfo{7, "k1"})}
	res := checkIdempotency(ops, finals)
	assert.Equal(t, verdictFail, res.Verdict)
	require.Len(t, res.Violations, 1)
	assert.Contains(t, res.Violations[0], "took effect 2 times")
}

func TestIdempotencyCatchesRefusedKeyThatTookEffect(t *testing.T) {
	ops := []regOp{cas(0, "t", 0, 1, outcomeFail, 0, 10, "k1")}
	res := checkIdempotency(ops, []tableState{final("n1", "t", 1, snapInfo{1, "k1"})})
	assert.Equal(t, verdictFail, res.Verdict)
	assert.Contains(t, res.Violations[0], "answered 409")
}

func TestIdempotencyCatchesPhantomEffect(t *testing.T) {
	res := checkIdempotency(nil, []tableState{final("n1", "t", 1, snapInfo{1, "nobody"})})
	assert.Equal(t, verdictFail, res.Verdict)
	assert.Contains(t, res.Violations[0], "no operation of this run used")
}

func TestDurabilityCatchesDivergedOrMissingNodes(t *testing.T) {
	ops, finals := goodHistory()
	diverged := append([]tableState(nil), finals...)
	diverged[1].Current = 2
	res := checkDurability(ops, diverged, []string{"t"}, nil)
	assert.Equal(t, verdictFail, res.Verdict)
	assert.Contains(t, res.Violations[0], "disagree")

	missing := append([]tableState(nil), finals...)
	missing[1] = tableState{Node: "n2", Table: "t"}
	res = checkDurability(ops, missing, []string{"t"}, nil)
	assert.Equal(t, verdictFail, res.Verdict)
	assert.Contains(t, res.Violations[0], "does not have it")

	res = checkDurability(ops, finals, []string{"t", "u"}, nil)
	assert.Equal(t, verdictFail, res.Verdict, "a created table no node reports")

	res = checkDurability(ops, finals, []string{"t"}, map[string]bool{})
	assert.Equal(t, verdictFail, res.Verdict, "the current metadata file is gone from the bucket")
	assert.Contains(t, res.Violations[0], "not in the bucket")
}

// Purge: a dropped incarnation (uuid A, files a1 a2) and a live one of the
// same name at the same location (uuid B, files b1 b2).
func purgeCase() ([]droppedTable, []liveTable, []purgeJob, map[string]bool) {
	dropped := []droppedTable{{Name: "t", UUID: "A", Reachable: []string{"s3://b/wh/t/a1", "s3://b/wh/t/a2"}, Outcome: outcomeOK, Status: 204}}
	live := []liveTable{{Name: "t", UUID: "B", Reachable: []string{"s3://b/wh/t/b1", "s3://b/wh/t/b2"}}}
	jobs := []purgeJob{{ID: "j1", State: "SUCCEEDED", TableUUID: "A"}}
	listing := map[string]bool{"s3://b/wh/t/b1": true, "s3://b/wh/t/b2": true, "s3://b/wh/t/orphan": true}
	return dropped, live, jobs, listing
}

func TestPurgeCheckerPassesGoodListing(t *testing.T) {
	dropped, live, jobs, listing := purgeCase()
	res := checkPurge(dropped, live, jobs, listing, true)
	assert.Equal(t, verdictPass, res.Verdict, res.Violations)
}

func TestPurgeCheckerCatchesWronglyDeletedFile(t *testing.T) {
	dropped, live, jobs, listing := purgeCase()
	delete(listing, "s3://b/wh/t/b2") // the purge of A took a file of B
	res := checkPurge(dropped, live, jobs, listing, true)
	assert.Equal(t, verdictFail, res.Verdict)
	require.Len(t, res.Violations, 1)
	assert.Contains(t, res.Violations[0], "s3://b/wh/t/b2 is missing")
}

func TestPurgeCheckerCatchesLeftoverFiles(t *testing.T) {
	dropped, live, jobs, listing := purgeCase()
	listing["s3://b/wh/t/a2"] = true
	res := checkPurge(dropped, live, jobs, listing, true)
	assert.Equal(t, verdictFail, res.Verdict)
	assert.Contains(t, res.Violations[0], "SUCCEEDED but 1 of 2 files remain")

	// Synchronous purge only (no job API): an acknowledged drop must have
	// deleted everything; an unknown one is not judged.
	res = checkPurge(dropped, live, nil, listing, false)
	assert.Equal(t, verdictFail, res.Verdict)
	dropped[0].Outcome = outcomeUnknown
	res = checkPurge(dropped, live, nil, listing, false)
	assert.Equal(t, verdictPass, res.Verdict)
}

func TestPurgeCheckerJobStates(t *testing.T) {
	dropped, live, _, listing := purgeCase()
	listing["s3://b/wh/t/a1"] = true

	res := checkPurge(dropped, live, []purgeJob{{ID: "j1", State: "FAILED", TableUUID: "A", LastError: "access denied"}}, listing, true)
	assert.Equal(t, verdictPass, res.Verdict, "a FAILED job is reported, not a violation")
	require.Len(t, res.Notes, 1)
	assert.Contains(t, res.Notes[0], "FAILED (access denied)")

	res = checkPurge(dropped, live, []purgeJob{{ID: "j1", State: "RUNNING", TableUUID: "A"}}, listing, true)
	assert.Equal(t, verdictFail, res.Verdict)
	assert.Contains(t, res.Violations[0], "still RUNNING")

	res = checkPurge(dropped, live, nil, listing, true)
	assert.Equal(t, verdictFail, res.Verdict)
	assert.Contains(t, res.Violations[0], "no purge job")
}

func TestPurgeCheckerCatchesFileMissingBeforeDrop(t *testing.T) {
	dropped, live, jobs, listing := purgeCase()
	dropped[0].MissingAtDrop = []string{"s3://b/wh/t/metadata/00000-x.metadata.json"}
	res := checkPurge(dropped, live, jobs, listing, true)
	assert.Equal(t, verdictFail, res.Verdict)
	assert.Contains(t, res.Violations[0], "already missing while the table was live")
}

func TestPurgeCheckerDropThatDidNotHappen(t *testing.T) {
	// A drop with an unknown outcome that did not take effect: the
	// incarnation is still live, so its files must all be there.
	dropped, _, _, listing := purgeCase()
	dropped[0].Outcome = outcomeUnknown
	live := []liveTable{{Name: "t", UUID: "A", Reachable: dropped[0].Reachable}}
	res := checkPurge(dropped, live, nil, listing, true)
	assert.Equal(t, verdictFail, res.Verdict)
	assert.Len(t, res.Violations, 2)
	listing["s3://b/wh/t/a1"], listing["s3://b/wh/t/a2"] = true, true
	assert.Equal(t, verdictPass, checkPurge(dropped, live, nil, listing, true).Verdict)
}

func TestDecodeJobs(t *testing.T) {
	for _, body := range []string{
		`[{"id":"j","state":"SUCCEEDED","table-uuid":"u"}]`,
		`{"jobs":[{"id":"j","state":"SUCCEEDED","table-uuid":"u"}]}`,
		`{"purge-jobs":[{"id":"j","state":"SUCCEEDED","table-uuid":"u"}],"next-page-token":null}`,
	} {
		jobs, next, err := decodeJobs([]byte(body))
		require.NoError(t, err, body)
		assert.Equal(t, []purgeJob{{ID: "j", State: "SUCCEEDED", TableUUID: "u"}}, jobs, body)
		assert.Empty(t, next)
	}
	_, next, err := decodeJobs([]byte(`{"jobs":[],"next-page-token":"p2"}`))
	require.NoError(t, err)
	assert.Equal(t, "p2", next)
	_, _, err = decodeJobs([]byte(`{"other":1}`))
	assert.Error(t, err)
}

// Overlap: a register on a live table's metadata file (witness uuid W,
// never dropped), answered as floe must answer it, and a control.
func overlapCase() []overlapAttempt {
	wit := tableRef{Namespace: purgeNamespace, Name: "c0_t0", UUID: "W", Location: "s3://b/wh/jepsen_purge/c0_t0",
		MetadataLocation: "s3://b/wh/jepsen_purge/c0_t0/metadata/00001-a.metadata.json"}
	return []overlapAttempt{
		{Kind: ovRegisterOther, Table: "x0_1", MetadataLocation: wit.MetadataLocation, Witness: wit,
			Request: `POST /v1/namespaces/jepsen_overlap/register {"metadata-location":"` + wit.MetadataLocation + `","name":"x0_1"}`,
			Outcome: outcomeFail, Status: 409, ErrType: "AlreadyExistsException", Call: 10 * ms, Return: 20 * ms},
		{Kind: ovControl, Table: "o0_2", Location: "s3://b/wh/jepsen_overlap/o0/g2/t", Outcome: outcomeOK, Status: 200},
	}
}

func TestOverlapCheckerPassesRefusals(t *testing.T) {
	res := checkOverlap(overlapCase(), nil, nil, false)
	assert.Equal(t, verdictPass, res.Verdict, res.Violations)
}

func TestOverlapCheckerCatchesAcceptedRegister(t *testing.T) {
	// floe registered a second table on a live table's metadata file: two
	// tables now share every file, and a purge of either destroys the other.
	attempts := overlapCase()
	attempts[0].Outcome, attempts[0].Status, attempts[0].ErrType = outcomeOK, 200, ""
	res := checkOverlap(attempts, nil, nil, false)
	assert.Equal(t, verdictFail, res.Verdict)
	require.Len(t, res.Violations, 1)
	assert.Contains(t, res.Violations[0], "register-other")
	assert.Contains(t, res.Violations[0], "the witness was never dropped")
	assert.Contains(t, res.Violations[0], attempts[0].Witness.MetadataLocation, "the violation carries the request")

	// The witness's drop was sent after the answer: still a violation.
	dropped := []droppedTable{{Name: "c0_t0", UUID: "W", Call: 30 * ms, Outcome: outcomeOK}}
	res = checkOverlap(attempts, dropped, nil, false)
	assert.Equal(t, verdictFail, res.Verdict)
	assert.Contains(t, res.Violations[0], "after the answer")

	// Sent before the answer, and its purge job finished before the answer
	// too: the witness may have been gone; a note only.
	dropped[0].Call = 15 * ms
	attempts[0].ReturnMs = 5000
	job := purgeJob{ID: "j", State: "SUCCEEDED", TableUUID: "W", UpdatedMs: 4990}
	res = checkOverlap(attempts, dropped, []purgeJob{job}, false)
	assert.Equal(t, verdictPass, res.Verdict, res.Violations)
	require.Len(t, res.Notes, 1)
	assert.Contains(t, res.Notes[0], "may have been gone")
	res = checkOverlap(attempts, dropped, nil, false)
	assert.Equal(t, verdictPass, res.Verdict, "no job to judge by: a note")

	// The job finished after the answer: the location was held (live,
	// then tombstoned) all along.
	job.UpdatedMs = 5010
	res = checkOverlap(attempts, dropped, []purgeJob{job}, false)
	assert.Equal(t, verdictFail, res.Verdict)
	assert.Contains(t, res.Violations[0], "after the answer arrived")
}

func TestOverlapCheckerUnknownOutcomes(t *testing.T) {
	attempts := overlapCase()
	attempts[0].Outcome, attempts[0].Status = outcomeUnknown, 0
	attempts[0].Applied = appliedNo
	assert.Equal(t, verdictPass, checkOverlap(attempts, nil, nil, false).Verdict, "not applied: nothing happened")

	attempts[0].Applied = appliedYes
	res := checkOverlap(attempts, nil, nil, false)
	assert.Equal(t, verdictFail, res.Verdict, "found applied after healing, the witness never dropped")
	assert.Contains(t, res.Violations[0], "found applied after healing")

	// Applied some time after its call, and the witness was dropped at some
	// point: it may have been applied after the purge.
	res = checkOverlap(attempts, []droppedTable{{UUID: "W", Call: 500 * ms}}, nil, false)
	assert.Equal(t, verdictPass, res.Verdict, res.Violations)
}

func TestOverlapCheckerUnconditional(t *testing.T) {
	// A stray metadata file copied outside its declared location must be
	// refused even when the table it came from is long gone.
	attempts := overlapCase()
	attempts[0].Kind, attempts[0].Unconditional = ovRegisterStray, true
	attempts[0].MetadataLocation = "s3://b/wh/jepsen_overlap/stray/00001-x.metadata.json"
	attempts[0].Outcome, attempts[0].Status = outcomeOK, 200
	res := checkOverlap(attempts, []droppedTable{{UUID: "W", Call: 0}}, nil, false)
	assert.Equal(t, verdictFail, res.Verdict)
	assert.Contains(t, res.Violations[0], "invalid whatever the other tables do")
}

func TestOverlapCheckerBeingPurged(t *testing.T) {
	wit := tableRef{Namespace: overlapNamespace, Name: "o0_1", UUID: "P", Location: "s3://b/wh/jepsen_overlap/o0/g1/t"}
	a := overlapAttempt{Kind: ovPurging, Variant: "around", Table: "x0_2", Location: "s3://b/wh/jepsen_overlap/o0/g1",
		Witness: wit, WitnessPurging: true, Outcome: outcomeOK, Status: 200, CallMs: 1000, ReturnMs: 1010}
	judge := func(j purgeJob) checkResult {
		j.TableUUID = "P"
		return checkOverlap([]overlapAttempt{a}, nil, []purgeJob{j}, false)
	}
	assert.Equal(t, verdictFail, judge(purgeJob{ID: "j", State: "RUNNING"}).Verdict, "job still active")
	assert.Equal(t, verdictFail, judge(purgeJob{ID: "j", State: "FAILED"}).Verdict, "FAILED keeps the tombstones")
	assert.Equal(t, verdictFail, judge(purgeJob{ID: "j", State: "SUCCEEDED", UpdatedMs: 1020}).Verdict, "finished after the answer")
	res := judge(purgeJob{ID: "j", State: "SUCCEEDED", UpdatedMs: 1005})
	assert.Equal(t, verdictPass, res.Verdict, "finished before the answer: may have been free")
	assert.Len(t, res.Notes, 1)
	assert.Equal(t, verdictPass, judge(purgeJob{ID: "j", State: "FAILED", Released: true, UpdatedMs: 900}).Verdict)

	// A register of the purged table's metadata file, accepted once the
	// purge had finished, made a live table whose metadata file is gone.
	a.Variant, a.Location, a.MetadataLocation = "register", "", "s3://b/wh/jepsen_overlap/o0/g1/t/metadata/00001-a.metadata.json"
	a.MetadataMissing = true
	res = judge(purgeJob{ID: "j", State: "SUCCEEDED", UpdatedMs: 1005})
	assert.Equal(t, verdictFail, res.Verdict)
	require.Len(t, res.Violations, 1)
	assert.Contains(t, res.Violations[0], "not in the bucket")
}

func TestOverlapCheckerControls(t *testing.T) {
	attempts := overlapCase()
	attempts[1].Outcome, attempts[1].Status = outcomeFail, 409
	attempts[1].Answer = `{"error":{"message":"location s3://b/wh/jepsen_overlap/o0/g2/t overlaps s3://b/wh/jepsen_overlap/o0/g1/t, the location of table jepsen_overlap.o0_1"}}`
	res := checkOverlap(attempts, nil, nil, false)
	assert.Equal(t, verdictFail, res.Verdict, "a fresh location refused")
	assert.Contains(t, res.Violations[0], "fresh location")

	// Refused because of a table an attempt with an unknown outcome may
	// have made: a note.
	attempts = append(attempts, overlapAttempt{Kind: ovCreateAround, Table: "x0_7", Outcome: outcomeUnknown, Applied: appliedNo})
	attempts[1].Answer = `{"error":{"message":"location … overlaps s3://b/wh/jepsen_overlap/o0, the location of table jepsen_overlap.x0_7; a location belongs to one table"}}`
	res = checkOverlap(attempts, nil, nil, false)
	assert.Equal(t, verdictPass, res.Verdict, res.Violations)
}

func TestOverlapCheckerRequiresEveryKindInCI(t *testing.T) {
	res := checkOverlap(overlapCase(), nil, nil, true)
	assert.Equal(t, verdictFail, res.Verdict)
	assert.Contains(t, res.Violations[0], "never answered")
	var all []overlapAttempt
	for _, k := range overlapKinds {
		all = append(all, overlapAttempt{Kind: k, Outcome: outcomeFail, Status: 409})
	}
	assert.Equal(t, verdictPass, checkOverlap(all, nil, nil, true).Verdict)
}

func TestOverlapLocations(t *testing.T) {
	c := &ovClient{w: &overlapWorkload{warehouse: "s3://b/wh"}}
	assert.Equal(t, []string{"s3://b/wh/jepsen_overlap/o0/g1", "s3://b/wh/jepsen_overlap/o0", "s3://b/wh/jepsen_overlap"},
		c.ancestors("s3://b/wh/jepsen_overlap/o0/g1/t", ""))
	assert.Equal(t, []string{"s3://b/wh/jepsen_purge"}, c.ancestors("s3://b/wh/jepsen_purge/c0_t0", ""))
	// Never a directory holding the table that would move there.
	assert.Equal(t, []string{"s3://b/wh/jepsen_overlap/o0/g1"},
		c.ancestors("s3://b/wh/jepsen_overlap/o0/g1/t", "s3://b/wh/jepsen_overlap/o0/g2/t"))
	assert.True(t, sameLocation("s3a://b/wh/t/", "s3://b/wh/t"))
	assert.False(t, sameLocation("s3://b/wh/t1", "s3://b/wh/t"))
}
