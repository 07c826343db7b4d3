package catalog_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A "+" in a path segment: the Java client writes a space as "+" (and a
// "+" as "%2B"); Go's and Rust's clients send a "+" of a name as it is.
// Both reach what they name; when both readings exist, the name as
// written wins.
func TestPlusInPathSegments(t *testing.T) {
	n := startNode(t, warehouses()[0])
	for _, ns := range []string{"my ns", "a+b"} {
		r := n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{ns}})
		require.Equal(t, 200, r.status, string(r.body))
	}
	for _, name := range []string{"t x", "p+q", "c+d", "c d"} {
		r := n.do(t, "POST", "/v1/namespaces/my%20ns/tables", withName(name))
		require.Equal(t, 200, r.status, string(r.body))
	}
	r := n.vdo(t, "POST", "/v1/namespaces/my%20ns/views", createViewBody("v w", "select 1", "my ns"))
	require.Equal(t, 200, r.status, string(r.body))

	loc := func(r response) string {
		t.Helper()
		require.Equal(t, 200, r.status, string(r.body))
		return r.json(t)["metadata"].(map[string]any)["location"].(string)
	}
	// Java: "+" is a space.
	r = n.do(t, "GET", "/v1/namespaces/my+ns", nil)
	require.Equal(t, 200, r.status, string(r.body))
	assert.Equal(t, []any{"my ns"}, r.json(t)["namespace"])
	assert.Contains(t, loc(n.do(t, "GET", "/v1/namespaces/my+ns/tables/t+x", nil)), "/my ns/t x")
	assert.Equal(t, 204, n.do(t, "HEAD", "/v1/namespaces/my+ns/tables/t+x", nil).status)
	r = n.vdo(t, "GET", "/v1/namespaces/my+ns/views/v+w", nil)
	assert.Equal(t, 200, r.status, string(r.body))
	r = n.do(t, "POST", "/v1/namespaces/my+ns/tables", withName("new"))
	require.Equal(t, 200, r.status, string(r.body))
	assert.Contains(t, r.json(t)["metadata"].(map[string]any)["location"], "/my ns/new")

	// Go and Rust: "+" is itself; Java's "%2B" is too.
	r = n.do(t, "GET", "/v1/namespaces/a+b", nil)
	require.Equal(t, 200, r.status, string(r.body))
	assert.Equal(t, []any{"a+b"}, r.json(t)["namespace"])
	assert.Contains(t, loc(n.do(t, "GET", "/v1/namespaces/my%20ns/tables/p+q", nil)), "/p+q")
	assert.Contains(t, loc(n.do(t, "GET", "/v1/namespaces/my+ns/tables/p%2Bq", nil)), "/p+q")

	// Both readings exist: as written.
	assert.Contains(t, loc(n.do(t, "GET", "/v1/namespaces/my+ns/tables/c+d", nil)), "/c+d")
	assert.Contains(t, loc(n.do(t, "GET", "/v1/namespaces/my+ns/tables/c%20d", nil)), "/c d")

	// Neither exists: a 404 for the name as written.
	r = n.do(t, "GET", "/v1/namespaces/my+ns/tables/no+such", nil)
	assert.Equal(t, 404, r.status)
	assert.Contains(t, string(r.body), "no+such")
}

// TestPlusInTheParentParameter: listNamespaces's parent is form-decoded
// ("+" a space, as Java's URLEncoder writes one), but PyIceberg before
// 0.10 sends it unencoded, a "+" of a name included: a "+" naming no
// namespace as a space is read as itself.
func TestPlusInTheParentParameter(t *testing.T) {
	n := startNode(t, warehouses()[0])
	for _, ns := range [][]string{{"p+q"}, {"p+q", "child"}, {"my ns"}, {"my ns", "kid"}} {
		r := n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": ns})
		require.Equal(t, 200, r.status, string(r.body))
	}
	for _, tc := range []struct{ query, want string }{
		{"parent=p+q", "child"},   // old PyIceberg
		{"parent=p%2Bq", "child"}, // Java, Go, PyIceberg since 0.10
		{"parent=my+ns", "kid"},   // Java's space
		{"parent=my%20ns", "kid"},
	} {
		r := n.do(t, "GET", "/v1/namespaces?"+tc.query, nil)
		require.Equal(t, 200, r.status, "%s: %s", tc.query, r.body)
		nss := r.json(t)["namespaces"].([]any)
		require.Len(t, nss, 1, tc.query)
		assert.Equal(t, tc.want, nss[0].([]any)[1], tc.query)
	}
	assert.Equal(t, 404, n.do(t, "GET", "/v1/namespaces?parent=no+such", nil).status)
}
