package catalog_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A client that sets X-Floe-Read-Consistency: stale on every request, as
// iceberg-go's WithHeaders does, finds its own writes in the replica of
// the follower that forwarded them: iceberg-go's RenameView loads the view
// it renamed at once, and answered 404 through a follower.
func TestStaleReaderReadsItsOwnWritesOnAFollower(t *testing.T) {
	nodes := startCluster(t, warehouses()[0], 3)
	f := follower(t, nodes)
	const stale = "X-Floe-Read-Consistency"
	for i := range 30 {
		ns := fmt.Sprintf("ryw%d", i)
		r := f.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{ns}}, stale, "stale")
		require.Equal(t, 200, r.status, "%s", r.body)
		r = f.do(t, "GET", "/v1/namespaces/"+ns, nil, stale, "stale")
		assert.Equal(t, 200, r.status, "the follower's replica misses the write it answered: %s", r.body)
		r = f.do(t, "POST", "/v1/namespaces/"+ns+"/properties", map[string]any{"updates": map[string]string{"k": ns}}, stale, "stale")
		require.Equal(t, 200, r.status, "%s", r.body)
		r = f.do(t, "GET", "/v1/namespaces/"+ns, nil, stale, "stale")
		require.Equal(t, 200, r.status, "%s", r.body)
		assert.Equal(t, ns, r.json(t)["properties"].(map[string]any)["k"], "the follower's replica misses the update it answered")
	}
}
