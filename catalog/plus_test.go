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

// The Java client (X-Client-Version "Apache Iceberg ...") writes a space
// as "+" and a "+" as "%2B": its raw "+" is a space even where the name
// as written exists, in paths and in the parent parameter.
func TestPlusFromTheJavaClient(t *testing.T) {
	n := startNode(t, warehouses()[0])
	java := []string{"X-Client-Version", "Apache Iceberg 1.9.2 (commit 0123456789abcdef0123456789abcdef01234567)"}
	for _, ns := range [][]string{{"x y"}, {"x+y"}, {"x+y", "kid"}, {"only+plus"}} {
		r := n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": ns})
		require.Equal(t, 200, r.status, string(r.body))
	}
	for _, ns := range []string{"x%20y", "x%2By"} {
		r := n.do(t, "POST", "/v1/namespaces/"+ns+"/tables", withName("k"))
		require.Equal(t, 200, r.status, string(r.body))
	}
	r := n.do(t, "GET", "/v1/namespaces/x+y/tables/k", nil, java...)
	require.Equal(t, 200, r.status, string(r.body))
	assert.Contains(t, r.json(t)["metadata"].(map[string]any)["location"], "/x y/k")
	r = n.do(t, "GET", "/v1/namespaces/x%2By/tables/k", nil, java...)
	require.Equal(t, 200, r.status, string(r.body))
	assert.Contains(t, r.json(t)["metadata"].(map[string]any)["location"], "/x+y/k")
	// A Java client asking for "only plus" is not given "only+plus".
	assert.Equal(t, 404, n.do(t, "GET", "/v1/namespaces/only+plus", nil, java...).status)
	// parent: "+" a space, even where none is and the "+" spelling is.
	r = n.do(t, "GET", "/v1/namespaces?parent=x+y", nil, java...)
	require.Equal(t, 200, r.status, string(r.body))
	assert.Empty(t, r.json(t)["namespaces"])
	// Without the header, as before: the name as written wins.
	r = n.do(t, "GET", "/v1/namespaces/x+y/tables/k", nil)
	require.Equal(t, 200, r.status, string(r.body))
	assert.Contains(t, r.json(t)["metadata"].(map[string]any)["location"], "/x+y/k")
}

// A namespace segment holding %1F is split at %1F alone, as Java's
// reference server splits it: "a%1Fb.c" names the levels a and "b.c",
// which no namespace has (400), never a.b.c.
func TestUnitSeparatorSplitsAlone(t *testing.T) {
	n := startNode(t, warehouses()[0])
	for _, ns := range [][]string{{"a"}, {"a", "b"}, {"a", "b", "c"}} {
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": ns}).status)
	}
	for _, path := range []string{"/v1/namespaces/a%1Fb%1Fc", "/v1/namespaces/a.b.c", "/v1/namespaces/a%2Eb%2Ec"} {
		r := n.do(t, "GET", path, nil)
		require.Equal(t, 200, r.status, "%s: %s", path, r.body)
		assert.Equal(t, []any{"a", "b", "c"}, r.json(t)["namespace"], path)
	}
	for _, path := range []string{"/v1/namespaces/a%1Fb.c", "/v1/namespaces/a.b%1Fc"} {
		assert.Equal(t, 400, n.do(t, "DELETE", path, nil).status, path)
	}
	assert.Equal(t, 200, n.do(t, "GET", "/v1/namespaces/a.b.c", nil).status, "not dropped")
}
