package catalog_test

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	icecatalog "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/catalog"
	"github.com/floe-catalog/floe/fsm"
)

// Two warehouses on one three-node cluster, through a follower: each its
// own namespaces, tables, storage root and allowed locations, reached by
// the prefix /v1/config?warehouse= hands out; a location still belongs to
// one table across warehouses.
func TestWarehouses(t *testing.T) {
	forEachWarehouse(t, func(t *testing.T, wh warehouse) {
		var root string
		nodes := startClusterWith(t, wh, 3, func(uri string) []catalog.Warehouse {
			root = uri
			// sales may also place tables in the default warehouse's tree,
			// so that location ownership across warehouses is exercised.
			return []catalog.Warehouse{{Name: "sales", Location: uri + "-sales/", AllowedLocations: []string{uri + "-sales", uri}}}
		})
		f := follower(t, nodes)
		ctx := context.Background()

		// The handshake.
		cfg := f.do(t, "GET", "/v1/config?warehouse=sales", nil)
		require.Equal(t, 200, cfg.status, string(cfg.body))
		over := cfg.json(t)["overrides"].(map[string]any)
		assert.Equal(t, "sales", over["prefix"])
		assert.Equal(t, root+"-sales", over["warehouse"])
		cfg = f.do(t, "GET", "/v1/config?warehouse="+root+"-sales/", nil)
		assert.Equal(t, "sales", cfg.json(t)["overrides"].(map[string]any)["prefix"], "a warehouse named by its location")
		respelled := strings.NewReplacer("s3://", "s3a://", "file:///", "file:/").Replace(root)
		require.NotEqual(t, root, respelled)
		cfg = f.do(t, "GET", "/v1/config?warehouse="+url.QueryEscape(respelled+"-sales"), nil)
		require.Equal(t, 200, cfg.status, string(cfg.body))
		assert.Equal(t, "sales", cfg.json(t)["overrides"].(map[string]any)["prefix"], "a warehouse named by another spelling of its location")
		cfg = f.do(t, "GET", "/v1/config", nil)
		assert.Equal(t, "floe", cfg.json(t)["overrides"].(map[string]any)["prefix"], "no warehouse: the default one")
		for _, path := range []string{"/v1/config?warehouse=nope", "/v1/nope/namespaces"} {
			r := f.do(t, "GET", path, nil)
			assert.Equal(t, 404, r.status, path)
			assert.Equal(t, "NoSuchWarehouseException", r.errorType(t), path)
		}

		def := f.catalog(t)
		sales := f.catalog(t, rest.WithWarehouseLocation("sales"))
		require.NoError(t, def.CreateNamespace(ctx, table.Identifier{"a"}, nil))
		require.NoError(t, sales.CreateNamespace(ctx, table.Identifier{"a"}, iceberg.Properties{"owner": "sales"}))
		require.NoError(t, sales.CreateNamespace(ctx, table.Identifier{"only"}, nil))
		require.NoError(t, sales.CreateNamespace(ctx, table.Identifier{"only", "child"}, nil))

		tDef, err := def.CreateTable(ctx, table.Identifier{"a", "t"}, rowSchema)
		require.NoError(t, err)
		tSales, err := sales.CreateTable(ctx, table.Identifier{"a", "t"}, rowSchema)
		require.NoError(t, err, "the same name in another warehouse is another table")
		assert.Equal(t, root+"/a/t", tDef.Location())
		assert.Equal(t, root+"-sales/a/t", tSales.Location(), "a table's default location is under its warehouse's root")
		assert.NotEqual(t, tDef.Metadata().TableUUID(), tSales.Metadata().TableUUID())

		// Each warehouse lists its own.
		nsDef, err := def.ListNamespaces(ctx, nil)
		require.NoError(t, err)
		assert.Equal(t, []table.Identifier{{"a"}}, nsDef)
		nsSales, err := sales.ListNamespaces(ctx, nil)
		require.NoError(t, err)
		assert.ElementsMatch(t, []table.Identifier{{"a"}, {"only"}}, nsSales)
		child, err := sales.ListNamespaces(ctx, table.Identifier{"only"})
		require.NoError(t, err)
		assert.Equal(t, []table.Identifier{{"only", "child"}}, child)
		props, err := sales.LoadNamespaceProperties(ctx, table.Identifier{"a"})
		require.NoError(t, err)
		assert.Equal(t, "sales", props["owner"])
		_, err = def.LoadNamespaceProperties(ctx, table.Identifier{"only"})
		assert.ErrorIs(t, err, icecatalog.ErrNoSuchNamespace)
		ids, err := collect(sales.ListTables(ctx, table.Identifier{"a"}))
		require.NoError(t, err)
		assert.Equal(t, []table.Identifier{{"a", "t"}}, ids)
		loaded, err := sales.LoadTable(ctx, table.Identifier{"a", "t"})
		require.NoError(t, err)
		assert.Equal(t, tSales.Location(), loaded.Location())
		r := f.do(t, "GET", "/v1/sales/namespaces/a/tables/missing", nil)
		assert.Equal(t, 404, r.status)
		assert.NotContains(t, string(r.body), "sales:", "a warehouse's own names read as the client wrote them")

		// Allowed locations are the warehouse's; a location belongs to one
		// table whichever warehouse holds it.
		create := func(name, loc string) map[string]any {
			return map[string]any{"name": name, "location": loc, "schema": map[string]any{"type": "struct", "schema-id": 0,
				"fields": []any{map[string]any{"id": 1, "name": "id", "type": "long", "required": true}}}}
		}
		r = f.do(t, "POST", "/v1/namespaces/a/tables", create("x", root+"-sales/a/x"))
		assert.Equal(t, 400, r.status, "the default warehouse may not place tables in sales's tree: %s", r.body)
		r = f.do(t, "POST", "/v1/sales/namespaces/a/tables", create("x", root+"/a/t"))
		assert.Equal(t, 409, r.status, "the default warehouse's table holds that location: %s", r.body)
		r = f.do(t, "POST", "/v1/sales/namespaces/a/tables", create("x", root+"-other/x"))
		assert.Equal(t, 400, r.status, "outside every allowed location of sales: %s", r.body)

		// One Idempotency-Key on the same request in two warehouses is two
		// requests: the second is refused, never answered with the first's
		// outcome.
		key := uuid.Must(uuid.NewV7()).String()
		body := map[string]any{"namespace": []string{"keyed"}}
		r = f.do(t, "POST", "/v1/namespaces", body, "Idempotency-Key", key)
		require.Equal(t, 200, r.status, string(r.body))
		r = f.doRaw(t, "POST", "/v1/sales/namespaces", body, "Idempotency-Key", key)
		assert.Equal(t, 422, r.status, string(r.body))
		_, err = sales.LoadNamespaceProperties(ctx, table.Identifier{"keyed"})
		assert.ErrorIs(t, err, icecatalog.ErrNoSuchNamespace)

		// A purge in sales is a job of sales's warehouse, and leaves the
		// default warehouse's table of the same name alone.
		require.NoError(t, sales.PurgeTable(ctx, table.Identifier{"a", "t"}))
		var jobs []fsm.PurgeJob
		require.NoError(t, f.raft.Read(ctx, func(rd *fsm.Reader) error {
			jobs, _ = rd.PurgeJobs(fsm.PurgeJobFilter{}, 0)
			return nil
		}))
		require.Len(t, jobs, 1)
		assert.Equal(t, root+"-sales", jobs[0].Warehouse)
		assert.Equal(t, fsm.InWarehouse("sales", []string{"a"}), jobs[0].Ident.Namespace)
		still, err := def.LoadTable(ctx, table.Identifier{"a", "t"})
		require.NoError(t, err)
		_, err = f.objects.Read(ctx, still.MetadataLocation())
		require.NoError(t, err, "the default warehouse's table keeps its files")

		require.NoError(t, sales.DropNamespace(ctx, table.Identifier{"a"}))
		_, err = def.LoadNamespaceProperties(ctx, table.Identifier{"a"})
		require.NoError(t, err, "dropping sales's namespace a leaves the default's")
		err = def.DropNamespace(ctx, table.Identifier{"a"})
		assert.True(t, errors.Is(err, icecatalog.ErrNamespaceNotEmpty), "%v", err)
	})
}

// TestPrefixesAsClientsEscapeThem: a warehouse's prefix is served however
// a client spells it in the path: as written, or percent-encoded where
// clients encode (non-ASCII letters always are on the wire; "~" and ";"
// by some clients).
func TestPrefixesAsClientsEscapeThem(t *testing.T) {
	nodes := startClusterWith(t, warehouses()[0], 1, func(uri string) []catalog.Warehouse {
		return []catalog.Warehouse{
			{Name: "sälës", Location: uri + "-a/"},
			{Name: "t~1", Location: uri + "-b/"},
			{Name: "x;y", Location: uri + "-c/"},
		}
	})
	n := nodes[0]
	for i, tc := range []struct{ prefix, spelling string }{
		{"sälës", "s%C3%A4l%C3%ABs"}, {"sälës", "s%c3%a4l%c3%abs"},
		{"t~1", "t~1"}, {"t~1", "t%7E1"},
		{"x;y", "x;y"}, {"x;y", "x%3By"},
	} {
		r := n.do(t, "POST", "/v1/"+tc.spelling+"/namespaces", map[string]any{"namespace": []string{"ns" + strconv.Itoa(i)}})
		require.Equal(t, 200, r.status, "%s: %s", tc.spelling, r.body)
		r = n.do(t, "GET", "/v1/"+tc.spelling+"/namespaces", nil)
		require.Equal(t, 200, r.status, "%s: %s", tc.spelling, r.body)
		r = n.do(t, "GET", "/v1/config?warehouse="+url.QueryEscape(tc.prefix), nil)
		require.Equal(t, 200, r.status, string(r.body))
		assert.Equal(t, tc.prefix, r.json(t)["overrides"].(map[string]any)["prefix"])
	}
	// The namespaces went to the warehouse the prefix names, whatever the
	// spelling.
	r := n.do(t, "GET", "/v1/t~1/namespaces", nil)
	assert.Len(t, r.json(t)["namespaces"], 2, string(r.body))
	r = n.do(t, "GET", "/v1/s%E2%82%ACx/namespaces", nil)
	assert.Equal(t, 404, r.status)
	assert.Equal(t, "NoSuchWarehouseException", r.errorType(t))
}
