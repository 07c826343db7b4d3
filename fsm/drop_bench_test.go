package fsm

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkPurgingDrop is one replica's share of an async drop with purge:
// applying the DropTable entry that removes the table and adds its job and
// tombstones, in batches of 64 entries per bbolt transaction (what Raft
// hands the state machine under 64 concurrent clients). Reported per drop.
//
//	go test -run '^$' -bench BenchmarkPurgingDrop ./fsm
func BenchmarkPurgingDrop(b *testing.B) {
	const batch = 64
	f, err := Open(filepath.Join(b.TempDir(), "fsm.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var index uint64
	apply := func(cmds []Command) {
		logs := make([]*raft.Log, len(cmds))
		for i, c := range cmds {
			data, err := Encode(c)
			if err != nil {
				b.Fatal(err)
			}
			index++
			logs[i] = &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}
		}
		for i, r := range f.ApplyBatch(logs) {
			if res, ok := r.(Result); !ok || res.Err() != nil {
				b.Fatalf("entry %d: %v", i, r)
			}
		}
	}
	apply([]Command{CreateNamespace{Namespace: nsA}})
	n := (b.N + batch - 1) / batch * batch
	for start := 0; start < n; start += 500 {
		var creates []Command
		for i := start; i < min(start+500, n); i++ {
			name := fmt.Sprintf("t%07d", i)
			creates = append(creates, tableAt(name, "s3://b/wh/a/"+name))
		}
		apply(creates)
	}
	drops := make([]Command, n)
	for i := range drops {
		name := fmt.Sprintf("t%07d", i)
		drops[i] = purgeDrop(name, fmt.Sprintf("0190a0a0-0000-7000-8000-%012d", i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for start := 0; start < n; start += batch {
		apply(drops[start : start+batch])
	}
}
