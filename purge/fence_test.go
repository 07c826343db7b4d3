package purge

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
)

// heartbeatGate refuses this node's heartbeats while closed, as a leader
// that no longer hears the node would; everything else goes to the state
// machine.
type heartbeatGate struct {
	*fsmStore
	closed  atomic.Bool
	refused atomic.Int64
}

var errRefused = errors.New("heartbeat refused")

func (g *heartbeatGate) Propose(ctx context.Context, c fsm.Command) (fsm.Result, error) {
	if _, ok := c.(fsm.PurgeHeartbeat); ok && g.closed.Load() {
		g.refused.Add(1)
		return fsm.Result{}, errRefused
	}
	return g.fsmStore.Propose(ctx, c)
}

// TestFenceNeedsARecentHeartbeat: a delete batch is sent only under a
// heartbeat the log accepted less than half a heartbeat timeout ago, and
// its context ends three quarters of a timeout after that heartbeat was
// sent, before the leader could reassign the node's leases. A process that
// was paused (its last heartbeat old) waits for a new one; with none
// accepted the batch is not sent at all.
func TestFenceNeedsARecentHeartbeat(t *testing.T) {
	const timeout = 400 * time.Millisecond
	st := &heartbeatGate{fsmStore: newFSMStore(t)}
	s, err := New(Config{NodeID: "n1", Store: st, HeartbeatTimeout: timeout, Registerer: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler), Storage: func(map[string]string) (Objects, error) { return nil, nil }})
	require.NoError(t, err)
	s.Start()
	t.Cleanup(s.Stop)
	ctx := context.Background()

	fctx, cancel, err := s.fence(ctx)
	require.NoError(t, err, "the first heartbeat is accepted")
	sent, _ := s.renewals.last()
	deadline, ok := fctx.Deadline()
	require.True(t, ok)
	assert.Equal(t, sent.Add(timeout*3/4), deadline, "three quarters of a timeout after the heartbeat was sent")
	cancel()

	// A pause: the last accepted heartbeat is old when the process runs
	// again, and the leader no longer accepts the node's heartbeats.
	pause := func() {
		st.closed.Store(true)
		// A heartbeat in flight when the gate closed has ended once one
		// is refused (the loop sends one at a time).
		refused := st.refused.Load()
		require.Eventually(t, func() bool { return st.refused.Load() > refused }, 10*time.Second, 5*time.Millisecond)
		s.renewals.mu.Lock()
		s.renewals.sent = time.Now().Add(-timeout)
		s.renewals.mu.Unlock()
	}
	pause()
	_, _, err = s.fence(ctx)
	require.ErrorIs(t, err, errUnrenewed, "no batch is sent without a recent heartbeat")
	assert.Equal(t, 1.0, testutil.ToFloat64(s.m.unrenewed))

	// Heartbeats accepted again: the waiting batch goes as soon as one is.
	done := make(chan error, 1)
	go func() {
		fctx, cancel, err := s.fence(ctx)
		if err == nil {
			err = fctx.Err()
			cancel()
		}
		done <- err
	}()
	st.closed.Store(false)
	require.NoError(t, <-done)

	// A run stopped while it waits gives up at once.
	pause()
	stopped, stop := context.WithCancel(ctx)
	stop()
	_, _, err = s.fence(stopped)
	assert.ErrorIs(t, err, context.Canceled)
}
