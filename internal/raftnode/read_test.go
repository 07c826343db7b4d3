package raftnode

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
)

// readRounds is the node's read_index_round_trips_total for role.
func readRounds(n *Node, role string) float64 {
	return testutil.ToFloat64(n.metrics.readIndexRounds.WithLabelValues(role))
}

// batchSizes returns the sample count and sum of the node's
// read_index_batch_size histogram for role: fetches, and reads they answered.
func batchSizes(t *testing.T, n *Node, role string) (fetches uint64, reads float64) {
	t.Helper()
	var m dto.Metric
	require.NoError(t, n.metrics.readIndexBatch.WithLabelValues(role).(prometheus.Histogram).Write(&m))
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// holdFirstFetch wraps b's fetch so that its first call waits until release
// is closed before it fetches. It reports that call through entered. It
// must be called before any read uses b (the batcher's goroutine reads the
// field).
func holdFirstFetch(b *indexBatcher, entered chan<- struct{}, release <-chan struct{}) {
	fetch := b.fetch
	var first atomic.Bool
	b.fetch = func(ctx context.Context, renew func() bool) (uint64, error) {
		if first.CompareAndSwap(false, true) {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		return fetch(ctx, renew)
	}
}

// sharedRounds runs reads linearizable reads on n: one first, whose fetch is
// held, then the rest, which queue for the next fetch while it is held. It
// returns once all have been served.
func sharedRounds(t *testing.T, n *Node, b *indexBatcher, reads int) {
	t.Helper()
	entered, release := make(chan struct{}), make(chan struct{})
	holdFirstFetch(b, entered, release)
	read := func() error { return n.Read(ctxTimeout(t, 20*time.Second), func(*fsm.Reader) error { return nil }) }

	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, read()) })
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first read never started a fetch")
	}
	for range reads - 1 {
		wg.Go(func() { assert.NoError(t, read()) })
	}
	// Every later read arrived while the first fetch was in flight: they
	// all wait for the next one.
	require.Eventually(t, func() bool { return b.pending() == reads-1 }, 20*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
}

// Concurrent linearizable reads on a follower share their round trips to
// the leader: reads that arrive while a read-index call is in flight all
// ride the next one. Counted by floe_raft_read_index_round_trips_total and
// floe_raft_read_index_batch_size.
func TestConcurrentFollowerReadsShareLeaderRoundTrips(t *testing.T) {
	nodes, _ := startJoinedCluster(t, 3)
	leader := waitOneLeader(t, nodes)
	follower := others(nodes, leader)[0]
	require.NoError(t, mustPropose(t, leader, createNS("warm")).Err())

	const reads = 32
	rounds0, fetches0, served0 := readRounds(follower, roleFollower), 0, 0.0
	{
		f, r := batchSizes(t, follower, roleFollower)
		fetches0, served0 = int(f), r
	}
	leaderRounds0 := readRounds(leader, roleLeader)

	sharedRounds(t, follower, follower.followerBatch, reads)

	rounds := readRounds(follower, roleFollower) - rounds0
	fetches, served := batchSizes(t, follower, roleFollower)
	t.Logf("%d follower reads: %.0f read-index calls to the leader, %.0f quorum rounds on the leader",
		reads, rounds, readRounds(leader, roleLeader)-leaderRounds0)
	assert.Less(t, rounds, float64(reads), "fewer round trips to the leader than reads")
	// One held fetch for the first read, one for the other 31 (a leader
	// change in between could add resends, hence no exact count).
	assert.GreaterOrEqual(t, rounds, 2.0)
	assert.Equal(t, uint64(2), fetches-uint64(fetches0), "two fetches")
	assert.Equal(t, float64(reads), served-served0, "answering every read")
	assert.Less(t, readRounds(leader, roleLeader)-leaderRounds0, float64(reads), "fewer quorum rounds on the leader than reads")
}

// Concurrent linearizable reads on the leader share one quorum round
// (VerifyLeader) per batch in the same way.
func TestConcurrentLeaderReadsShareQuorumRounds(t *testing.T) {
	nodes, _ := startJoinedCluster(t, 3)
	leader := waitOneLeader(t, nodes)
	require.NoError(t, mustPropose(t, leader, createNS("warm")).Err())

	const reads = 32
	rounds0 := readRounds(leader, roleLeader)
	f0, s0 := batchSizes(t, leader, roleLeader)

	sharedRounds(t, leader, leader.leaderBatch, reads)

	rounds := readRounds(leader, roleLeader) - rounds0
	f, s := batchSizes(t, leader, roleLeader)
	assert.Equal(t, 2.0, rounds, "one quorum round for the first read, one for the other %d", reads-1)
	assert.Equal(t, uint64(2), f-f0)
	assert.Equal(t, float64(reads), s-s0)
}

// A write acknowledged before a read starts is visible to that read, on
// every follower, while writers and readers run concurrently and reads
// share their round trips to the leader.
func TestFollowerReadsSeeEveryWriteAcknowledgedBeforeThem(t *testing.T) {
	nodes, _ := startJoinedCluster(t, 3)
	leader := waitOneLeader(t, nodes)
	followers := others(nodes, leader)

	const (
		writers         = 4
		writesPerWriter = 30
		readersPerNode  = 6
	)
	// acked[w] is the last write writer w had acknowledged (-1: none).
	var acked [writers]atomic.Int64
	for w := range acked {
		acked[w].Store(-1)
	}
	name := func(w int, i int64) string { return fmt.Sprintf("w%d-%03d", w, i) }

	rounds0 := map[*Node]float64{}
	for _, f := range followers {
		rounds0[f] = readRounds(f, roleFollower)
	}

	var writersWG, readersWG sync.WaitGroup
	done := make(chan struct{})
	for w := range writers {
		writersWG.Go(func() {
			for i := range int64(writesPerWriter) {
				// Through every node in turn: followers forward.
				via := nodes[(w+int(i))%len(nodes)]
				require.NoError(t, mustPropose(t, via, createNS(name(w, i))).Err())
				acked[w].Store(i)
			}
		})
	}
	var reads atomic.Int64
	for _, f := range followers {
		for range readersPerNode {
			readersWG.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					// Every write acknowledged before the read starts.
					var want [writers]int64
					for w := range want {
						want[w] = acked[w].Load()
					}
					err := f.Read(ctxTimeout(t, 20*time.Second), func(r *fsm.Reader) error {
						for w, i := range want {
							if i < 0 {
								continue
							}
							if _, ok := r.Namespace([]string{name(w, i)}); !ok {
								return fmt.Errorf("%s does not see %s, acknowledged before the read started", f.ID(), name(w, i))
							}
						}
						return nil
					})
					if !assert.NoError(t, err) {
						return
					}
					reads.Add(1)
				}
			})
		}
	}
	writersWG.Wait()
	close(done)
	readersWG.Wait()

	var rounds float64
	for _, f := range followers {
		rounds += readRounds(f, roleFollower) - rounds0[f]
	}
	t.Logf("%d follower reads, %.0f read-index calls to the leader", reads.Load(), rounds)
	assert.Positive(t, reads.Load())
	assert.Less(t, rounds, float64(reads.Load()), "concurrent reads shared round trips")
}
