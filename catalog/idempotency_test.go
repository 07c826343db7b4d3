package catalog_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
)

func newKey(t *testing.T) string {
	t.Helper()
	return uuid.Must(uuid.NewV7()).String()
}

// metadataVersion is the number of commits a table has seen.
func metadataLog(t *testing.T, n *node, ns, tbl string) int {
	t.Helper()
	r := n.do(t, "GET", "/v1/namespaces/"+ns+"/tables/"+tbl, nil)
	require.Equal(t, 200, r.status, "%s", r.body)
	log, _ := r.json(t)["metadata"].(map[string]any)["metadata-log"].([]any)
	return len(log)
}

func setProp(k, v string) map[string]any {
	return map[string]any{"requirements": []any{}, "updates": []any{map[string]any{"action": "set-properties", "updates": map[string]string{k: v}}}}
}

// TestEveryMutationOnceWithAKey sends each mutation twice with the same key:
// one effect, the same status, and for creates the same body.
func TestEveryMutationOnceWithAKey(t *testing.T) {
	n := startNode(t, warehouses()[0])
	twice := func(method, path string, body any, want int) (response, response) {
		t.Helper()
		key := newKey(t)
		a := n.do(t, method, path, body, "Idempotency-Key", key)
		b := n.do(t, method, path, body, "Idempotency-Key", key)
		require.Equal(t, want, a.status, "%s %s: %s", method, path, a.body)
		require.Equal(t, want, b.status, "replay of %s %s: %s", method, path, b.body)
		assert.Equal(t, "true", b.header.Get("Idempotent-Replayed"))
		return a, b
	}
	twice("POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}, "properties": map[string]string{"x": "1"}}, 200)
	twice("POST", "/v1/namespaces", map[string]any{"namespace": []string{"b"}}, 200)
	a, b := twice("POST", "/v1/namespaces/a/properties", map[string]any{"removals": []string{"x"}, "updates": map[string]string{"y": "2"}}, 200)
	assert.Equal(t, a.json(t), b.json(t), "replayed properties outcome")

	a, b = twice("POST", "/v1/namespaces/a/tables", withName("t"), 200)
	assert.Equal(t, a.json(t)["metadata-location"], b.json(t)["metadata-location"], "createTable replay returns the same LoadTableResult")
	assert.NotNil(t, b.json(t)["metadata"])

	twice("POST", "/v1/namespaces/a/tables/t", setProp("k", "v"), 200)
	assert.Equal(t, 1, metadataLog(t, n, "a", "t"), "one commit, not two")

	twice("POST", "/v1/transactions/commit", map[string]any{"table-changes": []any{
		map[string]any{"identifier": map[string]any{"namespace": []string{"a"}, "name": "t"}, "requirements": []any{},
			"updates": []any{map[string]any{"action": "set-properties", "updates": map[string]string{"tx": "1"}}}},
	}}, 204)
	assert.Equal(t, 2, metadataLog(t, n, "a", "t"))

	twice("POST", "/v1/tables/rename", map[string]any{
		"source": map[string]any{"namespace": []string{"a"}, "name": "t"}, "destination": map[string]any{"namespace": []string{"b"}, "name": "t"}}, 204)
	a, _ = twice("POST", "/v1/namespaces/b/tables/t/unregister", nil, 200)
	loc := a.json(t)["metadata-location"].(string)
	twice("POST", "/v1/namespaces/b/register", map[string]any{"name": "t", "metadata-location": loc}, 200)
	twice("DELETE", "/v1/namespaces/b/tables/t", nil, 204) // a replayed drop is 204, not 404
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/b/tables", withName("p")).status)
	twice("DELETE", "/v1/namespaces/b/tables/p?purgeRequested=true", nil, 204)
	twice("DELETE", "/v1/namespaces/b", nil, 204)

	// A deterministic failure replays as the same failure.
	a, b = twice("POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}, 409)
	assert.Equal(t, "AlreadyExistsException", b.errorType(t))
	twice("POST", "/v1/namespaces/a/tables/missing", setProp("k", "v"), 404)
	// ...even when the state changes in between: the key's answer is fixed.
	key := newKey(t)
	require.Equal(t, 404, n.do(t, "DELETE", "/v1/namespaces/a/tables/later", nil, "Idempotency-Key", key).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("later")).status)
	assert.Equal(t, 404, n.do(t, "DELETE", "/v1/namespaces/a/tables/later", nil, "Idempotency-Key", key).status)
	assert.Equal(t, 204, n.do(t, "HEAD", "/v1/namespaces/a/tables/later", nil).status, "the replay dropped nothing")
}

// TestReplayAfterTheFileItWroteExpired replays a keyed create and a keyed
// commit after later commits deleted the metadata files they wrote
// (write.metadata.delete-after-commit.enabled): the answer is the table's
// newer state, as the spec allows, not an error; once the table is gone,
// 404.
func TestReplayAfterTheFileItWroteExpired(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	create := withName("dac")
	create["properties"] = map[string]string{"write.metadata.delete-after-commit.enabled": "true", "write.metadata.previous-versions-max": "1"}
	createKey, commitKey := newKey(t), newKey(t)
	c := n.do(t, "POST", "/v1/namespaces/a/tables", create, "Idempotency-Key", createKey)
	require.Equal(t, 200, c.status, "%s", c.body)
	first := n.do(t, "POST", "/v1/namespaces/a/tables/dac", setProp("k", "0"), "Idempotency-Key", commitKey)
	require.Equal(t, 200, first.status, "%s", first.body)
	var last response
	for i := 1; i <= 3; i++ {
		last = n.do(t, "POST", "/v1/namespaces/a/tables/dac", setProp("k", fmt.Sprint(i)))
		require.Equal(t, 200, last.status, "%s", last.body)
	}
	gone := first.json(t)["metadata-location"].(string)
	require.NoFileExists(t, strings.TrimPrefix(gone, "file://"), "the commit's file expired")

	for _, replay := range []response{
		n.do(t, "POST", "/v1/namespaces/a/tables", create, "Idempotency-Key", createKey),
		n.do(t, "POST", "/v1/namespaces/a/tables/dac", setProp("k", "0"), "Idempotency-Key", commitKey),
	} {
		require.Equal(t, 200, replay.status, "%s", replay.body)
		assert.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
		assert.Equal(t, last.json(t)["metadata-location"], replay.json(t)["metadata-location"], "the newer state")
	}
	assert.Equal(t, "3", last.json(t)["metadata"].(map[string]any)["properties"].(map[string]any)["k"], "the replays changed nothing")

	require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/a/tables/dac?purgeRequested=true", nil).status)
	r := n.do(t, "POST", "/v1/namespaces/a/tables/dac", setProp("k", "0"), "Idempotency-Key", commitKey)
	assert.Equal(t, 404, r.status, "%s", r.body)
	assert.Equal(t, "NoSuchTableException", r.errorType(t))

	// The name taken again by a table elsewhere is not the table the
	// request changed.
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withLocation("dac", n.warehouse+"/a/elsewhere")).status)
	r = n.do(t, "POST", "/v1/namespaces/a/tables/dac", setProp("k", "0"), "Idempotency-Key", commitKey)
	assert.Equal(t, 404, r.status, "%s", r.body)
	assert.Equal(t, "NoSuchTableException", r.errorType(t))
}

func TestKeyMisuse(t *testing.T) {
	n := startNode(t, warehouses()[0])
	key := newKey(t)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}, "Idempotency-Key", key).status)
	before := n.state(t)
	// 422 is what the Idempotency-Key design asks for; the spec lists no
	// 422 for these routes, so these answers skip spec validation.
	r := n.doRaw(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"b"}}, "Idempotency-Key", key)
	assert.Equal(t, 422, r.status)
	assert.Equal(t, "UnprocessableEntityException", r.errorType(t))
	assert.Contains(t, string(r.body), "was already used for another request")
	r = n.doRaw(t, "DELETE", "/v1/namespaces/a", nil, "Idempotency-Key", key)
	assert.Equal(t, 422, r.status, "same key on another operation")

	// Two keys on one request: which was meant is unknown.
	req, err := http.NewRequest("POST", n.URL+"/v1/namespaces", strings.NewReader(`{"namespace":["two-keys"]}`))
	require.NoError(t, err)
	req.Header.Add("Idempotency-Key", newKey(t))
	req.Header.Add("Idempotency-Key", newKey(t))
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, 400, res.StatusCode)

	// A drop with purge is another request than one without, both ways.
	for i, first := range []string{"", "?purgeRequested=true"} {
		second := map[string]string{"": "?purgeRequested=true", "?purgeRequested=true": ""}[first]
		name := fmt.Sprintf("d%d", i)
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName(name)).status)
		dropKey := newKey(t)
		require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/a/tables/"+name+first, nil, "Idempotency-Key", dropKey).status)
		r = n.doRaw(t, "DELETE", "/v1/namespaces/a/tables/"+name+second, nil, "Idempotency-Key", dropKey)
		assert.Equal(t, 422, r.status, "%s then %s: %s", first, second, r.body)
		assert.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/a/tables/"+name+first, nil, "Idempotency-Key", dropKey).status, "the same request is replayed")
	}
	before = n.state(t)
	for _, bad := range []string{"", "not-a-uuid", "0190b2c48d3e7a1b9c2d3e4f5a6b7c8d", "0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8z"} {
		r = n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"c"}}, "Idempotency-Key", bad)
		assert.Equal(t, 400, r.status, bad)
		assert.Contains(t, string(r.body), "Idempotency-Key")
	}
	assert.Equal(t, before, n.state(t))

	// The lifetime is advertised.
	assert.Equal(t, "PT30M", n.do(t, "GET", "/v1/config", nil).json(t)["idempotency-key-lifetime"])
}

// A refusal recorded under a key is replayed as the same answer: the
// same status and error type as the first time, whichever way the first
// answer was mapped from the state machine's outcome.
func TestReplayedRefusalIsTheSameAnswer(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("t")).status)
	missing := map[string]any{"namespace": []string{"a"}, "name": "gone"}
	for _, c := range []struct {
		name, method, path string
		body               any
		status             int
	}{
		{"namespace under a missing parent", "POST", "/v1/namespaces", map[string]any{"namespace": []string{"nope", "x"}}, 400},
		{"namespace that exists", "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}, 409},
		{"table in a missing namespace", "POST", "/v1/namespaces/nope/tables", withName("t"), 404},
		{"table that exists", "POST", "/v1/namespaces/a/tables", withName("t"), 409},
		{"drop of a missing table", "DELETE", "/v1/namespaces/a/tables/gone", nil, 404},
		{"drop of a namespace not empty", "DELETE", "/v1/namespaces/a", nil, 409},
		{"rename of a missing table", "POST", "/v1/tables/rename", map[string]any{"source": missing, "destination": map[string]any{"namespace": []string{"a"}, "name": "u"}}, 404},
		{"commit whose requirement fails", "POST", "/v1/namespaces/a/tables/t", map[string]any{"requirements": []any{map[string]any{"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000001"}}, "updates": []any{}}, 409},
	} {
		key := newKey(t)
		first := n.do(t, c.method, c.path, c.body, "Idempotency-Key", key)
		require.Equal(t, c.status, first.status, "%s: %s", c.name, first.body)
		again := n.do(t, c.method, c.path, c.body, "Idempotency-Key", key)
		assert.Equal(t, first.status, again.status, "%s: replayed %s", c.name, again.body)
		assert.Equal(t, first.errorType(t), again.errorType(t), c.name)
	}
}

func TestExpiredKeyIsNew(t *testing.T) {
	var offset atomic.Int64
	wh := warehouses()[0]
	uri, scfg := wh.uri(t)
	n := &node{t: t, dir: t.TempDir(), addr: freeAddr(t), warehouse: uri, scfg: scfg,
		now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }}
	n.start()
	t.Cleanup(n.stop)
	key := newKey(t)
	body := map[string]any{"namespace": []string{"a"}}
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", body, "Idempotency-Key", key).status)
	require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/a", nil).status)
	// Within the lifetime: replayed, the namespace is not re-created.
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", body, "Idempotency-Key", key).status)
	assert.Equal(t, 404, n.do(t, "HEAD", "/v1/namespaces/a", nil).status)
	// Past lifetime and grace: the same key runs as new.
	offset.Store(int64(time.Hour))
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", body, "Idempotency-Key", key).status)
	assert.Equal(t, 204, n.do(t, "HEAD", "/v1/namespaces/a", nil).status)
}

// TestConcurrentDuplicatesOnTwoNodes sends the same keyed commit to two
// nodes at once: one effect, both get the same answer.
func TestConcurrentDuplicatesOnTwoNodes(t *testing.T) {
	nodes := startCluster(t, warehouses()[0], 3)
	require.Equal(t, 200, nodes[0].do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, nodes[0].do(t, "POST", "/v1/namespaces/a/tables", withName("t")).status)
	for round := range 5 {
		key := newKey(t)
		body := setProp("round", fmt.Sprint(round))
		var wg sync.WaitGroup
		res := make([]response, 2)
		for i := range res {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i] = nodes[i+1].do(t, "POST", "/v1/namespaces/a/tables/t", body, "Idempotency-Key", key)
			}()
		}
		wg.Wait()
		require.Equal(t, 200, res[0].status, "%s", res[0].body)
		require.Equal(t, 200, res[1].status, "%s", res[1].body)
		assert.Equal(t, res[0].json(t)["metadata-location"], res[1].json(t)["metadata-location"])
		assert.Equal(t, round+1, metadataLog(t, nodes[0], "a", "t"), "round %d applied once", round)
	}
	// The duplicate that lost the race deleted the metadata file it wrote:
	// one file per applied version, no orphans.
	loc := nodes[0].do(t, "GET", "/v1/namespaces/a/tables/t", nil).json(t)["metadata"].(map[string]any)["location"].(string)
	var files []string
	for _, f := range nodes[0].listFiles(t, loc+"/metadata") {
		if strings.HasSuffix(f, ".metadata.json") {
			files = append(files, f)
		}
	}
	assert.Len(t, files, 6, "%v", files)
}

// TestConcurrentSameKey: two requests with one key at once, on two nodes.
// The same request twice: both get its answer, the duplicate's replayed
// (createNamespace's replay reads the body again). Two different requests:
// one is refused 422 (outside the spec's statuses: doRaw), and each one's
// retry gets the answer it got first.
func TestConcurrentSameKey(t *testing.T) {
	nodes := startCluster(t, warehouses()[0], 3)
	require.Equal(t, 200, nodes[0].do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	type req struct {
		path string
		body any
	}
	both := func(key string, reqs [2]req) [2]response {
		var res [2]response
		var wg sync.WaitGroup
		for j := range res {
			wg.Go(func() { res[j] = nodes[j+1].doRaw(t, "POST", reqs[j].path, reqs[j].body, "Idempotency-Key", key) })
		}
		wg.Wait()
		return res
	}
	for round := range 8 {
		name := fmt.Sprintf("same%d", round)
		create := req{"/v1/namespaces", map[string]any{"namespace": []string{name}}}
		for _, r := range both(newKey(t), [2]req{create, create}) {
			require.Equal(t, 200, r.status, "%s", r.body)
			assert.Equal(t, []any{name}, r.json(t)["namespace"])
		}
	}
	for round := range 8 {
		key := newKey(t)
		reqs := [2]req{
			{"/v1/namespaces", map[string]any{"namespace": []string{fmt.Sprintf("diff%d", round)}}},
			{"/v1/namespaces/a/tables/none", map[string]any{"requirements": []any{}, "updates": []any{}}},
		}
		res := both(key, reqs)
		refused := 0
		for _, r := range res {
			if r.status == 422 {
				refused++
			}
		}
		assert.Equal(t, 1, refused, "one of two requests under one key is refused: %d %s / %d %s", res[0].status, res[0].body, res[1].status, res[1].body)
		for j, rq := range reqs {
			again := nodes[0].doRaw(t, "POST", rq.path, rq.body, "Idempotency-Key", key)
			assert.Equal(t, res[j].status, again.status, "round %d: request %d's retry answers as it was answered first: %s then %s", round, j, res[j].body, again.body)
		}
	}
}

// TestRetryAfterLeaderDies kills the leader while keyed commits are in
// flight through a follower, then retries each on another node with the
// same key: every commit takes effect exactly once.
func TestRetryAfterLeaderDies(t *testing.T) {
	nodes := startCluster(t, warehouses()[0], 3)
	entry := follower(t, nodes)
	require.Equal(t, 200, entry.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, entry.do(t, "POST", "/v1/namespaces/a/tables", withName("t")).status)
	var leader *node
	for _, n := range nodes {
		if n.raft.IsLeader() {
			leader = n
		}
	}
	require.NotNil(t, leader)
	survivor := entry
	for _, n := range nodes {
		if n != leader && n != entry {
			survivor = n
		}
	}

	const commits = 6
	keys := make([]string, commits)
	var wg sync.WaitGroup
	for i := range commits {
		keys[i] = newKey(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The answer is ignored: the client treats every commit as
			// unknown and retries it below.
			entry.doRaw(t, "POST", "/v1/namespaces/a/tables/t", setProp(fmt.Sprintf("c%d", i), "1"), "Idempotency-Key", keys[i])
		}()
		if i == commits/2 {
			leader.stop()
		}
	}
	wg.Wait()
	// Retry every commit, with its key, on another node until it answers.
	for i, key := range keys {
		deadline := time.Now().Add(30 * time.Second)
		for {
			r := survivor.doRaw(t, "POST", "/v1/namespaces/a/tables/t", setProp(fmt.Sprintf("c%d", i), "1"), "Idempotency-Key", key)
			if r.status == 200 {
				break
			}
			require.True(t, time.Now().Before(deadline), "commit %d never succeeded: %d %s", i, r.status, r.body)
			time.Sleep(100 * time.Millisecond)
		}
	}
	r := survivor.do(t, "GET", "/v1/namespaces/a/tables/t", nil)
	require.Equal(t, 200, r.status)
	meta := r.json(t)["metadata"].(map[string]any)
	props := meta["properties"].(map[string]any)
	for i := range commits {
		assert.Equal(t, "1", props[fmt.Sprintf("c%d", i)])
	}
	assert.Len(t, meta["metadata-log"], commits, "each keyed commit applied exactly once")
}

// A keyed commit that changes nothing (requirements and no updates, as
// iceberg-js sends with a key on every commit) writes no file:
// its answer is the table as it is, the record keeps that answer, and the
// table's current file stays current, logged and undeleted, also with
// write.metadata.delete-after-commit.enabled. A transaction whose change
// to one table is a no-op leaves that table's file as it is too.
func TestKeyedNoOpCommitWritesNothing(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	create := withName("noop")
	create["properties"] = map[string]string{"write.metadata.delete-after-commit.enabled": "true", "write.metadata.previous-versions-max": "1", "k": "v"}
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", create).status)
	changed := n.do(t, "POST", "/v1/namespaces/a/tables/noop", setProp("k", "w"))
	require.Equal(t, 200, changed.status, "%s", changed.body)
	cur := changed.json(t)["metadata-location"].(string)
	metaDir := filepath.Dir(strings.TrimPrefix(cur, "file://"))
	files := func() []string {
		entries, err := os.ReadDir(metaDir)
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	before := files()

	uuid := changed.json(t)["metadata"].(map[string]any)["table-uuid"]
	for i, body := range []any{
		map[string]any{"requirements": []any{}, "updates": []any{}},
		map[string]any{"requirements": []any{map[string]any{"type": "assert-table-uuid", "uuid": uuid}}, "updates": []any{}},
		map[string]any{"requirements": []any{map[string]any{"type": "assert-current-schema-id", "current-schema-id": 0}}},
	} {
		key := newKey(t)
		r := n.do(t, "POST", "/v1/namespaces/a/tables/noop", body, "Idempotency-Key", key)
		require.Equal(t, 200, r.status, "body %d: %s", i, r.body)
		assert.Equal(t, cur, r.json(t)["metadata-location"], "body %d: the table as it is", i)
		replay := n.do(t, "POST", "/v1/namespaces/a/tables/noop", body, "Idempotency-Key", key)
		require.Equal(t, 200, replay.status, "%s", replay.body)
		assert.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
		assert.Equal(t, cur, replay.json(t)["metadata-location"])
	}
	assert.Equal(t, before, files(), "no file written, none deleted")
	require.FileExists(t, strings.TrimPrefix(cur, "file://"))
	load := n.do(t, "GET", "/v1/namespaces/a/tables/noop", nil)
	require.Equal(t, 200, load.status)
	assert.Equal(t, cur, load.json(t)["metadata-location"])

	// A transaction: the no-op table keeps its file, the other moves on.
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("other")).status)
	tx := map[string]any{"table-changes": []any{
		map[string]any{"identifier": map[string]any{"namespace": []string{"a"}, "name": "noop"}, "requirements": []any{}, "updates": []any{}},
		map[string]any{"identifier": map[string]any{"namespace": []string{"a"}, "name": "other"}, "requirements": []any{},
			"updates": []any{map[string]any{"action": "set-properties", "updates": map[string]string{"x": "1"}}}},
	}}
	r := n.do(t, "POST", "/v1/transactions/commit", tx, "Idempotency-Key", newKey(t))
	require.Equal(t, 204, r.status, "%s", r.body)
	assert.Equal(t, before, files())
	assert.Equal(t, cur, n.do(t, "GET", "/v1/namespaces/a/tables/noop", nil).json(t)["metadata-location"])
	assert.Equal(t, "1", n.do(t, "GET", "/v1/namespaces/a/tables/other", nil).json(t)["metadata"].(map[string]any)["properties"].(map[string]any)["x"])
}

// A replay reads the file its request produced from storage: a node that
// cached it answers as one that did not. After an async purge deleted
// the file, every node answers 404, not the cached metadata of a table
// whose files are gone.
func TestReplayAfterAnAsyncPurgeReadsStorage(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("ap")).status)
	key := newKey(t)
	first := n.do(t, "POST", "/v1/namespaces/a/tables/ap", setProp("k", "v"), "Idempotency-Key", key)
	require.Equal(t, 200, first.status, "%s", first.body)
	file := strings.TrimPrefix(first.json(t)["metadata-location"].(string), "file://")
	r := n.do(t, "DELETE", "/v1/namespaces/a/tables/ap?purgeRequested=true", nil, "X-Gravitino-Async-Purge", "true")
	require.Equal(t, 204, r.status, "%s", r.body)
	// No purge workers run here: delete the file as the job would.
	require.NoError(t, os.Remove(file))
	r = n.do(t, "POST", "/v1/namespaces/a/tables/ap", setProp("k", "v"), "Idempotency-Key", key)
	assert.Equal(t, 404, r.status, "%s", r.body)
	assert.Equal(t, "NoSuchTableException", r.errorType(t))
}

// A synchronous purge drop replayed after its job was pruned (finished
// long ago) answers what the first request did, 204.
func TestReplayedPurgeDropAfterItsJobWasPruned(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("pp")).status)
	key := newKey(t)
	require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/a/tables/pp?purgeRequested=true", nil, "Idempotency-Key", key).status)
	res, err := n.raft.Propose(context.Background(), fsm.PrunePurgeJobs{BeforeMs: math.MaxInt64, AtMs: time.Now().UnixMilli()})
	require.NoError(t, err)
	require.Equal(t, 1, res.Count, "the job is pruned")
	r := n.do(t, "DELETE", "/v1/namespaces/a/tables/pp?purgeRequested=true", nil, "Idempotency-Key", key)
	assert.Equal(t, 204, r.status, "%s", r.body)
	assert.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
}

// A rename onto its own name changes nothing, yet under a key its answer
// is stored: a retry after the table is gone replays the 204, and the key
// cannot be used for another rename.
func TestKeyedSelfRenameIsRecorded(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	for _, kind := range []string{"tables", "views"} {
		do, create := n.do, withName("self")
		if kind == "views" {
			require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/a/tables/self", nil).status)
			do, create = n.vdo, createViewBody("self", "select 1", "a")
		}
		require.Equal(t, 200, do(t, "POST", "/v1/namespaces/a/"+kind, create).status, kind)
		self := map[string]any{"namespace": []string{"a"}, "name": "self"}
		body := map[string]any{"source": self, "destination": self}
		key := newKey(t)
		require.Equal(t, 204, do(t, "POST", "/v1/"+kind+"/rename", body, "Idempotency-Key", key).status, kind)
		require.Equal(t, 204, do(t, "DELETE", "/v1/namespaces/a/"+kind+"/self", nil).status, kind)

		replay := do(t, "POST", "/v1/"+kind+"/rename", body, "Idempotency-Key", key)
		assert.Equal(t, 204, replay.status, "%s: %s", kind, replay.body)
		assert.Equal(t, "true", replay.header.Get("Idempotent-Replayed"), kind)

		require.Equal(t, 200, do(t, "POST", "/v1/namespaces/a/"+kind, create).status, kind)
		other := map[string]any{"source": self, "destination": map[string]any{"namespace": []string{"a"}, "name": "moved"}}
		// The spec lists no 422 here: the answer skips spec validation.
		assert.Equal(t, 422, n.doRaw(t, "POST", "/v1/"+kind+"/rename", other, "Idempotency-Key", key).status, kind)
		assert.Equal(t, 200, do(t, "GET", "/v1/namespaces/a/"+kind+"/self", nil).status, "%s: not moved", kind)
	}
}

// TestRefusalDecidedByStateIsReplayed sends, under a key, an update the
// table's (or view's) metadata refuses (400), makes the update valid, and
// sends the request again with the key: the stored 400 is the answer, and
// nothing changes, as for any terminal 4xx (the spec's finalization rules).
func TestRefusalDecidedByStateIsReplayed(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	for _, tbl := range []string{"t", "tx"} {
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName(tbl)).status)
	}
	setSchema := map[string]any{"requirements": []any{}, "updates": []any{map[string]any{"action": "set-current-schema", "schema-id": 1}}}
	addSchema := map[string]any{"requirements": []any{}, "updates": []any{map[string]any{"action": "add-schema", "schema": map[string]any{
		"type": "struct", "schema-id": 1, "fields": []any{
			map[string]any{"id": 1, "name": "id", "type": "long", "required": true},
			map[string]any{"id": 2, "name": "y", "type": "string", "required": false},
		}}}}}
	currentSchema := func(tbl string) float64 {
		r := n.do(t, "GET", "/v1/namespaces/a/tables/"+tbl, nil)
		require.Equal(t, 200, r.status, "%s", r.body)
		return r.json(t)["metadata"].(map[string]any)["current-schema-id"].(float64)
	}
	txBody := func(tbl string, change map[string]any) map[string]any {
		c := map[string]any{"identifier": map[string]any{"namespace": []string{"a"}, "name": tbl}}
		for k, v := range change {
			c[k] = v
		}
		return map[string]any{"table-changes": []any{c}}
	}

	t.Run("table commit", func(t *testing.T) {
		key := newKey(t)
		first := n.do(t, "POST", "/v1/namespaces/a/tables/t", setSchema, "Idempotency-Key", key)
		require.Equal(t, 400, first.status, "%s", first.body)
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables/t", addSchema).status)
		again := n.do(t, "POST", "/v1/namespaces/a/tables/t", setSchema, "Idempotency-Key", key)
		assert.Equal(t, 400, again.status, "%s", again.body)
		assert.Equal(t, "BadRequestException", again.errorType(t))
		assert.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
		assert.Equal(t, float64(0), currentSchema("t"), "the retry applied the update")
	})
	t.Run("transaction", func(t *testing.T) {
		key := newKey(t)
		first := n.do(t, "POST", "/v1/transactions/commit", txBody("tx", setSchema), "Idempotency-Key", key)
		require.Equal(t, 400, first.status, "%s", first.body)
		require.Equal(t, 204, n.do(t, "POST", "/v1/transactions/commit", txBody("tx", addSchema)).status)
		again := n.do(t, "POST", "/v1/transactions/commit", txBody("tx", setSchema), "Idempotency-Key", key)
		assert.Equal(t, 400, again.status, "%s", again.body)
		assert.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
		assert.Equal(t, float64(0), currentSchema("tx"), "the retry applied the update")
	})
	t.Run("view commit", func(t *testing.T) {
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/views", createViewBody("v", "select 1", "a")).status)
		setVersion := map[string]any{"requirements": []any{}, "updates": []any{map[string]any{"action": "set-current-view-version", "view-version-id": 2}}}
		key := newKey(t)
		first := n.do(t, "POST", "/v1/namespaces/a/views/v", setVersion, "Idempotency-Key", key)
		require.Equal(t, 400, first.status, "%s", first.body)
		// Version 2 exists from here on; version 1 stays current.
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/views/v", addVersionBody("select 2", "a")).status)
		back := map[string]any{"requirements": []any{}, "updates": []any{map[string]any{"action": "set-current-view-version", "view-version-id": 1}}}
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/views/v", back).status)
		again := n.do(t, "POST", "/v1/namespaces/a/views/v", setVersion, "Idempotency-Key", key)
		assert.Equal(t, 400, again.status, "%s", again.body)
		assert.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
		r := n.do(t, "GET", "/v1/namespaces/a/views/v", nil)
		require.Equal(t, 200, r.status)
		assert.Equal(t, float64(1), r.json(t)["metadata"].(map[string]any)["current-version-id"], "the retry applied the update")
	})
}

// A 400 that may turn on this node's clock is not stored under an
// Idempotency-Key: iceberg-go stamps main moved to an older snapshot with
// time.Now and refuses it when that falls more than a minute before the
// snapshot log's last entry, which a node with a clock further ahead may
// have written. The retry runs again (on another node, or later, it may
// pass).
func TestClockDependentRefusalIsNotStored(t *testing.T) {
	uri, scfg := warehouses()[0].uri(t)
	// The catalog's own check lets snapshots up to a minute ahead of its
	// clock in; this one runs two minutes ahead of the builder's.
	n := &node{t: t, dir: t.TempDir(), addr: freeAddr(t), warehouse: uri, scfg: scfg,
		now: func() time.Time { return time.Now().Add(2 * time.Minute) }}
	n.start()
	t.Cleanup(n.stop)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("t")).status)
	now := time.Now().UnixMilli()
	r := n.do(t, "POST", "/v1/namespaces/a/tables/t", snapshotUpdates(1, 1, now))
	require.Equal(t, 200, r.status, "%s", r.body)
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", snapshotUpdates(2, 2, now+150_000))
	require.Equal(t, 200, r.status, "%s", r.body)

	back := map[string]any{"requirements": []any{}, "updates": []any{map[string]any{
		"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 1}}}
	key := newKey(t)
	first := n.do(t, "POST", "/v1/namespaces/a/tables/t", back, "Idempotency-Key", key)
	require.Equal(t, 400, first.status, "%s", first.body)
	assert.Contains(t, string(first.body), "snapshot log")
	again := n.do(t, "POST", "/v1/namespaces/a/tables/t", back, "Idempotency-Key", key)
	assert.Equal(t, 400, again.status, "%s", again.body)
	assert.Empty(t, again.header.Get("Idempotent-Replayed"), "a refusal that turns on the clock was stored")

	// A refusal of the state is stored, whatever names it holds.
	missing := map[string]any{"requirements": []any{}, "updates": []any{map[string]any{
		"action": "set-snapshot-ref", "ref-name": "timestamp-fix", "type": "branch", "snapshot-id": 99}}}
	key = newKey(t)
	first = n.do(t, "POST", "/v1/namespaces/a/tables/t", missing, "Idempotency-Key", key)
	require.Equal(t, 400, first.status, "%s", first.body)
	again = n.do(t, "POST", "/v1/namespaces/a/tables/t", missing, "Idempotency-Key", key)
	assert.Equal(t, 400, again.status, "%s", again.body)
	assert.Equal(t, "true", again.header.Get("Idempotent-Replayed"), "a refusal of the state was not stored")
}

// A staged create under an Idempotency-Key writes nothing, but its key is
// bound: a retry is a replay answering the same table (UUID and
// location), and the key cannot be used for another request. It stored
// nothing, and a retry ran again: a new UUID, and the key free for a drop.
func TestStagedCreateBindsItsKey(t *testing.T) {
	nodes := startCluster(t, warehouses()[0], 3)
	n, other := nodes[0], follower(t, nodes)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("kept")).status)
	staged := withName("s")
	staged["stage-create"] = true
	key := newKey(t)
	first := n.do(t, "POST", "/v1/namespaces/a/tables", staged, "Idempotency-Key", key)
	require.Equal(t, 200, first.status, "%s", first.body)
	assert.Empty(t, first.header.Get("Idempotent-Replayed"))
	meta := func(r response) (string, string) {
		m := r.json(t)["metadata"].(map[string]any)
		return m["table-uuid"].(string), m["location"].(string)
	}
	uuid1, loc1 := meta(first)
	again := other.do(t, "POST", "/v1/namespaces/a/tables", staged, "Idempotency-Key", key)
	require.Equal(t, 200, again.status, "%s", again.body)
	assert.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	uuid2, loc2 := meta(again)
	assert.Equal(t, uuid1, uuid2, "the replay answers another table")
	assert.Equal(t, loc1, loc2)
	r := other.doRaw(t, "DELETE", "/v1/namespaces/a/tables/kept", nil, "Idempotency-Key", key)
	assert.Equal(t, 422, r.status, "%s", r.body)
	require.Equal(t, 200, n.do(t, "GET", "/v1/namespaces/a/tables/kept", nil).status, "the drop ran")
	assert.Equal(t, 404, n.do(t, "GET", "/v1/namespaces/a/tables/s", nil).status, "a staged create created a table")

	// Without a key, each staged create is a table of its own.
	plain1, plain2 := n.do(t, "POST", "/v1/namespaces/a/tables", staged), n.do(t, "POST", "/v1/namespaces/a/tables", staged)
	require.Equal(t, 200, plain1.status)
	require.Equal(t, 200, plain2.status)
	u1, _ := meta(plain1)
	u2, _ := meta(plain2)
	assert.NotEqual(t, u1, u2)
}
