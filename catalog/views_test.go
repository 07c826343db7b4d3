package catalog_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	icecatalog "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/view"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/spectest"
)

// viewTransport validates every response against the Iceberg REST spec,
// like spectest's transport, except the error answers the spec gives the
// bare ErrorModel schema on the view routes (404, 409, and a replace's
// 5xx), against its own examples and every client's error parser. Those
// are checked to be what every other route answers: {"error": {...}}.
type viewTransport struct {
	t testing.TB
	v *spectest.Validator // nil: the spec was not found, nothing is validated
}

func newViewTransport(t testing.TB) *viewTransport {
	t.Helper()
	v, err := spectest.Load()
	if err != nil {
		if spectest.Required() {
			t.Fatalf("spectest: %v", err)
		}
		t.Logf("spectest: responses not validated: %s", spectest.MissingHint)
	}
	return &viewTransport{t: t, v: v}
}

func (tr *viewTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if bareErrorModel(req, resp.StatusCode) {
		var e struct {
			Error *struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error == nil || e.Error.Code != resp.StatusCode ||
			e.Error.Type == "" || e.Error.Message == "" {
			tr.t.Errorf("%s %s -> %d: not an Iceberg error response: %s", req.Method, req.URL.Path, resp.StatusCode, body)
		}
		return resp, nil
	}
	if tr.v != nil {
		if err := tr.v.Check(req, resp, body); err != nil {
			tr.t.Errorf("spectest: response violates the Iceberg REST spec: %s %s -> %d: %v",
				req.Method, req.URL.EscapedPath(), resp.StatusCode, err)
		}
	}
	return resp, nil
}

// bareErrorModel reports whether the spec gives the answer the bare
// ErrorModel schema: a 404, 409 or 5xx with a body on a /views route
// (register-view answers IcebergErrorResponse).
func bareErrorModel(req *http.Request, status int) bool {
	p := req.URL.Path
	onViews := strings.Contains(p, "/views/") || strings.HasSuffix(p, "/views")
	return onViews && req.Method != http.MethodHead && (status == 404 || status == 409 || status >= 500)
}

// viewCatalog is n.catalog with viewTransport.
func viewCatalog(t *testing.T, n *node) *rest.Catalog {
	t.Helper()
	opts := []rest.Option{rest.WithCustomTransport(newViewTransport(t))}
	if n.scfg.S3AccessKeyID != "" {
		opts = append(opts, rest.WithAdditionalProps(iceberg.Properties{
			"s3.access-key-id": n.scfg.S3AccessKeyID, "s3.secret-access-key": n.scfg.S3SecretAccessKey,
		}))
	}
	cat, err := rest.NewCatalog(context.Background(), "floe", n.URL, opts...)
	require.NoError(t, err)
	return cat
}

// vdo is n.do through viewTransport.
func (n *node) vdo(t *testing.T, method, path string, body any, headers ...string) response {
	t.Helper()
	return n.doWith(t, &http.Client{Transport: newViewTransport(t), Timeout: 30 * time.Second}, method, path, body, headers...)
}

var viewSchema = iceberg.NewSchema(0,
	iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
	iceberg.NestedField{ID: 2, Name: "name", Type: iceberg.PrimitiveTypes.String},
)

func sqlVersion(t *testing.T, id int64, sql string, ns ...string) *view.Version {
	t.Helper()
	v, err := view.NewVersionFromSQL(id, 0, sql, table.Identifier(append([]string{}, ns...)))
	require.NoError(t, err)
	return v
}

// createViewBody is a CreateViewRequest as a client sends it.
func createViewBody(name, sql string, ns ...string) map[string]any {
	return map[string]any{
		"name": name,
		"schema": map[string]any{"type": "struct", "schema-id": 0, "fields": []any{
			map[string]any{"id": 1, "name": "id", "type": "long", "required": true},
		}},
		"view-version": map[string]any{
			"version-id": 1, "schema-id": 0, "timestamp-ms": time.Now().UnixMilli(),
			"summary":           map[string]string{"engine-name": "test"},
			"representations":   []any{map[string]any{"type": "sql", "sql": sql, "dialect": "spark"}},
			"default-namespace": append([]string{}, ns...),
		},
		"properties": map[string]string{},
	}
}

// addVersionBody is a CommitViewRequest that adds a version with sql and
// makes it current.
func addVersionBody(sql string, ns ...string) map[string]any {
	return map[string]any{
		"requirements": []any{},
		"updates": []any{
			map[string]any{"action": "add-view-version", "view-version": map[string]any{
				"version-id": 99, "schema-id": 0, "timestamp-ms": time.Now().UnixMilli(),
				"summary":           map[string]string{"engine-name": "test"},
				"representations":   []any{map[string]any{"type": "sql", "sql": sql, "dialect": "spark"}},
				"default-namespace": append([]string{}, ns...),
			}},
			map[string]any{"action": "set-current-view-version", "view-version-id": -1},
		},
	}
}

// viewsState is everything a client can see of the views of namespaces
// (name and metadata location), and of the tables (n.state).
func (n *node) viewsState(t *testing.T, namespaces ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(n.state(t))
	for _, ns := range namespaces {
		r := n.vdo(t, "GET", "/v1/namespaces/"+ns+"/views", nil)
		if r.status == 404 {
			b.WriteString(ns + ": no namespace\n")
			continue
		}
		require.Equal(t, 200, r.status, "%s", r.body)
		for _, id := range r.json(t)["identifiers"].([]any) {
			name := id.(map[string]any)["name"].(string)
			lr := n.vdo(t, "GET", "/v1/namespaces/"+ns+"/views/"+name, nil)
			require.Equal(t, 200, lr.status, "%s", lr.body)
			b.WriteString(ns + "." + name + ":" + lr.json(t)["metadata-location"].(string) + "\n")
		}
	}
	return b.String()
}

var viewFileRE = regexp.MustCompile(`/metadata/(\d{5})-[0-9a-f-]{36}\.metadata\.json$`)

// TestViews serves every view operation through a follower of a
// three-node cluster: writes are forwarded to the leader, reads are
// linearizable on every node.
func TestViews(t *testing.T) {
	forEachWarehouse(t, func(t *testing.T, wh warehouse) {
		nodes := startCluster(t, wh, 3)
		f := follower(t, nodes)
		t.Run("lifecycle", func(t *testing.T) { testViewLifecycle(t, nodes, f) })
		if wh.name != "file" {
			return // the rest does not depend on the storage
		}
		t.Run("keyed", func(t *testing.T) { testKeyedViews(t, f) })
		t.Run("names", func(t *testing.T) { testViewTableNames(t, f) })
		t.Run("namespace", func(t *testing.T) { testNamespaceWithView(t, f) })
		t.Run("bad input", func(t *testing.T) { testBadViewInput(t, f) })
		t.Run("shapes", func(t *testing.T) { testViewShapes(t, f) })
		t.Run("register", func(t *testing.T) { testRegisterView(t, f) })
		t.Run("concurrent replaces", func(t *testing.T) { testConcurrentViewReplaces(t, nodes) })
	})
}

func testViewLifecycle(t *testing.T, nodes []*node, f *node) {
	ctx := context.Background()
	cat := viewCatalog(t, f)
	require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"vs"}, nil))
	require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"vs2"}, nil))
	id := table.Identifier{"vs", "v"}

	created, err := cat.CreateView(ctx, id, sqlVersion(t, 1, "select 1", "vs"), viewSchema,
		icecatalog.WithViewProperties(iceberg.Properties{"owner": "me"}))
	require.NoError(t, err)
	first := created.MetadataLocation()
	m := viewFileRE.FindStringSubmatch(first)
	require.NotNil(t, m, first)
	assert.Equal(t, "00000", m[1])
	assert.True(t, strings.HasPrefix(first, f.warehouse+"/vs/v/metadata/"), first)
	assert.Equal(t, f.warehouse+"/vs/v", created.Location())
	assert.Equal(t, int64(1), created.CurrentVersion().VersionID)
	assert.Equal(t, "me", created.Properties()["owner"])
	_, err = cat.CreateView(ctx, id, sqlVersion(t, 1, "select 1", "vs"), viewSchema)
	assert.ErrorIs(t, err, icecatalog.ErrViewAlreadyExists)

	// Every node sees it at once.
	for _, n := range nodes {
		loaded, err := viewCatalog(t, n).LoadView(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, first, loaded.MetadataLocation())
		assert.Equal(t, "select 1", loaded.CurrentVersion().Representations[0].Sql)
	}
	ok, err := cat.CheckViewExists(ctx, id)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = cat.CheckViewExists(ctx, table.Identifier{"vs", "missing"})
	require.NoError(t, err)
	assert.False(t, ok)
	_, err = cat.LoadView(ctx, table.Identifier{"vs", "missing"})
	assert.ErrorIs(t, err, icecatalog.ErrNoSuchView)

	// Replace: a new version in a new metadata file; the old file stays.
	uuidReq := view.AssertViewUUID(created.Metadata().ViewUUID())
	replaced, err := cat.UpdateView(ctx, id, []view.Requirement{uuidReq}, []view.Update{
		view.NewAddViewVersionUpdate(sqlVersion(t, 2, "select 2", "vs")),
		view.NewSetCurrentVersionUpdate(view.LastAddedID),
	})
	require.NoError(t, err)
	second := replaced.MetadataLocation()
	m = viewFileRE.FindStringSubmatch(second)
	require.NotNil(t, m, second)
	assert.Equal(t, "00001", m[1])
	assert.Equal(t, int64(2), replaced.CurrentVersion().VersionID)
	assert.Equal(t, "select 2", replaced.CurrentVersion().Representations[0].Sql)
	assert.Len(t, replaced.Versions(), 2)
	assert.Len(t, replaced.Metadata().VersionLog(), 2)
	_, err = f.objects.Read(ctx, first)
	assert.NoError(t, err, "the previous metadata file is kept")
	loaded, err := viewCatalog(t, nodes[0]).LoadView(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, second, loaded.MetadataLocation())

	// A requirement that does not hold: 409, nothing changes.
	before := f.viewsState(t, "vs", "vs2")
	_, err = cat.UpdateView(ctx, id, []view.Requirement{view.AssertViewUUID([16]byte{1})}, []view.Update{
		view.NewSetPropertiesUpdate(iceberg.Properties{"x": "1"}),
	})
	assert.ErrorIs(t, err, rest.ErrCommitFailed)
	_, err = cat.UpdateView(ctx, table.Identifier{"vs", "missing"}, nil, []view.Update{
		view.NewSetPropertiesUpdate(iceberg.Properties{"x": "1"}),
	})
	assert.ErrorIs(t, err, icecatalog.ErrNoSuchView)
	assert.Equal(t, before, f.viewsState(t, "vs", "vs2"))

	// Back to the first version's definition, as the reference
	// implementation does it: the version is the one the view has, so
	// nothing is added and it is named by its own id. Setting "the last
	// added" after it is refused, since nothing was added.
	again := created.CurrentVersion().Clone()
	again.VersionID, again.TimestampMS = 3, time.Now().UnixMilli()
	_, err = cat.UpdateView(ctx, id, nil, []view.Update{
		view.NewAddViewVersionUpdate(again),
		view.NewSetCurrentVersionUpdate(view.LastAddedID),
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the version added is one the view already has")
	assert.Equal(t, before, f.viewsState(t, "vs", "vs2"))
	reverted, err := cat.UpdateView(ctx, id, nil, []view.Update{
		view.NewAddViewVersionUpdate(again),
		view.NewSetCurrentVersionUpdate(1),
	})
	require.NoError(t, err)
	assert.Equal(t, int64(1), reverted.CurrentVersion().VersionID)
	assert.Len(t, reverted.Versions(), 2, "no version added")
	reverted, err = cat.UpdateView(ctx, id, nil, []view.Update{view.NewSetCurrentVersionUpdate(2)})
	require.NoError(t, err)
	assert.Equal(t, int64(2), reverted.CurrentVersion().VersionID)
	second = reverted.MetadataLocation()

	// A commit without updates, or whose updates are each a no-op,
	// changes nothing and writes no file, as a table's; its requirements
	// are still checked.
	files := f.listFiles(t, f.warehouse+"/vs/v")
	lv := f.do(t, "GET", "/v1/floe/namespaces/vs/views/v", nil)
	require.Equal(t, 200, lv.status, "%s", lv.body)
	vloc := lv.json(t)["metadata"].(map[string]any)["location"].(string)
	for _, body := range []string{`{"requirements":[],"updates":[]}`, `{}`,
		`{"requirements":[],"updates":[{"action":"set-current-view-version","view-version-id":2}]}`,
		`{"requirements":[],"updates":[{"action":"set-properties","updates":{}}]}`,
		`{"requirements":[],"updates":[{"action":"upgrade-format-version","format-version":1}]}`,
		`{"requirements":[],"updates":[{"action":"set-location","location":"` + vloc + `"}]}`,
	} {
		r := f.do(t, "POST", "/v1/floe/namespaces/vs/views/v", body)
		require.Equal(t, 200, r.status, "%s: %s", body, r.body)
		assert.Equal(t, second, r.json(t)["metadata-location"], body)
	}
	r := f.vdo(t, "POST", "/v1/floe/namespaces/vs/views/v", `{"requirements":[{"type":"assert-view-uuid","uuid":"00000000-0000-0000-0000-000000000001"}]}`)
	assert.Equal(t, 409, r.status, "%s", r.body)
	assert.Equal(t, files, f.listFiles(t, f.warehouse+"/vs/v"), "no metadata file written")

	// List, a page at a time.
	for _, name := range []string{"c", "a", "b", "d"} {
		_, err := cat.CreateView(ctx, table.Identifier{"vs", name}, sqlVersion(t, 1, "select '"+name+"'", "vs"), viewSchema)
		require.NoError(t, err)
	}
	var names []string
	for ident, err := range cat.ListViews(cat.SetPageSize(ctx, 2), table.Identifier{"vs"}) {
		require.NoError(t, err)
		names = append(names, ident[len(ident)-1])
	}
	assert.Equal(t, []string{"a", "b", "c", "d", "v"}, names)
	// Without a pageToken, everything (the spec's PageToken).
	r = f.vdo(t, "GET", "/v1/floe/namespaces/vs/views?pageSize=3", nil)
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Len(t, r.json(t)["identifiers"], 5)
	assert.Nil(t, r.json(t)["next-page-token"])
	r = f.vdo(t, "GET", "/v1/floe/namespaces/vs/views?pageSize=3&pageToken=", nil)
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Len(t, r.json(t)["identifiers"], 3)
	token, _ := r.json(t)["next-page-token"].(string)
	require.NotEmpty(t, token)
	r = f.vdo(t, "GET", "/v1/floe/namespaces/vs/views?pageSize=3&pageToken="+token, nil)
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Len(t, r.json(t)["identifiers"], 2)
	assert.Nil(t, r.json(t)["next-page-token"])
	tables, err := collect(cat.ListTables(ctx, table.Identifier{"vs"}))
	require.NoError(t, err)
	assert.Empty(t, tables, "views are not tables")

	// Rename, across namespaces: the metadata stays where it is.
	renamed, err := cat.RenameView(ctx, id, table.Identifier{"vs2", "moved"})
	require.NoError(t, err)
	assert.Equal(t, second, renamed.MetadataLocation())
	_, err = cat.LoadView(ctx, id)
	assert.ErrorIs(t, err, icecatalog.ErrNoSuchView)
	_, err = cat.RenameView(ctx, id, table.Identifier{"vs2", "again"})
	assert.ErrorIs(t, err, icecatalog.ErrNoSuchView)
	_, err = cat.RenameView(ctx, table.Identifier{"vs", "a"}, table.Identifier{"vs2", "moved"})
	assert.ErrorIs(t, err, icecatalog.ErrViewAlreadyExists)

	// Drop: gone on every node; a second drop finds nothing.
	require.NoError(t, cat.DropView(ctx, table.Identifier{"vs2", "moved"}))
	for _, n := range nodes {
		ok, err := viewCatalog(t, n).CheckViewExists(ctx, table.Identifier{"vs2", "moved"})
		require.NoError(t, err)
		assert.False(t, ok)
	}
	assert.ErrorIs(t, cat.DropView(ctx, table.Identifier{"vs2", "moved"}), icecatalog.ErrNoSuchView)
}

func collect(seq func(func(table.Identifier, error) bool)) ([]table.Identifier, error) {
	var out []table.Identifier
	for id, err := range seq {
		if err != nil {
			return out, err
		}
		out = append(out, id)
	}
	return out, nil
}

// Each view mutation sent twice with one Idempotency-Key: one effect, the
// same answer, the second marked as a replay.
func testKeyedViews(t *testing.T, f *node) {
	require.Equal(t, 200, f.vdo(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"kv"}}).status)
	require.Equal(t, 200, f.vdo(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"kv2"}}).status)
	twice := func(method, path string, body any, want int) (response, response) {
		t.Helper()
		key := newKey(t)
		a := f.vdo(t, method, path, body, "Idempotency-Key", key)
		b := f.vdo(t, method, path, body, "Idempotency-Key", key)
		require.Equal(t, want, a.status, "%s %s: %s", method, path, a.body)
		require.Equal(t, want, b.status, "replay of %s %s: %s", method, path, b.body)
		assert.Empty(t, a.header.Get("Idempotent-Replayed"))
		assert.Equal(t, "true", b.header.Get("Idempotent-Replayed"))
		return a, b
	}
	versions := func(name string) int {
		r := f.vdo(t, "GET", "/v1/namespaces/kv/views/"+name, nil)
		require.Equal(t, 200, r.status, "%s", r.body)
		return len(r.json(t)["metadata"].(map[string]any)["versions"].([]any))
	}

	a, b := twice("POST", "/v1/namespaces/kv/views", createViewBody("v", "select 1", "kv"), 200)
	assert.Equal(t, a.json(t)["metadata-location"], b.json(t)["metadata-location"])
	assert.Equal(t, a.json(t)["metadata"], b.json(t)["metadata"])

	a, b = twice("POST", "/v1/namespaces/kv/views/v", addVersionBody("select 2", "kv"), 200)
	assert.Equal(t, a.json(t)["metadata-location"], b.json(t)["metadata-location"])
	assert.Equal(t, 2, versions("v"), "one replace, not two")

	// A keyed commit without updates writes nothing, and its replay
	// answers what it answered, after the view moved on.
	noop, noopKey := map[string]any{"requirements": []any{}, "updates": []any{}}, newKey(t)
	first := f.vdo(t, "POST", "/v1/namespaces/kv/views/v", noop, "Idempotency-Key", noopKey)
	require.Equal(t, 200, first.status, "%s", first.body)
	assert.Equal(t, a.json(t)["metadata-location"], first.json(t)["metadata-location"], "the view as it is")
	require.Equal(t, 200, f.vdo(t, "POST", "/v1/namespaces/kv/views/v", addVersionBody("select 3", "kv")).status)
	replay := f.vdo(t, "POST", "/v1/namespaces/kv/views/v", noop, "Idempotency-Key", noopKey)
	require.Equal(t, 200, replay.status, "%s", replay.body)
	assert.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	assert.Equal(t, first.json(t)["metadata-location"], replay.json(t)["metadata-location"])
	assert.Equal(t, 3, versions("v"))

	twice("POST", "/v1/views/rename", map[string]any{
		"source": map[string]any{"namespace": []string{"kv"}, "name": "v"}, "destination": map[string]any{"namespace": []string{"kv"}, "name": "w"}}, 204)
	r := f.vdo(t, "GET", "/v1/namespaces/kv/views/w", nil)
	require.Equal(t, 200, r.status, "%s", r.body)
	loc := r.json(t)["metadata-location"].(string)
	twice("DELETE", "/v1/namespaces/kv/views/w", nil, 204) // a replayed drop is 204, not 404
	a, b = twice("POST", "/v1/namespaces/kv2/register-view", map[string]any{"name": "r", "metadata-location": loc}, 200)
	assert.Equal(t, loc, a.json(t)["metadata-location"])
	assert.Equal(t, a.json(t)["metadata"], b.json(t)["metadata"])

	// A deterministic failure replays as the same failure, even when the
	// state changes in between.
	require.Equal(t, 200, f.vdo(t, "POST", "/v1/namespaces/kv/tables", withName("t")).status)
	a, b = twice("POST", "/v1/namespaces/kv/views", createViewBody("t", "select 1", "kv"), 409)
	assert.Equal(t, "AlreadyExistsException", b.errorType(t))
	key := newKey(t)
	r = f.vdo(t, "DELETE", "/v1/namespaces/kv/views/later", nil, "Idempotency-Key", key)
	require.Equal(t, 404, r.status)
	assert.Equal(t, "NoSuchViewException", r.errorType(t))
	require.Equal(t, 200, f.vdo(t, "POST", "/v1/namespaces/kv/views", createViewBody("later", "select 1", "kv")).status)
	r = f.vdo(t, "DELETE", "/v1/namespaces/kv/views/later", nil, "Idempotency-Key", key)
	assert.Equal(t, 404, r.status)
	assert.Equal(t, "NoSuchViewException", r.errorType(t))
	assert.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
	assert.Equal(t, 204, f.vdo(t, "HEAD", "/v1/namespaces/kv/views/later", nil).status, "the replay dropped nothing")

	// A failed requirement is stored too.
	_, b = twice("POST", "/v1/namespaces/kv/views/later", map[string]any{
		"requirements": []any{map[string]any{"type": "assert-view-uuid", "uuid": "00000000-0000-0000-0000-000000000001"}},
		"updates":      []any{},
	}, 409)
	assert.Equal(t, "CommitFailedException", b.errorType(t))

	// The same key on another view is another request: 422.
	key = newKey(t)
	require.Equal(t, 204, f.vdo(t, "DELETE", "/v1/namespaces/kv/views/later", nil, "Idempotency-Key", key).status)
	r = f.doRaw(t, "DELETE", "/v1/namespaces/kv/views/other", nil, "Idempotency-Key", key)
	assert.Equal(t, 422, r.status, "%s", r.body)
}

// A name in a namespace is a table or a view, never both: each refuses
// the other with 409, whichever operation gives the name.
func testViewTableNames(t *testing.T, f *node) {
	require.Equal(t, 200, f.vdo(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"nm"}}).status)
	require.Equal(t, 200, f.vdo(t, "POST", "/v1/namespaces/nm/tables", withName("t")).status)
	require.Equal(t, 200, f.vdo(t, "POST", "/v1/namespaces/nm/views", createViewBody("v", "select 1", "nm")).status)
	before := f.viewsState(t, "nm")

	r := f.vdo(t, "POST", "/v1/namespaces/nm/views", createViewBody("t", "select 1", "nm"))
	assert.Equal(t, 409, r.status, "%s", r.body)
	assert.Equal(t, "AlreadyExistsException", r.errorType(t))

	// A table at the view's name: refused early at the view's default
	// location, and by the state machine at any other location.
	r = f.vdo(t, "POST", "/v1/namespaces/nm/tables", withName("v"))
	assert.Equal(t, 409, r.status, "%s", r.body)
	assert.Equal(t, "AlreadyExistsException", r.errorType(t))
	elsewhere := withName("v")
	elsewhere["location"] = f.warehouse + "/elsewhere/v"
	r = f.vdo(t, "POST", "/v1/namespaces/nm/tables", elsewhere)
	assert.Equal(t, 409, r.status, "%s", r.body)
	assert.Equal(t, "AlreadyExistsException", r.errorType(t))
	assert.Contains(t, string(r.body), "view already exists: nm.v")
	// A staged create (a create transaction's first step) is refused at
	// once, not at its final commit.
	staged := withName("v")
	staged["stage-create"] = true
	r = f.vdo(t, "POST", "/v1/namespaces/nm/tables", staged)
	assert.Equal(t, 409, r.status, "%s", r.body)
	assert.Equal(t, "AlreadyExistsException", r.errorType(t))
	tr := f.vdo(t, "GET", "/v1/namespaces/nm/tables/t", nil)
	require.Equal(t, 200, tr.status)
	r = f.vdo(t, "POST", "/v1/namespaces/nm/register", map[string]any{
		"name": "v", "metadata-location": tr.json(t)["metadata-location"], "overwrite": true})
	assert.Equal(t, 409, r.status, "%s", r.body)

	// Renames onto the other kind's name.
	r = f.vdo(t, "POST", "/v1/tables/rename", map[string]any{
		"source": map[string]any{"namespace": []string{"nm"}, "name": "t"}, "destination": map[string]any{"namespace": []string{"nm"}, "name": "v"}})
	assert.Equal(t, 409, r.status, "%s", r.body)
	assert.Equal(t, "AlreadyExistsException", r.errorType(t))
	r = f.vdo(t, "POST", "/v1/views/rename", map[string]any{
		"source": map[string]any{"namespace": []string{"nm"}, "name": "v"}, "destination": map[string]any{"namespace": []string{"nm"}, "name": "t"}})
	assert.Equal(t, 409, r.status, "%s", r.body)
	assert.Equal(t, "AlreadyExistsException", r.errorType(t))

	// Onto its own name: nothing changes (Java's reference catalog); a
	// missing source is still a 404, and a view is no table.
	for _, c := range []struct {
		path, name string
		status     int
	}{{"/v1/tables/rename", "t", 204}, {"/v1/views/rename", "v", 204}, {"/v1/tables/rename", "v", 404}, {"/v1/views/rename", "t", 404}, {"/v1/tables/rename", "gone", 404}} {
		self := map[string]any{"namespace": []string{"nm"}, "name": c.name}
		r = f.vdo(t, "POST", c.path, map[string]any{"source": self, "destination": self})
		assert.Equal(t, c.status, r.status, "%s %s: %s", c.path, c.name, r.body)
	}

	assert.Equal(t, before, f.viewsState(t, "nm"))

	// A view may lie inside a table's location (Iceberg's reference
	// catalog allows it; iceberg-go's own suite does it), but not inside
	// another view's.
	inside := createViewBody("inside", "select 1", "nm")
	inside["location"] = tr.json(t)["metadata"].(map[string]any)["location"].(string) + "/views/inside"
	r = f.vdo(t, "POST", "/v1/namespaces/nm/views", inside)
	assert.Equal(t, 200, r.status, "%s", r.body)
	nested := createViewBody("nested", "select 1", "nm")
	nested["location"] = inside["location"].(string) + "/nested"
	r = f.vdo(t, "POST", "/v1/namespaces/nm/views", nested)
	assert.Equal(t, 409, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "the location of view nm.inside")
}

func testNamespaceWithView(t *testing.T, f *node) {
	require.Equal(t, 200, f.vdo(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ne"}}).status)
	require.Equal(t, 200, f.vdo(t, "POST", "/v1/namespaces/ne/views", createViewBody("v", "select 1", "ne")).status)
	r := f.vdo(t, "DELETE", "/v1/namespaces/ne", nil)
	assert.Equal(t, 409, r.status, "%s", r.body)
	assert.Equal(t, "NamespaceNotEmptyException", r.errorType(t))
	assert.Contains(t, string(r.body), "contains views")
	require.Equal(t, 204, f.vdo(t, "DELETE", "/v1/namespaces/ne/views/v", nil).status)
	assert.Equal(t, 204, f.vdo(t, "DELETE", "/v1/namespaces/ne", nil).status)
}

// Malformed bodies, unknown namespaces and missing views get the spec's
// errors and change nothing.
func testBadViewInput(t *testing.T, f *node) {
	require.Equal(t, 200, f.vdo(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"bad"}}).status)
	require.Equal(t, 200, f.vdo(t, "POST", "/v1/namespaces/bad/views", createViewBody("v", "select 1", "bad")).status)
	before := f.viewsState(t, "bad", "nope")

	noSchema := createViewBody("x", "select 1", "bad")
	delete(noSchema, "schema")
	noVersion := createViewBody("x", "select 1", "bad")
	delete(noVersion, "view-version")
	noSQL := createViewBody("x", "select 1", "bad")
	noSQL["view-version"].(map[string]any)["representations"] = []any{}
	noDefaultNS := createViewBody("x", "select 1", "bad")
	delete(noDefaultNS["view-version"].(map[string]any), "default-namespace")
	outside := createViewBody("x", "select 1", "bad")
	outside["location"] = "file:///somewhere/else"
	// Fields Java's ViewVersionParser requires, which iceberg-go would
	// set to 0; a level Java's Namespace.of refuses; a history bound
	// Java's builder cannot read.
	var missing []any
	for _, k := range []string{"version-id", "schema-id", "timestamp-ms"} {
		b := createViewBody("x", "select 1", "bad")
		delete(b["view-version"].(map[string]any), k)
		missing = append(missing, b)
	}
	nulNS := createViewBody("x", "select 1", "bad\x00x")
	badHistory := createViewBody("x", "select 1", "bad")
	badHistory["properties"] = map[string]string{"version.history.num-entries": "abc"}
	zeroHistory := createViewBody("x", "select 1", "bad")
	zeroHistory["properties"] = map[string]string{"version.history.num-entries": "0"}
	for i, body := range append([]any{`{"name":`, `[]`, noSchema, noVersion, noSQL, noDefaultNS, outside, createViewBody("", "select 1", "bad"),
		nulNS, badHistory, zeroHistory}, missing...) {
		r := f.vdo(t, "POST", "/v1/namespaces/bad/views", body)
		assert.Equal(t, 400, r.status, "body %d: %s", i, r.body)
		assert.Equal(t, "BadRequestException", r.errorType(t))
	}
	for i, body := range []any{
		`null`,
		`{"updates":[{"action":"no-such-update"}]}`,
		`{"requirements":[{"type":"assert-table-uuid","uuid":"00000000-0000-0000-0000-000000000001"}],"updates":[]}`,
		`{"identifier":{"namespace":["bad"],"name":"other"},"updates":[]}`,
		`{"updates":[{"action":"set-current-view-version","view-version-id":7}]}`,
		`{"updates":[{"action":"set-properties","updates":{"k":null}}]}`,
		`{"updates":[{"action":"remove-properties","removals":[null]}]}`,
		`{"properties":{"k":"v"}}`,
		`{"updates":[{"action":"set-properties","updates":{"version.history.num-entries":"3000000000"}}]}`,
		versionUpdate(`"version-id":4294967296,"schema-id":0,"timestamp-ms":1,"default-namespace":["bad"]`),
		versionUpdate(`"version-id":2,"schema-id":0,"default-namespace":["bad"]`),
		versionUpdate(`"version-id":2,"timestamp-ms":1,"default-namespace":["bad"]`),
		versionUpdate(`"schema-id":0,"timestamp-ms":1,"default-namespace":["bad"]`),
		versionUpdate(`"version-id":2,"schema-id":0,"timestamp-ms":1,"default-namespace":["a\u0000b"]`),
		manyVersions(1001),
	} {
		r := f.vdo(t, "POST", "/v1/namespaces/bad/views/v", body)
		assert.Equal(t, 400, r.status, "body %d: %s", i, r.body)
		assert.Equal(t, "BadRequestException", r.errorType(t))
	}
	r := f.vdo(t, "POST", "/v1/views/rename", `{"source":{"namespace":["bad"],"name":"v"}}`)
	assert.Equal(t, 400, r.status, "%s", r.body)
	r = f.vdo(t, "POST", "/v1/namespaces/bad/register-view", `{"name":"r"}`)
	assert.Equal(t, 400, r.status, "%s", r.body)

	notFound := []struct {
		method, path string
		body         any
		typ          string
	}{
		{"POST", "/v1/namespaces/nope/views", createViewBody("x", "select 1", "nope"), "NoSuchNamespaceException"},
		{"GET", "/v1/namespaces/nope/views", nil, "NoSuchNamespaceException"},
		{"GET", "/v1/namespaces/bad/views/missing", nil, "NoSuchViewException"},
		{"GET", "/v1/namespaces/nope/views/v", nil, "NoSuchViewException"},
		{"POST", "/v1/namespaces/bad/views/missing", addVersionBody("select 2", "bad"), "NoSuchViewException"},
		{"DELETE", "/v1/namespaces/bad/views/missing", nil, "NoSuchViewException"},
		{"DELETE", "/v1/namespaces/nope/views/v", nil, "NoSuchViewException"},
		{"POST", "/v1/views/rename", map[string]any{"source": map[string]any{"namespace": []string{"bad"}, "name": "missing"},
			"destination": map[string]any{"namespace": []string{"bad"}, "name": "x"}}, "NoSuchViewException"},
		{"POST", "/v1/views/rename", map[string]any{"source": map[string]any{"namespace": []string{"bad"}, "name": "v"},
			"destination": map[string]any{"namespace": []string{"nope"}, "name": "x"}}, "NoSuchNamespaceException"},
	}
	for _, c := range notFound {
		r := f.vdo(t, c.method, c.path, c.body)
		assert.Equal(t, 404, r.status, "%s %s: %s", c.method, c.path, r.body)
		assert.Equal(t, c.typ, r.errorType(t), "%s %s", c.method, c.path)
	}
	assert.Equal(t, 404, f.vdo(t, "HEAD", "/v1/namespaces/bad/views/missing", nil).status)
	assert.Equal(t, before, f.viewsState(t, "bad", "nope"))
}

// versionUpdate is a view commit adding one version with fields (the
// version's other fields aside) and making it current.
func versionUpdate(fields string) string {
	return `{"updates":[{"action":"add-view-version","view-version":{` + fields +
		`,"summary":{},"representations":[{"type":"sql","sql":"select 2","dialect":"spark"}]}},` +
		`{"action":"set-current-view-version","view-version-id":-1}]}`
}

// manyVersions is a view commit adding n versions.
func manyVersions(n int) map[string]any {
	var updates []any
	for i := range n {
		updates = append(updates, map[string]any{"action": "add-view-version", "view-version": map[string]any{
			"version-id": i + 2, "schema-id": 0, "timestamp-ms": 1, "summary": map[string]string{},
			"representations":   []any{map[string]any{"type": "sql", "sql": fmt.Sprintf("select %d", i), "dialect": "spark"}},
			"default-namespace": []string{},
		}})
	}
	return map[string]any{"updates": updates}
}

// Shapes Java's view builder accepts that iceberg-go's would treat
// otherwise: a format-version property is stored as any other; a
// set-location with a trailing '/' is stored without it, as a table's; as
// many versions in one change as the bound allows.
func testViewShapes(t *testing.T, f *node) {
	require.Equal(t, 200, f.vdo(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"shapes"}}).status)
	for _, fv := range []string{"1", "2"} {
		b := createViewBody("fv"+fv, "select 1", "shapes")
		b["properties"] = map[string]string{"format-version": fv, "version.history.num-entries": "5"}
		r := f.vdo(t, "POST", "/v1/namespaces/shapes/views", b)
		require.Equal(t, 200, r.status, "%s", r.body)
		md := r.json(t)["metadata"].(map[string]any)
		assert.Equal(t, float64(1), md["format-version"])
		assert.Equal(t, map[string]any{"format-version": fv, "version.history.num-entries": "5"}, md["properties"])
	}
	r := f.vdo(t, "GET", "/v1/namespaces/shapes/views/fv1", nil)
	require.Equal(t, 200, r.status, "%s", r.body)
	loc := r.json(t)["metadata"].(map[string]any)["location"].(string)
	r = f.vdo(t, "POST", "/v1/namespaces/shapes/views/fv1", map[string]any{"updates": []any{
		map[string]any{"action": "set-location", "location": loc + "/"}}})
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, loc, r.json(t)["metadata"].(map[string]any)["location"])
	r = f.vdo(t, "POST", "/v1/namespaces/shapes/views/fv1", manyVersions(1000))
	require.Equal(t, 200, r.status, "%s", r.body)
}

// registerView points a new view at an existing metadata file, inside a
// location no live table or view holds.
func testRegisterView(t *testing.T, f *node) {
	require.Equal(t, 200, f.vdo(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"rg"}}).status)
	r := f.vdo(t, "POST", "/v1/namespaces/rg/views", createViewBody("a", "select 1", "rg"))
	require.Equal(t, 200, r.status, "%s", r.body)
	loc := r.json(t)["metadata-location"].(string)

	// Held by the live view a: refused.
	r = f.vdo(t, "POST", "/v1/namespaces/rg/register-view", map[string]any{"name": "b", "metadata-location": loc})
	assert.Equal(t, 409, r.status, "%s", r.body)
	assert.Equal(t, "AlreadyExistsException", r.errorType(t))
	assert.Contains(t, string(r.body), "the location of view rg.a")

	require.Equal(t, 204, f.vdo(t, "DELETE", "/v1/namespaces/rg/views/a", nil).status)
	r = f.vdo(t, "POST", "/v1/namespaces/rg/register-view", map[string]any{"name": "b", "metadata-location": loc})
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, loc, r.json(t)["metadata-location"])
	r = f.vdo(t, "GET", "/v1/namespaces/rg/views/b", nil)
	require.Equal(t, 200, r.status)
	assert.Equal(t, loc, r.json(t)["metadata-location"])

	// A gzipped metadata file (write.metadata.compression-codec=gzip)
	// registers and loads; a corrupt one is refused.
	require.Equal(t, 204, f.vdo(t, "DELETE", "/v1/namespaces/rg/views/b", nil).status)
	raw, err := f.objects.Read(context.Background(), loc)
	require.NoError(t, err)
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, err = zw.Write(raw)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	dir := loc[:strings.LastIndex(loc, "/")]
	gz := dir + "/00009-01937a5e-0000-7000-8000-00000000009a.gz.metadata.json"
	require.NoError(t, f.objects.Write(context.Background(), gz, zipped.Bytes()))
	r = f.vdo(t, "POST", "/v1/namespaces/rg/register-view", map[string]any{"name": "g", "metadata-location": gz})
	require.Equal(t, 200, r.status, "%s", r.body)
	r = f.vdo(t, "GET", "/v1/namespaces/rg/views/g", nil)
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, gz, r.json(t)["metadata-location"])
	require.Equal(t, 204, f.vdo(t, "DELETE", "/v1/namespaces/rg/views/g", nil).status)
	bad := dir + "/00010-01937a5e-0000-7000-8000-00000000009b.gz.metadata.json"
	require.NoError(t, f.objects.Write(context.Background(), bad, append([]byte{0x1f, 0x8b}, "not gzip"...)))
	r = f.vdo(t, "POST", "/v1/namespaces/rg/register-view", map[string]any{"name": "h", "metadata-location": bad})
	assert.Equal(t, 400, r.status, "%s", r.body)

	// A file not named *.json is refused though it holds a view's
	// metadata: once the view moved on, a purge in its place would take
	// it for a table's file.
	plain := dir + "/view.meta"
	require.NoError(t, f.objects.Write(context.Background(), plain, raw))
	r = f.vdo(t, "POST", "/v1/namespaces/rg/register-view", map[string]any{"name": "p", "metadata-location": plain})
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), `must contain \".json\"`)
	assert.Equal(t, 404, f.vdo(t, "GET", "/v1/namespaces/rg/views/p", nil).status)

	// A view without a UUID of its own (the nil one) is refused: its
	// first replace would give it a new one while the record kept nil.
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	doc["view-uuid"] = "00000000-0000-0000-0000-000000000000"
	nilUUID, err := json.Marshal(doc)
	require.NoError(t, err)
	nilLoc := dir + "/00011-01937a5e-0000-7000-8000-00000000009c.metadata.json"
	require.NoError(t, f.objects.Write(context.Background(), nilLoc, nilUUID))
	r = f.vdo(t, "POST", "/v1/namespaces/rg/register-view", map[string]any{"name": "z", "metadata-location": nilLoc})
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "nil view-uuid")

	r = f.vdo(t, "POST", "/v1/namespaces/nope/register-view", map[string]any{"name": "c", "metadata-location": loc})
	assert.Equal(t, 404, r.status, "%s", r.body)
	assert.Equal(t, "NoSuchNamespaceException", r.errorType(t))
	r = f.vdo(t, "POST", "/v1/namespaces/rg/register-view", map[string]any{"name": "c", "metadata-location": f.warehouse + "/rg/none/metadata/x.metadata.json"})
	assert.Equal(t, 400, r.status, "%s", r.body)
}

// Concurrent replaces of one view through every node: each loses the
// compare-and-set to the others at most a few times, is rebuilt on the
// newer metadata by the server, and lands.
func testConcurrentViewReplaces(t *testing.T, nodes []*node) {
	f := nodes[0]
	require.Equal(t, 200, f.vdo(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"cc"}}).status)
	r := f.vdo(t, "POST", "/v1/namespaces/cc/views", createViewBody("v", "select 0", "cc"))
	require.Equal(t, 200, r.status, "%s", r.body)
	uuid := r.json(t)["metadata"].(map[string]any)["view-uuid"].(string)

	const writers = 6
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := addVersionBody(fmt.Sprintf("select %d", i+1), "cc")
			body["requirements"] = []any{map[string]any{"type": "assert-view-uuid", "uuid": uuid}}
			r := nodes[i%len(nodes)].vdo(t, "POST", "/v1/namespaces/cc/views/v", body)
			assert.Equal(t, 200, r.status, "%s", r.body)
		}()
	}
	wg.Wait()
	r = f.vdo(t, "GET", "/v1/namespaces/cc/views/v", nil)
	require.Equal(t, 200, r.status)
	meta := r.json(t)["metadata"].(map[string]any)
	var sqls []string
	for _, v := range meta["versions"].([]any) {
		sqls = append(sqls, v.(map[string]any)["representations"].([]any)[0].(map[string]any)["sql"].(string))
	}
	slices.Sort(sqls)
	assert.Equal(t, []string{"select 0", "select 1", "select 2", "select 3", "select 4", "select 5", "select 6"}, sqls)
	m := viewFileRE.FindStringSubmatch(r.json(t)["metadata-location"].(string))
	require.NotNil(t, m)
	assert.Equal(t, fmt.Sprintf("%05d", writers), m[1])
}

// A view change whose metadata file cannot be written applied nothing:
// 503 with Retry-After, as for a table, never the 500 "commit state
// unknown" that makes a client keep files it could clean up.
func TestViewMetadataNotWrittenIs503(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, n.vdo(t, "POST", "/v1/namespaces/a/views", createViewBody("v", "select 1", "a")).status)
	// A regular file where the new metadata directory would be.
	root := strings.TrimPrefix(n.warehouse, "file://")
	for _, dir := range []string{"blocked", "blocked2"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, "a", dir), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, "a", dir, "metadata"), []byte("x"), 0o644))
	}
	before := n.vdo(t, "GET", "/v1/namespaces/a/views/v", nil)
	require.Equal(t, 200, before.status)

	move := map[string]any{"requirements": []any{}, "updates": []any{map[string]any{"action": "set-location", "location": n.warehouse + "/a/blocked"}}}
	r := n.vdo(t, "POST", "/v1/namespaces/a/views/v", move)
	assert.Equal(t, 503, r.status, "%s", r.body)
	assert.Equal(t, "ServiceUnavailableException", r.errorType(t))
	assert.NotEmpty(t, r.header.Get("Retry-After"))

	create := createViewBody("w", "select 1", "a")
	create["location"] = n.warehouse + "/a/blocked2"
	r = n.vdo(t, "POST", "/v1/namespaces/a/views", create)
	assert.Equal(t, 503, r.status, "%s", r.body)
	assert.Equal(t, "ServiceUnavailableException", r.errorType(t))

	after := n.vdo(t, "GET", "/v1/namespaces/a/views/v", nil)
	assert.Equal(t, before.json(t)["metadata-location"], after.json(t)["metadata-location"], "nothing applied")
	gone := n.vdo(t, "GET", "/v1/namespaces/a/views/w", nil)
	assert.Equal(t, 404, gone.status, "%s", gone.body)
}
