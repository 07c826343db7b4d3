package storage

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkLocalWrite writes new files of a commit's metadata size through
// the local backend, each writer into its own directories (dirs=spread, as
// commits to distinct tables) or all into one (dirs=one), with each write
// synced on its own (sync-each) or with group commit (group, the default).
// Reported: ops/s and the process's CPU per write (getrusage).
// -localwrite.rounds=R runs every row R times, round by round, each round
// starting at the other variant.
//
//	go test -run '^$' -bench BenchmarkLocalWrite -benchtime 1500x ./internal/storage -args -localwrite.rounds=3
func BenchmarkLocalWrite(b *testing.B) {
	const size, dirs = 19000, 128
	data := bytes.Repeat([]byte("x"), size)
	// One directory for every row, removed only at the end: removing a
	// row's files between rows would make the next row's file creations
	// pay for the deletions (ext4 skips recently freed inodes).
	top := b.TempDir()
	row := 0
	variants := []struct {
		name string
		s    *localStorage
	}{
		{"sync-each", newLocalStorage(1, true)},
		{"group", newLocalStorage(1, false)},
	}
	for _, spread := range []bool{true, false} {
		for _, writers := range []int{1, 64} {
			for round := 1; round <= *localWriteRounds; round++ {
				// Each round starts at the other variant, so that neither
				// always runs first.
				for k := range variants {
					v := variants[(k+round-1)%len(variants)]
					where := "one"
					if spread {
						where = "spread"
					}
					name := fmt.Sprintf("dirs=%s/writers=%d/%s/round=%d", where, writers, v.name, round)
					b.Run(name, func(b *testing.B) {
						row++
						root := fmt.Sprintf("%s/%d", top, row)
						var next atomic.Int64
						var wg sync.WaitGroup
						errs := make([]error, writers)
						cpu0 := rusageCPU()
						b.ResetTimer()
						t0 := time.Now()
						for i := range writers {
							wg.Go(func() {
								for j := 0; ; j++ {
									n := next.Add(1)
									if n > int64(b.N) {
										return
									}
									d := 0
									if spread {
										d = (i + (j%max(1, dirs/writers))*writers) % dirs
									}
									key := fmt.Sprintf("%s/t%03d/metadata/%08d.metadata.json", root, d, n)
									l, err := parse(key)
									if err == nil {
										err = v.s.write(context.Background(), key, l, data)
									}
									if err != nil {
										errs[i] = err
										return
									}
								}
							})
						}
						wg.Wait()
						elapsed := time.Since(t0)
						b.StopTimer()
						for _, err := range errs {
							if err != nil {
								b.Fatal(err)
							}
						}
						b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
						b.ReportMetric(float64(rusageCPU()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
					})
				}
			}
		}
	}
}

var localWriteRounds = flag.Int("localwrite.rounds", 1, "BenchmarkLocalWrite: rounds over every row")

func rusageCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
