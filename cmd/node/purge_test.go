package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePurgeAndIdempotencyFlags(t *testing.T) {
	c, err := parseConfig(nil, nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 2, c.PurgeWorkerThreads)
	assert.Equal(t, 4, c.PurgeDeleteThreads)
	assert.Equal(t, 1000, c.PurgeDeleteBatchSize)
	assert.Equal(t, 10*time.Second, c.PurgeHeartbeatTimeout)
	assert.Equal(t, 5, c.PurgeMaxAttempts)
	assert.Equal(t, 720*time.Hour, c.PurgeRetention)
	assert.True(t, c.Idempotency)
	assert.Equal(t, 30*time.Minute, c.idempotencyLifetime)

	env := []string{
		"FLOE_PURGE_WORKER_THREADS=3", "FLOE_PURGE_DELETE_THREADS=8", "FLOE_PURGE_DELETE_BATCH_SIZE=500",
		"FLOE_PURGE_HEARTBEAT_TIMEOUT=3s", "FLOE_PURGE_MAX_ATTEMPTS=9", "FLOE_PURGE_RETENTION=48h",
		"FLOE_IDEMPOTENCY=false", "FLOE_IDEMPOTENCY_LIFETIME=PT2H",
	}
	c, err = parseConfig([]string{"--purge-worker-threads=7", "--idempotency-lifetime=PT5M"}, env, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 7, c.PurgeWorkerThreads, "flag wins over env")
	assert.Equal(t, 8, c.PurgeDeleteThreads)
	assert.Equal(t, 500, c.PurgeDeleteBatchSize)
	assert.Equal(t, 3*time.Second, c.PurgeHeartbeatTimeout)
	assert.Equal(t, 9, c.PurgeMaxAttempts)
	assert.Equal(t, 48*time.Hour, c.PurgeRetention)
	assert.False(t, c.Idempotency)
	assert.Equal(t, 5*time.Minute, c.idempotencyLifetime)

	var help strings.Builder
	_, _ = parseConfig([]string{"--help"}, nil, &help)
	for _, name := range []string{"purge-worker-threads", "purge-delete-threads", "purge-delete-batch-size", "purge-heartbeat-timeout",
		"purge-max-attempts", "purge-retention", "idempotency", "idempotency-lifetime"} {
		assert.Contains(t, help.String(), "--"+name)
		assert.Contains(t, help.String(), envName(name))
	}
}

// TestRunPurges runs the node in process: a synchronous and an asynchronous
// purging drop, seen through the operator API and the metrics.
func TestRunPurges(t *testing.T) {
	n := runInProcess(t, "--purge-heartbeat-timeout=300ms")
	base, dataDir, logs := n.base, n.dataDir, n.logs

	call := func(method, path, body string, headers ...string) (int, string) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	code, body := call("POST", "/v1/namespaces", `{"namespace":["db"]}`)
	require.Equal(t, 200, code, body)
	schema := `{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true}]}`
	for _, name := range []string{"sync", "async"} {
		code, body = call("POST", "/v1/namespaces/db/tables", `{"name":"`+name+`","schema":`+schema+`}`)
		require.Equal(t, 200, code, body)
	}
	metaDir := func(name string) []os.DirEntry {
		entries, _ := os.ReadDir(filepath.Join(dataDir, "warehouse", "db", name, "metadata"))
		return entries
	}
	require.Len(t, metaDir("sync"), 1)

	code, body = call("DELETE", "/v1/namespaces/db/tables/sync?purgeRequested=true", "")
	require.Equal(t, 204, code, body)
	assert.Empty(t, metaDir("sync"), "a sync drop answers when the files are gone")

	code, body = call("DELETE", "/v1/namespaces/db/tables/async?purgeRequested=true", "", "X-Gravitino-Async-Purge", "true")
	require.Equal(t, 204, code, body)
	require.Eventually(t, func() bool {
		code, body := call("GET", "/management/v1/purge-jobs?state=SUCCEEDED", "")
		var list struct {
			Jobs []struct {
				Table string `json:"table"`
			} `json:"jobs"`
		}
		return code == 200 && json.Unmarshal([]byte(body), &list) == nil && len(list.Jobs) == 2
	}, 20*time.Second, 50*time.Millisecond)
	assert.Empty(t, metaDir("async"))

	code, _ = call("GET", "/management/v1/cluster", "")
	assert.Equal(t, 200, code, "the cluster API is still served")
	require.Eventually(t, func() bool { // the gauges follow the local replica
		code, body = call("GET", "/metrics", "")
		return code == 200 && strings.Contains(body, `floe_purge_jobs{state="SUCCEEDED"} 2`)
	}, 5*time.Second, 20*time.Millisecond)
	assert.Contains(t, body, "floe_purge_files_deleted_total 2")
	assert.Contains(t, logs.String(), "purge job completed")
}
