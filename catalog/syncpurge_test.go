package catalog_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/catalog"
)

// stuckPurger takes the leases of synchronous drops and never runs them:
// the job stays leased, as to a node whose run is slow.
type stuckPurger struct{}

func (stuckPurger) NodeID() string              { return "stuck" }
func (stuckPurger) LeaseTimeout() time.Duration { return time.Hour }
func (stuckPurger) Run(string) <-chan struct{}  { return make(chan struct{}) }

// syncPurge sends a synchronous purging drop of ns.name to n and returns
// a channel that gets its answer.
func syncPurge(t *testing.T, n *node, ns, name string) <-chan response {
	t.Helper()
	out := make(chan response, 1)
	go func() {
		// Outside spectest's transport: the test may end before this
		// request's answer.
		req, err := http.NewRequest("DELETE", n.URL+"/v1/namespaces/"+ns+"/tables/"+name+"?purgeRequested=true", nil)
		if err != nil {
			out <- response{status: -1, body: []byte(err.Error())}
			return
		}
		res, err := (&http.Client{Timeout: time.Minute}).Do(req)
		if err != nil {
			out <- response{status: -1, body: []byte(err.Error())}
			return
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		out <- response{status: res.StatusCode, body: body, header: res.Header}
	}()
	return out
}

// A synchronous purge still waiting for its job is answered when its node
// begins to stop (Config.Stopping), before the HTTP server's graceful wait
// would cut it off: 500, the job continues elsewhere.
func TestSyncPurgeAnsweredWhenTheNodeStops(t *testing.T) {
	uri, scfg := warehouses()[0].uri(t)
	n := &node{t: t, dir: t.TempDir(), addr: freeAddr(t), warehouse: uri, scfg: scfg,
		purger: stuckPurger{}, stopping: make(chan struct{})}
	n.start()
	t.Cleanup(n.stop)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("t")).status)

	answer := syncPurge(t, n, "a", "t")
	require.Eventually(t, func() bool { return n.do(t, "GET", "/v1/namespaces/a/tables/t", nil).status == 404 },
		10*time.Second, 10*time.Millisecond, "the drop commits")
	select {
	case r := <-answer:
		t.Fatalf("answered before the job ended or the node stopped: %d %s", r.status, r.body)
	case <-time.After(200 * time.Millisecond):
	}
	close(n.stopping)
	select {
	case r := <-answer:
		assert.Equal(t, 500, r.status, "%s", r.body)
		assert.Contains(t, string(r.body), "continues in the background")
		assert.Contains(t, string(r.body), "stopping")
	case <-time.After(30 * time.Second):
		t.Fatal("no answer after the node began to stop")
	}
}

// A synchronous purge whose node can no longer read its job (cut off from
// the cluster, or removed from it while the job moved on) answers once
// the reads have failed for a while, rather than holding the client.
func TestSyncPurgeAnsweredWhenReadsKeepFailing(t *testing.T) {
	t.Cleanup(catalog.SetAwaitReadFailures(time.Second))
	uri, scfg := warehouses()[0].uri(t)
	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	nodes := make([]*node, 3)
	for i := range nodes {
		nodes[i] = &node{t: t, dir: t.TempDir(), addr: addrs[i], join: addrs, expect: 3, warehouse: uri, scfg: scfg,
			purger: stuckPurger{}}
		nodes[i].start()
		t.Cleanup(nodes[i].stop)
	}
	for _, n := range nodes {
		require.Eventually(t, func() bool { return n.raft.Ready() == nil }, 30*time.Second, 20*time.Millisecond)
	}
	f := follower(t, nodes)
	require.Equal(t, 200, f.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, f.do(t, "POST", "/v1/namespaces/a/tables", withName("t")).status)

	answer := syncPurge(t, f, "a", "t")
	require.Eventually(t, func() bool { return f.do(t, "GET", "/v1/namespaces/a/tables/t", nil).status == 404 },
		10*time.Second, 10*time.Millisecond, "the drop commits")
	f.net.Isolate(true)
	select {
	case r := <-answer:
		assert.Equal(t, 500, r.status, "%s", r.body)
		assert.Contains(t, string(r.body), "continues in the background")
	case <-time.After(45 * time.Second):
		t.Fatal("no answer while the node could not read its job")
	}
	f.net.Isolate(false)
}
