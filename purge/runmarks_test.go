package purge_test

import (
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/purge"
)

// A run the node's process ended during (a crash, an OOM kill: its mark
// is left on disk) counts as a failed attempt when the node finds the
// job still leased to it under the same token, instead of being resumed
// under the same attempt: a job whose runs end the process reaches FAILED
// after MaxAttempts rather than ending it at every restart.
func TestARunTheProcessEndedDuringCountsAsAnAttempt(t *testing.T) {
	marks := t.TempDir()
	c := newCluster(t, fileWarehouse(), 1, 10, func(cfg *purge.Config) { cfg.RunMarkDir = marks })
	n := c.nodes[0]
	hook, entered, open := gate()
	c.setHook(hook)
	c.makeTable(n, "ns", "t", nil, 1, 30)
	r := n.do(t, http.MethodDelete, "/v1/namespaces/ns/tables/t?purgeRequested=true", "", "X-Gravitino-Async-Purge", "true")
	require.Equal(t, http.StatusNoContent, r.status, "%s", r.body)
	<-entered // the run is deleting

	entries, err := os.ReadDir(marks)
	require.NoError(t, err)
	require.Len(t, entries, 1, "the run in flight is marked")
	mark := filepath.Join(marks, entries[0].Name())
	saved, err := os.ReadFile(mark)
	require.NoError(t, err)
	job := c.mustJob("ns", "t")
	require.Equal(t, fsm.JobRunning, job.State)
	token, err := strconv.ParseUint(strings.TrimSpace(string(saved)), 10, 64)
	require.NoError(t, err)
	assert.Equal(t, job.Lease.Token, token, "the mark holds the lease token")

	// A stop removes the mark (the run ended with the process alive); the
	// lease stays the node's. Put the mark back as a process that died
	// mid-run leaves it, and start the node's purge service again.
	n.svc.Stop()
	close(open)
	_, err = os.Stat(mark)
	require.ErrorIs(t, err, os.ErrNotExist, "a run that ends removes its mark")
	require.NoError(t, os.WriteFile(mark, saved, 0o600))
	reg := restartPurge(t, n, marks)

	failed := c.waitJob("ns", "t", 10*time.Second, func(j fsm.PurgeJob) bool { return j.State == fsm.JobPending })
	assert.Equal(t, 1, failed.Attempts, "the lost run is one attempt")
	assert.Contains(t, failed.LastError, "process ended during the previous run")
	assert.Equal(t, job.Progress, failed.Progress, "from the last checkpoint")
	assert.Equal(t, float64(1), gathered(t, reg, "floe_purge_lost_runs_total"))
	entries, err = os.ReadDir(marks)
	require.NoError(t, err)
	assert.Empty(t, entries, "the mark is handled")
}

// A mark whose job the node no longer holds under its token (the lease
// moved on while the node was down, or the job ended) counts nothing and
// is removed.
func TestARunMarkOfALeaseThatMovedOnIsDropped(t *testing.T) {
	marks := t.TempDir()
	c := newCluster(t, fileWarehouse(), 1, 10, func(cfg *purge.Config) { cfg.RunMarkDir = marks })
	n := c.nodes[0]
	c.makeTable(n, "ns", "t", nil, 1, 5)
	r := n.do(t, http.MethodDelete, "/v1/namespaces/ns/tables/t?purgeRequested=true", "")
	require.Equal(t, http.StatusNoContent, r.status, "%s", r.body)
	done := c.mustJob("ns", "t")
	require.Equal(t, fsm.JobSucceeded, done.State)

	n.svc.Stop()
	stale := filepath.Join(marks, hex.EncodeToString([]byte(done.ID)))
	require.NoError(t, os.WriteFile(stale, []byte("7\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(marks, "not-hex"), []byte("x"), 0o600))
	reg := restartPurge(t, n, marks)
	require.Eventually(t, func() bool {
		entries, err := os.ReadDir(marks)
		return err == nil && len(entries) == 0
	}, 10*time.Second, 20*time.Millisecond, "the stale and the unreadable mark are removed")
	assert.Equal(t, done, c.mustJob("ns", "t"), "the job is as it was")
	assert.Equal(t, float64(0), gathered(t, reg, "floe_purge_lost_runs_total"))
}

// restartPurge starts a new purge service for node n (whose own was
// stopped) on the marks directory, as the node's next process would: its
// scheduler does not run (a job it sends back to PENDING stays there).
// It returns the service's metrics registry.
func restartPurge(t *testing.T, n *tnode, marks string) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	svc, err := purge.New(purge.Config{
		NodeID: n.raft.ID(), Store: n.raft,
		Storage:       func(string, map[string]string) (purge.Objects, error) { return n.store, nil },
		WorkerThreads: 2, DeleteThreads: 2, DeleteBatchSize: 10,
		HeartbeatTimeout: time.Second, MaxAttempts: 3, RetryBackoff: time.Hour, MaxRetryBackoff: time.Hour,
		CheckpointInterval: 50 * time.Millisecond, PollInterval: 50 * time.Millisecond, StopTimeout: 2 * time.Second,
		Logger: quietLogger(), Registerer: reg, RunMarkDir: marks,
	})
	require.NoError(t, err)
	svc.Start()
	t.Cleanup(svc.Stop)
	return reg
}
