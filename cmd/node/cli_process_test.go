package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runFloeCLI runs the floe binary with args and extra environment entries and
// returns its exit code and output.
func runFloeCLI(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(cleanEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatalf("floe %s: %v", strings.Join(args, " "), err)
	}
	return 0, stdout.String(), stderr.String()
}

// TestCLIProcesses drives a real three-node cluster with the admin
// commands: status, members, leader transfer, membership changes, and the
// purge job of an asynchronous drop.
func TestCLIProcesses(t *testing.T) {
	c := startTestCluster(t)
	leader := c.awaitStable(t, 60*time.Second)
	n1 := c.procs[0]
	floe := func(args ...string) (int, string, string) {
		t.Helper()
		return runFloeCLI(t, c.bin, nil, append(args, "--node", n1.httpAddr)...)
	}
	mustFloe := func(args ...string) string {
		t.Helper()
		code, out, errOut := floe(args...)
		require.Equal(t, 0, code, "floe %s: %s", strings.Join(args, " "), errOut)
		return out
	}

	// status: the leader, the indexes, every member ready.
	out := mustFloe("status")
	assert.Contains(t, out, "http://"+n1.httpAddr+" (node1): ready")
	assert.Regexp(t, `(?m)^leader +`+leader.id+` \(`+regexp.QuoteMeta(leader.clusterAddr)+`\)$`, out)
	assert.Regexp(t, `(?m)^term +\d+$`, out)
	assert.Regexp(t, `(?m)^commit index +\d+$`, out)
	assert.Regexp(t, `(?m)^applied index +\d+$`, out)
	for _, p := range c.procs {
		assert.Regexp(t, `(?m)^`+p.id+` +Voter +(leader|follower) +`+regexp.QuoteMeta(p.httpAddr)+` +`+regexp.QuoteMeta(p.clusterAddr)+` .* ready$`, out)
	}
	var st cliCluster
	require.NoError(t, json.Unmarshal([]byte(mustFloe("status", "--json")), &st))
	assert.Equal(t, "node1", st.Self)
	assert.Equal(t, leader.id, st.LeaderID)
	assert.Len(t, st.Members, 3)

	// members, as a table and as JSON.
	out = mustFloe("members")
	assert.Regexp(t, `^ID +SUFFRAGE +STATE +REACHABLE +CLUSTER +HTTP\n`, out)
	for _, p := range c.procs {
		assert.Regexp(t, `(?m)^`+p.id+` +Voter +(leader|follower) +yes +`+regexp.QuoteMeta(p.clusterAddr)+` +`+regexp.QuoteMeta(p.httpAddr)+`$`, out)
	}
	st = cliCluster{}
	require.NoError(t, json.Unmarshal([]byte(mustFloe("members", "--json")), &st))
	assert.Len(t, st.Members, 3)

	// leader transfer to a named follower, then to any voter.
	var target *clusterProc
	for _, p := range c.procs {
		if p != leader {
			target = p
			break
		}
	}
	assert.Equal(t, "leadership transferred to "+target.id+"\n", mustFloe("leader", "transfer", target.id))
	assert.Equal(t, target, c.awaitStable(t, 30*time.Second))
	assert.Equal(t, target.id+" is the leader already\n", mustFloe("leader", "transfer", target.id))
	out = mustFloe("leader", "transfer")
	next := c.awaitStable(t, 30*time.Second)
	assert.NotEqual(t, target, next)
	assert.Contains(t, []string{"leadership transferred to " + next.id + "\n", "leadership transferred\n"}, out)

	// A non-voter added and removed; an unknown member cannot be removed.
	spare := freeAddr(t)
	assert.Equal(t, "added node9 ("+spare+") as a non-voter\n", mustFloe("members", "add-nonvoter", "node9", spare))
	assert.Regexp(t, `(?m)^node9 +Nonvoter +`, mustFloe("members"))
	assert.Equal(t, "node9 ("+spare+") is a non-voter already; nothing changed\n", mustFloe("members", "add-nonvoter", "node9", spare))
	assert.Equal(t, target.id+" ("+target.clusterAddr+") is a voter already; nothing changed\n",
		mustFloe("members", "add-voter", target.id, target.clusterAddr))
	assert.Equal(t, "removed member node9\n", mustFloe("members", "remove", "node9"))
	assert.NotContains(t, mustFloe("members"), "node9")
	code, out, errOut := floe("members", "remove", "node9")
	assert.Equal(t, exitFailed, code)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "(404 NotFoundException)")

	// The purge job of an asynchronous drop: listed, shown, waited for.
	createNamespace(t, c, n1, "ns")
	schema := `{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true}]}`
	status, body, err := c.do(n1, http.MethodPost, "/v1/namespaces/ns/tables", `{"name":"t","schema":`+schema+`}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, "%s", body)
	req, err := http.NewRequest(http.MethodDelete, "http://"+n1.httpAddr+"/v1/namespaces/ns/tables/t?purgeRequested=true", nil)
	require.NoError(t, err)
	req.Header.Set("X-Gravitino-Async-Purge", "true")
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	drop, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "%s", drop)

	var list struct {
		Jobs []cliJob `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustFloe("purge", "list", "--namespace", "ns", "--table", "t", "--json")), &list))
	require.Len(t, list.Jobs, 1)
	id := list.Jobs[0].ID
	require.NotEmpty(t, id)
	assert.Equal(t, "ns.t", list.Jobs[0].tableName())

	assert.Regexp(t, `(?m)^id +`+regexp.QuoteMeta(id)+`$`, mustFloe("purge", "show", id))

	code, out, errOut = floe("purge", "wait", id, "--timeout", "60s")
	require.Equal(t, 0, code, "purge wait: %s", errOut)
	assert.Regexp(t, `^purge job `+regexp.QuoteMeta(id)+` SUCCEEDED: [1-9]\d* files deleted`, out)
	assert.Contains(t, errOut, "purge job "+id+": SUCCEEDED, ")
	assert.Contains(t, errOut, "files deleted")
	assert.NotContains(t, errOut, "\r", "stderr is no terminal: lines, not a redrawn one")

	var job cliJob
	require.NoError(t, json.Unmarshal([]byte(mustFloe("purge", "show", id, "--json")), &job))
	assert.Equal(t, "SUCCEEDED", job.State)
	assert.Positive(t, job.Progress.Deleted)
	assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(id)+` +SUCCEEDED +ns\.t +`, mustFloe("purge", "list", "--state", "SUCCEEDED"))

	// Retry and release apply to FAILED jobs only: 409, exit 1.
	code, _, errOut = floe("purge", "retry", id)
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, errOut, "409")
	// A malformed filter is the server's 400: a usage error.
	code, _, errOut = floe("purge", "list", "--state", "DONE")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "state must be PENDING, RUNNING, SUCCEEDED or FAILED")

	// Nobody at the address: 3.
	code, _, errOut = runFloeCLI(t, c.bin, nil, "status", "--node", freeAddr(t), "--timeout", "2s")
	assert.Equal(t, exitUnavailable, code)
	assert.Contains(t, errOut, "no answer to GET")
}

// TestCLIProcessesWithAuth: with --auth=on a command needs a token with the
// admin privilege: --token or FLOE_TOKEN; without one it exits 4.
func TestCLIProcessesWithAuth(t *testing.T) {
	c := startAuthCluster(t) // ready, with a signing key
	node := c.procs[1].httpAddr

	code, out, errOut := runFloeCLI(t, c.bin, nil, "status", "--node", node, "--token", testRootToken)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "(node2): ready")

	code, out, errOut = runFloeCLI(t, c.bin, nil, "members", "--node", node)
	assert.Equal(t, exitUnauthorized, code)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "floe members: ")
	assert.Contains(t, errOut, "(401 NotAuthorizedException)")

	code, _, errOut = runFloeCLI(t, c.bin, nil, "purge", "list", "--node", node, "--token", "not-a-valid-token-at-all")
	assert.Equal(t, exitUnauthorized, code)
	assert.Contains(t, errOut, "401")

	code, out, errOut = runFloeCLI(t, c.bin, []string{"FLOE_NODE=http://" + node, "FLOE_TOKEN=" + testRootToken}, "members", "--json")
	require.Equal(t, 0, code, errOut)
	var st cliCluster
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	assert.Len(t, st.Members, 3)

	// A principal without the admin privilege: 403, exit 4.
	id, secret := c.newClient(t, c.procs[0], "reader")
	token := c.oauthToken(t, c.procs[0], id, secret)
	code, _, errOut = runFloeCLI(t, c.bin, nil, "purge", "list", "--node", node, "--token", token)
	assert.Equal(t, exitUnauthorized, code)
	assert.Contains(t, errOut, "(403 ForbiddenException)")
}
