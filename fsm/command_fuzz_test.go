package fsm_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/floe-catalog/floe/fsm"
)

// seedCommands are well-formed commands of every registered kind, as a
// proposer builds them. Their encodings seed both fuzz targets.
func seedCommands() []fsm.Command {
	tbl := fsm.Ident{Namespace: []string{"db"}, Name: "t"}
	other := fsm.Ident{Namespace: []string{"db", "inner"}, Name: "u"}
	inner := mustEncode(fsm.CreateNamespace{Namespace: []string{"keyed"}, AtMs: 1})
	return []fsm.Command{
		fsm.CreateNamespace{Namespace: []string{"db"}, Properties: map[string]string{"owner": "ana"}, AtMs: 1},
		fsm.CreateNamespace{Namespace: []string{"db", "inner"}, AtMs: 2},
		fsm.DropNamespace{Namespace: []string{"db", "inner"}},
		fsm.UpdateNamespace{Namespace: []string{"db"}, Set: map[string]string{"a": "1"}, Remove: []string{"owner"}, AtMs: 3},
		createSeedTable(),
		fsm.CommitTables{Changes: []fsm.TableChange{{
			Kind: fsm.ChangeUpdate, Ident: tbl, ExpectedMetadataLocation: "file:///w/db/t/metadata/00000-a.metadata.json",
			ExpectedUUID: "0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e", MetadataLocation: "file:///w/db/t/metadata/00001-b.metadata.json",
			Location: "file:///w/db/t", UUID: "0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e",
		}}, AtMs: 5},
		fsm.CommitTables{Changes: []fsm.TableChange{{
			Kind: fsm.ChangeRegister, Ident: other, MetadataLocation: "s3://bucket/w/u/metadata/00003-c.metadata.json",
			Location: "s3://bucket/w/u", UUID: "0190f0a4-7b1c-7cc0-8d2e-000000000001", Overwrite: true,
		}}, AtMs: 6},
		fsm.RenameTable{From: tbl, To: fsm.Ident{Namespace: []string{"db"}, Name: "t2"}, AtMs: 7},
		fsm.DropTable{Ident: tbl, AtMs: 8},
		fsm.DropTable{Ident: tbl, Purge: true, Job: &fsm.PurgeJobSpec{ID: "job-1", Warehouse: "file:///w", DroppedBy: "node-1"}, AtMs: 9},
		fsm.Noop{Pad: []byte("pad")},
		fsm.Keyed{
			Key:     "0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e",
			Binding: fsm.Binding{Operation: "createNamespace", Route: "", Principal: "anonymous", BodyDigest: "00"},
			AtMs:    10, ExpiresMs: 2_100_010, Command: inner,
		},
		fsm.RecordOutcome{
			Key:     "0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6f",
			Binding: fsm.Binding{Operation: "dropTable", Route: "db\x1ft", Principal: "anonymous", BodyDigest: "00"},
			AtMs:    11, ExpiresMs: 2_100_011, Result: fsm.Result{Status: fsm.StatusNoSuchTable, Message: "table does not exist: db.t"},
		},
		fsm.PruneIdempotency{NowMs: 3_000_000, Limit: 10},
		fsm.AssignPurgeLease{JobID: "job-1", Node: "node-1", AtMs: 12, ExpiresMs: 30_012},
		fsm.ReportPurgeProgress{JobID: "job-1", Token: 15, Progress: fsm.PurgeProgress{Phase: 1, Offset: 2, Deleted: 3, Bytes: 4}, AtMs: 13},
		fsm.FinishPurgeJob{JobID: "job-1", Token: 15, Outcome: "succeeded", AtMs: 14},
		fsm.PurgeHeartbeat{Node: "node-1", Slots: 2, Leases: []fsm.LeaseRef{{JobID: "job-1", Token: 15}}, AtMs: 15, ExpiresMs: 30_015},
		fsm.RetryPurgeJob{JobID: "job-1", By: "admin", AtMs: 16},
		fsm.ReleasePurgeJob{JobID: "job-1", By: "admin", AtMs: 17},
		fsm.PrunePurgeJobs{BeforeMs: 18, Limit: 5, AtMs: 19},
	}
}

// createSeedTable creates table db.t.
func createSeedTable() fsm.CommitTables {
	return fsm.CommitTables{Changes: []fsm.TableChange{{
		Kind: fsm.ChangeCreate, Ident: fsm.Ident{Namespace: []string{"db"}, Name: "t"},
		MetadataLocation: "file:///w/db/t/metadata/00000-a.metadata.json",
		Location:         "file:///w/db/t", UUID: "0190f0a4-7b1c-7cc0-8d2e-1f2a3b4c5d6e",
	}}, AtMs: 4}
}

// malformedEntries are log entries Decode must refuse without panicking.
var malformedEntries = [][]byte{
	nil,
	{},
	{byte(fsm.TypeCreateNamespace)},
	{byte(fsm.TypeCreateNamespace), 0, '{', '}'},             // version 0
	{byte(fsm.TypeCreateNamespace), 2, '{', '}'},             // a newer body version
	{byte(fsm.TypeCreateNamespace), 1, '{'},                  // truncated JSON
	{byte(fsm.TypeCreateNamespace), 1, '[', ']'},             // wrong shape
	{byte(fsm.TypeCommitTables), 1, '{', '"', 'c', '"', '}'}, // not a JSON object
	{0x7f, 1, '{', '}'},                                      // unknown type
	{0xfe, 1, '{', '}'},                                      // unknown type, ignorable flag set
}

func mustEncode(c fsm.Command) []byte {
	b, err := fsm.Encode(c)
	if err != nil {
		panic(err)
	}
	return b
}

// FuzzDecode checks that Decode never panics, and that a command Decode
// accepts survives Encode and Decode unchanged: its type is the entry's type
// byte, and encoding it, decoding that, and encoding again gives the same
// bytes (encodings are compared rather than values, because JSON does not
// tell an empty map or slice from an omitted one).
func FuzzDecode(f *testing.F) {
	for _, c := range seedCommands() {
		f.Add(mustEncode(c))
	}
	for _, b := range malformedEntries {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, entry []byte) {
		cmd, err := fsm.Decode(entry)
		if err != nil {
			if !errors.Is(err, fsm.ErrBadEncoding) && !errors.Is(err, fsm.ErrUnknownCommand) {
				t.Fatalf("Decode(%q) failed with an unclassified error: %v", entry, err)
			}
			return
		}
		if got := byte(cmd.Type()); got != entry[0] {
			t.Fatalf("Decode(%q) returned a command of type %d, entry type is %d", entry, got, entry[0])
		}
		first, err := fsm.Encode(cmd)
		if err != nil {
			t.Fatalf("Encode of decoded %#v: %v", cmd, err)
		}
		again, err := fsm.Decode(first)
		if err != nil {
			t.Fatalf("Decode(Encode(cmd)) = %v for %q", err, first)
		}
		second, err := fsm.Encode(again)
		if err != nil {
			t.Fatalf("Encode of re-decoded %#v: %v", again, err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("command changed across Encode/Decode:\n first: %q\nsecond: %q", first, second)
		}
	})
}

// FuzzApply checks, against a real state machine, that every entry Decode
// accepts is applied without a panic and that a command refused with a
// domain outcome (Result.Status not OK) leaves the catalog (namespaces and
// tables) unchanged.
//
// One state machine serves the whole run; it starts with namespace db and
// table db.t so that commands find something to act on. Entries Decode
// refuses are skipped: ApplyBatch panics on them by design (the log and the
// binary disagree). So is a Keyed entry whose inner command does not decode
// or is itself Keyed, for the same documented reason.
func FuzzApply(f *testing.F) {
	for _, c := range seedCommands() {
		f.Add(mustEncode(c))
	}
	for _, b := range malformedEntries {
		f.Add(b)
	}

	sm, err := fsm.Open(filepath.Join(f.TempDir(), "fsm.db"), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { sm.Close() })
	index := uint64(0)
	apply := func(t testing.TB, data []byte) any {
		t.Helper()
		index++
		res := sm.ApplyBatch([]*raft.Log{{Index: index, Term: 1, Type: raft.LogCommand, Data: data}})
		if len(res) != 1 {
			t.Fatalf("ApplyBatch returned %d results for one entry", len(res))
		}
		return res[0]
	}
	for _, c := range []fsm.Command{
		fsm.CreateNamespace{Namespace: []string{"db"}, AtMs: 1},
		createSeedTable(),
	} {
		if r, ok := apply(f, mustEncode(c)).(fsm.Result); !ok || r.Err() != nil {
			f.Fatalf("setup %#v: %#v", c, r)
		}
	}

	f.Fuzz(func(t *testing.T, entry []byte) {
		cmd, err := fsm.Decode(entry)
		if err != nil {
			return
		}
		if k, ok := cmd.(fsm.Keyed); ok {
			inner, err := fsm.Decode(k.Command)
			if err != nil {
				return
			}
			if _, nested := inner.(fsm.Keyed); nested {
				return
			}
		}
		before := catalogState(t, sm)
		out := apply(t, entry)
		res, ok := out.(fsm.Result)
		if !ok {
			t.Fatalf("ApplyBatch result is %T, want fsm.Result", out)
		}
		if got := sm.AppliedIndex(); got != index {
			t.Fatalf("applied index is %d after applying entry %d", got, index)
		}
		if res.Status != fsm.StatusOK {
			if after := catalogState(t, sm); after != before {
				t.Fatalf("%T refused (%v) but changed the catalog:\nbefore: %s\n after: %s", cmd, res.Err(), before, after)
			}
		}
	})
}

// catalogState renders every namespace and table, for "changes nothing"
// comparisons.
func catalogState(t *testing.T, sm *fsm.FSM) string {
	t.Helper()
	var b strings.Builder
	err := sm.View(func(r *fsm.Reader) error {
		var walk func(parent []string, depth int)
		walk = func(parent []string, depth int) {
			list, _ := r.Namespaces(parent, "", 0)
			for _, ns := range list {
				raw, _ := json.Marshal(ns)
				b.Write(raw)
				b.WriteByte('\n')
				// A level can only grow the key, so the walk ends; the
				// depth bound is a guard against a state machine bug.
				if depth < 64 && len(ns.Levels) > 0 {
					walk(ns.Levels, depth+1)
				}
			}
		}
		walk(nil, 0)
		return r.ForEachTable(func(tb fsm.Table) error {
			raw, _ := json.Marshal(tb)
			b.Write(raw)
			b.WriteByte('\n')
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
