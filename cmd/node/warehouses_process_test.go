package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/internal/testenv"
)

// A named warehouse defined in the configuration file, on three real
// nodes with authorization on: the handshake, grants on the whole
// warehouse and on one of its namespaces, and a purge job of the
// warehouse in the operator API.
func TestWarehouseProcesses(t *testing.T) {
	dir := t.TempDir()
	salesRoot := "file://" + filepath.ToSlash(filepath.Join(dir, "sales"))
	cfgPath := filepath.Join(dir, "floe.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("warehouses:\n  sales:\n    location: "+salesRoot+"\n"), 0o600))
	c := startAuthCluster(t, "--config", cfgPath)
	p := c.procs[1]
	ctx := context.Background()

	code, body := c.call(t, p, "", "GET", "/v1/config?warehouse=sales", "")
	require.Equal(t, http.StatusOK, code, "%s", body)
	var cfg struct {
		Overrides map[string]string `json:"overrides"`
	}
	require.NoError(t, json.Unmarshal(body, &cfg))
	assert.Equal(t, "sales", cfg.Overrides["prefix"])
	assert.Equal(t, salesRoot, cfg.Overrides["warehouse"])

	// The root principal through iceberg-go, in the sales warehouse.
	cat, err := rest.NewCatalog(ctx, "floe", "http://"+p.httpAddr, rest.WithOAuthToken(testRootToken), rest.WithWarehouseLocation("sales"))
	require.NoError(t, err)
	require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"shared"}, nil))
	tbl, err := cat.CreateTable(ctx, table.Identifier{"shared", "t"}, testSchema())
	require.NoError(t, err)
	assert.Equal(t, salesRoot+"/shared/t", tbl.Location())

	// ana may write anywhere in sales, and nowhere in the default warehouse.
	anaID, anaSecret := c.newClient(t, p, "ana")
	c.mustCall(t, p, testRootToken, "POST", "/management/v1/auth/grants", `{"grantee":"principal:ana","warehouse":"sales","privilege":"write"}`, http.StatusNoContent)
	// A grant on a warehouse not served, or on the default one by its
	// prefix, would cover nothing: refused. A revoke of one is not.
	for _, wh := range []string{"floe", "Sales", "nope"} {
		body := fmt.Sprintf(`{"grantee":"principal:ana","warehouse":%q,"privilege":"write"}`, wh)
		c.mustCall(t, p, testRootToken, "POST", "/management/v1/auth/grants", body, http.StatusBadRequest)
		c.mustCall(t, p, testRootToken, "POST", "/management/v1/auth/grants/revoke", body, http.StatusNoContent)
	}
	ana := c.oauthToken(t, p, anaID, anaSecret)
	c.mustCall(t, p, ana, "POST", "/v1/sales/namespaces", `{"namespace":["team"]}`, http.StatusOK)
	c.mustCall(t, p, ana, "POST", "/v1/floe/namespaces", `{"namespace":["team"]}`, http.StatusForbidden)
	c.mustCall(t, p, ana, "POST", "/v1/namespaces", `{"namespace":["team"]}`, http.StatusForbidden)
	c.mustCall(t, p, ana, "POST", "/v1/sales/namespaces/team/tables", createTableAt("t", salesRoot+"/elsewhere/t"), http.StatusOK)

	// bob may write in sales's namespace team only, and place tables only
	// under its location.
	bobID, bobSecret := c.newClient(t, p, "bob")
	c.mustCall(t, p, testRootToken, "POST", "/management/v1/auth/grants", `{"grantee":"principal:bob","warehouse":"sales","namespace":["team"],"privilege":"write"}`, http.StatusNoContent)
	bob := c.oauthToken(t, p, bobID, bobSecret)
	c.mustCall(t, p, bob, "POST", "/v1/sales/namespaces/team/tables", createTableAt("u", ""), http.StatusOK)
	c.mustCall(t, p, bob, "POST", "/v1/sales/namespaces/team/tables", createTableAt("v", salesRoot+"/shared/v"), http.StatusForbidden)
	list := c.mustCall(t, p, bob, "GET", "/v1/sales/namespaces", "", http.StatusOK)
	assert.JSONEq(t, `{"namespaces":[["team"]],"next-page-token":null}`, string(list))
	code, _ = c.call(t, p, bob, "GET", "/v1/namespaces/team", "")
	assert.Equal(t, http.StatusNotFound, code, "the default warehouse's team is not bob's")

	// The status page browses the warehouse.
	page := c.mustCall(t, p, testRootToken, "GET", "/ui/catalog?wh=sales", "", http.StatusOK)
	assert.Contains(t, string(page), "shared")
	assert.Contains(t, string(page), "team")
	page = c.mustCall(t, p, testRootToken, "GET", "/ui/catalog", "", http.StatusOK)
	assert.NotContains(t, string(page), "team", "the default warehouse has no namespace team")

	grants := c.mustCall(t, p, testRootToken, "GET", "/management/v1/auth/grants?grantee=principal:bob", "", http.StatusOK)
	assert.JSONEq(t, `{"grants":[{"grantee":"principal:bob","warehouse":"sales","namespace":["team"],"privilege":"write"}]}`, string(grants))

	// A purge in sales is a job of the sales warehouse.
	c.mustCall(t, p, testRootToken, "DELETE", "/v1/sales/namespaces/shared/tables/t?purgeRequested=true", "", http.StatusNoContent)
	jobs := c.mustCall(t, p, testRootToken, "GET", "/management/v1/purge-jobs", "", http.StatusOK)
	var out struct {
		Jobs []struct {
			Warehouse     string   `json:"warehouse"`
			WarehouseName string   `json:"warehouse-name"`
			Namespace     []string `json:"namespace"`
			Table         string   `json:"table"`
		} `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal(jobs, &out))
	require.Len(t, out.Jobs, 1)
	assert.Equal(t, salesRoot, out.Jobs[0].Warehouse)
	assert.Equal(t, "sales", out.Jobs[0].WarehouseName)
	assert.Equal(t, []string{"shared"}, out.Jobs[0].Namespace)
	assert.False(t, strings.ContainsRune(string(jobs), 0x1e), "no stored form leaks")
}

// createTableAt is a createTable request for a one-column table, at
// location unless it is "".
func createTableAt(name, location string) string {
	m := map[string]any{"name": name, "schema": map[string]any{"type": "struct", "schema-id": 0,
		"fields": []any{map[string]any{"id": 1, "name": "id", "type": "long", "required": true}}}}
	if location != "" {
		m["location"] = location
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// A named warehouse on its own S3 server, with its own credentials: the
// nodes write its metadata there, clients are told its endpoint (and no
// secret), and its purge jobs delete there, leaving the default
// warehouse's server alone.
func TestWarehouseOwnS3Processes(t *testing.T) {
	other := testenv.S3(t)
	spec, err := json.Marshal(map[string]any{"sales": map[string]any{
		"location": "s3://" + other.Bucket + "/sales", "s3-endpoint": other.Endpoint, "s3-region": other.Region,
		"s3-access-key-id": other.AccessKeyID, "s3-secret-access-key": other.SecretAccessKey, "s3-path-style": true,
	}})
	require.NoError(t, err)
	c := startS3Cluster(t, "--warehouses", string(spec))
	otherObjects, err := storage.New(other.StorageConfig())
	require.NoError(t, err)
	ctx := context.Background()
	p := c.follower(t)

	cat, err := rest.NewCatalog(ctx, "floe", "http://"+p.httpAddr, rest.WithWarehouseLocation("sales"),
		rest.WithAdditionalProps(iceberg.Properties{"s3.access-key-id": other.AccessKeyID, "s3.secret-access-key": other.SecretAccessKey}))
	require.NoError(t, err)
	require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"ns"}, nil))
	tbl, err := cat.CreateTable(ctx, table.Identifier{"ns", "t"}, testSchema())
	require.NoError(t, err)
	assert.Equal(t, "s3://"+other.Bucket+"/sales/ns/t", tbl.Location())

	// The data files, on the warehouse's own server.
	var dfs []iceberg.DataFile
	for i := range 20 {
		uri := fmt.Sprintf("%s/data/f%02d.parquet", tbl.Location(), i)
		require.NoError(t, otherObjects.Write(ctx, uri, []byte("placeholder")))
		b, err := iceberg.NewDataFileBuilder(*iceberg.UnpartitionedSpec, iceberg.EntryContentData, uri, iceberg.ParquetFile, nil, nil, nil, 1, 11)
		require.NoError(t, err)
		dfs = append(dfs, b.Build())
	}
	tx := tbl.NewTransaction()
	require.NoError(t, tx.AddDataFiles(ctx, dfs, nil))
	tbl, err = tx.Commit(ctx)
	require.NoError(t, err)
	list := func(o *storage.Mux, loc string) []string {
		var out []string
		require.NoError(t, o.List(ctx, loc+"/", func(uri string) error { out = append(out, uri); return nil }))
		return out
	}
	require.Greater(t, len(list(otherObjects, tbl.Location())), 20)

	code, body := c.request(t, p, "GET", "/v1/sales/namespaces/ns/tables/t")
	require.Equal(t, http.StatusOK, code, "%s", body)
	var loaded struct {
		Config map[string]string `json:"config"`
	}
	require.NoError(t, json.Unmarshal(body, &loaded))
	assert.Equal(t, other.Endpoint, loaded.Config["s3.endpoint"], "clients are told the warehouse's own endpoint")
	assert.NotContains(t, string(body), other.SecretAccessKey)

	// The default warehouse's table of the same name, on the node's server.
	loc, files := c.makeTable(t, p, "ns", "t", 1, 5)

	code, body = c.request(t, p, "DELETE", "/v1/sales/namespaces/ns/tables/t?purgeRequested=true", "X-Gravitino-Async-Purge", "true")
	require.Equal(t, http.StatusNoContent, code, "%s", body)
	require.Eventually(t, func() bool {
		code, body, err := c.do(p, http.MethodGet, "/management/v1/purge-jobs?warehouse-name=sales&namespace=ns&table=t", "")
		return err == nil && code == http.StatusOK && strings.Contains(string(body), `"state":"SUCCEEDED"`)
	}, 60*time.Second, 50*time.Millisecond, "the sales purge job never succeeded")
	assert.Empty(t, list(otherObjects, tbl.Location()), "the warehouse's files are gone from its own server")
	assert.Equal(t, files, c.list(t, loc), "the default warehouse's table of the same name keeps every file")
}
