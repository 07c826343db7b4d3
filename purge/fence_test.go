package purge

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
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
		Logger: slog.New(slog.DiscardHandler), Storage: func(string, map[string]string) (Objects, error) { return nil, nil }})
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
	assert.Equal(t, sent.Add(timeout*3/4), fctx.deadline, "three quarters of a timeout after the heartbeat was sent")
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

// TestFencedSendsAreCutOffOnlyBeforeTheyAreWritten: at its deadline a
// fenced context cuts off what is not yet sent whole (and any attempt
// begun after it), but not a request written whole that awaits its answer:
// storage acts on that one anyway, and cutting it off would only fail a
// batch that succeeded.
func TestFencedSendsAreCutOffOnlyBeforeTheyAreWritten(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/slow" {
			<-release // answers only after the deadline has passed
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	defer close(release)

	f := fencedUntil(context.Background(), time.Now().Add(50*time.Millisecond))
	defer f.stop()
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(f, http.MethodPost, srv.URL+"/slow", strings.NewReader("<Delete/>"))
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	require.Eventually(t, f.cutOff, 10*time.Second, 5*time.Millisecond)
	release <- struct{}{}
	require.NoError(t, <-done, "written whole before the deadline: not cut off")
	assert.NoError(t, f.Err())

	// An attempt begun after the deadline is not sent.
	req, _ := http.NewRequestWithContext(f, http.MethodPost, srv.URL+"/fast", strings.NewReader("<Delete/>"))
	_, err := srv.Client().Do(req)
	assert.ErrorIs(t, err, context.Canceled)

	// Nothing awaiting an answer at the deadline: cut off at once.
	g := fencedUntil(context.Background(), time.Now().Add(10*time.Millisecond))
	defer g.stop()
	<-g.Done()
	assert.True(t, g.cutOff())
}
