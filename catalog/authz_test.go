package catalog_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// grantAuthz grants by the X-Test-Principal header: "admin" everything,
// anyone else the privileges listed for it as "privilege namespace".
type grantAuthz map[string][]string

func (grantAuthz) Principal(r *http.Request) string { return r.Header.Get("X-Test-Principal") }
func (g grantAuthz) Allowed(r *http.Request, priv string, ns []string) (bool, error) {
	p := r.Header.Get("X-Test-Principal")
	if p == "admin" {
		return true, nil
	}
	for _, l := range ns {
		if slices.Contains(g[p], priv+" "+l) {
			return true, nil
		}
	}
	return false, nil
}
func (g grantAuthz) Visible(r *http.Request, ns []string) (bool, error) {
	p := r.Header.Get("X-Test-Principal")
	for _, grant := range g[p] {
		_, l, _ := strings.Cut(grant, " ")
		if p == "admin" || slices.Contains(ns, l) {
			return true, nil
		}
	}
	return p == "admin", nil
}

// The 404 that hides a namespace from a caller names what the caller
// wrote: a '+' read as a space (which names the namespace or table only
// when it exists) would tell whether a name with a space exists.
func TestHiddenNotFoundNamesWhatWasWritten(t *testing.T) {
	uri, scfg := warehouses()[0].uri(t)
	n := &node{t: t, dir: t.TempDir(), addr: freeAddr(t), warehouse: uri, scfg: scfg, authz: grantAuthz{"etl": {"read open"}}}
	n.start()
	t.Cleanup(n.stop)
	admin := []string{"X-Test-Principal", "admin"}
	for _, ns := range []string{"a b", "secret"} {
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{ns}}, admin...).status)
	}
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/secret/tables", withName("my tbl"), admin...).status)
	// The admin reaches both through '+'.
	require.Equal(t, 200, n.do(t, "GET", "/v1/namespaces/a+b", nil, admin...).status)
	require.Equal(t, 200, n.do(t, "GET", "/v1/namespaces/secret/tables/my+tbl", nil, admin...).status)
	for _, c := range []struct{ path, want string }{
		{"/v1/namespaces/a+b", "namespace does not exist: a+b"},
		{"/v1/namespaces/c+d", "namespace does not exist: c+d"},
		{"/v1/namespaces/secret/tables/my+tbl", "table does not exist: secret.my+tbl"},
		{"/v1/namespaces/secret/tables/no+tbl", "table does not exist: secret.no+tbl"},
	} {
		r := n.do(t, "GET", c.path, nil, "X-Test-Principal", "etl")
		assert.Equal(t, 404, r.status, "%s: %s", c.path, r.body)
		assert.Contains(t, string(r.body), c.want, c.path)
	}
}

// A rename moves what it renames to where the caller may write: drop on
// the source alone (which does not let a principal read it) is not
// enough, or a principal could move a table or view it may not read to a
// namespace it may, then read it and be vended credentials for its files.
func TestRenameNeedsReadOnTheSource(t *testing.T) {
	uri, scfg := warehouses()[0].uri(t)
	n := &node{t: t, dir: t.TempDir(), addr: freeAddr(t), warehouse: uri, scfg: scfg, authz: grantAuthz{
		"dropper": {"drop secret", "write open", "read open"},
		"mover":   {"drop secret", "read secret", "write open", "read open"},
	}}
	n.start()
	t.Cleanup(n.stop)
	admin := []string{"X-Test-Principal", "admin"}
	for _, ns := range []string{"secret", "open"} {
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{ns}}, admin...).status)
	}
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/secret/tables", withName("t"), admin...).status)
	r := n.vdo(t, "POST", "/v1/namespaces/secret/views", createViewBody("v", "select 1", "secret"), admin...)
	require.Equal(t, 200, r.status, "%s", r.body)

	for _, kind := range []string{"tables", "views"} {
		name := map[string]string{"tables": "t", "views": "v"}[kind]
		rename := func(principal, to string) response {
			return n.vdo(t, "POST", "/v1/"+kind+"/rename", map[string]any{
				"source":      map[string]any{"namespace": []string{"secret"}, "name": name},
				"destination": map[string]any{"namespace": []string{"open"}, "name": to},
			}, "X-Test-Principal", principal)
		}
		r := rename("dropper", "stolen-"+kind)
		assert.Equal(t, 403, r.status, "%s: %s", kind, r.body)
		assert.Equal(t, 200, n.vdo(t, "GET", "/v1/namespaces/secret/"+kind+"/"+name, nil, admin...).status, kind)
		assert.Equal(t, 404, n.vdo(t, "GET", "/v1/namespaces/open/"+kind+"/stolen-"+kind, nil, admin...).status, kind)

		r = rename("mover", "moved-"+kind)
		assert.Equal(t, 204, r.status, "%s: %s", kind, r.body)
		assert.Equal(t, 200, n.vdo(t, "GET", "/v1/namespaces/open/"+kind+"/moved-"+kind, nil, admin...).status, kind)
	}
}

// A page of namespaces carries a next-page-token only when a namespace the
// caller may see follows it: hidden ones after the last it may see give
// neither a token nor an empty last page that would tell they exist.
func TestNamespacePagesDoNotHintAtHiddenOnes(t *testing.T) {
	uri, scfg := warehouses()[0].uri(t)
	n := &node{t: t, dir: t.TempDir(), addr: freeAddr(t), warehouse: uri, scfg: scfg,
		authz: grantAuthz{"bob": {"read b1", "read b3"}}}
	n.start()
	t.Cleanup(n.stop)
	admin := []string{"X-Test-Principal", "admin"}
	for _, ns := range []string{"a0", "b1", "b2", "b3", "z9"} {
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{ns}}, admin...).status)
	}
	bob := []string{"X-Test-Principal", "bob"}
	var seen []string
	token, pages := "", 0
	for {
		r := n.do(t, "GET", "/v1/namespaces?pageSize=1&pageToken="+token, nil, bob...)
		require.Equal(t, 200, r.status, "%s", r.body)
		body := r.json(t)
		pages++
		for _, ns := range body["namespaces"].([]any) {
			seen = append(seen, ns.([]any)[0].(string))
		}
		next, _ := body["next-page-token"].(string)
		if next == "" {
			break
		}
		require.Less(t, pages, 10)
		token = next
	}
	assert.Equal(t, []string{"b1", "b3"}, seen)
	assert.Equal(t, 2, pages, "no empty last page after b3, though z9 follows it")

	// Without a page token everything visible comes at once, with none.
	r := n.do(t, "GET", "/v1/namespaces", nil, bob...)
	assert.Nil(t, r.json(t)["next-page-token"])
	// The admin, who sees everything, pages as before.
	r = n.do(t, "GET", "/v1/namespaces?pageSize=5&pageToken=", nil, admin...)
	assert.Nil(t, r.json(t)["next-page-token"], "five of five: nothing follows")
	r = n.do(t, "GET", "/v1/namespaces?pageSize=4&pageToken=", nil, admin...)
	assert.NotNil(t, r.json(t)["next-page-token"])
}

// A register with overwrite replaces the table of that name, which drops
// it: write alone, which may not drop the table, may not replace it.
func TestRegisterOverwriteNeedsDrop(t *testing.T) {
	uri, scfg := warehouses()[0].uri(t)
	n := &node{t: t, dir: t.TempDir(), addr: freeAddr(t), warehouse: uri, scfg: scfg, authz: grantAuthz{
		"writer":   {"write sales", "read sales"},
		"replacer": {"write sales", "read sales", "drop sales"},
	}}
	n.start()
	t.Cleanup(n.stop)
	admin := []string{"X-Test-Principal", "admin"}
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"sales"}}, admin...).status)
	r := n.do(t, "POST", "/v1/namespaces/sales/tables", withName("orders"), admin...)
	require.Equal(t, 200, r.status, "%s", r.body)
	loc := r.json(t)["metadata-location"].(string)
	register := func(principal string) response {
		return n.do(t, "POST", "/v1/namespaces/sales/register",
			map[string]any{"name": "orders", "metadata-location": loc, "overwrite": true}, "X-Test-Principal", principal)
	}
	assert.Equal(t, 403, n.do(t, "DELETE", "/v1/namespaces/sales/tables/orders", nil, "X-Test-Principal", "writer").status)
	r = register("writer")
	assert.Equal(t, 403, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "may not drop")
	r = register("replacer")
	assert.Equal(t, 200, r.status, "%s", r.body)
}

// Which spelling a raw '+' names never depends on a namespace hidden from
// the caller: a hidden "pq rs" neither takes the caller's "pq+rs" (path
// and parent) nor is told by the answer changing.
func TestPlusNeverReadsAHiddenNamespace(t *testing.T) {
	uri, scfg := warehouses()[0].uri(t)
	n := &node{t: t, dir: t.TempDir(), addr: freeAddr(t), warehouse: uri, scfg: scfg,
		authz: grantAuthz{"alice": {"read pq+rs", "read kid"}}}
	n.start()
	t.Cleanup(n.stop)
	admin := []string{"X-Test-Principal", "admin"}
	alice := []string{"X-Test-Principal", "alice"}
	for _, ns := range [][]string{{"pq+rs"}, {"pq+rs", "kid"}} {
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": ns}, admin...).status)
	}
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/pq%2Brs/tables", withName("t1"), admin...).status)
	answers := func() []string {
		var out []string
		for _, path := range []string{"/v1/namespaces?parent=pq+rs", "/v1/namespaces/pq+rs/tables", "/v1/namespaces/pq+rs"} {
			r := n.do(t, "GET", path, nil, alice...)
			out = append(out, string(rune('0'+r.status/100))+" "+string(r.body))
		}
		return out
	}
	before := answers()
	for _, a := range before {
		assert.True(t, strings.HasPrefix(a, "2 "), a)
	}
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"pq rs"}}, admin...).status)
	assert.Equal(t, before, answers(), "a namespace alice may not see changed her answers")
	// Path: alice's visible "ab cd", reached as "ab+cd", stays hers when a
	// hidden "ab+cd" appears (the name as written would win if it counted).
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ab cd"}}, admin...).status)
	n.authz.(grantAuthz)["alice"] = append(n.authz.(grantAuthz)["alice"], "read ab cd")
	r := n.do(t, "GET", "/v1/namespaces/ab+cd", nil, alice...)
	require.Equal(t, 200, r.status, string(r.body))
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ab+cd"}}, admin...).status)
	r = n.do(t, "GET", "/v1/namespaces/ab+cd", nil, alice...)
	require.Equal(t, 200, r.status, string(r.body))
	assert.Equal(t, []any{"ab cd"}, r.json(t)["namespace"])

	// The admin, who sees both, gets the space where both exist only
	// through the spelling as written: unchanged rule.
	r = n.do(t, "GET", "/v1/namespaces/pq+rs", nil, admin...)
	require.Equal(t, 200, r.status)
	assert.Equal(t, []any{"pq+rs"}, r.json(t)["namespace"])
}

// The directory of namespace secret.inner is also the default location of
// table inner of namespace secret. Once that table is dropped without
// purge, its files stay there: a principal who may write only in
// secret.inner may neither register its metadata nor place a table over
// its data directory, which would let it read and change another
// namespace's table. A writer on secret may; a nested namespace whose
// directory no table holds is unaffected.
func TestNestedNamespaceWriterCannotTakeADroppedParentTable(t *testing.T) {
	uri, scfg := warehouses()[0].uri(t)
	n := &node{t: t, dir: t.TempDir(), addr: freeAddr(t), warehouse: uri, scfg: scfg, authz: grantAuthz{
		"carol":  {"write inner", "read inner"},
		"parent": {"write secret", "read secret"},
	}}
	n.start()
	t.Cleanup(n.stop)
	admin := []string{"X-Test-Principal", "admin"}
	carol := []string{"X-Test-Principal", "carol"}
	for _, ns := range [][]string{{"secret"}, {"secret", "inner"}, {"open"}, {"open", "inner"}} {
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": ns}, admin...).status, "%v", ns)
	}
	r := n.do(t, "POST", "/v1/namespaces/secret/tables", withName("inner"), admin...)
	require.Equal(t, 200, r.status, "%s", r.body)
	meta := r.json(t)["metadata-location"].(string)
	require.Equal(t, strings.TrimSuffix(uri, "/")+"/secret/inner", r.json(t)["metadata"].(map[string]any)["location"])
	require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/secret/tables/inner", nil, admin...).status)

	r = n.do(t, "POST", "/v1/namespaces/secret%1Finner/register", map[string]any{"name": "stolen", "metadata-location": meta}, carol...)
	assert.Equal(t, 403, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "dropped without purge")
	r = n.do(t, "POST", "/v1/namespaces/secret%1Finner/tables", withName("data"), carol...)
	assert.Equal(t, 403, r.status, "a table over the dropped table's data directory: %s", r.body)
	assert.Equal(t, 404, n.do(t, "GET", "/v1/namespaces/secret%1Finner/tables/stolen", nil, admin...).status, "nothing registered")

	r = n.do(t, "POST", "/v1/namespaces/open%1Finner/tables", withName("fine"), carol...)
	assert.Equal(t, 200, r.status, "no table holds open/inner: %s", r.body)
	// Live tables and views are the ownership index's to judge: carol's
	// own table at the namespace's directory, and a view of namespace
	// open there, leave her commits and creates alone.
	r = n.do(t, "POST", "/v1/namespaces/open/views", createViewBody("inner", "select 1", "open"), admin...)
	require.Equal(t, 200, r.status, "%s", r.body)
	require.Equal(t, strings.TrimSuffix(uri, "/")+"/open/inner", r.json(t)["metadata"].(map[string]any)["location"])
	r = n.do(t, "POST", "/v1/namespaces/open%1Finner/tables/fine", setProp("k", "v"), carol...)
	assert.Equal(t, 200, r.status, "a commit that moves nothing is not judged: %s", r.body)
	r = n.do(t, "POST", "/v1/namespaces/open%1Finner/tables", withName("fine2"), carol...)
	assert.Equal(t, 200, r.status, "a live view at open/inner is no dropped table: %s", r.body)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"mine"}}, admin...).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"mine", "inner"}}, admin...).status)
	r = n.do(t, "POST", "/v1/namespaces/mine%1Finner/tables", withLocation("self", strings.TrimSuffix(uri, "/")+"/mine/inner"), carol...)
	require.Equal(t, 200, r.status, "carol's table at her namespace's directory: %s", r.body)
	r = n.do(t, "POST", "/v1/namespaces/mine%1Finner/tables/self", setProp("k", "v"), carol...)
	assert.Equal(t, 200, r.status, "carol's own table there does not lock her out: %s", r.body)
	r = n.do(t, "POST", "/v1/namespaces/mine%1Finner/tables", withName("next"), carol...)
	assert.Equal(t, 400, r.status, "inside her own table's location, the ownership index's to refuse: %s", r.body)
	assert.NotContains(t, string(r.body), "dropped without purge")
	r = n.do(t, "POST", "/v1/namespaces/secret%1Finner/register", map[string]any{"name": "restored", "metadata-location": meta},
		"X-Test-Principal", "parent")
	assert.Equal(t, 200, r.status, "a writer on secret may: %s", r.body)
}
