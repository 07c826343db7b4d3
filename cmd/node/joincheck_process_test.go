package main

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/testenv"
)

// A node started with --join whose own settings then fail (its HTTP port
// taken, its audit log unwritable, its certificate missing) exits before
// it asks the cluster to add it: it used to join as a voter first and then
// exit, leaving a one-node cluster with a dead second voter and no quorum.
func TestJoiningNodeFailsItsOwnChecksBeforeJoining(t *testing.T) {
	bin := floeBinary(t)
	root := t.TempDir()
	a := &clusterProc{id: "a", httpAddr: freeAddr(t), clusterAddr: freeAddr(t), out: &testenv.LogBuffer{}}
	a.args = []string{"--node-id", "a", "--data-dir", filepath.Join(root, "a"), "--http-addr", a.httpAddr, "--cluster-addr", a.clusterAddr}
	c := &testCluster{bin: bin, procs: []*clusterProc{a}, client: &http.Client{Timeout: 5 * time.Second}}
	t.Cleanup(func() {
		if a.running() {
			a.kill(t)
		}
	})
	a.start(t, bin)
	require.Eventually(t, func() bool { return c.ready(a) }, 30*time.Second, 50*time.Millisecond, "a: %s", a.tail(20))

	for name, extra := range map[string][]string{
		"http port taken":      {"--http-addr", a.httpAddr},
		"audit log unwritable": {"--http-addr", freeAddr(t), "--audit-log", root},
		"certificate missing":  {"--http-addr", freeAddr(t), "--http-tls-cert", filepath.Join(root, "none.pem"), "--http-tls-key", filepath.Join(root, "none.key")},
	} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"--node-id", "b", "--data-dir", filepath.Join(t.TempDir(), "b"), "--cluster-addr", freeAddr(t), "--join", a.clusterAddr}, extra...)
			cmd := exec.Command(bin, args...)
			cmd.Env = cleanEnv()
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "%s", out)
			assert.NotContains(t, string(out), "join request accepted")

			st, err := c.status(a)
			require.NoError(t, err)
			assert.Len(t, st.Members, 1, "the cluster gained no member: %+v", st.Members)
			code, body, err := c.do(a, "POST", "/v1/namespaces", `{"namespace":["ns`+filepath.Base(t.Name())[:4]+`"]}`)
			require.NoError(t, err)
			assert.Equal(t, 200, code, "%s", body)
		})
	}
}
