package harness

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClusterLifecycle builds floe and runs a 3-node cluster of real
// processes through what the tools do to one: find the leader, pause a
// node, kill the leader and restart it on its data directory, stop all and
// start all again.
func TestClusterLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("builds floe and starts a 3-node cluster of processes")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build floe with")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "floe")
	out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, "github.com/floe-catalog/floe/cmd/node").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	c, err := StartCluster(ctx, ClusterConfig{Bin: bin, Dir: filepath.Join(dir, "cluster"), Size: 3, Tool: "harness-test",
		Env: EnvWithout("FLOE_", "AWS_")}, nil)
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	defer func() {
		if t.Failed() {
			t.Log(c.LogTails(20))
		}
	}()
	require.NoError(t, c.Healthy(ctx))
	leader, err := c.Leader(ctx)
	require.NoError(t, err)
	st, err := leader.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, leader.ID, st.LeaderID)
	assert.Len(t, st.Members, 3)
	assert.True(t, leader.LogContains(0, "=== harness-test: start #1 at ", "--node-id "+leader.ID))

	// A paused follower makes the cluster unhealthy until it continues.
	follower := c.Nodes[(leader.Index+1)%3]
	require.NoError(t, follower.Pause())
	assert.ErrorContains(t, c.Healthy(ctx), follower.ID+" is not serving")
	require.NoError(t, follower.Continue())
	require.NoError(t, c.WaitHealthy(ctx, HealthyTimeout))

	// SIGKILL the leader: the others elect a new one; the killed node comes
	// back on its data directory. Neither is a crash.
	require.NoError(t, leader.Kill())
	assert.False(t, leader.Running())
	newLeader, err := c.Leader(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, leader.ID, newLeader.ID)
	require.NoError(t, c.Restart(ctx, leader))
	assert.True(t, leader.LogContains(0, "start #2"))

	// A joiner becomes a member and is removed again.
	j, err := c.Joiner("n4")
	require.NoError(t, err)
	require.NoError(t, j.Process.Start())
	t.Cleanup(func() { _ = j.Stop() })
	require.NoError(t, j.WaitReady(ctx, HealthyTimeout))
	require.Eventually(t, func() bool {
		st, err := newLeader.Status(ctx)
		return err == nil && len(st.Members) == 4
	}, HealthyTimeout, 50*time.Millisecond, "n4 never became a member")
	require.NoError(t, newLeader.RemoveMember(ctx, "n4"))
	require.NoError(t, j.Stop())
	require.NoError(t, c.WaitHealthy(ctx, HealthyTimeout))

	// Stop all, start all: the same command lines, a healthy cluster.
	c.Stop()
	for _, n := range c.Nodes {
		assert.False(t, n.Running(), n.ID)
	}
	require.NoError(t, c.Start())
	require.NoError(t, c.WaitHealthy(ctx, HealthyTimeout))
	assert.Empty(t, c.TakeCrashes())
}
