package storage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Writes that arrive while a flush runs wait and are flushed together by
// the next one; each Write returns only when its own flush has ended, with
// its own outcome: a write that fails fails alone, and leaves no temporary
// file behind.
func TestGroupCommitBatchesWaitingWrites(t *testing.T) {
	s := newLocalStorage(1, false)
	var (
		mu      sync.Mutex
		sizes   []int
		started = make(chan struct{})
		release = make(chan struct{})
	)
	s.group.beforeFlush = func(n int) {
		mu.Lock()
		sizes = append(sizes, n)
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			close(started)
			<-release
		}
	}
	dir := t.TempDir()
	ctx := context.Background()
	write := func(key string) error {
		l, err := parse(key)
		require.NoError(t, err)
		return s.write(ctx, key, l, []byte(key))
	}
	require.NoError(t, os.MkdirAll(dir+"/t1/metadata/taken", 0o755))

	firstDone := make(chan error, 1)
	go func() { firstDone <- write(dir + "/t0/metadata/first.json") }()
	<-started

	// While the first flush is held: writes to distinct directories, to a
	// shared one, and one whose name is a directory (its rename fails).
	var keys []string
	for i := range 6 {
		keys = append(keys, fmt.Sprintf("%s/t%d/metadata/v%d.json", dir, 2+i%3, i))
	}
	failing := dir + "/t1/metadata/taken"
	keys = append(keys, failing)
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() { errs[i] = write(k) })
	}
	require.Eventually(t, func() bool {
		s.group.mu.Lock()
		defer s.group.mu.Unlock()
		return len(s.group.queue) == len(keys)
	}, 10*time.Second, time.Millisecond, "the writes queue behind the running flush")
	select {
	case err := <-firstDone:
		t.Fatalf("the first write returned before its flush ended: %v", err)
	default:
	}
	close(release)
	require.NoError(t, <-firstDone)
	wg.Wait()

	assert.Equal(t, []int{1, len(keys)}, sizes, "one flush for every write that waited")
	for i, k := range keys {
		if k == failing {
			require.Error(t, errs[i])
			assert.Contains(t, errs[i].Error(), "rename")
			continue
		}
		require.NoError(t, errs[i], k)
		got, err := os.ReadFile(k)
		require.NoError(t, err)
		assert.Equal(t, k, string(got))
		fi, err := os.Stat(k)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(filePerm), fi.Mode().Perm())
	}
	require.NoError(t, filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		assert.False(t, strings.HasPrefix(filepath.Base(p), tmpPrefix), "temporary file left: %s", p)
		return err
	}))
	s.group.mu.Lock()
	assert.False(t, s.group.running, "no flush runs once every write returned")
	assert.Empty(t, s.group.queue)
	s.group.mu.Unlock()
}

// Many writers at once, some sharing directories: every write lands with
// its content, whatever the batches turn out to be.
func TestGroupCommitConcurrentWriters(t *testing.T) {
	for _, parallel := range []int{1, maxFlushParallel} {
		t.Run(fmt.Sprintf("parallel=%d", parallel), func(t *testing.T) {
			s := &localStorage{deleteConcurrency: 1, group: &groupSync{parallel: parallel}}
			var mu sync.Mutex
			flushes, writes := 0, 0
			s.group.beforeFlush = func(n int) {
				mu.Lock()
				flushes++
				writes += n
				mu.Unlock()
			}
			dir := t.TempDir()
			const writers, each = 32, 8
			var wg sync.WaitGroup
			errs := make([]error, writers*each)
			for w := range writers {
				wg.Go(func() {
					for j := range each {
						key := fmt.Sprintf("%s/t%d/metadata/%d-%d.json", dir, w%5, w, j)
						l, err := parse(key)
						if err == nil {
							err = s.write(context.Background(), key, l, []byte(key))
						}
						errs[w*each+j] = err
					}
				})
			}
			wg.Wait()
			for _, err := range errs {
				require.NoError(t, err)
			}
			assert.Equal(t, writers*each, writes)
			t.Logf("%d writes in %d flushes", writes, flushes)
			for w := range writers {
				for j := range each {
					key := fmt.Sprintf("%s/t%d/metadata/%d-%d.json", dir, w%5, w, j)
					got, err := os.ReadFile(key)
					require.NoError(t, err)
					require.Equal(t, key, string(got))
				}
			}
		})
	}
}
