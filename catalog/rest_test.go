package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/purge"
)

var tableBody = map[string]any{
	"name": "t",
	"schema": map[string]any{
		"type": "struct", "schema-id": 0,
		"fields": []any{map[string]any{"id": 1, "name": "id", "type": "long", "required": true}},
	},
}

func withName(name string) map[string]any {
	b := map[string]any{}
	for k, v := range tableBody {
		b[k] = v
	}
	b["name"] = name
	return b
}

func TestConfigAdvertisesWhatIsServed(t *testing.T) {
	n := startNode(t, warehouses()[0])
	r := n.do(t, "GET", "/v1/config", nil)
	require.Equal(t, 200, r.status)
	cfg := r.json(t)
	assert.Equal(t, "%2E", cfg["namespace-separator"])
	assert.Equal(t, "floe", cfg["overrides"].(map[string]any)["prefix"])
	eps := cfg["endpoints"].([]any)
	assert.Contains(t, eps, "POST /v1/{prefix}/transactions/commit")
	assert.Contains(t, eps, "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/unregister")
	assert.Contains(t, eps, "GET /v1/{prefix}/namespaces/{namespace}/views")
	assert.Contains(t, eps, "POST /v1/{prefix}/namespaces/{namespace}/register-view")
	assert.NotContains(t, eps, "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan")
	assert.Equal(t, 404, n.do(t, "GET", "/v1/config?warehouse=other", nil).status)
}

func TestNamespaces(t *testing.T) {
	n := startNode(t, warehouses()[0])
	for _, p := range []string{"/v1", "/v1/floe"} {
		t.Run(p, func(t *testing.T) {
			root := "r" + strings.ReplaceAll(p, "/", "_")
			r := n.do(t, "POST", p+"/namespaces", map[string]any{"namespace": []string{root}, "properties": map[string]string{"a": "1"}})
			require.Equal(t, 200, r.status, "%s", r.body)
			// Multi-level: the parent must exist; both separators address it.
			assert.Equal(t, 400, n.do(t, "POST", p+"/namespaces", map[string]any{"namespace": []string{"nope", "x"}}).errorStatus(t))
			require.Equal(t, 200, n.do(t, "POST", p+"/namespaces", map[string]any{"namespace": []string{root, "child"}}).status)
			assert.Equal(t, 200, n.do(t, "GET", p+"/namespaces/"+root+"%1Fchild", nil).status)
			assert.Equal(t, 200, n.do(t, "GET", p+"/namespaces/"+root+".child", nil).status)
			assert.Equal(t, 200, n.do(t, "GET", p+"/namespaces/"+root+"%2Echild", nil).status)
			assert.Equal(t, 204, n.do(t, "HEAD", p+"/namespaces/"+root+"%1Fchild", nil).status)
			assert.Equal(t, 404, n.do(t, "HEAD", p+"/namespaces/"+root+"%1Fnone", nil).status)

			r = n.do(t, "GET", p+"/namespaces?parent="+root, nil)
			require.Equal(t, 200, r.status)
			assert.Equal(t, []any{[]any{root, "child"}}, r.json(t)["namespaces"])
			assert.Equal(t, 404, n.do(t, "GET", p+"/namespaces?parent=missing", nil).errorStatus(t))

			// 409 while it has a child, 422 for a key both set and removed.
			r = n.do(t, "DELETE", p+"/namespaces/"+root, nil)
			assert.Equal(t, 409, r.status)
			assert.Equal(t, "NamespaceNotEmptyException", r.errorType(t))
			r = n.do(t, "POST", p+"/namespaces/"+root+"/properties", map[string]any{"removals": []string{"a"}, "updates": map[string]string{"a": "2"}})
			assert.Equal(t, 422, r.status)
			assert.Equal(t, "UnprocessableEntityException", r.errorType(t))
			r = n.do(t, "POST", p+"/namespaces/"+root+"/properties", map[string]any{"removals": []string{"a", "zz", "a"}, "updates": map[string]string{"b": "2"}})
			require.Equal(t, 200, r.status)
			assert.Equal(t, map[string]any{"updated": []any{"b"}, "removed": []any{"a"}, "missing": []any{"zz"}}, r.json(t))

			assert.Equal(t, 204, n.do(t, "DELETE", p+"/namespaces/"+root+"%1Fchild", nil).status)
			assert.Equal(t, 204, n.do(t, "DELETE", p+"/namespaces/"+root, nil).status)
			r = n.do(t, "DELETE", p+"/namespaces/"+root, nil)
			assert.Equal(t, 404, r.status)
			assert.Equal(t, "NoSuchNamespaceException", r.errorType(t))
		})
	}
}

func (r response) errorStatus(t *testing.T) int {
	t.Helper()
	r.errorType(t)
	return r.status
}

func TestPagination(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"p"}}).status)
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/p/tables", withName(name)).status)
	}
	var got []string
	// Without a pageToken, every result at once, whatever the size (the
	// spec's PageToken): a client that does not follow tokens sees all.
	r := n.do(t, "GET", "/v1/floe/namespaces/p/tables?pageSize=2", nil)
	require.Equal(t, 200, r.status)
	assert.Len(t, r.json(t)["identifiers"], 5)
	assert.Nil(t, r.json(t)["next-page-token"])
	path := "/v1/floe/namespaces/p/tables?pageSize=2&pageToken="
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		r := n.do(t, "GET", path, nil)
		require.Equal(t, 200, r.status)
		body := r.json(t)
		for _, id := range body["identifiers"].([]any) {
			got = append(got, id.(map[string]any)["name"].(string))
		}
		tok, ok := body["next-page-token"].(string)
		if !ok {
			break
		}
		path = "/v1/floe/namespaces/p/tables?pageSize=2&pageToken=" + tok
	}
	assert.Equal(t, []string{"a", "b", "c", "d", "e"}, got)
	assert.Equal(t, 400, n.do(t, "GET", "/v1/namespaces/p/tables?pageSize=0", nil).errorStatus(t))
	assert.Equal(t, 400, n.do(t, "GET", "/v1/namespaces/p/tables?pageSize=-99999999999999999999", nil).errorStatus(t))
	// A positive integer past the int range is as large a page as any.
	r = n.do(t, "GET", "/v1/namespaces/p/tables?pageSize=99999999999999999999&pageToken=", nil)
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Len(t, r.json(t)["identifiers"], 5)
	assert.Equal(t, 400, n.do(t, "GET", "/v1/namespaces/p/tables?pageToken=***", nil).errorStatus(t))
	// Tokens that decode, but to no name a page could end with.
	for _, tok := range []string{"zzzz", "_w", "AA"} {
		assert.Equal(t, 400, n.do(t, "GET", "/v1/namespaces/p/tables?pageToken="+tok, nil).errorStatus(t), tok)
		assert.Equal(t, 400, n.do(t, "GET", "/v1/namespaces?pageToken="+tok, nil).errorStatus(t), tok)
	}
}

func TestTableLifecycle(t *testing.T) {
	ctx := context.Background()
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"b"}}).status)
	r := n.do(t, "POST", "/v1/floe/namespaces/a/tables", withName("t"))
	require.Equal(t, 200, r.status, "%s", r.body)
	loc := r.json(t)["metadata-location"].(string)
	assert.Contains(t, loc, n.warehouse+"/a/t/metadata/00000-")
	r = n.do(t, "POST", "/v1/floe/namespaces/a/tables", withName("t"))
	assert.Equal(t, 409, r.status)
	assert.Equal(t, "AlreadyExistsException", r.errorType(t))

	// ETag and If-None-Match.
	r = n.do(t, "GET", "/v1/floe/namespaces/a/tables/t", nil)
	require.Equal(t, 200, r.status)
	etag := r.header.Get("ETag")
	require.NotEmpty(t, etag)
	assert.Equal(t, 304, n.do(t, "GET", "/v1/floe/namespaces/a/tables/t", nil, "If-None-Match", etag).status)
	assert.Equal(t, 204, n.do(t, "HEAD", "/v1/floe/namespaces/a/tables/t", nil).status)
	r = n.do(t, "GET", "/v1/floe/namespaces/a/tables/missing", nil)
	assert.Equal(t, "NoSuchTableException", r.errorType(t))

	// A commit changes the ETag; snapshots=refs answers too.
	r = n.do(t, "POST", "/v1/floe/namespaces/a/tables/t", map[string]any{
		"requirements": []any{},
		"updates": []any{map[string]any{"action": "set-properties", "updates": map[string]string{
			"write.metadata.delete-after-commit.enabled": "true", "write.metadata.previous-versions-max": "1"}}},
	})
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, 200, n.do(t, "GET", "/v1/floe/namespaces/a/tables/t", nil, "If-None-Match", etag).status)
	assert.Equal(t, 200, n.do(t, "GET", "/v1/floe/namespaces/a/tables/t?snapshots=refs", nil).status)
	// With previous-versions-max=1 and delete-after-commit, a second commit
	// drops the first file from the log and from storage.
	for i := range 2 {
		r = n.do(t, "POST", "/v1/floe/namespaces/a/tables/t", map[string]any{
			"requirements": []any{},
			"updates":      []any{map[string]any{"action": "set-properties", "updates": map[string]string{"i": string(rune('0' + i))}}},
		})
		require.Equal(t, 200, r.status, "%s", r.body)
	}
	_, err := n.objects.Read(ctx, loc)
	assert.Error(t, err, "expired metadata file should be deleted")
	assert.Len(t, r.json(t)["metadata"].(map[string]any)["metadata-log"], 1)

	// Unknown update and requirement types are 400 and change nothing.
	before := n.state(t)
	for _, body := range []string{
		`{"requirements":[],"updates":[{"action":"frobnicate"}]}`,
		`{"requirements":[{"type":"assert-nothing"}],"updates":[]}`,
		`{"requirements":[],"updates":[{"action":"set-current-schema","schema-id":42}]}`,
		`null`,
		`[]`,
	} {
		r = n.do(t, "POST", "/v1/floe/namespaces/a/tables/t", body)
		assert.Equal(t, 400, r.status, "%s -> %s", body, r.body)
		assert.Equal(t, "BadRequestException", r.errorType(t))
	}
	// Absent lists are empty, as Java's parser reads them: nothing to do.
	r = n.do(t, "POST", "/v1/floe/namespaces/a/tables/t", `{"updates":[]}`)
	assert.Equal(t, 200, r.status, "%s", r.body)
	r = n.do(t, "POST", "/v1/floe/namespaces/a/tables/t", `{"requirements":[{"type":"assert-current-schema-id","current-schema-id":7}],"updates":[]}`)
	assert.Equal(t, 409, r.status)
	assert.Equal(t, "CommitFailedException", r.errorType(t))
	assert.Equal(t, before, n.state(t))

	// Rename across namespaces.
	r = n.do(t, "POST", "/v1/floe/tables/rename", map[string]any{
		"source": map[string]any{"namespace": []string{"a"}, "name": "t"}, "destination": map[string]any{"namespace": []string{"b"}, "name": "u"}})
	require.Equal(t, 204, r.status, "%s", r.body)
	assert.Equal(t, 404, n.do(t, "HEAD", "/v1/floe/namespaces/a/tables/t", nil).status)
	r = n.do(t, "GET", "/v1/floe/namespaces/b/tables/u", nil)
	require.Equal(t, 200, r.status)
	current := r.json(t)["metadata-location"].(string)
	r = n.do(t, "POST", "/v1/tables/rename", map[string]any{
		"source": map[string]any{"namespace": []string{"a"}, "name": "t"}, "destination": map[string]any{"namespace": []string{"b"}, "name": "v"}})
	assert.Equal(t, "NoSuchTableException", r.errorType(t))

	// Unregister, then register again; register without overwrite is 409.
	r = n.do(t, "POST", "/v1/floe/namespaces/b/tables/u/unregister", nil)
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, current, r.json(t)["metadata-location"])
	_, err = n.objects.Read(ctx, current)
	require.NoError(t, err, "unregister must not touch files")
	r = n.do(t, "POST", "/v1/floe/namespaces/a/register", map[string]any{"name": "back", "metadata-location": current})
	require.Equal(t, 200, r.status, "%s", r.body)
	r = n.do(t, "POST", "/v1/floe/namespaces/a/register", map[string]any{"name": "back", "metadata-location": current})
	assert.Equal(t, 409, r.status)
	r = n.do(t, "POST", "/v1/floe/namespaces/a/register", map[string]any{"name": "back", "metadata-location": current, "overwrite": true})
	assert.Equal(t, 200, r.status)

	// Metrics reports are accepted.
	r = n.do(t, "POST", "/v1/floe/namespaces/a/tables/back/metrics", map[string]any{
		"report-type": "commit-report", "table-name": "a.back", "snapshot-id": 1, "sequence-number": 1, "operation": "append", "metrics": map[string]any{}})
	assert.Equal(t, 204, r.status, "%s", r.body)
	// Also for a table a create transaction has staged but not created yet
	// (Java reports its commits first), and of a type this release does not
	// know, as Java's reference server accepts them.
	r = n.do(t, "POST", "/v1/floe/namespaces/a/tables/staged/metrics", map[string]any{
		"report-type": "commit-report", "table-name": "a.staged", "snapshot-id": 1, "sequence-number": 1, "operation": "append", "metrics": map[string]any{}})
	assert.Equal(t, 204, r.status, "%s", r.body)
	r = n.do(t, "POST", "/v1/floe/namespaces/a/tables/back/metrics", map[string]any{"report-type": "future-report", "table-name": "a.back"})
	assert.Equal(t, 204, r.status, "%s", r.body)

	// Drop without purge leaves files; drop with purge deletes them.
	require.Equal(t, 204, n.do(t, "DELETE", "/v1/floe/namespaces/a/tables/back", nil).status)
	_, err = n.objects.Read(ctx, current)
	require.NoError(t, err)
	assert.Equal(t, 404, n.do(t, "DELETE", "/v1/floe/namespaces/a/tables/back", nil).status)
}

func TestDropWithPurgeDeletesOnlyThatTable(t *testing.T) {
	forEachWarehouse(t, func(t *testing.T, wh warehouse) {
		ctx := context.Background()
		n := startNode(t, wh)
		cat := n.catalog(t)
		require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"db"}, nil))
		var files = map[string][]string{}
		for _, name := range []string{"gone", "gone2", "kept"} {
			tbl, err := cat.CreateTable(ctx, table.Identifier{"db", name}, rowSchema)
			require.NoError(t, err)
			f := tbl.Location() + "/data/f.parquet"
			writeParquet(t, tbl, f, 1)
			tx := tbl.NewTransaction()
			require.NoError(t, tx.AddFiles(ctx, []string{f}, nil, false))
			_, err = tx.Commit(ctx)
			require.NoError(t, err)
			require.NoError(t, n.objects.List(ctx, tbl.Location()+"/", func(uri string) error {
				files[name] = append(files[name], uri)
				return nil
			}))
			require.GreaterOrEqual(t, len(files[name]), 5, "data, manifest, manifest list, 2 metadata files")
		}
		r := n.do(t, "DELETE", "/v1/floe/namespaces/db/tables/gone?purgeRequested=true", nil)
		require.Equal(t, 204, r.status, "%s", r.body)
		for _, f := range files["gone"] {
			_, err := n.objects.Read(ctx, f)
			assert.Error(t, err, "%s should be deleted", f)
		}
		for _, f := range append(files["gone2"], files["kept"]...) {
			_, err := n.objects.Read(ctx, f)
			assert.NoError(t, err, "%s must survive", f)
		}
		assert.Equal(t, 400, n.do(t, "DELETE", "/v1/floe/namespaces/db/tables/kept?purgeRequested=maybe", nil).status)
	})
}

func TestBadInputChangesNothing(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("t")).status)
	long := strings.Repeat("x", 256)
	outside := withName("outside")
	outside["location"] = "file:///somewhere/else"
	if dir, err := os.MkdirTemp("", "floe-outside"); err == nil {
		outside["location"] = "file://" + dir
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	cases := []struct {
		name, method, path string
		body               any
		status             int
		typ                string
	}{
		{"malformed json", "POST", "/v1/namespaces", `{"namespace": [`, 400, "BadRequestException"},
		{"empty body", "POST", "/v1/namespaces", ``, 400, "BadRequestException"},
		{"wrong field type", "POST", "/v1/namespaces", `{"namespace": "a"}`, 400, "BadRequestException"},
		{"wrong property type", "POST", "/v1/namespaces", `{"namespace": ["q"], "properties": {"a": 1}}`, 400, "BadRequestException"},
		{"null namespace property", "POST", "/v1/namespaces", `{"namespace": ["q"], "properties": {"a": null}}`, 400, "BadRequestException"},
		{"null namespace property update", "POST", "/v1/namespaces/a/properties", `{"updates": {"a": null}}`, 400, "BadRequestException"},
		{"null table property", "POST", "/v1/namespaces/a/tables", `{"name":"np","schema":{"type":"struct","fields":[]},"properties":{"k":null}}`, 400, "BadRequestException"},
		{"empty namespace", "POST", "/v1/namespaces", `{"namespace": []}`, 400, "BadRequestException"},
		{"empty level", "POST", "/v1/namespaces", `{"namespace": [""]}`, 400, "BadRequestException"},
		{"over-long name", "POST", "/v1/namespaces", `{"namespace": ["` + long + `"]}`, 400, "BadRequestException"},
		{"separator in name", "POST", "/v1/namespaces", `{"namespace": ["a.b"]}`, 400, "BadRequestException"},
		{"control character", "POST", "/v1/namespaces", `{"namespace": ["a\u0001b"]}`, 400, "BadRequestException"},
		{"invalid UTF-8", "POST", "/v1/namespaces", "{\"namespace\": [\"\xff\xfe\"]}", 400, "BadRequestException"},
		{"half a surrogate pair", "POST", "/v1/namespaces", `{"namespace": ["a\ud800"]}`, 400, "BadRequestException"},
		{"unit separator", "POST", "/v1/namespaces", `{"namespace": ["a\u001fb"]}`, 400, "BadRequestException"},
		{"empty table name", "POST", "/v1/namespaces/a/tables", withName(""), 400, "BadRequestException"},
		{"control char table", "POST", "/v1/namespaces/a/tables", withName("t\nx"), 400, "BadRequestException"},
		{"long table name", "POST", "/v1/namespaces/a/tables", withName(long), 400, "BadRequestException"},
		{"dot-dot table name", "POST", "/v1/namespaces/a/tables", withName(".."), 400, "BadRequestException"},
		{"slash in a table name", "POST", "/v1/namespaces/a/tables", withName("sq/x"), 400, "BadRequestException"},
		{"slash in a namespace level", "POST", "/v1/namespaces", `{"namespace": ["a/x"]}`, 400, "BadRequestException"},
		{"rename to a slashed name", "POST", "/v1/tables/rename", `{"source": {"namespace": ["a"], "name": "t"}, "destination": {"namespace": ["a"], "name": "t/x"}}`, 400, "BadRequestException"},
		{"slash in a view name", "POST", "/v1/namespaces/a/views", `{"name": "v/x", "schema": {"type": "struct", "fields": []}, "view-version": {"version-id": 1, "timestamp-ms": 1, "schema-id": 0, "summary": {}, "representations": [], "default-namespace": ["a"]}, "properties": {}}`, 400, "BadRequestException"},
		{"schema nested too deep", "POST", "/v1/namespaces/a/tables", deepSchema(300), 400, "BadRequestException"},
		{"identifier field missing", "POST", "/v1/namespaces/a/tables", withSchemaAndSpec(`"identifier-field-ids":[99],`, ``), 400, "BadRequestException"},
		{"identifier field optional double", "POST", "/v1/namespaces/a/tables", withSchemaAndSpec(`"identifier-field-ids":[3],`, ``), 400, "BadRequestException"},
		{"identifier field in a list", "POST", "/v1/namespaces/a/tables", withSchemaAndSpec(`"identifier-field-ids":[5],`, ``), 400, "BadRequestException"},
		{"year of a string", "POST", "/v1/namespaces/a/tables", withSchemaAndSpec(``, `{"source-id":2,"field-id":1000,"name":"p","transform":"year"}`), 400, "BadRequestException"},
		{"negative bucket", "POST", "/v1/namespaces/a/tables", withSchemaAndSpec(``, `{"source-id":1,"field-id":1000,"name":"p","transform":"bucket[-3]"}`), 400, "BadRequestException"},
		{"partition named as another column", "POST", "/v1/namespaces/a/tables", withSchemaAndSpec(``, `{"source-id":1,"field-id":1000,"name":"s","transform":"bucket[4]"}`), 400, "BadRequestException"},
		{"partition of a missing column", "POST", "/v1/namespaces/a/tables", withSchemaAndSpec(``, `{"source-id":42,"field-id":1000,"name":"p","transform":"identity"}`), 400, "BadRequestException"},
		{"partition of two columns", "POST", "/v1/namespaces/a/tables", withSchemaAndSpec(``, `{"source-ids":[1,2],"field-id":1000,"name":"p","transform":"bucket[4]"}`), 400, "BadRequestException"},
		{"add-spec of two columns", "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[{"action":"add-spec","spec":{"spec-id":1,"fields":[{"source-ids":[1,1],"field-id":1001,"name":"q","transform":"bucket[8]"}]}}]}`, 400, "BadRequestException"},
		{"partition of a struct", "POST", "/v1/namespaces/a/tables", withSchemaAndSpec(``, `{"source-id":6,"field-id":1000,"name":"p","transform":"identity"}`), 400, "BadRequestException"},
		{"staged create completed as dot-dot", "POST", "/v1/transactions/commit", `{"table-changes":[{"identifier":{"namespace":["a"],"name":".."},"requirements":[{"type":"assert-create"}],"updates":[` +
			`{"action":"upgrade-format-version","format-version":2},{"action":"add-schema","schema":{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"x","type":"long","required":true}]}},` +
			`{"action":"set-current-schema","schema-id":-1},{"action":"add-spec","spec":{"spec-id":0,"fields":[]}},{"action":"set-default-spec","spec-id":-1},` +
			`{"action":"add-sort-order","sort-order":{"order-id":0,"fields":[]}},{"action":"set-default-sort-order","sort-order-id":-1},` +
			`{"action":"set-location","location":"` + n.warehouse + `/a/dotdot"}]}]}`, 400, "BadRequestException"},
		{"data path outside the table", "POST", "/v1/namespaces/a/tables", `{"name":"wp","schema":{"type":"struct","fields":[]},"properties":{"write.data.path":"file:///etc"}}`, 400, "BadRequestException"},
		{"data path escaping the table through a percent-escape", "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[{"action":"set-properties","updates":{"write.data.path":"` + n.warehouse + `/a/t/..%2F..%2Fu"}}]}`, 400, "BadRequestException"},
		{"commit with neither requirements nor updates, but properties", "POST", "/v1/namespaces/a/tables/t", `{"properties":{"k":"v"}}`, 400, "BadRequestException"},
		{"commit with null requirements and updates, and properties", "POST", "/v1/namespaces/a/tables/t", `{"requirements":null,"updates":null,"properties":{"k":"v"}}`, 400, "BadRequestException"},
		{"null table property update", "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[{"action":"set-properties","updates":{"k":null}}]}`, 400, "BadRequestException"},
		{"set-properties without updates", "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[{"action":"set-properties"}]}`, 400, "BadRequestException"},
		{"set-properties with null updates", "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[{"action":"set-properties","updates":null}]}`, 400, "BadRequestException"},
		{"remove-properties with null removals", "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[{"action":"remove-properties","removals":null}]}`, 400, "BadRequestException"},
		{"null property removal", "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[{"action":"remove-properties","removals":[null]}]}`, 400, "BadRequestException"},
		{"metadata path set outside the table", "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[{"action":"set-properties","updates":{"write.metadata.path":"file:///tmp/outside"}}]}`, 400, "BadRequestException"},
		{"add-schema with a missing identifier field", "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[{"action":"add-schema","schema":{"type":"struct","schema-id":1,"identifier-field-ids":[77],"fields":[{"id":1,"name":"id","type":"long","required":true}]}}]}`, 400, "BadRequestException"},
		{"add-spec with year of a long", "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[{"action":"add-spec","spec":{"spec-id":1,"fields":[{"source-id":1,"field-id":1001,"name":"y","transform":"hour"}]}}]}`, 400, "BadRequestException"},
		{"dot namespace level", "POST", "/v1/namespaces", `{"namespace": ["a", "."]}`, 400, "BadRequestException"},
		{"rename to dot-dot", "POST", "/v1/tables/rename", `{"source": {"namespace": ["a"], "name": "t"}, "destination": {"namespace": ["a"], "name": ".."}}`, 400, "BadRequestException"},
		{"rename into a dot level", "POST", "/v1/tables/rename", `{"source": {"namespace": ["a"], "name": "t"}, "destination": {"namespace": [".."], "name": "z"}}`, 400, "BadRequestException"},
		{"register as dot", "POST", "/v1/namespaces/a/register", `{"name":".","metadata-location":"file:///etc/passwd"}`, 400, "BadRequestException"},
		{"view identifier field missing", "POST", "/v1/namespaces/a/views", `{"name": "vv", "schema": {"type": "struct", "identifier-field-ids": [9], "fields": [{"id": 1, "name": "x", "type": "long", "required": true}]}, "view-version": {"version-id": 1, "timestamp-ms": 1, "schema-id": 0, "summary": {}, "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}], "default-namespace": ["a"]}, "properties": {}}`, 400, "BadRequestException"},
		{"dot-dot view name", "POST", "/v1/namespaces/a/views", `{"name": "..", "schema": {"type": "struct", "fields": []}, "view-version": {"version-id": 1, "timestamp-ms": 1, "schema-id": 0, "summary": {}, "representations": [], "default-namespace": ["a"]}, "properties": {}}`, 400, "BadRequestException"},
		{"no schema", "POST", "/v1/namespaces/a/tables", `{"name": "x"}`, 400, "BadRequestException"},
		{"bad schema", "POST", "/v1/namespaces/a/tables", `{"name": "x", "schema": {"type": "struct", "fields": [{"id": 1}]}}`, 400, "BadRequestException"},
		{"location outside warehouse", "POST", "/v1/namespaces/a/tables", outside, 400, "BadRequestException"},
		{"empty level in path", "GET", "/v1/namespaces/a%1F%1Fb", nil, 400, "BadRequestException"},
		{"unknown prefix", "GET", "/v1/other/namespaces", nil, 404, "NoSuchWarehouseException"},
		{"table in missing namespace", "POST", "/v1/namespaces/zz/tables", withName("x"), 404, "NoSuchNamespaceException"},
		{"register outside warehouse", "POST", "/v1/namespaces/a/register", `{"name":"r","metadata-location":"file:///etc/passwd"}`, 400, "BadRequestException"},
		{"register missing file", "POST", "/v1/namespaces/a/register", map[string]any{"name": "r", "metadata-location": n.warehouse + "/a/nope/metadata/00000-x.metadata.json"}, 400, "BadRequestException"},
		{"rename without source", "POST", "/v1/tables/rename", `{"destination": {"namespace": ["a"], "name": "z"}}`, 400, "BadRequestException"},
		{"transaction without identifier", "POST", "/v1/transactions/commit", `{"table-changes": [{"requirements": [], "updates": []}]}`, 400, "BadRequestException"},
		{"empty transaction", "POST", "/v1/transactions/commit", `{"table-changes": []}`, 400, "BadRequestException"},
		{"commit identifier mismatch", "POST", "/v1/namespaces/a/tables/t", `{"identifier": {"namespace": ["a"], "name": "other"}, "requirements": [], "updates": []}`, 400, "BadRequestException"},
		{"snapshot without a manifest list", "POST", "/v1/namespaces/a/tables/t", snapshotUpdate(7, `"summary":{"operation":"append"}`), 400, "BadRequestException"},
		{"branch keeping 0 snapshots", "POST", "/v1/namespaces/a/tables/t", refUpdate(`"type":"branch","min-snapshots-to-keep":0`), 400, "BadRequestException"},
		{"branch with a negative snapshot age", "POST", "/v1/namespaces/a/tables/t", refUpdate(`"type":"branch","max-snapshot-age-ms":-1`), 400, "BadRequestException"},
		{"ref with a negative age", "POST", "/v1/namespaces/a/tables/t", refUpdate(`"type":"tag","max-ref-age-ms":-1`), 400, "BadRequestException"},
		{"tag keeping snapshots", "POST", "/v1/namespaces/a/tables/t", refUpdate(`"type":"tag","min-snapshots-to-keep":2`), 400, "BadRequestException"},
		{"statistics without path or blobs", "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[{"action":"set-statistics","statistics":{"snapshot-id":1}}]}`, 400, "BadRequestException"},
		{"field id beyond 32 bits", "POST", "/v1/namespaces/a/tables/t", addSchema(`{"id":3000000000,"name":"big","type":"long","required":false}`), 400, "BadRequestException"},
		{"fixed length beyond 32 bits", "POST", "/v1/namespaces/a/tables/t", addSchema(`{"id":9,"name":"big","type":"fixed[3000000000]","required":false}`), 400, "BadRequestException"},
		{"empty struct hides the last column id", "POST", "/v1/namespaces/a/tables/t", addSchema(`{"id":10,"name":"e","type":{"type":"struct","fields":[]},"required":false}`), 400, "BadRequestException"},
		{"location with a query", "POST", "/v1/namespaces/a/tables", withLocation("q", n.warehouse+"/a/q?x=1"), 400, "BadRequestException"},
		{"location with a fragment", "POST", "/v1/namespaces/a/tables", withLocation("f", n.warehouse+"/a/f#x"), 400, "BadRequestException"},
		{"location with a percent-escape", "POST", "/v1/namespaces/a/tables", withLocation("e", n.warehouse+"/a/e%2Fdata"), 400, "BadRequestException"},
		{"location with an empty segment", "POST", "/v1/namespaces/a/tables", withLocation("ds", n.warehouse+"/a//ds"), 400, "BadRequestException"},
		{"location with a tab PyIceberg deletes", "POST", "/v1/namespaces/a/tables", withLocation("tab", n.warehouse+"/a/t\t"), 400, "BadRequestException"},
		{"location with an upper-case scheme", "POST", "/v1/namespaces/a/tables", withLocation("upper", "FILE"+strings.TrimPrefix(n.warehouse, "file")+"/a/upper"), 400, "BadRequestException"},
		{"location with a line feed", "POST", "/v1/namespaces/a/tables", withLocation("lf", n.warehouse+"/a/lf\n"), 400, "BadRequestException"},
		{"location ending in a space", "POST", "/v1/namespaces/a/tables", withLocation("sp", n.warehouse+"/a/sp "), 400, "BadRequestException"},
		{"data path escaping through a tab", "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[{"action":"set-properties","updates":{"write.data.path":"` + n.warehouse + `/a/t/.\t./u"}}]}`, 400, "BadRequestException"},
		{"set-location with an empty segment", "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[{"action":"set-location","location":"` + n.warehouse + `/a//t2"}]}`, 400, "BadRequestException"},
		{"data path with an empty segment", "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[{"action":"set-properties","updates":{"write.data.path":"` + n.warehouse + `/a/t//data"}}]}`, 400, "BadRequestException"},
		{"name that puts a query in its default location", "POST", "/v1/namespaces/a/tables", withName("t?x"), 400, "BadRequestException"},
		{"set-location with a query", "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[{"action":"set-location","location":"` + n.warehouse + `/a/t2?x"}]}`, 400, "BadRequestException"},
		{"reassign a table's uuid", "POST", "/v1/namespaces/a/tables/t", `{"requirements": [], "updates": [{"action": "assign-uuid", "uuid": "22222222-2222-2222-2222-222222222222"}]}`, 400, "BadRequestException"},
		{"commit identifier mismatch behind a leading level", "POST", "/v1/namespaces/a/tables/t", `{"identifier": {"namespace": ["cat", "b"], "name": "t"}, "requirements": [], "updates": []}`, 400, "BadRequestException"},
		{"commit identifier with the route's namespace as its head", "POST", "/v1/namespaces/a/tables/t", `{"identifier": {"namespace": ["a", "x"], "name": "t"}, "requirements": [], "updates": []}`, 400, "BadRequestException"},
		{"metrics report without a type", "POST", "/v1/namespaces/a/tables/t/metrics", `{"table-name": "a.t"}`, 400, "BadRequestException"},
	}
	before := n.state(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := n.do(t, c.method, c.path, c.body)
			assert.Equal(t, c.status, r.status, "%s", r.body)
			assert.Equal(t, c.typ, r.errorType(t))
		})
	}
	// Registering into a missing namespace names the namespace, even for a
	// file of a location another table owns.
	owned := n.do(t, "GET", "/v1/namespaces/a/tables/t", nil).json(t)["metadata-location"].(string)
	reg := n.do(t, "POST", "/v1/namespaces/zz/register", map[string]any{"name": "r", "metadata-location": owned})
	assert.Equal(t, 404, reg.status, "%s", reg.body)
	assert.Equal(t, "NoSuchNamespaceException", reg.errorType(t))
	// Answers the spec does not list for these routes.
	r := n.doRaw(t, "POST", "/v1/namespaces", `{"namespace": ["big"], "properties": {"k": "`+strings.Repeat("v", 2<<20)+`"}}`)
	assert.Equal(t, 413, r.status)
	assert.Equal(t, "BadRequestException", r.errorType(t))
	r = n.doRaw(t, "PUT", "/v1/namespaces", `{}`)
	assert.Equal(t, 405, r.status)
	assert.Equal(t, "GET, HEAD, POST", r.header.Get("Allow"))
	r = n.doRaw(t, "PATCH", "/v1/namespaces/a/tables/t", `{}`)
	assert.Equal(t, 405, r.status)
	assert.Equal(t, "DELETE, GET, HEAD, POST", r.header.Get("Allow"))
	for _, enc := range []string{"gzip", "br", "identity, deflate"} {
		r = n.doRaw(t, "POST", "/v1/namespaces", `{"namespace": ["enc"]}`, "Content-Encoding", enc)
		assert.Equal(t, 415, r.status, enc)
		assert.Equal(t, "UnsupportedMediaTypeException", r.errorType(t), enc)
	}
	assert.Equal(t, before, n.state(t))
}

// deepSchema is a createTable body whose one column is a list of lists,
// depth lists deep.
func deepSchema(depth int) string {
	typ := `"long"`
	for i := range depth {
		typ = fmt.Sprintf(`{"type":"list","element-id":%d,"element":%s,"element-required":false}`, 1000+i, typ)
	}
	return `{"name":"deep","schema":{"type":"struct","fields":[{"id":1,"name":"c","required":false,"type":` + typ + `}]}}`
}

// A schema nested deep but within the bound is served.
func TestDeepButBoundedSchemaIsAccepted(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, http.StatusOK, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	r := n.do(t, "POST", "/v1/namespaces/a/tables", json.RawMessage(deepSchema(60)))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
}

// withSchemaAndSpec is a createTable body for table "x" whose schema is
// id long (1, required), s string (2), d double (3, optional), l list of
// long (4, element 5, required), st struct (6) of n int (7); schemaExtra
// goes into the schema object, and specField, when not empty, is the
// partition spec's one field.
func withSchemaAndSpec(schemaExtra, specField string) string {
	spec := ``
	if specField != "" {
		spec = `,"partition-spec":{"spec-id":0,"fields":[` + specField + `]}`
	}
	return `{"name":"x","schema":{"type":"struct","schema-id":0,` + schemaExtra + `"fields":[` +
		`{"id":1,"name":"id","type":"long","required":true},` +
		`{"id":2,"name":"s","type":"string","required":true},` +
		`{"id":3,"name":"d","type":"double","required":false},` +
		`{"id":4,"name":"l","type":{"type":"list","element-id":5,"element":"long","element-required":true},"required":true},` +
		`{"id":6,"name":"st","type":{"type":"struct","fields":[{"id":7,"name":"n","type":"int","required":true}]},"required":true}` +
		`]}` + spec + `}`
}

// The same shapes, valid, are created.
func TestValidSchemasAndSpecsAreAccepted(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, http.StatusOK, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	wh := n.warehouse
	for i, body := range []string{
		strings.Replace(withSchemaAndSpec(``, ``), `"name":"x",`, `"name":"x","properties":{"write.data.path":"`+wh+`/a/ok0/data-elsewhere","write.metadata.path":"`+wh+`/a/ok0/meta"},`, 1),
		withSchemaAndSpec(`"identifier-field-ids":[1,2,7],`, `{"source-id":1,"field-id":1000,"name":"id_bucket","transform":"bucket[16]"}`),
		withSchemaAndSpec(``, `{"source-id":2,"field-id":1000,"name":"s","transform":"identity"}`),
		withSchemaAndSpec(``, `{"source-id":7,"field-id":1000,"name":"n_trunc","transform":"truncate[10]"}`),
	} {
		body = strings.Replace(body, `"name":"x"`, fmt.Sprintf(`"name":"ok%d"`, i), 1)
		r := n.do(t, "POST", "/v1/namespaces/a/tables", json.RawMessage(body))
		require.Equal(t, http.StatusOK, r.status, "%d: %s", i, r.body)
	}

	// A v1 table drops its partition field s: Java keeps it as a void
	// placeholder under the column's name, whose source may be dropped too.
	v1 := strings.Replace(withSchemaAndSpec(``, `{"source-id":2,"field-id":1000,"name":"s","transform":"identity"}`),
		`"name":"x",`, `"name":"v1","properties":{"format-version":"1"},`, 1)
	require.Equal(t, http.StatusOK, n.do(t, "POST", "/v1/namespaces/a/tables", json.RawMessage(v1)).status)
	r := n.do(t, "POST", "/v1/namespaces/a/tables/v1", json.RawMessage(`{"requirements":[],"updates":[
		{"action":"add-spec","spec":{"spec-id":1,"fields":[{"source-id":2,"field-id":1000,"name":"s","transform":"void"},{"source-id":1,"field-id":1001,"name":"id_b","transform":"bucket[8]"}]}},
		{"action":"set-default-spec","spec-id":-1}]}`))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
}

// A staged create completed without an upgrade-format-version update is
// built at format version 2, as Java's reference catalog builds it; with
// one, at the version it names.
func TestStagedCreateFormatVersion(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	const schema = `{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"x","type":"long","required":true}]}`
	for _, c := range []struct {
		name    string
		upgrade string
		want    float64
	}{
		{"none", "", 2},
		{"v1", `{"action":"upgrade-format-version","format-version":1},`, 1},
		{"v2", `{"action":"upgrade-format-version","format-version":2},`, 2},
	} {
		body := `{"requirements":[{"type":"assert-create"}],"updates":[` + c.upgrade +
			`{"action":"add-schema","schema":` + schema + `},{"action":"set-current-schema","schema-id":-1},` +
			`{"action":"add-spec","spec":{"spec-id":0,"fields":[]}},{"action":"set-default-spec","spec-id":-1},` +
			`{"action":"add-sort-order","sort-order":{"order-id":0,"fields":[]}},{"action":"set-default-sort-order","sort-order-id":-1}]}`
		r := n.do(t, "POST", "/v1/namespaces/a/tables/staged_"+c.name, body)
		require.Equal(t, 200, r.status, "%s: %s", c.name, r.body)
		meta, _ := r.json(t)["metadata"].(map[string]any)
		assert.Equal(t, c.want, meta["format-version"], c.name)
	}
}

// snapshotUpdate is a commit adding snapshot id with the given fields
// besides its id, sequence number and time.
func snapshotUpdate(id int, fields string) string {
	return fmt.Sprintf(`{"requirements":[],"updates":[{"action":"add-snapshot","snapshot":{"snapshot-id":%d,"sequence-number":1,"timestamp-ms":%d,%s}}]}`,
		id, time.Now().UnixMilli(), fields)
}

// refUpdate is a commit adding a snapshot and a ref to it with fields.
func refUpdate(fields string) string {
	return fmt.Sprintf(`{"requirements":[],"updates":[{"action":"add-snapshot","snapshot":{"snapshot-id":8,"sequence-number":1,"timestamp-ms":%d,`+
		`"manifest-list":"file:///tmp/snap-8.avro","summary":{"operation":"append"}}},{"action":"set-snapshot-ref","ref-name":"r","snapshot-id":8,%s}]}`,
		time.Now().UnixMilli(), fields)
}

// addSchema is a commit adding a schema of the columns withName creates
// and one more.
func addSchema(field string) string {
	return `{"requirements":[],"updates":[{"action":"add-schema","schema":{"type":"struct","schema-id":1,"fields":[` +
		`{"id":1,"name":"id","type":"long","required":true},` + field + `]}}]}`
}

// A snapshot may name a manifest list anywhere. A purge does not read one
// outside the allowed locations (the warehouse here): the drop succeeds,
// the file is left alone, and nothing of its content reaches the answer.
func TestPurgeDoesNotReadOutsideTheAllowedLocations(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("t")).status)
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("root:x:0:0:secret"), 0o600))
	r := n.do(t, "POST", "/v1/namespaces/a/tables/t", snapshotUpdate(7, `"manifest-list":"file://`+secret+`","summary":{"operation":"append"}`))
	require.Equal(t, 200, r.status, "%s", r.body)
	r = n.do(t, "DELETE", "/v1/namespaces/a/tables/t?purgeRequested=true", nil)
	assert.Equal(t, 204, r.status, "%s", r.body)
	assert.NotContains(t, string(r.body), "726f6f74")
	b, err := os.ReadFile(secret)
	require.NoError(t, err, "left in place")
	assert.Equal(t, "root:x:0:0:secret", string(b))
}

// A '%' that starts no percent-escape would make the default location no
// URI at all (iceberg-go's FileIO, through url.Parse, and Java's URI refuse
// it): a table named so, or in a namespace named so, is given a location
// by its creator. The same holds for '?' and '#' in a namespace level, and
// the refusal names the table, not only its name.
func TestNameThatMakesNoLocationNeedsOne(t *testing.T) {
	n := startNode(t, warehouses()[0])
	for _, ns := range []string{"a", "p%"} {
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{ns}}).status, ns)
	}
	// A namespace level holding '?' or '#', which makes none either, can
	// no longer be created through the API
	// (TestNewNamesThatEndAPathAreRefused), but one created before may
	// exist: it is put in the state directly.
	for _, ns := range []string{"q?x", "h#x"} {
		res, err := n.raft.Propose(context.Background(), fsm.CreateNamespace{Namespace: []string{ns}, AtMs: time.Now().UnixMilli()})
		require.NoError(t, err)
		require.Equal(t, fsm.StatusOK, res.Status, "%s: %s", ns, res.Message)
	}
	for _, c := range []struct{ ns, name string }{{"a", "growth_100%"}, {"a", "x%zz"}, {"q?x", "t"}, {"h#x", "t"}, {"p%", "t"}} {
		path := "/v1/namespaces/" + url.PathEscape(c.ns) + "/tables"
		r := n.do(t, "POST", path, withName(c.name))
		assert.Equal(t, 400, r.status, "%s.%s: %s", c.ns, c.name, r.body)
		assert.Contains(t, string(r.body), "table "+c.ns+"."+c.name+" has no default location", "%s", r.body)
		r = n.do(t, "POST", path, withLocation(c.name, n.warehouse+"/given/"+strings.NewReplacer("?", "q", "#", "h", "%", "p").Replace(c.ns+"-"+c.name)))
		assert.Equal(t, 200, r.status, "%s.%s with a location: %s", c.ns, c.name, r.body)
	}
	r := n.do(t, "POST", "/v1/namespaces/a/tables", withLocation("l", n.warehouse+"/a/50%"))
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "outside a percent-escape")
}

// A commit whose updates change nothing writes no new metadata version:
// the answer is the current metadata, as from Java's reference catalog.
// Its requirements are still checked.
func TestCommitThatChangesNothingWritesNothing(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	c := n.do(t, "POST", "/v1/namespaces/a/tables", withName("t"))
	require.Equal(t, 200, c.status, "%s", c.body)
	loc := c.json(t)["metadata-location"]
	uuid := c.json(t)["metadata"].(map[string]any)["table-uuid"].(string)
	for _, body := range []string{
		`{"requirements":[],"updates":[]}`,
		`{"requirements":[{"type":"assert-table-uuid","uuid":"` + uuid + `"}],"updates":[{"action":"set-current-schema","schema-id":0}]}`,
		// Removals of what the table does not have, as Java's builder
		// records no change for them.
		`{"requirements":[],"updates":[{"action":"remove-snapshots","snapshot-ids":[999]}]}`,
		`{"requirements":[],"updates":[{"action":"remove-statistics","snapshot-id":999}]}`,
		`{"requirements":[],"updates":[{"action":"remove-partition-statistics","snapshot-id":999}]}`,
		`{"requirements":[],"updates":[{"action":"remove-encryption-key","key-id":"k"}]}`,
		`{"requirements":[],"updates":[{"action":"remove-snapshot-ref","ref-name":"gone"}]}`,
	} {
		r := n.do(t, "POST", "/v1/namespaces/a/tables/t", body)
		require.Equal(t, 200, r.status, "%s: %s", body, r.body)
		assert.Equal(t, loc, r.json(t)["metadata-location"], body)
	}
	assert.Equal(t, 0, metadataLog(t, n, "a", "t"), "no new version")
	r := n.do(t, "POST", "/v1/namespaces/a/tables/t", `{"requirements":[{"type":"assert-current-schema-id","current-schema-id":7}],"updates":[]}`)
	assert.Equal(t, 409, r.status, "%s", r.body)
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", setProp("k", "v"))
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.NotEqual(t, loc, r.json(t)["metadata-location"], "a change still writes")

	// Under an Idempotency-Key it is proposed, so that its answer is
	// recorded: a retry is a replay, even once a requirement no longer holds.
	key := newKey(t)
	guarded := `{"requirements":[{"type":"assert-current-schema-id","current-schema-id":0}],"updates":[]}`
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", guarded, "Idempotency-Key", key)
	require.Equal(t, 200, r.status, "%s", r.body)
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[`+
		`{"action":"add-schema","schema":{"type":"struct","schema-id":1,"fields":[{"id":1,"name":"id","type":"long","required":true},{"id":2,"name":"x","type":"long","required":false}]}},`+
		`{"action":"set-current-schema","schema-id":-1}]}`)
	require.Equal(t, 200, r.status, "%s", r.body)
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", guarded, "Idempotency-Key", key)
	assert.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
}

// A ref removal names a ref the table does not have when it applies: it
// changes nothing, as in Java's builder, rather than a 400. Java sends it
// with no requirement (an expiry dropping an aged ref, DROP BRANCH or DROP
// TAG), so the second of two racing on the same ref failed.
func TestRemovingARefTheTableLacksChangesNothing(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("t")).status)
	r := n.do(t, "POST", "/v1/namespaces/a/tables/t", refUpdate(`"type":"tag"`))
	require.Equal(t, 200, r.status, "%s", r.body)
	removeTag := `{"requirements":[],"updates":[{"action":"remove-snapshot-ref","ref-name":"r"}]}`
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", removeTag)
	require.Equal(t, 200, r.status, "%s", r.body)
	removed := r.json(t)["metadata-location"]
	refs, _ := r.json(t)["metadata"].(map[string]any)["refs"].(map[string]any)
	assert.NotContains(t, refs, "r")
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", removeTag)
	require.Equal(t, 200, r.status, "removed again: %s", r.body)
	assert.Equal(t, removed, r.json(t)["metadata-location"], "no new version")

	// Within one commit: set, removed, removed again; and a ref that went
	// with the snapshot it pointed to.
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", `{"requirements":[],"updates":[
		{"action":"set-snapshot-ref","ref-name":"b","type":"branch","snapshot-id":8},
		{"action":"remove-snapshot-ref","ref-name":"b"},
		{"action":"remove-snapshot-ref","ref-name":"b"},
		{"action":"set-snapshot-ref","ref-name":"c","type":"tag","snapshot-id":8},
		{"action":"remove-snapshots","snapshot-ids":[8]},
		{"action":"remove-snapshot-ref","ref-name":"c"}]}`)
	require.Equal(t, 200, r.status, "%s", r.body)
	meta := r.json(t)["metadata"].(map[string]any)
	assert.Empty(t, meta["refs"])
	assert.Empty(t, meta["snapshots"])
}

// A purging drop of a table whose current metadata file the node holds
// parsed stamps the job with the first phase that has a file, so a small
// table's purge need not record its first phase. The stamp is checked
// against the file: a table with a snapshot starts at the data phase.
func TestPurgingDropStampsTheFirstPhase(t *testing.T) {
	ctx := context.Background()
	n := startNode(t, warehouses()[0])
	heartbeat := func(node string, features uint64) {
		res, err := n.raft.Propose(ctx, fsm.PurgeHeartbeat{Node: node, Slots: 1, Features: features})
		require.NoError(t, err)
		require.NoError(t, res.Err())
	}
	heartbeat("n1", fsm.PurgeFeatureFirstPhase) // this test's node runs no purge service of its own
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("empty")).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("changed")).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables/changed", setProp("k", "v")).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("full")).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables/full", snapshotUpdate(7, `"manifest-list":"`+n.warehouse+`/a/full/metadata/snap-7.avro","summary":{"operation":"append"}`)).status)

	// A table registered at a file whose name carries no UUID (a legacy
	// vN.metadata.json, a name another writer may reuse) is not judged.
	c := n.do(t, "POST", "/v1/namespaces/a/tables", withName("legacy"))
	require.Equal(t, 200, c.status, "%s", c.body)
	loc := c.json(t)["metadata-location"].(string)
	raw, err := n.objects.Read(ctx, loc)
	require.NoError(t, err)
	require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/a/tables/legacy", nil).status)
	legacy := loc[:strings.LastIndex(loc, "/")] + "/v1.metadata.json"
	require.NoError(t, n.objects.Write(ctx, legacy, raw))
	r := n.do(t, "POST", "/v1/namespaces/a/register", map[string]any{"name": "legacy", "metadata-location": legacy})
	require.Equal(t, 200, r.status, "%s", r.body)

	drop := func(name string, phase int) {
		t.Helper()
		r := n.do(t, "DELETE", "/v1/namespaces/a/tables/"+name+"?purgeRequested=true", nil)
		require.Equal(t, 204, r.status, "%s: %s", name, r.body)
		var jobs []fsm.PurgeJob
		require.NoError(t, n.raft.Read(ctx, func(rd *fsm.Reader) error {
			jobs, _ = rd.PurgeJobs(fsm.PurgeJobFilter{Namespace: []string{"a"}, Table: name}, 0)
			return nil
		}))
		require.Len(t, jobs, 1, name)
		assert.Equal(t, phase, jobs[0].FirstPhase, name)
		assert.Equal(t, fsm.JobSucceeded, jobs[0].State, "%s: %s", name, jobs[0].LastError)
		assert.Equal(t, purge.PhaseDone, jobs[0].Progress.Phase, name)
	}
	want := map[string]int{"empty": purge.PhaseRoot, "changed": purge.PhaseMetadataLog, "full": purge.PhaseData, "legacy": purge.PhaseData}
	for name, phase := range want {
		drop(name, phase)
	}

	// Once a node whose binary lacks the feature heartbeats, nothing is
	// stamped: its replica would keep the job without the stamp.
	heartbeat("old", 0)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("late")).status)
	drop("late", purge.PhaseData)
}

// A metadata file that holds a statistics blob's properties as null (as
// iceberg-go wrote it, and floe before it wrote an empty map) is served,
// and rewritten by the next commit, with an empty map: Java's and
// iceberg-rust's readers refuse the null.
func TestNullStatisticsPropertiesAreServedEmpty(t *testing.T) {
	n := startNode(t, warehouses()[0])
	ctx := context.Background()
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	r := n.do(t, "POST", "/v1/namespaces/a/tables", withName("t"))
	require.Equal(t, 200, r.status, "%s", r.body)
	loc := r.json(t)["metadata"].(map[string]any)["location"].(string)
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", map[string]any{"updates": []any{
		map[string]any{"action": "add-snapshot", "snapshot": map[string]any{"snapshot-id": 7, "sequence-number": 1,
			"timestamp-ms": time.Now().UnixMilli(), "manifest-list": loc + "/metadata/snap-7.avro", "summary": map[string]any{"operation": "append"}, "schema-id": 0}},
		map[string]any{"action": "set-snapshot-ref", "ref-name": "main", "snapshot-id": 7, "type": "branch"},
		map[string]any{"action": "set-statistics", "statistics": map[string]any{"snapshot-id": 7, "statistics-path": loc + "/metadata/s.puffin",
			"file-size-in-bytes": 100, "file-footer-size-in-bytes": 20,
			"blob-metadata": []any{map[string]any{"type": "apache-datasketches-theta-v1", "snapshot-id": 7, "sequence-number": 1, "fields": []int{1}}}}},
	}})
	require.Equal(t, 200, r.status, "%s", r.body)
	blobProps := func(r response) any {
		stats := r.json(t)["metadata"].(map[string]any)["statistics"].([]any)
		return stats[0].(map[string]any)["blob-metadata"].([]any)[0].(map[string]any)["properties"]
	}
	assert.Equal(t, map[string]any{}, blobProps(r))
	current := r.json(t)["metadata-location"].(string)

	// The same file as iceberg-go writes it, registered after a drop that
	// keeps the files.
	raw, err := n.objects.Read(ctx, current)
	require.NoError(t, err)
	withNull := strings.Replace(string(raw), `"fields":[1],"properties":{}`, `"fields":[1],"properties":null`, 1)
	require.NotEqual(t, string(raw), withNull)
	nullLoc := loc + "/metadata/00002-null.metadata.json"
	require.NoError(t, n.objects.Write(ctx, nullLoc, []byte(withNull)))
	require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/a/tables/t", nil).status)
	// Registration reads the file from storage, never from the cache.
	r = n.do(t, "POST", "/v1/namespaces/a/register", map[string]any{"name": "t", "metadata-location": nullLoc})
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, map[string]any{}, blobProps(r))
	r = n.do(t, "GET", "/v1/namespaces/a/tables/t", nil)
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, map[string]any{}, blobProps(r))
	assert.NotContains(t, string(r.body), `"properties":null`)
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", map[string]any{"updates": []any{
		map[string]any{"action": "set-properties", "updates": map[string]any{"k": "v"}}}})
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, map[string]any{}, blobProps(r))
	raw, err = n.objects.Read(ctx, r.json(t)["metadata-location"].(string))
	require.NoError(t, err)
	assert.NotContains(t, string(raw), `"properties":null`, "the file a commit writes")
}

// Fields an add-spec sends without a field-id (or with 0) are numbered
// against the table as spec evolution numbers them from format version 2:
// an earlier field's id for the same source and transform, else the next
// free id, never an id another field of the table or of the commit holds,
// never twice in a spec. Version 1 specs are numbered by position.
func TestAddedSpecFieldsAreNumberedAgainstTheTable(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	schema := map[string]any{"type": "struct", "schema-id": 0, "fields": []any{
		map[string]any{"id": 1, "name": "id", "type": "long", "required": true},
		map[string]any{"id": 2, "name": "data", "type": "string", "required": false},
		map[string]any{"id": 3, "name": "cat", "type": "string", "required": false}}}
	create := func(name string, props map[string]any) {
		r := n.do(t, "POST", "/v1/namespaces/a/tables", map[string]any{"name": name, "schema": schema, "properties": props,
			"partition-spec": map[string]any{"spec-id": 0, "fields": []any{map[string]any{"source-id": 2, "field-id": 1000, "name": "data", "transform": "identity"}}}})
		require.Equal(t, 200, r.status, "%s", r.body)
	}
	field := func(source int, name, transform string, id any) map[string]any {
		f := map[string]any{"source-id": source, "name": name, "transform": transform}
		if id != "absent" {
			f["field-id"] = id
		}
		return f
	}
	addSpecs := func(name string, specs ...[]any) response {
		var updates []any
		for _, fields := range specs {
			updates = append(updates, map[string]any{"action": "add-spec", "spec": map[string]any{"fields": fields}})
		}
		return n.do(t, "POST", "/v1/namespaces/a/tables/"+name, map[string]any{"updates": updates})
	}
	ids := func(r response, spec int) []any {
		var out []any
		specs := r.json(t)["metadata"].(map[string]any)["partition-specs"].([]any)
		for _, f := range specs[spec].(map[string]any)["fields"].([]any) {
			out = append(out, f.(map[string]any)["field-id"])
		}
		return out
	}

	create("v2", nil)
	// Explicit 1001 in the first spec, then a new field without an id and
	// one like spec 0's, with 0: 1002 and 1000.
	r := addSpecs("v2",
		[]any{field(3, "cat", "identity", 1001)},
		[]any{field(1, "id_bucket", "bucket[4]", "absent"), field(2, "data", "identity", 0)})
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, []any{1001.0}, ids(r, 1))
	assert.Equal(t, []any{1002.0, 1000.0}, ids(r, 2))
	assert.Equal(t, 1002.0, r.json(t)["metadata"].(map[string]any)["last-partition-id"])
	// Two fields that would reuse the same id: the second gets a new one.
	r = addSpecs("v2", []any{field(3, "cat", "identity", nil), field(3, "cat2", "identity", nil)})
	require.Equal(t, 400, r.status, "two identity fields of one column are refused anyway: %s", r.body)
	r = addSpecs("v2", []any{field(3, "cat_void", "void", nil), field(2, "data_void", "void", nil), field(3, "cat", "identity", nil)})
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, []any{1003.0, 1004.0, 1001.0}, ids(r, 3))

	// Version 1: ids by position, as iceberg-go requires of v1 specs.
	create("v1", map[string]any{"format-version": "1"})
	r = addSpecs("v1", []any{field(2, "data", "identity", nil), field(3, "cat", "identity", nil)})
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, []any{1000.0, 1001.0}, ids(r, 1))
}

// A commit whose new metadata file cannot be written (a full disk, here a
// metadata directory that is a file) applied nothing: 503 with
// Retry-After, never the 500 "commit state unknown" that has clients keep
// files they could clean up; the table is unchanged, and commits once the
// file system takes writes again.
func TestCommitWhoseMetadataCannotBeWrittenAppliedNothing(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	r := n.do(t, "POST", "/v1/namespaces/a/tables", withName("t"))
	require.Equal(t, 200, r.status, "%s", r.body)
	loc := r.json(t)["metadata"].(map[string]any)["location"].(string)
	dir := strings.TrimPrefix(loc, "file://") + "/metadata"
	moved := dir + ".moved"
	require.NoError(t, os.Rename(dir, moved))
	require.NoError(t, os.WriteFile(dir, nil, 0o644))

	before := n.state(t)
	commit := map[string]any{"requirements": []any{},
		"updates": []any{map[string]any{"action": "set-properties", "updates": map[string]string{"k": "v"}}}}
	r = n.doRaw(t, "POST", "/v1/namespaces/a/tables/t", commit)
	assert.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r.body)
	assert.Equal(t, "ServiceUnavailableException", r.errorType(t))
	assert.Contains(t, string(r.body), "nothing was applied")
	assert.NotEmpty(t, r.header.Get("Retry-After"))
	assert.Equal(t, before, n.state(t))

	require.NoError(t, os.Remove(dir))
	require.NoError(t, os.Rename(moved, dir))
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", commit)
	assert.Equal(t, 200, r.status, "%s", r.body)
}
