package fsm

import (
	"fmt"
	"testing"
)

// BenchmarkPurgingDrop is one replica's share of an async drop with purge:
// applying the DropTable entry that removes the table and adds its job and
// tombstones, in batches of 64 entries per bbolt transaction (what Raft
// hands the state machine under 64 concurrent clients), per drop. The
// baseline, noop, applies no-op entries padded to the same size through
// the same path: the ratio of the two is the state machine's own work.
//
//	go test -run '^$' -bench BenchmarkPurgingDrop ./fsm
func BenchmarkPurgingDrop(b *testing.B) {
	const batch = 64
	drop := func(i int) DropTable {
		return purgeDrop(fmt.Sprintf("t%07d", i), fmt.Sprintf("0190a0a0-0000-7000-8000-%012d", i))
	}
	b.Run("noop", func(b *testing.B) {
		_, apply, _ := benchFSM(b)
		enc, err := Encode(drop(0))
		if err != nil {
			b.Fatal(err)
		}
		noops := make([]Command, batch)
		for i := range noops {
			noops[i] = Noop{Pad: make([]byte, len(enc))}
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if i%batch == 0 {
				apply(noops)
			}
		}
	})
	b.Run("drop", func(b *testing.B) {
		_, apply, _ := benchFSM(b)
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
			drops[i] = drop(i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for start := 0; start < n; start += batch {
			apply(drops[start : start+batch])
		}
	})
}
