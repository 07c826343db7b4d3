package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
)

func TestStorageFingerprint(t *testing.T) {
	base := config{Prefix: "floe", Warehouse: "s3://lake/wh", AllowedLocations: "s3://lake/wh",
		warehouses: []warehouseSpec{{Name: "a", Location: "s3://a/wh"}}}
	same := base
	same.AllowedLocations = "s3://lake/wh,s3://lake/ext"
	same.warehouses = nil
	same.S3Endpoint, same.S3SecretAccessKey = "http://elsewhere:9000", "another secret"
	assert.Equal(t, storageFingerprint(base), storageFingerprint(same),
		"named warehouses and allowed locations change by rolling restart; endpoints and credentials are per node")
	for name, change := range map[string]func(c *config){
		"prefix":    func(c *config) { c.Prefix = "other" },
		"warehouse": func(c *config) { c.Warehouse = "s3://other/wh" },
	} {
		c := base
		change(&c)
		assert.NotEqual(t, storageFingerprint(base), storageFingerprint(c), name)
	}
}

func TestSettingsOutlier(t *testing.T) {
	const now = 100_000
	window := 10 * time.Second
	node := func(id, settings string, ageMs int64) fsm.PurgeNode {
		return fsm.PurgeNode{Node: id, Settings: settings, AtMs: now - ageMs}
	}
	// This node ("me") has "x"; nodes lists the others.
	for _, tc := range []struct {
		name  string
		nodes []fsm.PurgeNode
		want  bool
	}{
		{"alone", []fsm.PurgeNode{node("me", "x", 0)}, false},
		{"all agree", []fsm.PurgeNode{node("me", "x", 0), node("b", "x", 0), node("c", "x", 0)}, false},
		{"the odd one of three", []fsm.PurgeNode{node("me", "x", 0), node("b", "y", 0), node("c", "y", 0)}, true},
		{"one of three differs, seen by the others", []fsm.PurgeNode{node("b", "y", 0), node("c", "x", 0)}, false},
		{"all differ", []fsm.PurgeNode{node("b", "y", 0), node("c", "z", 0)}, false},
		{"two nodes that differ", []fsm.PurgeNode{node("b", "y", 0)}, false},
		{"two against two", []fsm.PurgeNode{node("b", "x", 0), node("c", "y", 0), node("d", "y", 0)}, false},
		{"two bad of five, seen by a bad one", []fsm.PurgeNode{node("b", "x", 0), node("c", "y", 0), node("d", "y", 0), node("e", "y", 0)}, true},
		{"two bad of five, seen by a good one", []fsm.PurgeNode{node("b", "y", 0), node("c", "y", 0), node("d", "x", 0), node("e", "x", 0)}, false},
		{"silent nodes do not count", []fsm.PurgeNode{node("b", "y", 20_000), node("c", "y", 20_000)}, false},
		{"older binaries do not count", []fsm.PurgeNode{node("b", "", 0), node("c", "", 0)}, false},
		{"a third node down: one against one", []fsm.PurgeNode{node("b", "y", 0), node("c", "y", 20_000)}, false},
	} {
		got, _, _ := settingsOutlier("x", "me", tc.nodes, now, window)
		assert.Equal(t, tc.want, got, tc.name)
	}
}

// A node started with other storage settings than the cluster's (here its
// own warehouse) is not ready and refuses catalog requests, naming why; the
// others serve on.
func TestNodeWithOtherStorageSettingsRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes")
	}
	other := "file://" + filepath.ToSlash(filepath.Join(t.TempDir(), "elsewhere"))
	c := startTestClusterWith(t, func(p *clusterProc) []string {
		args := []string{"--purge-heartbeat-timeout", "1s"}
		if p.id == "node3" {
			args = append(args, "--warehouse", other)
		}
		return args
	})
	odd := c.byID("node3")
	require.Eventually(t, func() bool {
		code, body, err := c.do(odd, http.MethodGet, "/readyz", "")
		return err == nil && code == http.StatusServiceUnavailable && strings.Contains(string(body), "default warehouse")
	}, 60*time.Second, 100*time.Millisecond)
	code, body, err := c.do(odd, http.MethodGet, "/v1/namespaces", "")
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, string(body), "restart it with the cluster's settings")
	for _, id := range []string{"node1", "node2"} {
		p := c.byID(id)
		assert.True(t, c.ready(p), id)
		code, body, err := c.do(p, http.MethodPost, "/v1/namespaces", `{"namespace":["ok_`+id+`"]}`)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, code, "%s: %s", id, body)
	}
}
