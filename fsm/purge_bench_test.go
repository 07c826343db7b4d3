package fsm

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// benchFSM opens a state machine for one benchmark, holding namespace
// nsA, and returns it, a function applying commands as one batch of
// entries (failing the benchmark on any refusal), and the last index.
func benchFSM(b *testing.B) (*FSM, func([]Command), *uint64) {
	b.Helper()
	f, err := Open(filepath.Join(b.TempDir(), "fsm.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	index := new(uint64)
	apply := func(cmds []Command) {
		logs := make([]*raft.Log, len(cmds))
		for i, c := range cmds {
			data, err := Encode(c)
			if err != nil {
				b.Fatal(err)
			}
			*index++
			logs[i] = &raft.Log{Index: *index, Term: 1, Type: raft.LogCommand, Data: data}
		}
		for i, r := range f.ApplyBatch(logs) {
			if res, ok := r.(Result); !ok || res.Err() != nil {
				b.Fatalf("entry %d: %v", i, r)
			}
		}
	}
	apply([]Command{CreateNamespace{Namespace: nsA}})
	return f, apply, index
}

// BenchmarkDuePendingJobs is the scheduler's read after a mass failure:
// 10,000 PENDING jobs in backoff ahead of 8 due ones, and a read of the
// first 4 due. summaries: the state index carries each job's summary and
// the walk passes over the jobs in backoff without decoding them; decoded:
// the same state with the index entries cleared (as written by earlier
// releases), every job in backoff decoded to be passed over.
//
//	go test -run '^$' -bench BenchmarkDuePendingJobs ./fsm
func BenchmarkDuePendingJobs(b *testing.B) {
	const backoff, due = 10_000, 8
	f, apply, index := benchFSM(b)
	for start := 0; start < backoff+due; start += 500 {
		var drops, leases []Command
		n := min(500, backoff+due-start)
		for i := start; i < start+n; i++ {
			name := fmt.Sprintf("t%06d", i)
			drops = append(drops, tableAt(name, "s3://b/wh/"+name), purgeDrop(name, fmt.Sprintf("job-%06d", i)))
		}
		apply(drops)
		for i := start; i < start+n && i < backoff; i++ {
			leases = append(leases, AssignPurgeLease{JobID: fmt.Sprintf("job-%06d", i), Node: "n"})
		}
		if len(leases) == 0 {
			continue
		}
		first := *index + 1
		apply(leases)
		var fails []Command
		for k, l := range leases {
			fails = append(fails, FinishPurgeJob{JobID: l.(AssignPurgeLease).JobID, Token: first + uint64(k),
				Outcome: OutcomeRetry, MaxAttempts: 5, NotBeforeMs: 1_000_000, AtMs: 100})
		}
		apply(fails)
	}
	read := func(b *testing.B) {
		for b.Loop() {
			err := f.View(func(r *Reader) error {
				jobs, _ := r.PurgeJobs(PurgeJobFilter{State: JobPending, NoBackoff: true}, 4)
				if len(jobs) != 4 {
					b.Fatalf("%d due jobs", len(jobs))
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("summaries", read)
	if err := clearStateSummaries(f.db); err != nil {
		b.Fatal(err)
	}
	b.Run("decoded", read)
}
