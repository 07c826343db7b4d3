package purge

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
)

// TestFenceNeedsARecentRenewalOfTheLease: a delete batch is sent only
// under a heartbeat that renewed the run's own lease less than half a
// heartbeat timeout ago, and its context ends three quarters of a timeout
// after that heartbeat was sent. A process that was paused (its renewal
// old) waits for a new one; with none the batch is not sent; and once a
// heartbeat finds the lease taken away, it fails as stale at once.
func TestFenceNeedsARecentRenewalOfTheLease(t *testing.T) {
	const timeout = 2 * time.Second
	st := newFSMStore(t)
	id := fsm.Ident{Namespace: []string{"db"}, Name: "t"}
	st.must(t, fsm.CreateNamespace{Namespace: []string{"db"}})
	st.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: id, Location: "s3://b/t", MetadataLocation: "m", UUID: "u"}}})
	st.must(t, fsm.DropTable{Ident: id, Purge: true, Job: &fsm.PurgeJobSpec{ID: "j"}})
	st.must(t, fsm.AssignPurgeLease{JobID: "j", Node: "n1"})
	token := st.lease(t, "j").Token
	leases := []fsm.LeaseRef{{JobID: "j", Token: token}}

	s, err := New(Config{NodeID: "n1", Store: st, HeartbeatTimeout: timeout, Registerer: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler), Storage: func(map[string]string) (Objects, error) { return nil, nil }})
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	// Heartbeats are the test's (checkRenewals), and no worker runs the
	// job: a started service without its loops.
	s.mu.Lock()
	s.started = true
	s.mu.Unlock()
	ctx := context.Background()

	s.renewals.track(token)
	sent := time.Now()
	s.checkRenewals(sent, leases)
	fctx, cancel, err := s.fence(ctx, token)
	require.NoError(t, err, "a heartbeat renewed the lease")
	deadline, ok := fctx.Deadline()
	require.True(t, ok)
	assert.Equal(t, sent.Add(timeout*3/4), deadline, "three quarters of a timeout after the heartbeat was sent")
	cancel()

	// Another run's renewal is not this one's.
	_, _, err = s.fence(ctx, token+1)
	require.ErrorIs(t, err, errUnrenewed)

	// A pause: the renewal is old when the process runs again, and no
	// heartbeat comes.
	s.renewals.mu.Lock()
	s.renewals.sent[token] = time.Now().Add(-timeout)
	s.renewals.mu.Unlock()
	_, _, err = s.fence(ctx, token)
	require.ErrorIs(t, err, errUnrenewed, "no batch is sent without a recent renewal")
	assert.Equal(t, 2.0, testutil.ToFloat64(s.m.unrenewed))

	// Meanwhile the lease went to another node: the next heartbeat finds
	// it gone, and the batch fails as stale.
	st.must(t, fsm.AssignPurgeLease{JobID: "j", Node: "n2", ExpectedToken: token})
	s.checkRenewals(time.Now(), leases)
	_, _, err = s.fence(ctx, token)
	require.ErrorIs(t, err, errStale)

	// A run stopped while it waits gives up at once.
	stopped, stop := context.WithCancel(ctx)
	stop()
	_, _, err = s.fence(stopped, token+2)
	assert.ErrorIs(t, err, context.Canceled)

	// A run that ended is forgotten, and a heartbeat checked after it
	// records nothing for it.
	s.renewals.forget(token)
	s.checkRenewals(time.Now(), leases)
	s.renewals.mu.Lock()
	assert.Empty(t, s.renewals.sent)
	assert.Empty(t, s.renewals.lost)
	s.renewals.mu.Unlock()
}
