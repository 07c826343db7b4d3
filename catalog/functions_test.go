package catalog_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// floe stores no functions (the spec has no operation that creates one):
// a namespace's list is empty and loading one is the spec's 404
// NoSuchFunctionException, while a missing namespace is 404
// NoSuchNamespaceException, not a 404 for an unknown route. Both are
// advertised, and their answers are checked against the spec.
func TestFunctionsListEmptyAndLoadNone(t *testing.T) {
	n := startNode(t, warehouses()[0])
	for _, ns := range [][]string{{"fn"}, {"fn", "inner"}} {
		r := n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": ns})
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	}

	var cfg struct {
		Endpoints []string `json:"endpoints"`
	}
	require.NoError(t, json.Unmarshal(n.do(t, "GET", "/v1/config", nil).body, &cfg))
	assert.Contains(t, cfg.Endpoints, "GET /v1/{prefix}/namespaces/{namespace}/functions")
	assert.Contains(t, cfg.Endpoints, "GET /v1/{prefix}/namespaces/{namespace}/functions/{function}")

	for _, path := range []string{"/v1/namespaces/fn%2Einner/functions", "/v1/floe/namespaces/fn%1Finner/functions?pageToken=&pageSize=10"} {
		r := n.do(t, "GET", path, nil)
		require.Equal(t, http.StatusOK, r.status, "%s: %s", path, r.body)
		assert.JSONEq(t, `{"identifiers":[]}`, string(r.body))
	}

	for path, typ := range map[string]string{
		"/v1/floe/namespaces/fn%2Einner/functions/add_one": "NoSuchFunctionException",
		"/v1/namespaces/fn/functions/x":                    "NoSuchFunctionException",
		"/v1/namespaces/nope/functions":                    "NoSuchNamespaceException",
		"/v1/floe/namespaces/nope/functions/add_one":       "NoSuchNamespaceException",
	} {
		r := n.do(t, "GET", path, nil)
		require.Equal(t, http.StatusNotFound, r.status, "%s: %s", path, r.body)
		assert.Equal(t, typ, r.errorType(t), path)
	}

	// Bad input: the errors every namespace route gives.
	for _, path := range []string{"/v1/namespaces/fn/functions?pageSize=0", "/v1/namespaces/fn/functions?pageToken=%25%25", "/v1/namespaces/fn/functions/a%00b"} {
		r := n.do(t, "GET", path, nil)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", path, r.body)
		assert.Equal(t, "BadRequestException", r.errorType(t), path)
	}
}
