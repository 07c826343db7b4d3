package main

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRejoinAfterDataLossProcesses runs three real floe processes and wipes
// a follower's data directory. Started again with its unchanged command
// line, the node is refused: it exits 1 with a message naming the ways out,
// and the cluster's membership is unchanged. Started with
// --rejoin-as-nonvoter, it comes back as a non-voter with all the data; the
// operator API promotes it, and the cluster has three voters again.
func TestRejoinAfterDataLossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes")
	}
	c := startTestCluster(t)
	leader := c.awaitStable(t, 30*time.Second)
	var lost *clusterProc
	for _, p := range c.procs {
		if p != leader {
			lost = p
			break
		}
	}
	createNamespace(t, c, leader, "before_loss")
	require.Eventually(t, func() bool {
		code, err := c.staleStatus(lost, http.MethodHead, "/v1/namespaces/before_loss")
		return err == nil && code == http.StatusNoContent
	}, 10*time.Second, 50*time.Millisecond, "%s never had the namespace", lost.id)

	lost.kill(t)
	require.NoError(t, os.RemoveAll(flagValue(t, lost.args, "--data-dir")))
	createNamespace(t, c, leader, "while_lost")

	// 1. The unchanged command line: refused.
	lost.start(t, c.bin)
	code := lost.waitExit(t, 60*time.Second)
	out := lost.lastRun()
	assert.Equal(t, 1, code, "exit code; output:\n%s", out)
	if i := strings.Index(out, "floe: "); i >= 0 {
		t.Logf("%s exited %d:\n%s", lost.id, code, out[i:])
	}
	for _, want := range []string{
		"rejoin refused",
		fmt.Sprintf("%q is a voter", lost.id),
		"DELETE /management/v1/cluster/members/" + lost.id,
		"--node-id",
		"--rejoin-as-nonvoter",
		"POST /management/v1/cluster/voters",
	} {
		assert.Contains(t, out, want)
	}
	// The cluster is unchanged: the lost node is still a voter, not
	// reachable, and the other two serve.
	st, err := c.status(leader)
	require.NoError(t, err)
	require.Len(t, st.Members, 3)
	for _, m := range st.Members {
		assert.Equal(t, "Voter", m.Suffrage, "member %s", m.ID)
		if m.ID == lost.id {
			assert.False(t, m.Reachable)
		}
	}
	createNamespace(t, c, leader, "after_refusal")

	// 2. With --rejoin-as-nonvoter: back as a non-voter, with the data.
	lost.args = append(lost.args, "--rejoin-as-nonvoter")
	lost.start(t, c.bin)
	var last string
	require.Eventually(t, func() bool {
		if !lost.running() {
			last = lost.id + " exited"
			return false
		}
		if !c.ready(lost) {
			last = lost.id + " is not ready"
			return false
		}
		st, err := c.status(leader)
		if err != nil {
			last = err.Error()
			return false
		}
		for _, m := range st.Members {
			if m.ID == lost.id {
				last = fmt.Sprintf("%s is a %s, reachable %v", m.ID, m.Suffrage, m.Reachable)
				return m.Suffrage == "Nonvoter" && m.Reachable
			}
		}
		last = lost.id + " is not a member"
		return false
	}, 60*time.Second, 100*time.Millisecond, "rejoin as a non-voter: %s", &last)
	for _, ns := range []string{"before_loss", "while_lost", "after_refusal"} {
		code, err := c.headNamespace(lost, ns)
		require.NoError(t, err)
		assert.Equal(t, http.StatusNoContent, code, "HEAD %s on %s", ns, lost.id)
	}

	// 3. The operator promotes it, through any node.
	body := fmt.Sprintf(`{"id":%q,"address":%q}`, lost.id, lost.clusterAddr)
	code, resp, err := c.do(lost, http.MethodPost, "/management/v1/cluster/voters", body)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, code, "promote: %s", resp)
	var problems []string
	require.Eventually(t, func() bool {
		problems = c.statusProblems()
		return len(problems) == 0
	}, 20*time.Second, 100*time.Millisecond, "three voters again: %v", &problems)
	c.awaitStable(t, 20*time.Second)
	createNamespace(t, c, lost, "after_promotion")
}

// createNamespace creates a namespace through p and requires 200.
func createNamespace(t *testing.T, c *testCluster, p *clusterProc, name string) {
	t.Helper()
	code, body, err := c.do(p, http.MethodPost, "/v1/namespaces", fmt.Sprintf(`{"namespace":[%q]}`, name))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "create %s on %s: %s", name, p.id, body)
}

// staleStatus sends a request answered from the node's local replica
// (a stale read) and returns the status.
func (c *testCluster) staleStatus(p *clusterProc, method, path string) (int, error) {
	req, err := http.NewRequest(method, "http://"+p.httpAddr+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Floe-Read-Consistency", "stale")
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// flagValue returns the value following name in args.
func flagValue(t *testing.T, args []string, name string) string {
	t.Helper()
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			return args[i+1]
		}
	}
	t.Fatalf("no %s in %v", name, args)
	return ""
}

// waitExit waits (bounded) until the current run exits and returns its exit
// code.
func (p *clusterProc) waitExit(t *testing.T, within time.Duration) int {
	t.Helper()
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(within):
		t.Fatalf("%s still running after %s; output:\n%s", p.id, within, p.lastRun())
	}
	return cmd.ProcessState.ExitCode()
}

// lastRun returns the output of the current (or last) run.
func (p *clusterProc) lastRun() string {
	out := p.out.String()
	if i := strings.LastIndex(out, "==== start "); i >= 0 {
		return out[i:]
	}
	return out
}
