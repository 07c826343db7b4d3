package spectest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tableMetadata returns realistic table metadata JSON written by iceberg-go.
func tableMetadata(t *testing.T) string {
	t.Helper()
	sc := iceberg.NewSchema(0,
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "ts", Type: iceberg.PrimitiveTypes.TimestampTz},
		iceberg.NestedField{ID: 3, Name: "amount", Type: iceberg.DecimalTypeOf(10, 2)},
		iceberg.NestedField{ID: 4, Name: "tags", Type: &iceberg.ListType{ElementID: 5, Element: iceberg.PrimitiveTypes.String}},
	)
	spec := iceberg.NewPartitionSpec(iceberg.PartitionField{
		SourceIDs: []int{2}, FieldID: 1000, Name: "ts_day", Transform: iceberg.DayTransform{},
	})
	md, err := table.NewMetadata(sc, &spec, table.UnsortedSortOrder, "file:///tmp/wh/a/t", iceberg.Properties{"owner": "floe"})
	require.NoError(t, err)
	b, err := json.Marshal(md)
	require.NoError(t, err)
	return string(b)
}

// TestIcebergGoClient plugs the validating transport into iceberg-go's REST
// client the way the package documentation describes.
func TestIcebergGoClient(t *testing.T) {
	md := tableMetadata(t)
	loadTable := `{"metadata-location":"file:///tmp/wh/a/t/metadata/00000.metadata.json","metadata":` + md + `,"config":{}}`
	staged := `{"metadata-location":null,"metadata":` + md + `}`
	srv := fakeServer(t, map[string]canned{
		// No "endpoints": the client assumes the default set.
		"GET /v1/config":                   {status: 200, body: `{"defaults":{},"overrides":{}}`},
		"POST /v1/namespaces":              {status: 200, body: `{"namespace":["a"],"properties":{"owner":"floe"}}`},
		"GET /v1/namespaces/a":             {status: 200, body: loadNamespaceOK},
		"GET /v1/namespaces/missing":       {status: 404, body: noSuchNamespace},
		"GET /v1/namespaces/a/tables/t":    {status: 200, body: loadTable},
		"GET /v1/namespaces/a/tables/s":    {status: 200, body: staged},
		"DELETE /v1/namespaces/a/tables/t": {status: 204},
	})

	tr := Wrap(t, nil)
	ctx := context.Background()
	cat, err := rest.NewCatalog(ctx, "floe", srv.URL, rest.WithCustomTransport(tr))
	require.NoError(t, err)

	require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"a"}, iceberg.Properties{"owner": "floe"}))
	props, err := cat.LoadNamespaceProperties(ctx, table.Identifier{"a"})
	require.NoError(t, err)
	assert.Equal(t, "floe", props["owner"])
	exists, err := cat.CheckNamespaceExists(ctx, table.Identifier{"a"})
	require.NoError(t, err)
	assert.True(t, exists)
	_, err = cat.LoadNamespaceProperties(ctx, table.Identifier{"missing"})
	require.ErrorIs(t, err, catalog.ErrNoSuchNamespace)
	tbl, err := cat.LoadTable(ctx, table.Identifier{"a", "t"})
	require.NoError(t, err)
	assert.Equal(t, "file:///tmp/wh/a/t", tbl.Metadata().Location())
	// metadata-location is nullable (staged tables); the spec says so with
	// the OpenAPI 3.0 keyword that the loader relaxes.
	require.NoError(t, tr.v.Check(httptest.NewRequest(http.MethodGet, "/v1/namespaces/a/tables/s", nil),
		jsonResponse(200, staged), []byte(staged)))
	require.NoError(t, cat.DropTable(ctx, table.Identifier{"a", "t"}))

	assert.Equal(t, 0, tr.Failures())
	assert.Equal(t, 7, tr.Count())
	assert.Equal(t, map[string]int{
		"getConfig":             1,
		"createNamespace":       1,
		"loadNamespaceMetadata": 3, // iceberg-go checks existence with a GET
		"loadTable":             1,
		"dropTable":             1,
	}, tr.Operations())
}

// TestIcebergGoClientReportsViolations shows that a violation is reported
// even when iceberg-go itself accepts the response.
func TestIcebergGoClientReportsViolations(t *testing.T) {
	md := tableMetadata(t)
	// StorageCredential requires "config"; iceberg-go does not care.
	loadTable := `{"metadata-location":"file:///tmp/wh/a/t/metadata/00000.metadata.json","metadata":` + md +
		`,"storage-credentials":[{"prefix":"file:///tmp/wh"}]}`
	srv := fakeServer(t, map[string]canned{
		"GET /v1/config":                {status: 200, body: `{"defaults":{},"overrides":{}}`},
		"GET /v1/namespaces/a/tables/t": {status: 200, body: loadTable},
	})
	rec := &recorder{TB: t}
	tr := Wrap(rec, nil)
	cat, err := rest.NewCatalog(context.Background(), "floe", srv.URL, rest.WithCustomTransport(tr))
	require.NoError(t, err)
	_, err = cat.LoadTable(context.Background(), table.Identifier{"a", "t"})
	require.NoError(t, err, "iceberg-go accepts the response")

	errs := rec.errors()
	require.Len(t, errs, 1)
	assert.Contains(t, errs[0], "GET /v1/namespaces/a/tables/t -> 200")
	assert.Contains(t, errs[0], "loadTable")
	assert.Contains(t, errs[0], "config")
	assert.Equal(t, 2, tr.Count())

	// Table metadata itself is validated: table-uuid is required.
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(md), &m))
	delete(m, "table-uuid")
	noUUID, err := json.Marshal(m)
	require.NoError(t, err)
	body := `{"metadata":` + string(noUUID) + `}`
	req := httptest.NewRequest(http.MethodGet, "/v1/namespaces/a/tables/t", nil)
	err = tr.v.Check(req, jsonResponse(200, body), []byte(body))
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "table-uuid"), err.Error())
}
