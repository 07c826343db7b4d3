package catalog_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A server built without a node-wide purge service runs synchronous purges
// on one of its own; Close stops it, and a purge asked after Close is
// refused (503) instead of starting another.
func TestCloseStopsThePrivatePurger(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	for _, name := range []string{"a", "b"} {
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/ns/tables", withName(name)).status)
	}
	require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/ns/tables/a?purgeRequested=true", nil).status)
	n.srv.Close()
	n.srv.Close() // idempotent
	r := n.do(t, "DELETE", "/v1/namespaces/ns/tables/b?purgeRequested=true", nil)
	assert.Equal(t, 503, r.status, "%s", r.body)
	assert.Equal(t, 200, n.do(t, "GET", "/v1/namespaces/ns/tables/b", nil).status, "nothing dropped")
}
