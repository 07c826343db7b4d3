package fsm

import (
	"fmt"
	"testing"
)

// BenchmarkListTables lists a namespace of 30,000 tables whole, as an
// unpaged listTables does: names from the keys (what the catalog serves)
// against the decoded records (the baseline, what it once served from).
// An operation is one whole listing.
//
//	go test -run '^$' -bench BenchmarkListTables -benchmem ./fsm
func BenchmarkListTables(b *testing.B) {
	const tables = 30000
	f, apply, _ := benchFSM(b)
	for start := 0; start < tables; start += 500 {
		var creates []Command
		for i := start; i < min(start+500, tables); i++ {
			name := fmt.Sprintf("t%07d", i)
			creates = append(creates, tableAt(name, "s3://bucket/warehouse/a/"+name))
		}
		apply(creates)
	}
	list := func(b *testing.B, fn func(r *Reader) int) {
		b.ReportAllocs()
		for b.Loop() {
			var n int
			if err := f.View(func(r *Reader) error { n = fn(r); return nil }); err != nil {
				b.Fatal(err)
			}
			if n != tables {
				b.Fatalf("listed %d tables, want %d", n, tables)
			}
		}
	}
	b.Run("records", func(b *testing.B) {
		list(b, func(r *Reader) int { l, _ := r.Tables(nsA, "", 0); return len(l) })
	})
	b.Run("names", func(b *testing.B) {
		list(b, func(r *Reader) int { l, _ := r.TableNames(nsA, "", 0); return len(l) })
	})
}
