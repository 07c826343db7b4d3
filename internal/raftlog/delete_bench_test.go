package raftlog

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkDeleteRange times compaction from the front, as raft runs it
// after a snapshot: n entries of about 600 bytes (a commit's size) deleted
// in one DeleteRange. Compare the figure per entry across n: it should
// stay flat (the cost of one delete), not grow with n.
//
//	go test ./internal/raftlog -run '^$' -bench DeleteRange -benchtime 3x
func BenchmarkDeleteRange(b *testing.B) {
	for _, n := range []int{5_000, 20_000, 50_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			payload := make([]byte, 600)
			for b.Loop() {
				b.StopTimer()
				s, err := Open(filepath.Join(b.TempDir(), "raft.db"), Options{NoSync: true})
				if err != nil {
					b.Fatal(err)
				}
				logs := make([]*raft.Log, 0, 1000)
				for i := 1; i <= n+1000; i++ {
					logs = append(logs, &raft.Log{Index: uint64(i), Term: 1, Type: raft.LogCommand, Data: payload})
					if len(logs) == cap(logs) {
						if err := s.StoreLogs(logs); err != nil {
							b.Fatal(err)
						}
						logs = logs[:0]
					}
				}
				b.StartTimer()
				if err := s.DeleteRange(1, uint64(n)); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				first, _ := s.FirstIndex()
				if first != uint64(n)+1 {
					b.Fatalf("first index %d after deleting 1..%d", first, n)
				}
				_ = s.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/entry")
		})
	}
}
