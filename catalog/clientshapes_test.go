package catalog_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/spectest"
)

// TestClientShapes replays, against a running node, the requests that the
// major Iceberg REST clients build: the exact method, path, query, headers
// and body each one sends for each catalog call, read from its source.
// Every row names the client call that sends it; each client's rows run in
// order against a node of their own, so later rows use what earlier ones
// created (a table's UUID, a metadata location, a page token).
//
// Sources read (public repositories and packages):
//
//   - Java (org.apache.iceberg.rest): RESTSessionCatalog.java at
//     singhpk234/iceberg 0ff2bc11d09a, HTTPClient.java at 14ba08e672df,
//     RESTUtil.java at 87f29b6bd251, RESTTableOperations.java at
//     8cb436cdebf7 (1.11 development line); ResourcePaths.java at
//     laskoviymishka/iceberg 037d84e060c3; the 1.5-era HTTPClient.java at
//     apache/iceberg 2fb6c29e3432 (before config endpoints were honoured).
//   - PyIceberg 0.10 (apache/iceberg-python main 002d70446a1f):
//     pyiceberg/catalog/rest/__init__.py, response.py (19c89e7f4273).
//   - PyIceberg 0.5-0.6 (apache/iceberg-python): Table._do_commit in
//     pyiceberg/table/__init__.py builds the body's identifier from the
//     table's, which RestCatalog._response_to_table prefixes with the
//     catalog name; later releases strip it before sending
//     (_remove_catalog_name_from_table_request_identifier).
//   - iceberg-go v0.7.0 (this module's dependency): catalog/rest/rest.go,
//     endpoints.go, metrics_reporter.go.
//   - iceberg-rust (apache/iceberg-rust): crates/catalog/rest/src/catalog.rs
//     at 7fde14835a04, client.rs at f6cfca02b3b4, types.rs at eb505e8eac4a;
//     the older prefix-less endpoints (NamespaceIdent::encode_in_url).
//   - iceberg-js 1.0.0 (npm iceberg-js, supabase/iceberg-js): dist/index.mjs.
func TestClientShapes(t *testing.T) {
	clients := []struct {
		name   string
		shapes []shape
	}{
		{"java", javaShapes},
		{"pyiceberg", pyicebergShapes},
		{"iceberg-go", icebergGoShapes},
		{"iceberg-rust", icebergRustShapes},
		{"iceberg-js", icebergJSShapes},
	}
	total := 0
	for _, c := range clients {
		total += len(c.shapes)
		t.Run(c.name, func(t *testing.T) {
			n := startNode(t, warehouses()[0])
			v := vars{"warehouse": n.warehouse, "warehouse-q": url.QueryEscape(n.warehouse)}
			for i, s := range c.shapes {
				v["now"] = strconv.FormatInt(time.Now().UnixMilli(), 10)
				t.Run(fmt.Sprintf("%02d_%s", i, s.call), func(t *testing.T) { s.replay(t, n, v) })
			}
		})
	}
	assert.GreaterOrEqual(t, total, 100)
}

// shape is one request exactly as a client sends it, and what floe must
// answer.
type shape struct {
	call    string   // the client method that sends the request
	method  string   // HTTP method
	target  string   // path and query; {{name}} stands for a saved value
	headers []string // name, value pairs, as the client sets them
	body    string   // "" for none; {{name}} stands for a saved value
	status  int
	errType string // the Iceberg error type of an error answer
	// raw marks an answer that is not validated against the spec: one the
	// spec does not list for the route (406 where it does not mark the
	// operation unsupported, a redirect), or one whose schema the spec gets
	// wrong (see the Java view rows).
	raw    bool
	checks []check
}

type vars map[string]string

func (v vars) expand(s string) string {
	for k, val := range v {
		s = strings.ReplaceAll(s, "{{"+k+"}}", val)
	}
	return s
}

type check func(t *testing.T, r response, v vars)

func (s shape) replay(t *testing.T, n *node, v vars) {
	var body io.Reader
	if s.body != "" {
		body = strings.NewReader(v.expand(s.body))
	}
	req, err := http.NewRequest(s.method, n.URL+v.expand(s.target), body)
	require.NoError(t, err)
	for i := 0; i+1 < len(s.headers); i += 2 {
		req.Header.Set(s.headers[i], v.expand(s.headers[i+1]))
	}
	var tr http.RoundTripper = http.DefaultTransport
	if !s.raw {
		tr = spectest.Wrap(t, nil)
	}
	// No client here follows a redirect for a catalog call (a POST turned
	// into a GET would be a different call), so none is followed.
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := response{status: resp.StatusCode, header: resp.Header, body: raw}
	require.Equal(t, s.status, r.status, "%s %s: %s", s.method, req.URL.RequestURI(), raw)
	if s.errType != "" {
		assert.Equal(t, s.errType, r.errorType(t))
	}
	if s.method == http.MethodHead || r.status == http.StatusNoContent || r.status == http.StatusNotModified {
		assert.Empty(t, r.body, "a %d answer to %s has no body", r.status, s.method)
	}
	for _, c := range s.checks {
		c(t, r, v)
	}
}

// at returns the JSON value at path in r's body (object keys or array
// indexes).
func at(t *testing.T, r response, path ...string) any {
	t.Helper()
	var cur any
	require.NoError(t, json.Unmarshal(r.body, &cur), "body: %s", r.body)
	for _, p := range path {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[p]
		case []any:
			i, err := strconv.Atoi(p)
			require.NoError(t, err)
			require.Less(t, i, len(c), "body: %s", r.body)
			cur = c[i]
		default:
			t.Fatalf("no %q in %s", p, r.body)
		}
	}
	return cur
}

// is checks the JSON value at path; want is compared with the value after
// a round trip through JSON, so []string and map[string]string match.
func is(want any, path ...string) check {
	return func(t *testing.T, r response, v vars) {
		if s, ok := want.(string); ok {
			want = v.expand(s)
		}
		raw, err := json.Marshal(want)
		require.NoError(t, err)
		var norm any
		require.NoError(t, json.Unmarshal(raw, &norm))
		assert.Equal(t, norm, at(t, r, path...), "at %v in %s", path, r.body)
	}
}

// absent checks that the body has no value (or null) at path.
func absent(path ...string) check {
	return func(t *testing.T, r response, _ vars) {
		assert.Nil(t, at(t, r, path...), "at %v in %s", path, r.body)
	}
}

// nullKey checks that the body's top level has key, with the value null.
func nullKey(key string) check {
	return func(t *testing.T, r response, _ vars) {
		var top map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(r.body, &top), "body: %s", r.body)
		v, ok := top[key]
		assert.True(t, ok && string(v) == "null", "want %q: null in %s", key, r.body)
	}
}

// present checks that the body has a non-null value at path.
func present(path ...string) check {
	return func(t *testing.T, r response, _ vars) {
		assert.NotNil(t, at(t, r, path...), "at %v in %s", path, r.body)
	}
}

// save keeps the value at path (a string or a number) as {{name}}.
func save(name string, path ...string) check {
	return func(t *testing.T, r response, v vars) {
		switch val := at(t, r, path...).(type) {
		case string:
			v[name] = val
		case float64:
			v[name] = strconv.FormatFloat(val, 'f', -1, 64)
		default:
			t.Fatalf("cannot save %T at %v from %s", val, path, r.body)
		}
	}
}

// saveHeader keeps a response header as {{name}}.
func saveHeader(name, header string) check {
	return func(t *testing.T, r response, v vars) {
		require.NotEmpty(t, r.header.Get(header), "no %s header", header)
		v[name] = r.header.Get(header)
	}
}

// hasHeader checks a response header's value.
func hasHeader(name, want string) check {
	return func(t *testing.T, r response, v vars) {
		assert.Equal(t, v.expand(want), r.header.Get(name))
	}
}

// changed checks that the value at path differs from the saved {{name}}.
func changed(name string, path ...string) check {
	return func(t *testing.T, r response, v vars) {
		assert.NotEqual(t, v[name], at(t, r, path...))
	}
}

// lists checks that the array at path has n entries.
func lists(n int, path ...string) check {
	return func(t *testing.T, r response, _ vars) {
		list, ok := at(t, r, path...).([]any)
		require.True(t, ok, "no array at %v in %s", path, r.body)
		assert.Len(t, list, n, "at %v in %s", path, r.body)
	}
}

// advertises checks that /v1/config lists an endpoint.
func advertises(endpoint string) check {
	return func(t *testing.T, r response, _ vars) {
		assert.Contains(t, at(t, r, "endpoints"), endpoint)
	}
}

// with returns the client's headers plus more (name, value pairs).
func with(base []string, more ...string) []string {
	return append(append([]string{}, base...), more...)
}

// The config answer every client reads: the prefix and the namespace
// separator are overrides, the endpoints drive what clients call at all.
var configChecks = []check{
	is("floe", "overrides", "prefix"),
	is("%2E", "overrides", "namespace-separator"),
	is(map[string]string{}, "defaults"),
	advertises("HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}"),
	advertises("POST /v1/{prefix}/transactions/commit"),
}

// ---------------------------------------------------------------------------
// Java: org.apache.iceberg.rest (Spark, Flink, Trino and the other JVM
// engines). HTTPClient.buildRequest sets Accept and Content-Type:
// application/json on every request, bodies or not; HTTPClient.Builder.build
// adds X-Client-Version (IcebergBuild.fullVersion) and
// X-Client-Git-Commit-Short. Paths come from ResourcePaths: the prefix from
// the config overrides, namespaces joined by the advertised separator
// (ResourcePaths.forCatalogProperties, RESTUtil.encodeNamespace; %1F in
// releases that do not read namespace-separator), names form-encoded
// (RESTUtil.encodeString, URLEncoder).

var javaHeaders = []string{
	"Accept", "application/json",
	"Content-Type", "application/json",
	"X-Client-Version", "Apache Iceberg 1.11.0-SNAPSHOT (commit 0ff2bc11d09ab7dc514f9a5e889af837f1545af0)",
	"X-Client-Git-Commit-Short", "0ff2bc1",
	"User-Agent", "Apache-HttpClient/5.4.4 (Java/17.0.14)",
}

// SchemaParser.toJson.
const javaSchema = `{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","required":true,"type":"long"},{"id":2,"name":"data","required":false,"type":"string"}]}`

var javaShapes = []shape{
	// RESTSessionCatalog.fetchConfig: the client's warehouse property as
	// ?warehouse=, on the bootstrap client, before any auth session.
	{call: "fetchConfig", method: "GET", target: "/v1/config?warehouse={{warehouse-q}}", headers: javaHeaders,
		status: 200, checks: configChecks},
	// The same with the warehouse configured with a trailing slash
	// (spark.sql.catalog.x.warehouse=s3://bucket/wh/ is passed on as is).
	{call: "fetchConfig", method: "GET", target: "/v1/config?warehouse={{warehouse-q}}%2F", headers: javaHeaders,
		status: 200, checks: []check{is("floe", "overrides", "prefix")}},
	// A logical warehouse name: the catalog's prefix.
	{call: "fetchConfig", method: "GET", target: "/v1/config?warehouse=floe", headers: javaHeaders,
		status: 200, checks: []check{is("floe", "overrides", "prefix")}},
	{call: "fetchConfig", method: "GET", target: "/v1/config?warehouse=elsewhere", headers: javaHeaders,
		status: 404, errType: "NoSuchWarehouseException"},
	// createNamespace: CreateNamespaceRequest.
	{call: "createNamespace", method: "POST", target: "/v1/floe/namespaces", headers: javaHeaders,
		body:   `{"namespace":["jdb"],"properties":{"owner":"spark"}}`,
		status: 200, checks: []check{is([]string{"jdb"}, "namespace"), is("spark", "properties", "owner")}},
	{call: "createNamespace", method: "POST", target: "/v1/floe/namespaces", headers: javaHeaders,
		body: `{"namespace":["jdb","inner"],"properties":{}}`, status: 200},
	{call: "createNamespace", method: "POST", target: "/v1/floe/namespaces", headers: javaHeaders,
		body: `{"namespace":["jdb2"],"properties":{}}`, status: 200},
	{call: "createNamespace", method: "POST", target: "/v1/floe/namespaces", headers: javaHeaders,
		body: `{"namespace":["jdb"],"properties":{}}`, status: 409, errType: "AlreadyExistsException"},
	// namespaceExists (when HEAD is advertised): %1F from releases that do
	// not read namespace-separator, the advertised %2E from those that do.
	{call: "namespaceExists", method: "HEAD", target: "/v1/floe/namespaces/jdb%1Finner", headers: javaHeaders, status: 204},
	{call: "namespaceExists", method: "HEAD", target: "/v1/floe/namespaces/jdb%2Einner", headers: javaHeaders, status: 204},
	{call: "namespaceExists", method: "HEAD", target: "/v1/floe/namespaces/jdb%2Emissing", headers: javaHeaders, status: 404},
	{call: "loadNamespaceMetadata", method: "GET", target: "/v1/floe/namespaces/jdb", headers: javaHeaders,
		status: 200, checks: []check{is("spark", "properties", "owner")}},
	// listNamespaces: pageToken is sent empty on the first call; parent is
	// joined with the unit separator (RESTUtil.namespaceToQueryParam).
	{call: "listNamespaces", method: "GET", target: "/v1/floe/namespaces?pageToken=", headers: javaHeaders,
		status: 200, checks: []check{is([][]string{{"jdb"}, {"jdb2"}}, "namespaces"), absent("next-page-token")}},
	{call: "listNamespaces", method: "GET", target: "/v1/floe/namespaces?parent=jdb&pageToken=", headers: javaHeaders,
		status: 200, checks: []check{is([][]string{{"jdb", "inner"}}, "namespaces")}},
	{call: "listNamespaces", method: "GET", target: "/v1/floe/namespaces?parent=jdb%1Finner&pageToken=", headers: javaHeaders,
		status: 200, checks: []check{lists(0, "namespaces")}},
	// 1.7.0 alone joined the levels with the text "%1F" and escaped that
	// again (apache/iceberg#10858, reverted in 1.7.1).
	{call: "listNamespaces", method: "GET", target: "/v1/floe/namespaces?parent=jdb%251Finner&pageToken=", headers: javaHeaders,
		status: 200, checks: []check{lists(0, "namespaces")}},
	{call: "listNamespaces", method: "GET", target: "/v1/floe/namespaces?parent=jdb%251fmissing&pageToken=", headers: javaHeaders,
		status: 404, errType: "NoSuchNamespaceException"},
	// rest-page-size=1: pageSize on every call, then the token as given.
	{call: "listNamespaces", method: "GET", target: "/v1/floe/namespaces?pageToken=&pageSize=1", headers: javaHeaders,
		status: 200, checks: []check{is([][]string{{"jdb"}}, "namespaces"), save("ns-token", "next-page-token")}},
	{call: "listNamespaces", method: "GET", target: "/v1/floe/namespaces?pageToken={{ns-token}}&pageSize=1", headers: javaHeaders,
		status: 200, checks: []check{is([][]string{{"jdb2"}}, "namespaces"), absent("next-page-token")}},
	{call: "listNamespaces", method: "GET", target: "/v1/floe/namespaces?parent=nope&pageToken=", headers: javaHeaders,
		status: 404, errType: "NoSuchNamespaceException"},
	// updateNamespaceMetadata: UpdateNamespacePropertiesRequest.
	{call: "updateNamespaceMetadata", method: "POST", target: "/v1/floe/namespaces/jdb/properties", headers: javaHeaders,
		body:   `{"removals":["gone"],"updates":{"comment":"from spark"}}`,
		status: 200, checks: []check{is([]string{"comment"}, "updated"), is([]string{"gone"}, "missing")}},
	// Builder.create: CreateTableRequest.
	{call: "createTable", method: "POST", target: "/v1/floe/namespaces/jdb/tables", headers: javaHeaders,
		body: `{"name":"events","location":null,"schema":` + javaSchema + `,` +
			`"partition-spec":{"spec-id":0,"fields":[{"name":"id_bucket","transform":"bucket[16]","source-id":1,"field-id":1000}]},` +
			`"write-order":{"order-id":1,"fields":[{"transform":"identity","source-id":1,"direction":"asc","null-order":"nulls-first"}]},` +
			`"stage-create":false,"properties":{"write.format.default":"parquet","owner":"spark"}}`,
		status: 200, checks: []check{save("uuid", "metadata", "table-uuid"), save("loc", "metadata", "location"),
			save("mdloc", "metadata-location")}},
	{call: "createTable", method: "POST", target: "/v1/floe/namespaces/jdb/tables", headers: javaHeaders,
		body:   `{"name":"other","schema":` + javaSchema + `,"partition-spec":{"spec-id":0,"fields":[]},"write-order":{"order-id":0,"fields":[]},"properties":{}}`,
		status: 200, checks: []check{save("other-mdloc", "metadata-location")}},
	// Spark's CREATE TABLE … PARTITIONED BY (bucket(16, id)) ORDERED BY id:
	// SparkTypeToType numbers a new table's top-level columns from 0, and
	// the spec and order refer to those ids. The catalog assigns fresh ids
	// (1 and 2) and rebinds both by column name.
	{call: "createTable (Spark)", method: "POST", target: "/v1/floe/namespaces/jdb%1Finner/tables", headers: javaHeaders,
		body: `{"name":"spark0","location":null,"schema":{"type":"struct","schema-id":0,"fields":[{"id":0,"name":"id","required":false,"type":"long"},{"id":1,"name":"data","required":false,"type":"string"}]},` +
			`"partition-spec":{"spec-id":0,"fields":[{"name":"id_bucket","transform":"bucket[16]","source-id":0,"field-id":1000}]},` +
			`"write-order":{"order-id":1,"fields":[{"transform":"identity","source-id":0,"direction":"asc","null-order":"nulls-first"}]},` +
			`"stage-create":false,"properties":{"owner":"spark"}}`,
		status: 200, checks: []check{is(1.0, "metadata", "schemas", "0", "fields", "0", "id"), is("id", "metadata", "schemas", "0", "fields", "0", "name"),
			is(1.0, "metadata", "partition-specs", "0", "fields", "0", "source-id"),
			is(1.0, "metadata", "sort-orders", "0", "fields", "0", "source-id")}},
	// The same as a CTAS's stage-create.
	{call: "stageCreate (Spark)", method: "POST", target: "/v1/floe/namespaces/jdb%1Finner/tables", headers: javaHeaders,
		body: `{"name":"spark0ctas","location":null,"schema":{"type":"struct","schema-id":0,"fields":[{"id":0,"name":"id","required":false,"type":"long"},{"id":1,"name":"data","required":false,"type":"string"}]},` +
			`"partition-spec":{"spec-id":0,"fields":[{"name":"id","transform":"identity","source-id":0,"field-id":1000}]},` +
			`"write-order":{"order-id":0,"fields":[]},"stage-create":true,"properties":{}}`,
		status: 200, checks: []check{nullKey("metadata-location"), is(1.0, "metadata", "partition-specs", "0", "fields", "0", "source-id")}},
	{call: "createTable", method: "POST", target: "/v1/floe/namespaces/nope/tables", headers: javaHeaders,
		body:   `{"name":"x","schema":` + javaSchema + `}`,
		status: 404, errType: "NoSuchNamespaceException"},
	// listTables: the same paging conventions as listNamespaces.
	{call: "listTables", method: "GET", target: "/v1/floe/namespaces/jdb/tables?pageToken=", headers: javaHeaders,
		status: 200, checks: []check{lists(2, "identifiers"), is(map[string]any{"namespace": []string{"jdb"}, "name": "events"}, "identifiers", "0")}},
	{call: "listTables", method: "GET", target: "/v1/floe/namespaces/jdb/tables?pageToken=&pageSize=1", headers: javaHeaders,
		status: 200, checks: []check{lists(1, "identifiers"), save("tbl-token", "next-page-token")}},
	{call: "listTables", method: "GET", target: "/v1/floe/namespaces/jdb/tables?pageToken={{tbl-token}}&pageSize=1", headers: javaHeaders,
		status: 200, checks: []check{is("other", "identifiers", "0", "name"), absent("next-page-token")}},
	// loadTable (loadInternal): snapshots= from snapshot-loading-mode,
	// lower case, always sent.
	{call: "loadTable", method: "GET", target: "/v1/floe/namespaces/jdb/tables/events?snapshots=all", headers: javaHeaders,
		status: 200, checks: []check{is("{{mdloc}}", "metadata-location"), saveHeader("etag", "ETag")}},
	{call: "loadTable", method: "GET", target: "/v1/floe/namespaces/jdb/tables/events?snapshots=refs", headers: javaHeaders, status: 200},
	// header.X-Iceberg-Access-Delegation=vended-credentials in the catalog
	// properties: RESTUtil.configHeaders puts it on every request.
	{call: "loadTable", method: "GET", target: "/v1/floe/namespaces/jdb/tables/events?snapshots=all",
		headers: with(javaHeaders, "X-Iceberg-Access-Delegation", "vended-credentials"), status: 200,
		checks: []check{is("{{mdloc}}", "metadata-location")}},
	// loadTable of db.events.snapshots: first tried as table "snapshots" in
	// namespace jdb.events; the 404 makes the client load jdb.events.
	{call: "loadTable", method: "GET", target: "/v1/floe/namespaces/jdb%1Fevents/tables/snapshots?snapshots=all", headers: javaHeaders,
		status: 404, errType: "NoSuchTableException"},
	// RESTTableOperations.refresh: no query.
	{call: "refresh", method: "GET", target: "/v1/floe/namespaces/jdb/tables/events", headers: javaHeaders, status: 200},
	{call: "tableExists", method: "HEAD", target: "/v1/floe/namespaces/jdb/tables/events", headers: javaHeaders, status: 204},
	{call: "tableExists", method: "HEAD", target: "/v1/floe/namespaces/jdb/tables/missing", headers: javaHeaders, status: 404},
	// RESTTableOperations.commit (SIMPLE): UpdateTableRequest without an
	// identifier; requirements from UpdateRequirements.forUpdateTable.
	{call: "commit", method: "POST", target: "/v1/floe/namespaces/jdb/tables/events", headers: javaHeaders,
		body:   `{"requirements":[{"type":"assert-table-uuid","uuid":"{{uuid}}"}],"updates":[{"action":"set-properties","updates":{"commit.retry.num-retries":"4"}}]}`,
		status: 200, checks: []check{changed("mdloc", "metadata-location"), is("4", "metadata", "properties", "commit.retry.num-retries")}},
	// An append: add-snapshot and the main branch, guarded by main's
	// current snapshot (null: none yet).
	{call: "commit", method: "POST", target: "/v1/floe/namespaces/jdb/tables/events", headers: javaHeaders,
		body: `{"requirements":[{"type":"assert-table-uuid","uuid":"{{uuid}}"},{"type":"assert-ref-snapshot-id","ref":"main","snapshot-id":null}],` +
			`"updates":[{"action":"add-snapshot","snapshot":{"snapshot-id":3051729675574597004,"sequence-number":1,"timestamp-ms":{{now}},` +
			`"manifest-list":"{{loc}}/metadata/snap-3051729675574597004-1-bd9b0a37.avro","summary":{"operation":"append","added-data-files":"1","added-records":"1","total-records":"1"},"schema-id":0}},` +
			`{"action":"set-snapshot-ref","ref-name":"main","snapshot-id":3051729675574597004,"type":"branch"}]}`,
		status: 200, checks: []check{is(3051729675574597004.0, "metadata", "current-snapshot-id")}},
	// The same append from a writer that had not seen it: 409, so the client
	// refreshes and retries.
	{call: "commit", method: "POST", target: "/v1/floe/namespaces/jdb/tables/events", headers: javaHeaders,
		body: `{"requirements":[{"type":"assert-table-uuid","uuid":"{{uuid}}"},{"type":"assert-ref-snapshot-id","ref":"main","snapshot-id":null}],` +
			`"updates":[{"action":"add-snapshot","snapshot":{"snapshot-id":1,"sequence-number":1,"timestamp-ms":{{now}},"manifest-list":"{{loc}}/metadata/snap-1.avro","summary":{"operation":"append"},"schema-id":0}},` +
			`{"action":"set-snapshot-ref","ref-name":"main","snapshot-id":1,"type":"branch"}]}`,
		status: 409, errType: "CommitFailedException"},
	// Builder.createTransaction: stageCreate, then the commit of
	// createChanges (RESTSessionCatalog.createChanges) with assert-create
	// (UpdateRequirements.forCreateTable).
	{call: "stageCreate", method: "POST", target: "/v1/floe/namespaces/jdb/tables", headers: javaHeaders,
		body:   `{"name":"staged","location":null,"schema":` + javaSchema + `,"partition-spec":{"spec-id":0,"fields":[]},"write-order":{"order-id":0,"fields":[]},"stage-create":true,"properties":{"created-by":"spark"}}`,
		status: 200, checks: []check{nullKey("metadata-location"), save("staged-uuid", "metadata", "table-uuid"),
			save("staged-loc", "metadata", "location"), save("staged-fv", "metadata", "format-version")}},
	{call: "tableExists", method: "HEAD", target: "/v1/floe/namespaces/jdb/tables/staged", headers: javaHeaders, status: 404},
	{call: "commit", method: "POST", target: "/v1/floe/namespaces/jdb/tables/staged", headers: javaHeaders,
		body: `{"requirements":[{"type":"assert-create"}],"updates":[` +
			`{"action":"assign-uuid","uuid":"{{staged-uuid}}"},{"action":"upgrade-format-version","format-version":{{staged-fv}}},` +
			`{"action":"add-schema","schema":` + javaSchema + `,"last-column-id":2},{"action":"set-current-schema","schema-id":-1},` +
			`{"action":"add-spec","spec":{"spec-id":0,"fields":[]}},{"action":"set-default-spec","spec-id":-1},` +
			`{"action":"add-sort-order","sort-order":{"order-id":0,"fields":[]}},{"action":"set-default-sort-order","sort-order-id":-1},` +
			`{"action":"set-location","location":"{{staged-loc}}"},{"action":"set-properties","updates":{"created-by":"spark"}}]}`,
		status: 200, checks: []check{is("{{staged-uuid}}", "metadata", "table-uuid"), present("metadata-location")}},
	// commitTransaction: UpdateTableRequest.create(identifier, ...) per table.
	{call: "commitTransaction", method: "POST", target: "/v1/floe/transactions/commit", headers: javaHeaders,
		body: `{"table-changes":[` +
			`{"identifier":{"namespace":["jdb"],"name":"events"},"requirements":[{"type":"assert-table-uuid","uuid":"{{uuid}}"}],"updates":[{"action":"set-properties","updates":{"txn":"1"}}]},` +
			`{"identifier":{"namespace":["jdb"],"name":"staged"},"requirements":[{"type":"assert-table-uuid","uuid":"{{staged-uuid}}"}],"updates":[{"action":"remove-properties","removals":["created-by"]}]}]}`,
		status: 204},
	// RESTMetricsReporter: a ScanReport (ReportMetricsRequestParser).
	{call: "reportMetrics", method: "POST", target: "/v1/floe/namespaces/jdb/tables/events/metrics", headers: javaHeaders,
		body: `{"report-type":"scan-report","table-name":"rest.jdb.events","snapshot-id":3051729675574597004,"filter":true,"schema-id":0,` +
			`"projected-field-ids":[1,2],"projected-field-names":["id","data"],"metrics":{"total-planning-duration":{"count":1,"time-unit":"nanoseconds","total-duration":2644235116},` +
			`"result-data-files":{"unit":"count","value":1},"total-data-manifests":{"unit":"count","value":1}},"metadata":{"engine-name":"spark","engine-version":"3.5.4"}}`,
		status: 204},
	// renameTable: RenameTableRequest; across namespaces.
	{call: "renameTable", method: "POST", target: "/v1/floe/tables/rename", headers: javaHeaders,
		body:   `{"source":{"namespace":["jdb"],"name":"staged"},"destination":{"namespace":["jdb","inner"],"name":"moved"}}`,
		status: 204},
	{call: "tableExists", method: "HEAD", target: "/v1/floe/namespaces/jdb%2Einner/tables/moved", headers: javaHeaders, status: 204},
	// dropTable: no purgeRequested; purgeTable: purgeRequested=true.
	{call: "dropTable", method: "DELETE", target: "/v1/floe/namespaces/jdb/tables/other", headers: javaHeaders, status: 204},
	{call: "dropTable", method: "DELETE", target: "/v1/floe/namespaces/jdb/tables/other", headers: javaHeaders,
		status: 404, errType: "NoSuchTableException"},
	// registerTable: RegisterTableRequest without overwrite.
	{call: "registerTable", method: "POST", target: "/v1/floe/namespaces/jdb/register", headers: javaHeaders,
		body:   `{"name":"restored","metadata-location":"{{other-mdloc}}"}`,
		status: 200, checks: []check{is("{{other-mdloc}}", "metadata-location")}},
	{call: "purgeTable", method: "DELETE", target: "/v1/floe/namespaces/jdb/tables/restored?purgeRequested=true", headers: javaHeaders, status: 204},
	{call: "dropNamespace", method: "DELETE", target: "/v1/floe/namespaces/jdb", headers: javaHeaders,
		status: 409, errType: "NamespaceNotEmptyException"},
	{call: "dropNamespace", method: "DELETE", target: "/v1/floe/namespaces/jdb2", headers: javaHeaders, status: 204},
	// Views: the view requests clients send, whether or not they read the
	// endpoints (1.5 and 1.6 do not). A lookup of a missing view is 404
	// (viewExists, called by replaceTransaction and createOrReplace, relies
	// on it). The spec gives the 404 and 409 answers of the view routes the
	// bare ErrorModel schema, against its own examples and every client's
	// error parser (which read {"error": {...}}), so those are not
	// validated; the others are.
	{call: "loadView", method: "GET", target: "/v1/floe/namespaces/jdb/views/v", headers: javaHeaders,
		status: 404, errType: "NoSuchViewException", raw: true},
	{call: "dropView", method: "DELETE", target: "/v1/floe/namespaces/jdb/views/v", headers: javaHeaders,
		status: 404, errType: "NoSuchViewException", raw: true},
	{call: "listViews", method: "GET", target: "/v1/floe/namespaces/jdb/views?pageToken=", headers: javaHeaders,
		status: 200, checks: []check{lists(0, "identifiers")}},
	{call: "createView", method: "POST", target: "/v1/floe/namespaces/jdb/views", headers: javaHeaders,
		body: `{"name":"v","schema":` + javaSchema + `,"view-version":{"version-id":1,"schema-id":0,"timestamp-ms":{{now}},"summary":{"engine-name":"spark"},` +
			`"representations":[{"type":"sql","sql":"select 1","dialect":"spark"}],"default-namespace":["jdb"]},"properties":{}}`,
		status: 200, checks: []check{present("metadata-location"), is(1.0, "metadata", "current-version-id"),
			is("select 1", "metadata", "versions", "0", "representations", "0", "sql")}},
	{call: "createView", method: "POST", target: "/v1/floe/namespaces/jdb/views", headers: javaHeaders,
		body: `{"name":"events","schema":` + javaSchema + `,"view-version":{"version-id":1,"schema-id":0,"timestamp-ms":{{now}},"summary":{"engine-name":"spark"},` +
			`"representations":[{"type":"sql","sql":"select 1","dialect":"spark"}],"default-namespace":["jdb"]},"properties":{}}`,
		status: 409, errType: "AlreadyExistsException", raw: true},
	{call: "listViews", method: "GET", target: "/v1/floe/namespaces/jdb/views?pageToken=", headers: javaHeaders,
		status: 200, checks: []check{is([]map[string]any{{"namespace": []string{"jdb"}, "name": "v"}}, "identifiers")}},
	{call: "renameView", method: "POST", target: "/v1/floe/views/rename", headers: javaHeaders,
		body:   `{"source":{"namespace":["jdb"],"name":"v"},"destination":{"namespace":["jdb"],"name":"w"}}`,
		status: 204},
	{call: "loadView", method: "GET", target: "/v1/floe/namespaces/jdb/views/w", headers: javaHeaders,
		status: 200, checks: []check{is("select 1", "metadata", "versions", "0", "representations", "0", "sql")}},
	{call: "dropView", method: "DELETE", target: "/v1/floe/namespaces/jdb/views/w", headers: javaHeaders, status: 204},
	// RESTTableScan.planTableScan: sent only when the server advertises
	// planning (it does not); answered as the spec's unsupported operation.
	{call: "planTableScan", method: "POST", target: "/v1/floe/namespaces/jdb/tables/events/plan", headers: javaHeaders,
		body:   `{"snapshot-id":3051729675574597004,"select":["id"],"filter":true,"case-sensitive":true,"use-snapshot-schema":false}`,
		status: 406, errType: "UnsupportedOperationException", raw: true},
}

// ---------------------------------------------------------------------------
// PyIceberg (pyiceberg/catalog/rest/__init__.py). RestCatalog._config_headers
// sets Content-type, User-Agent, X-Client-Version and
// X-Iceberg-Access-Delegation on the session, so every request carries them;
// requests adds Accept: */*. url() puts the config's prefix after /v1/;
// _encode_namespace_path quotes each level (quote(part, safe="")) and joins
// them with the advertised separator, unquoted: "." with floe's %2E, the raw
// unit separator (sent as %1F) with the default. json= bodies are
// json.dumps output (", " and ": "); model bodies are pydantic's compact
// JSON with None fields left out.

var pyHeaders = []string{
	"Accept", "*/*",
	"Accept-Encoding", "gzip, deflate",
	"Content-type", "application/json",
	"User-Agent", "PyIceberg/0.10.0",
	"X-Client-Version", "PyIceberg 0.10.0",
	"X-Iceberg-Access-Delegation", "vended-credentials",
}

// Schema.model_dump_json.
const pySchema = `{"type":"struct","fields":[{"id":1,"name":"id","type":"long","required":true},{"id":2,"name":"data","type":"string","required":false}],"schema-id":0,"identifier-field-ids":[]}`

var pyicebergShapes = []shape{
	// _fetch_config: warehouse only when configured.
	{call: "_fetch_config", method: "GET", target: "/v1/config?warehouse=floe", headers: pyHeaders,
		status: 200, checks: configChecks},
	{call: "_fetch_config", method: "GET", target: "/v1/config", headers: pyHeaders, status: 200, checks: configChecks},
	// create_namespace: json= payload, properties defaulting to {}.
	{call: "create_namespace", method: "POST", target: "/v1/floe/namespaces", headers: pyHeaders,
		body: `{"namespace": ["pdb"], "properties": {}}`, status: 200, checks: []check{is(map[string]string{}, "properties")}},
	{call: "create_namespace", method: "POST", target: "/v1/floe/namespaces", headers: pyHeaders,
		body: `{"namespace": ["pdb", "sub"], "properties": {"owner": "py"}}`, status: 200},
	{call: "create_namespace", method: "POST", target: "/v1/floe/namespaces", headers: pyHeaders,
		body: `{"namespace": ["pdb2"], "properties": {}}`, status: 200},
	{call: "create_namespace", method: "POST", target: "/v1/floe/namespaces", headers: pyHeaders,
		body: `{"namespace": ["pdb"], "properties": {}}`, status: 409, errType: "AlreadyExistsException"},
	// namespace_exists: HEAD; 404 is False, 200 or 204 True. The "." form is
	// what it sends once the separator is advertised; %1F is what releases
	// without namespace-separator support send.
	{call: "namespace_exists", method: "HEAD", target: "/v1/floe/namespaces/pdb.sub", headers: pyHeaders, status: 204},
	{call: "namespace_exists", method: "HEAD", target: "/v1/floe/namespaces/pdb%1Fsub", headers: pyHeaders, status: 204},
	{call: "namespace_exists", method: "HEAD", target: "/v1/floe/namespaces/pdb.nope", headers: pyHeaders, status: 404},
	// list_namespaces: no pageToken on the first call; parent encoded as
	// the path segment is.
	{call: "list_namespaces", method: "GET", target: "/v1/floe/namespaces", headers: pyHeaders,
		status: 200, checks: []check{is([][]string{{"pdb"}, {"pdb2"}}, "namespaces")}},
	{call: "list_namespaces", method: "GET", target: "/v1/floe/namespaces?parent=pdb", headers: pyHeaders,
		status: 200, checks: []check{is([][]string{{"pdb", "sub"}}, "namespaces")}},
	{call: "list_namespaces", method: "GET", target: "/v1/floe/namespaces?parent=pdb.sub", headers: pyHeaders,
		status: 200, checks: []check{lists(0, "namespaces")}},
	{call: "list_namespaces", method: "GET", target: "/v1/floe/namespaces?parent=pdb%1Fsub", headers: pyHeaders,
		status: 200, checks: []check{lists(0, "namespaces")}},
	// rest-page-size=1: the first call has no pageToken, so it gets every
	// namespace (the spec's PageToken) and no token to follow.
	{call: "list_namespaces", method: "GET", target: "/v1/floe/namespaces?pageSize=1", headers: pyHeaders,
		status: 200, checks: []check{is([][]string{{"pdb"}, {"pdb2"}}, "namespaces"), absent("next-page-token")}},
	{call: "load_namespace_properties", method: "GET", target: "/v1/floe/namespaces/pdb.sub", headers: pyHeaders,
		status: 200, checks: []check{is(map[string]string{"owner": "py"}, "properties")}},
	{call: "update_namespace_properties", method: "POST", target: "/v1/floe/namespaces/pdb/properties", headers: pyHeaders,
		body: `{"removals": [], "updates": {"comment": "py"}}`, status: 200,
		checks: []check{is([]string{"comment"}, "updated"), is([]string{}, "removed"), is([]string{}, "missing")}},
	// Called with neither removals nor updates.
	{call: "update_namespace_properties", method: "POST", target: "/v1/floe/namespaces/pdb2/properties", headers: pyHeaders,
		body: `{"removals": [], "updates": {}}`, status: 200,
		checks: []check{is([]string{}, "updated"), is([]string{}, "removed"), is([]string{}, "missing")}},
	// _create_table: CreateTableRequest.model_dump_json (location left out
	// when None, the unpartitioned spec and unsorted order spelled out).
	{call: "create_table", method: "POST", target: "/v1/floe/namespaces/pdb/tables", headers: pyHeaders,
		body:   `{"name":"t","schema":` + pySchema + `,"partition-spec":{"spec-id":0,"fields":[]},"write-order":{"order-id":0,"fields":[]},"stage-create":false,"properties":{}}`,
		status: 200, checks: []check{save("uuid", "metadata", "table-uuid"), save("mdloc", "metadata-location"), save("ploc", "metadata", "location")}},
	// load_table: snapshots= only when snapshot-loading-mode is set.
	{call: "load_table", method: "GET", target: "/v1/floe/namespaces/pdb/tables/t", headers: pyHeaders,
		status: 200, checks: []check{is("{{mdloc}}", "metadata-location")}},
	{call: "load_table", method: "GET", target: "/v1/floe/namespaces/pdb/tables/t?snapshots=refs", headers: pyHeaders, status: 200},
	{call: "table_exists", method: "HEAD", target: "/v1/floe/namespaces/pdb/tables/t", headers: pyHeaders, status: 204},
	{call: "table_exists", method: "HEAD", target: "/v1/floe/namespaces/pdb/tables/nope", headers: pyHeaders, status: 404},
	// commit_table: CommitTableRequest with the identifier.
	{call: "commit_table", method: "POST", target: "/v1/floe/namespaces/pdb/tables/t", headers: pyHeaders,
		body: `{"identifier":{"namespace":["pdb"],"name":"t"},"requirements":[{"type":"assert-table-uuid","uuid":"{{uuid}}"}],` +
			`"updates":[{"action":"set-properties","updates":{"owner":"py"}},{"action":"remove-properties","removals":["absent"]}]}`,
		status: 200, checks: []check{changed("mdloc", "metadata-location"), save("mdloc", "metadata-location")}},
	{call: "commit_table", method: "POST", target: "/v1/floe/namespaces/pdb/tables/t", headers: pyHeaders,
		body:   `{"identifier":{"namespace":["pdb"],"name":"t"},"requirements":[{"type":"assert-current-schema-id","current-schema-id":7}],"updates":[]}`,
		status: 409, errType: "CommitFailedException"},
	// An append from a PyIceberg whose serialiser drops null fields
	// (apache/iceberg-python#2376): main's snapshot-id (none yet) is left
	// out of assert-ref-snapshot-id, read as null as the reference
	// implementation reads it; once main exists, the same append is a 409.
	{call: "commit_table (nulls dropped)", method: "POST", target: "/v1/floe/namespaces/pdb/tables/t", headers: pyHeaders,
		body: `{"identifier":{"namespace":["pdb"],"name":"t"},"requirements":[{"type":"assert-table-uuid","uuid":"{{uuid}}"},{"type":"assert-ref-snapshot-id","ref":"main"}],` +
			`"updates":[{"action":"add-snapshot","snapshot":{"snapshot-id":7,"sequence-number":1,"timestamp-ms":{{now}},"manifest-list":"{{ploc}}/metadata/snap-7.avro","summary":{"operation":"append"},"schema-id":0}},` +
			`{"action":"set-snapshot-ref","ref-name":"main","snapshot-id":7,"type":"branch"}]}`,
		status: 200, checks: []check{is(7.0, "metadata", "current-snapshot-id"), save("mdloc", "metadata-location")}},
	{call: "commit_table (nulls dropped)", method: "POST", target: "/v1/floe/namespaces/pdb/tables/t", headers: pyHeaders,
		body: `{"identifier":{"namespace":["pdb"],"name":"t"},"requirements":[{"type":"assert-ref-snapshot-id","ref":"main"}],` +
			`"updates":[{"action":"set-properties","updates":{"again":"1"}}]}`,
		status: 409, errType: "CommitFailedException"},
	// PyIceberg 0.5-0.6: the table's identifier starts with the client's
	// catalog name ("default" here); the path leaves it out, the body keeps it.
	{call: "commit_table (0.5-0.6)", method: "POST", target: "/v1/floe/namespaces/pdb/tables/t", headers: pyHeaders,
		body:   `{"identifier":{"namespace":["default","pdb"],"name":"t"},"requirements":[],"updates":[{"action":"set-properties","updates":{"py":"0.6"}}]}`,
		status: 200, checks: []check{changed("mdloc", "metadata-location"), save("mdloc", "metadata-location")}},
	// UpdateStatistics.set_statistics: a blob without properties, which
	// BlobMetadata (Optional, exclude_none) leaves out. The metadata
	// carries them as an empty map, never null: Java's and iceberg-rust's
	// readers refuse a null map, so such a table could not be loaded.
	{call: "commit_table (set_statistics)", method: "POST", target: "/v1/floe/namespaces/pdb/tables/t", headers: pyHeaders,
		body: `{"identifier":{"namespace":["pdb"],"name":"t"},"requirements":[],"updates":[{"action":"set-statistics","snapshot-id":7,"statistics":` +
			`{"snapshot-id":7,"statistics-path":"{{ploc}}/metadata/stats-7.puffin","file-size-in-bytes":100,"file-footer-size-in-bytes":20,` +
			`"blob-metadata":[{"type":"apache-datasketches-theta-v1","snapshot-id":7,"sequence-number":1,"fields":[1]}]}}]}`,
		status: 200, checks: []check{is(map[string]string{}, "metadata", "statistics", "0", "blob-metadata", "0", "properties"),
			save("mdloc", "metadata-location")}},
	{call: "load_table", method: "GET", target: "/v1/floe/namespaces/pdb/tables/t", headers: pyHeaders,
		status: 200, checks: []check{is(map[string]string{}, "metadata", "statistics", "0", "blob-metadata", "0", "properties")}},
	// create_table_transaction: stage-create, then commit_table with
	// CreateTableTransaction._initial_changes and assert-create.
	{call: "create_table_transaction", method: "POST", target: "/v1/floe/namespaces/pdb/tables", headers: pyHeaders,
		body:   `{"name":"staged","schema":` + pySchema + `,"partition-spec":{"spec-id":0,"fields":[]},"write-order":{"order-id":0,"fields":[]},"stage-create":true,"properties":{}}`,
		status: 200, checks: []check{nullKey("metadata-location"), save("staged-uuid", "metadata", "table-uuid"),
			save("staged-loc", "metadata", "location"), save("staged-fv", "metadata", "format-version")}},
	{call: "commit_table", method: "POST", target: "/v1/floe/namespaces/pdb/tables/staged", headers: pyHeaders,
		body: `{"identifier":{"namespace":["pdb"],"name":"staged"},"requirements":[{"type":"assert-create"}],"updates":[` +
			`{"action":"assign-uuid","uuid":"{{staged-uuid}}"},{"action":"upgrade-format-version","format-version":{{staged-fv}}},` +
			`{"action":"add-schema","schema":` + pySchema + `},{"action":"set-current-schema","schema-id":-1},` +
			`{"action":"add-spec","spec":{"spec-id":0,"fields":[]}},{"action":"set-default-spec","spec-id":-1},` +
			`{"action":"add-sort-order","sort-order":{"order-id":0,"fields":[]}},{"action":"set-default-sort-order","sort-order-id":-1},` +
			`{"action":"set-location","location":"{{staged-loc}}"},{"action":"set-properties","updates":{}}]}`,
		status: 200, checks: []check{is("{{staged-uuid}}", "metadata", "table-uuid")}},
	// rename_table: HEAD both namespaces first, then the json= payload
	// (tuples become lists).
	{call: "rename_table", method: "HEAD", target: "/v1/floe/namespaces/pdb", headers: pyHeaders, status: 204},
	{call: "rename_table", method: "HEAD", target: "/v1/floe/namespaces/pdb.sub", headers: pyHeaders, status: 204},
	{call: "rename_table", method: "POST", target: "/v1/floe/tables/rename", headers: pyHeaders,
		body: `{"source": {"namespace": ["pdb"], "name": "staged"}, "destination": {"namespace": ["pdb", "sub"], "name": "moved"}}`, status: 204},
	{call: "rename_table", method: "GET", target: "/v1/floe/namespaces/pdb.sub/tables/moved", headers: pyHeaders, status: 200},
	{call: "list_tables", method: "GET", target: "/v1/floe/namespaces/pdb.sub/tables", headers: pyHeaders,
		status: 200, checks: []check{is([]map[string]any{{"namespace": []string{"pdb", "sub"}, "name": "moved"}}, "identifiers")}},
	{call: "list_tables", method: "GET", target: "/v1/floe/namespaces/pdb%1Fsub/tables?pageSize=1", headers: pyHeaders,
		status: 200, checks: []check{lists(1, "identifiers"), absent("next-page-token")}},
	// drop_table: params={"purgeRequested": False}, which requests spells
	// False / True.
	{call: "drop_table", method: "DELETE", target: "/v1/floe/namespaces/pdb/tables/t?purgeRequested=False", headers: pyHeaders, status: 204},
	// register_table: RegisterTableRequest, overwrite always present.
	{call: "register_table", method: "POST", target: "/v1/floe/namespaces/pdb/register", headers: pyHeaders,
		body:   `{"name":"t_again","metadata-location":"{{mdloc}}","overwrite":false}`,
		status: 200, checks: []check{is("{{mdloc}}", "metadata-location")}},
	{call: "register_table", method: "POST", target: "/v1/floe/namespaces/pdb/register", headers: pyHeaders,
		body:   `{"name":"t_again","metadata-location":"{{mdloc}}","overwrite":false}`,
		status: 409, errType: "AlreadyExistsException"},
	{call: "register_table", method: "POST", target: "/v1/floe/namespaces/pdb/register", headers: pyHeaders,
		body: `{"name":"t_again","metadata-location":"{{mdloc}}","overwrite":true}`, status: 200},
	{call: "purge_table", method: "DELETE", target: "/v1/floe/namespaces/pdb/tables/t_again?purgeRequested=True", headers: pyHeaders, status: 204},
	{call: "drop_namespace", method: "DELETE", target: "/v1/floe/namespaces/pdb2", headers: pyHeaders, status: 204},
	{call: "drop_namespace", method: "DELETE", target: "/v1/floe/namespaces/pdb2", headers: pyHeaders,
		status: 404, errType: "NoSuchNamespaceException"},
	// view_exists: sent whatever the endpoints say; 404 is False.
	{call: "view_exists", method: "HEAD", target: "/v1/floe/namespaces/pdb/views/v", headers: pyHeaders, status: 404},
	// create_view: sent whatever the endpoints say.
	{call: "create_view", method: "POST", target: "/v1/floe/namespaces/pdb/views", headers: pyHeaders,
		body: `{"name":"v","schema":` + pySchema + `,"view-version":{"version-id":1,"schema-id":0,"timestamp-ms":{{now}},"summary":{},` +
			`"representations":[{"type":"sql","sql":"SELECT 1","dialect":"spark"}],"default-namespace":["pdb"]},"properties":{}}`,
		status: 200, checks: []check{present("metadata-location"), is("SELECT 1", "metadata", "versions", "0", "representations", "0", "sql")}},
	{call: "view_exists", method: "HEAD", target: "/v1/floe/namespaces/pdb/views/v", headers: pyHeaders, status: 204},
	// _plan_table_scan (scan-planning-mode=server): sent only when
	// advertised.
	{call: "_plan_table_scan", method: "POST", target: "/v1/floe/namespaces/pdb.sub/tables/moved/plan", headers: pyHeaders,
		body:   `{"select":["id"],"case-sensitive":true,"use-snapshot-schema":false}`,
		status: 406, errType: "UnsupportedOperationException", raw: true},
	// With token= configured, LegacyOAuth2AuthManager sends it as is; floe
	// authenticates nobody and ignores it. Without credential= no token
	// request is ever made, so /v1/oauth/tokens is never called.
	{call: "list_tables", method: "GET", target: "/v1/floe/namespaces/pdb.sub/tables", headers: with(pyHeaders, "Authorization", "Bearer eyJhbGciOiJIUzI1NiJ9.e30.c2lnbg"),
		status: 200, checks: []check{lists(1, "identifiers")}},
}

// ---------------------------------------------------------------------------
// iceberg-go v0.7.0 (catalog/rest/rest.go). createSession sets
// X-Client-Version (the spec version, 0.14.1), Content-Type, User-Agent and
// X-Iceberg-Access-Delegation: vended-credentials as session defaults, so
// GET, HEAD and DELETE carry them too. Paths are baseURI.JoinPath of the
// prefix and endpoint segments (endpoints.go); encodeNamespace path-escapes
// each level and joins with the advertised separator (%2E here, %1F by
// default); namespaceToQueryParam joins with it decoded. Query strings are
// url.Values.Encode (keys sorted). List calls send pageSize (20 unless set
// with SetPageSize) and pageToken only after the first page. Bodies are
// encoding/json output.

var goHeaders = []string{
	"X-Client-Version", "0.14.1",
	"Content-Type", "application/json",
	"User-Agent", "GoIceberg/v0.7.0",
	"X-Iceberg-Access-Delegation", "vended-credentials",
}

// iceberg.Schema's MarshalJSON.
const goSchema = `{"type":"struct","fields":[{"type":"long","id":1,"name":"id","required":true},{"type":"string","id":2,"name":"data","required":false}],"schema-id":0,"identifier-field-ids":[]}`

var icebergGoShapes = []shape{
	// fetchConfig: ?warehouse= only when configured.
	{call: "fetchConfig", method: "GET", target: "/v1/config", headers: goHeaders, status: 200, checks: configChecks},
	{call: "fetchConfig", method: "GET", target: "/v1/config?warehouse={{warehouse-q}}", headers: goHeaders, status: 200, checks: configChecks},
	// CreateNamespace: map[string]any{"namespace", "properties"}; nil
	// properties marshal as null.
	{call: "CreateNamespace", method: "POST", target: "/v1/floe/namespaces", headers: goHeaders,
		body: `{"namespace":["gdb"],"properties":null}`, status: 200, checks: []check{is(map[string]string{}, "properties")}},
	{call: "CreateNamespace", method: "POST", target: "/v1/floe/namespaces", headers: goHeaders,
		body: `{"namespace":["gdb","sub"],"properties":{"owner":"go"}}`, status: 200},
	{call: "CheckNamespaceExists", method: "HEAD", target: "/v1/floe/namespaces/gdb%2Esub", headers: goHeaders, status: 204},
	{call: "CheckNamespaceExists", method: "HEAD", target: "/v1/floe/namespaces/gdb%1Fsub", headers: goHeaders, status: 204},
	{call: "CheckNamespaceExists", method: "HEAD", target: "/v1/floe/namespaces/gdb%2Enope", headers: goHeaders, status: 404},
	{call: "ListNamespaces", method: "GET", target: "/v1/floe/namespaces?pageSize=20", headers: goHeaders,
		status: 200, checks: []check{is([][]string{{"gdb"}}, "namespaces"), absent("next-page-token")}},
	{call: "ListNamespaces", method: "GET", target: "/v1/floe/namespaces?pageSize=20&parent=gdb", headers: goHeaders,
		status: 200, checks: []check{is([][]string{{"gdb", "sub"}}, "namespaces")}},
	{call: "ListNamespaces", method: "GET", target: "/v1/floe/namespaces?pageSize=20&parent=gdb.sub", headers: goHeaders,
		status: 200, checks: []check{lists(0, "namespaces")}},
	{call: "ListNamespaces", method: "GET", target: "/v1/floe/namespaces?pageSize=20&parent=nope", headers: goHeaders,
		status: 404, errType: "NoSuchNamespaceException"},
	{call: "LoadNamespaceProperties", method: "GET", target: "/v1/floe/namespaces/gdb%2Esub", headers: goHeaders,
		status: 200, checks: []check{is([]string{"gdb", "sub"}, "namespace"), is("go", "properties", "owner")}},
	// UpdateNamespaceProperties: nil removals or updates marshal as null.
	{call: "UpdateNamespaceProperties", method: "POST", target: "/v1/floe/namespaces/gdb/properties", headers: goHeaders,
		body: `{"removals":null,"updates":{"owner":"go"}}`, status: 200, checks: []check{is([]string{"owner"}, "updated")}},
	{call: "UpdateNamespaceProperties", method: "POST", target: "/v1/floe/namespaces/gdb/properties", headers: goHeaders,
		body: `{"removals":["owner"],"updates":null}`, status: 200, checks: []check{is([]string{"owner"}, "removed")}},
	// CreateTable: createTableRequest; location, partition-spec and
	// properties are omitempty, write-order is always the (unsorted) order.
	{call: "CreateTable", method: "POST", target: "/v1/floe/namespaces/gdb/tables", headers: goHeaders,
		body:   `{"name":"t","schema":` + goSchema + `,"write-order":{"order-id":0,"fields":[]},"stage-create":false}`,
		status: 200, checks: []check{save("uuid", "metadata", "table-uuid"), save("mdloc", "metadata-location")}},
	{call: "CreateTable", method: "POST", target: "/v1/floe/namespaces/gdb%2Esub/tables", headers: goHeaders,
		body: `{"name":"p","schema":` + goSchema + `,"location":"{{warehouse}}/gdb/sub/p_custom",` +
			`"partition-spec":{"spec-id":0,"fields":[{"source-id":1,"field-id":1000,"name":"id_bucket_16","transform":"bucket[16]"}]},` +
			`"write-order":{"order-id":0,"fields":[]},"stage-create":false,"properties":{"format-version":"2"}}`,
		status: 200, checks: []check{is("{{warehouse}}/gdb/sub/p_custom", "metadata", "location")}},
	{call: "CreateTable", method: "POST", target: "/v1/floe/namespaces/gdb/tables", headers: goHeaders,
		body:   `{"name":"t","schema":` + goSchema + `,"write-order":{"order-id":0,"fields":[]},"stage-create":false}`,
		status: 409, errType: "AlreadyExistsException"},
	// LoadTable: snapshots= only with snapshot-loading-mode.
	{call: "LoadTable", method: "GET", target: "/v1/floe/namespaces/gdb/tables/t", headers: goHeaders,
		status: 200, checks: []check{is("{{mdloc}}", "metadata-location")}},
	{call: "LoadTable", method: "GET", target: "/v1/floe/namespaces/gdb/tables/t?snapshots=refs", headers: goHeaders, status: 200},
	{call: "LoadTable", method: "GET", target: "/v1/floe/namespaces/gdb/tables/nope", headers: goHeaders,
		status: 404, errType: "NoSuchTableException"},
	{call: "CheckTableExists", method: "HEAD", target: "/v1/floe/namespaces/gdb%2Esub/tables/p", headers: goHeaders, status: 204},
	{call: "CheckTableExists", method: "HEAD", target: "/v1/floe/namespaces/gdb%2Esub/tables/nope", headers: goHeaders, status: 404},
	// CommitTable / UpdateTable: the identifier is always in the body.
	{call: "CommitTable", method: "POST", target: "/v1/floe/namespaces/gdb/tables/t", headers: goHeaders,
		body: `{"identifier":{"namespace":["gdb"],"name":"t"},"requirements":[{"type":"assert-table-uuid","uuid":"{{uuid}}"},{"type":"assert-current-schema-id","current-schema-id":0}],` +
			`"updates":[{"action":"set-properties","updates":{"owner":"go"}},{"action":"remove-properties","removals":["x"]}]}`,
		status: 200, checks: []check{changed("mdloc", "metadata-location"), save("mdloc", "metadata-location")}},
	// CreateTable with staged updates: stage-create, then
	// commitStagedCreate (the Java createChanges, in the same order).
	{call: "CreateTable", method: "POST", target: "/v1/floe/namespaces/gdb/tables", headers: goHeaders,
		body:   `{"name":"staged","schema":` + goSchema + `,"write-order":{"order-id":0,"fields":[]},"stage-create":true}`,
		status: 200, checks: []check{nullKey("metadata-location"), save("staged-uuid", "metadata", "table-uuid"),
			save("staged-loc", "metadata", "location"), save("staged-fv", "metadata", "format-version")}},
	{call: "commitStagedCreate", method: "POST", target: "/v1/floe/namespaces/gdb/tables/staged", headers: goHeaders,
		body: `{"identifier":{"namespace":["gdb"],"name":"staged"},"requirements":[{"type":"assert-create"}],"updates":[` +
			`{"action":"assign-uuid","uuid":"{{staged-uuid}}"},{"action":"upgrade-format-version","format-version":{{staged-fv}}},` +
			`{"action":"add-schema","schema":` + goSchema + `},{"action":"set-current-schema","schema-id":-1},` +
			`{"action":"add-spec","spec":{"spec-id":0,"fields":[]}},{"action":"set-default-spec","spec-id":-1},` +
			`{"action":"add-sort-order","sort-order":{"order-id":0,"fields":[]}},{"action":"set-default-sort-order","sort-order-id":-1},` +
			`{"action":"set-location","location":"{{staged-loc}}"},{"action":"set-properties","updates":{"staged-by":"go"}}]}`,
		status: 200, checks: []check{is("go", "metadata", "properties", "staged-by")}},
	// CommitTransaction: table-changes with identifiers; 204.
	{call: "CommitTransaction", method: "POST", target: "/v1/floe/transactions/commit", headers: goHeaders,
		body: `{"table-changes":[` +
			`{"identifier":{"namespace":["gdb"],"name":"t"},"requirements":[{"type":"assert-table-uuid","uuid":"{{uuid}}"}],"updates":[{"action":"set-properties","updates":{"txn":"1"}}]},` +
			`{"identifier":{"namespace":["gdb","sub"],"name":"p"},"requirements":[],"updates":[{"action":"set-properties","updates":{"txn":"1"}}]}]}`,
		status: 204},
	{call: "LoadTable", method: "GET", target: "/v1/floe/namespaces/gdb/tables/t", headers: goHeaders,
		status: 200, checks: []check{is("1", "metadata", "properties", "txn"), save("mdloc", "metadata-location")}},
	// ListTables with SetPageSize(ctx, 1): the first call has no
	// pageToken, so it gets every table and no token (the spec's
	// PageToken); a token, when one comes, is sent back as given.
	{call: "ListTables", method: "GET", target: "/v1/floe/namespaces/gdb/tables?pageSize=20", headers: goHeaders,
		status: 200, checks: []check{lists(2, "identifiers")}},
	{call: "ListTables", method: "GET", target: "/v1/floe/namespaces/gdb/tables?pageSize=1", headers: goHeaders,
		status: 200, checks: []check{lists(2, "identifiers"), absent("next-page-token")}},
	// The metrics reporter (rest.metrics-reporting-enabled): a
	// ReportMetricsRequest marshalled through a map, so keys come sorted.
	{call: "reportMetrics", method: "POST", target: "/v1/floe/namespaces/gdb/tables/t/metrics", headers: goHeaders,
		body: `{"metadata":{"iceberg-version":"v0.7.0"},"metrics":{"attempts":{"unit":"count","value":1},"total-duration":{"count":1,"time-unit":"nanoseconds","total-duration":1843000}},` +
			`"operation":"append","report-type":"commit-report","sequence-number":1,"snapshot-id":1,"table-name":"floe.gdb.t"}`,
		status: 204},
	// RenameTable: then LoadTable of the destination.
	{call: "RenameTable", method: "POST", target: "/v1/floe/tables/rename", headers: goHeaders,
		body: `{"source":{"namespace":["gdb"],"name":"staged"},"destination":{"namespace":["gdb","sub"],"name":"moved"}}`, status: 204},
	{call: "RenameTable", method: "GET", target: "/v1/floe/namespaces/gdb%2Esub/tables/moved", headers: goHeaders, status: 200},
	{call: "RenameTable", method: "POST", target: "/v1/floe/tables/rename", headers: goHeaders,
		body:   `{"source":{"namespace":["gdb"],"name":"staged"},"destination":{"namespace":["gdb"],"name":"again"}}`,
		status: 404, errType: "NoSuchTableException"},
	// DropTable: purgeRequested=false spelled out; PurgeTable: true.
	{call: "DropTable", method: "DELETE", target: "/v1/floe/namespaces/gdb/tables/t?purgeRequested=false", headers: goHeaders, status: 204},
	// RegisterTable: name and metadata-location only.
	{call: "RegisterTable", method: "POST", target: "/v1/floe/namespaces/gdb/register", headers: goHeaders,
		body: `{"name":"t2","metadata-location":"{{mdloc}}"}`, status: 200, checks: []check{is("{{mdloc}}", "metadata-location")}},
	{call: "PurgeTable", method: "DELETE", target: "/v1/floe/namespaces/gdb/tables/t2?purgeRequested=true", headers: goHeaders, status: 204},
	{call: "DropNamespace", method: "DELETE", target: "/v1/floe/namespaces/gdb%2Esub", headers: goHeaders,
		status: 409, errType: "NamespaceNotEmptyException"},
	{call: "PurgeTable", method: "DELETE", target: "/v1/floe/namespaces/gdb%2Esub/tables/p?purgeRequested=true", headers: goHeaders, status: 204},
	{call: "DropTable", method: "DELETE", target: "/v1/floe/namespaces/gdb%2Esub/tables/moved?purgeRequested=false", headers: goHeaders, status: 204},
	{call: "DropNamespace", method: "DELETE", target: "/v1/floe/namespaces/gdb%2Esub", headers: goHeaders, status: 204},
	// With rest.WithCredential, setupOAuthManager fetches a token from
	// /v1/oauth/tokens (clientcredentials, AuthStyleInParams). The spec
	// deprecates that endpoint and advises against serving it; floe does
	// not (it authenticates nobody), so such a client must be configured
	// without a credential, or with oauth2-server-uri.
	{call: "clientcredentials", method: "POST", target: "/v1/oauth/tokens",
		headers: with(goHeaders, "Content-Type", "application/x-www-form-urlencoded"),
		body:    `client_id=floe&client_secret=secret&grant_type=client_credentials&scope=catalog`,
		status:  404, errType: "NotFoundException", raw: true},
	// rest.WithOAuthToken: a static bearer token on every request; floe
	// ignores it. With no credential no token request is ever made.
	{call: "ListNamespaces", method: "GET", target: "/v1/floe/namespaces?pageSize=20", headers: with(goHeaders, "Authorization", "Bearer static-token"),
		status: 200, checks: []check{is([][]string{{"gdb"}}, "namespaces")}},
}

// ---------------------------------------------------------------------------
// iceberg-rust (crates/catalog/rest). RestCatalogConfig.extra_headers sets
// content-type, x-client-version (0.14.1) and user-agent as the reqwest
// client's default headers (reqwest adds accept: */*). Paths are the
// configured uri, "v1", the prefix and the parts joined with "/"
// (url_prefixed): a uri configured with a trailing slash yields "//v1".
// NamespaceIdent::to_url_string joins levels with the unit separator,
// which the URL parser sends as %1F; table names are put in the URL as
// they are. Bodies are serde_json of types.rs: Option fields that are None
// are written as null. Lists follow next-page-token with pageToken and send
// no pageSize; drop_table sends no purgeRequested.

var rustHeaders = []string{
	"Accept", "*/*",
	"Content-Type", "application/json",
	"X-Client-Version", "0.14.1",
	"User-Agent", "iceberg-rs/0.6.0",
}

// Schema's serde (SchemaV2).
const rustSchema = `{"schema-id":0,"type":"struct","fields":[{"id":1,"name":"id","required":true,"type":"long"},{"id":2,"name":"data","required":false,"type":"string"}]}`

var icebergRustShapes = []shape{
	// load_config: ?warehouse= when a warehouse is configured.
	{call: "load_config", method: "GET", target: "/v1/config?warehouse={{warehouse-q}}", headers: rustHeaders, status: 200, checks: configChecks},
	// uri = "http://host:port/" (trailing slash): every path starts "//v1".
	// The answer is a redirect to the clean path (from the catalog's router
	// here, from the node's HTTP mux in front of it in a node), which
	// reqwest follows for a GET; a POST it would re-send as a GET, so such
	// a configuration can read but not change the catalog.
	{call: "load_config", method: "GET", target: "//v1/config?warehouse={{warehouse-q}}", headers: rustHeaders, status: 301, raw: true,
		checks: []check{hasHeader("Location", "/v1/config?warehouse={{warehouse-q}}")}},
	// create_namespace: NamespaceSerde, properties always Some.
	{call: "create_namespace", method: "POST", target: "/v1/floe/namespaces", headers: rustHeaders,
		body: `{"namespace":["rdb"],"properties":{}}`, status: 200, checks: []check{is([]string{"rdb"}, "namespace")}},
	{call: "create_namespace", method: "POST", target: "/v1/floe/namespaces", headers: rustHeaders,
		body: `{"namespace":["rdb","sub"],"properties":{}}`, status: 200},
	{call: "namespace_exists", method: "HEAD", target: "/v1/floe/namespaces/rdb%1Fsub", headers: rustHeaders, status: 204},
	{call: "namespace_exists", method: "HEAD", target: "/v1/floe/namespaces/rdb%1Fnope", headers: rustHeaders, status: 404},
	{call: "get_namespace", method: "GET", target: "/v1/floe/namespaces/rdb%1Fsub", headers: rustHeaders,
		status: 200, checks: []check{is([]string{"rdb", "sub"}, "namespace")}},
	{call: "list_namespaces", method: "GET", target: "/v1/floe/namespaces", headers: rustHeaders,
		status: 200, checks: []check{is([][]string{{"rdb"}}, "namespaces")}},
	{call: "list_namespaces", method: "GET", target: "/v1/floe/namespaces?parent=rdb", headers: rustHeaders,
		status: 200, checks: []check{is([][]string{{"rdb", "sub"}}, "namespaces")}},
	{call: "list_namespaces", method: "GET", target: "/v1/floe/namespaces?parent=rdb%1Fsub", headers: rustHeaders,
		status: 200, checks: []check{lists(0, "namespaces")}},
	// create_table: CreateTableRequest with None fields as null and an
	// UnboundPartitionSpec from its builder: spec_id and field_id are
	// Options serialised without skip_serializing_if, so null
	// (crates/iceberg/src/spec/partition.rs).
	{call: "create_table", method: "POST", target: "/v1/floe/namespaces/rdb/tables", headers: rustHeaders,
		body: `{"name":"t","location":null,"schema":` + rustSchema + `,"partition-spec":{"spec-id":null,"fields":[{"source-id":1,"field-id":null,"name":"id_bucket","transform":"bucket[16]"}]},` +
			`"write-order":null,"stage-create":false,"properties":null}`,
		status: 200, checks: []check{save("uuid", "metadata", "table-uuid"), save("mdloc", "metadata-location"),
			is("bucket[16]", "metadata", "partition-specs", "0", "fields", "0", "transform"),
			is(1000.0, "metadata", "partition-specs", "0", "fields", "0", "field-id")}},
	{call: "create_table", method: "POST", target: "/v1/floe/namespaces/rdb%1Fsub/tables", headers: rustHeaders,
		body:   `{"name":"u","location":null,"schema":` + rustSchema + `,"partition-spec":null,"write-order":null,"stage-create":false,"properties":{"owner":"rust"}}`,
		status: 200},
	{call: "create_table", method: "POST", target: "/v1/floe/namespaces/nope/tables", headers: rustHeaders,
		body:   `{"name":"x","location":null,"schema":` + rustSchema + `,"partition-spec":null,"write-order":null,"stage-create":false,"properties":null}`,
		status: 404, errType: "NoSuchNamespaceException"},
	{call: "load_table", method: "GET", target: "/v1/floe/namespaces/rdb/tables/t", headers: rustHeaders,
		status: 200, checks: []check{is("{{mdloc}}", "metadata-location")}},
	{call: "table_exists", method: "HEAD", target: "/v1/floe/namespaces/rdb/tables/t", headers: rustHeaders, status: 204},
	{call: "table_exists", method: "HEAD", target: "/v1/floe/namespaces/rdb/tables/nope", headers: rustHeaders, status: 404},
	// update_table: CommitTableRequest, identifier always present.
	{call: "update_table", method: "POST", target: "/v1/floe/namespaces/rdb/tables/t", headers: rustHeaders,
		body:   `{"identifier":{"namespace":["rdb"],"name":"t"},"requirements":[{"type":"assert-table-uuid","uuid":"{{uuid}}"}],"updates":[{"action":"set-properties","updates":{"owner":"rust"}}]}`,
		status: 200, checks: []check{changed("mdloc", "metadata-location"), save("mdloc", "metadata-location")}},
	{call: "update_table", method: "POST", target: "/v1/floe/namespaces/rdb/tables/t", headers: rustHeaders,
		body:   `{"identifier":{"namespace":["rdb"],"name":"t"},"requirements":[{"type":"assert-table-uuid","uuid":"00000000-0000-7000-8000-000000000000"}],"updates":[]}`,
		status: 409, errType: "CommitFailedException"},
	// TableUpdate::AddSpec carries the same UnboundPartitionSpec; its ids
	// are assigned by the catalog: a new field gets the next above
	// last-partition-id (never an id an earlier spec gave another field),
	// a field of the same source and transform as an earlier one its id.
	// Then the default is the last added.
	{call: "update_table", method: "POST", target: "/v1/floe/namespaces/rdb/tables/t", headers: rustHeaders,
		body: `{"identifier":{"namespace":["rdb"],"name":"t"},"requirements":[{"type":"assert-table-uuid","uuid":"{{uuid}}"}],"updates":[` +
			`{"action":"add-spec","spec":{"spec-id":null,"fields":[{"source-id":2,"field-id":null,"name":"data_trunc","transform":"truncate[4]"}]}},` +
			`{"action":"set-default-spec","spec-id":-1}]}`,
		status: 200, checks: []check{changed("mdloc", "metadata-location"), save("mdloc", "metadata-location"),
			is(1.0, "metadata", "default-spec-id"), is(1001.0, "metadata", "last-partition-id"),
			is(1001.0, "metadata", "partition-specs", "1", "fields", "0", "field-id")}},
	{call: "update_table", method: "POST", target: "/v1/floe/namespaces/rdb/tables/t", headers: rustHeaders,
		body: `{"identifier":{"namespace":["rdb"],"name":"t"},"requirements":[{"type":"assert-table-uuid","uuid":"{{uuid}}"}],"updates":[` +
			`{"action":"add-spec","spec":{"spec-id":null,"fields":[{"source-id":2,"field-id":null,"name":"data_trunc","transform":"truncate[4]"},` +
			`{"source-id":1,"field-id":null,"name":"id_bucket","transform":"bucket[16]"},{"source-id":1,"name":"id_ident","transform":"identity"}]}},` +
			`{"action":"set-default-spec","spec-id":-1}]}`,
		status: 200, checks: []check{changed("mdloc", "metadata-location"), save("mdloc", "metadata-location"),
			is(2.0, "metadata", "default-spec-id"), is(1002.0, "metadata", "last-partition-id"),
			is(1001.0, "metadata", "partition-specs", "2", "fields", "0", "field-id"),
			is(1000.0, "metadata", "partition-specs", "2", "fields", "1", "field-id"),
			is(1002.0, "metadata", "partition-specs", "2", "fields", "2", "field-id")}},
	{call: "list_tables", method: "GET", target: "/v1/floe/namespaces/rdb/tables", headers: rustHeaders,
		status: 200, checks: []check{is([]map[string]any{{"namespace": []string{"rdb"}, "name": "t"}}, "identifiers")}},
	{call: "rename_table", method: "POST", target: "/v1/floe/tables/rename", headers: rustHeaders,
		body: `{"source":{"namespace":["rdb"],"name":"t"},"destination":{"namespace":["rdb"],"name":"t_renamed"}}`, status: 204},
	{call: "rename_table", method: "POST", target: "/v1/floe/tables/rename", headers: rustHeaders,
		body:   `{"source":{"namespace":["rdb"],"name":"t_renamed"},"destination":{"namespace":["rdb","sub"],"name":"u"}}`,
		status: 409, errType: "AlreadyExistsException"},
	// drop_table: no query at all.
	{call: "drop_table", method: "DELETE", target: "/v1/floe/namespaces/rdb/tables/t_renamed", headers: rustHeaders, status: 204},
	// register_table: RegisterTableRequest with overwrite Some(false).
	{call: "register_table", method: "POST", target: "/v1/floe/namespaces/rdb/register", headers: rustHeaders,
		body: `{"name":"back","metadata-location":"{{mdloc}}","overwrite":false}`, status: 200},
	{call: "drop_namespace", method: "DELETE", target: "/v1/floe/namespaces/rdb", headers: rustHeaders,
		status: 409, errType: "NamespaceNotEmptyException"},
	// Releases before the prefix was used ([uri, "v1", "namespaces", ...],
	// NamespaceIdent::encode_in_url) address the unprefixed routes.
	{call: "get_namespace", method: "GET", target: "/v1/namespaces/rdb%1Fsub", headers: rustHeaders, status: 200},
	{call: "list_tables", method: "GET", target: "/v1/namespaces/rdb%1Fsub/tables", headers: rustHeaders,
		status: 200, checks: []check{is("u", "identifiers", "0", "name")}},
	{call: "drop_table", method: "DELETE", target: "/v1/namespaces/rdb%1Fsub/tables/u", headers: rustHeaders, status: 204},
	{call: "drop_namespace", method: "DELETE", target: "/v1/namespaces/rdb%1Fsub", headers: rustHeaders, status: 204},
}

// ---------------------------------------------------------------------------
// iceberg-js 1.0.0 (dist/index.mjs). createFetchClient sends Content-Type
// only with a body, and no other header of its own (fetch adds Accept and
// User-Agent). buildUrl resolves the path against the base URL and sets
// query parameters with URLSearchParams. The prefix is "v1" without a
// warehouse; with one, loadConfig asks GET v1/config?warehouse= and uses
// overrides.prefix, falling back to v1/<warehouse> when that fails.
// namespaceToPath encodeURIComponent-s each level and joins with %1F;
// namespaceToParentQuery joins with the raw unit separator. Every
// mutation carries a fresh UUIDv7 Idempotency-Key (generateIdempotencyKey);
// accessDelegation is sent as X-Iceberg-Access-Delegation, comma-joined.

var jsHeaders = []string{"Accept", "*/*", "User-Agent", "node"}

// jsKey is the n-th Idempotency-Key a client generates: a UUIDv7.
func jsKey(n int) string { return fmt.Sprintf("019a2b3c-4d5e-7f60-8a1b-2c3d4e5f%04x", n) }

func jsMutation(n int) []string {
	return with(jsHeaders, "Content-Type", "application/json", "Idempotency-Key", jsKey(n))
}

// The README's createTable example.
const jsCreateTable = `{"name":"events","schema":{"type":"struct","fields":[{"id":1,"name":"id","type":"long","required":true},` +
	`{"id":2,"name":"timestamp","type":"timestamp","required":true},{"id":3,"name":"user_id","type":"string","required":false}],` +
	`"schema-id":0,"identifier-field-ids":[1]},"partition-spec":{"spec-id":0,"fields":[]},"write-order":{"order-id":0,"fields":[]},` +
	`"properties":{"write.format.default":"parquet"}}`

var icebergJSShapes = []shape{
	{call: "loadConfig", method: "GET", target: "/v1/config?warehouse=floe", headers: jsHeaders,
		status: 200, checks: configChecks},
	// A warehouse floe does not serve: 404, and the client falls back to
	// v1/<warehouse>/..., which names an unknown prefix.
	{call: "loadConfig", method: "GET", target: "/v1/config?warehouse=analytics", headers: jsHeaders,
		status: 404, errType: "NoSuchWarehouseException"},
	{call: "listNamespaces", method: "GET", target: "/v1/analytics/namespaces", headers: jsHeaders,
		status: 404, errType: "NoSuchWarehouseException", raw: true},
	// createNamespace: properties left out when not given.
	{call: "createNamespace", method: "POST", target: "/v1/floe/namespaces", headers: jsMutation(1),
		body: `{"namespace":["jsdb"]}`, status: 200, checks: []check{is([]string{"jsdb"}, "namespace")}},
	{call: "createNamespace", method: "POST", target: "/v1/floe/namespaces", headers: jsMutation(2),
		body: `{"namespace":["jsdb","sub"],"properties":{"owner":"js"}}`, status: 200},
	// createNamespaceIfNotExists: a 409 is success to it.
	{call: "createNamespaceIfNotExists", method: "POST", target: "/v1/floe/namespaces", headers: jsMutation(3),
		body: `{"namespace":["jsdb"]}`, status: 409, errType: "AlreadyExistsException"},
	// Without a warehouse the prefix is plain "v1".
	{call: "listNamespaces", method: "GET", target: "/v1/namespaces", headers: jsHeaders,
		status: 200, checks: []check{is([][]string{{"jsdb"}}, "namespaces")}},
	{call: "listNamespaces", method: "GET", target: "/v1/floe/namespaces?parent=jsdb", headers: jsHeaders,
		status: 200, checks: []check{is([][]string{{"jsdb", "sub"}}, "namespaces")}},
	{call: "listNamespaces", method: "GET", target: "/v1/floe/namespaces?parent=jsdb%1Fsub&pageToken=&pageSize=50", headers: jsHeaders,
		status: 200, checks: []check{lists(0, "namespaces")}},
	{call: "namespaceExists", method: "HEAD", target: "/v1/floe/namespaces/jsdb%1Fsub", headers: jsHeaders, status: 204},
	{call: "namespaceExists", method: "HEAD", target: "/v1/floe/namespaces/jsdb%1Fnope", headers: jsHeaders, status: 404},
	{call: "loadNamespaceMetadata", method: "GET", target: "/v1/namespaces/jsdb%1Fsub", headers: jsHeaders,
		status: 200, checks: []check{is("js", "properties", "owner")}},
	{call: "updateNamespaceProperties", method: "POST", target: "/v1/floe/namespaces/jsdb/properties", headers: jsMutation(4),
		body: `{"removals":["none"],"updates":{"team":"web"}}`, status: 200, checks: []check{is([]string{"none"}, "missing")}},
	// createTableResult with accessDelegation: ["vended-credentials",
	// "remote-signing"].
	{call: "createTableResult", method: "POST", target: "/v1/floe/namespaces/jsdb/tables",
		headers: with(jsMutation(5), "X-Iceberg-Access-Delegation", "vended-credentials,remote-signing"),
		body:    jsCreateTable, status: 200, checks: []check{save("uuid", "metadata", "table-uuid"), save("mdloc", "metadata-location"), saveHeader("create-etag", "ETag")}},
	// A name with a space: encodeURIComponent sends %20.
	{call: "createTable", method: "POST", target: "/v1/floe/namespaces/jsdb%1Fsub/tables", headers: jsMutation(6),
		body:   strings.Replace(jsCreateTable, `"name":"events"`, `"name":"page views"`, 1),
		status: 200},
	{call: "loadTable", method: "GET", target: "/v1/floe/namespaces/jsdb%1Fsub/tables/page%20views", headers: jsHeaders,
		status: 200, checks: []check{present("metadata-location")}},
	// loadTableResult: the ETag kept; If-None-Match with it gives 304
	// (returned as null).
	{call: "loadTableResult", method: "GET", target: "/v1/floe/namespaces/jsdb/tables/events?snapshots=refs", headers: jsHeaders,
		status: 200, checks: []check{saveHeader("etag", "ETag")}},
	{call: "loadTableResult", method: "GET", target: "/v1/floe/namespaces/jsdb/tables/events?snapshots=refs",
		headers: with(jsHeaders, "If-None-Match", "{{etag}}"), status: 304},
	{call: "tableExists", method: "HEAD", target: "/v1/floe/namespaces/jsdb/tables/events",
		headers: with(jsHeaders, "X-Iceberg-Access-Delegation", "vended-credentials,remote-signing"), status: 204},
	// updateTable: the caller's { requirements, updates }, no identifier.
	{call: "updateTable", method: "POST", target: "/v1/floe/namespaces/jsdb/tables/events", headers: jsMutation(7),
		body:   `{"requirements":[],"updates":[{"action":"set-properties","updates":{"read.split.target-size":"134217728"}}]}`,
		status: 200, checks: []check{present("metadata-location"), save("mdloc", "metadata-location"), saveHeader("commit-etag", "ETag")}},
	{call: "loadTableResult", method: "GET", target: "/v1/floe/namespaces/jsdb/tables/events?snapshots=refs",
		headers: with(jsHeaders, "If-None-Match", "{{etag}}"), status: 200},
	// iceberg-js documents requirements as optional; Java's parser reads
	// an absent list as empty.
	{call: "updateTable", method: "POST", target: "/v1/floe/namespaces/jsdb/tables/events", headers: jsMutation(40),
		body:   `{"updates":[{"action":"set-properties","updates":{"no-requirements":"1"}}]}`,
		status: 200, checks: []check{is("1", "metadata", "properties", "no-requirements"), saveHeader("commit-etag", "ETag")}},
	// The commit's answer is tagged as a load of the whole metadata is:
	// the next load with it is a 304 (the spec's etag on CommitTableResponse).
	{call: "loadTableResult", method: "GET", target: "/v1/floe/namespaces/jsdb/tables/events",
		headers: with(jsHeaders, "If-None-Match", "{{commit-etag}}"), status: 304},
	{call: "loadTableResult", method: "GET", target: "/v1/floe/namespaces/jsdb/tables/events?snapshots=all",
		headers: with(jsHeaders, "If-None-Match", "{{commit-etag}}"), status: 304},
	{call: "listTables", method: "GET", target: "/v1/floe/namespaces/jsdb/tables?pageSize=1", headers: jsHeaders,
		status: 200, checks: []check{is("events", "identifiers", "0", "name"), absent("next-page-token")}},
	{call: "renameTable", method: "POST", target: "/v1/floe/tables/rename", headers: jsMutation(8),
		body: `{"source":{"namespace":["jsdb","sub"],"name":"page views"},"destination":{"namespace":["jsdb"],"name":"page_views"}}`, status: 204},
	// dropTable: purgeRequested always spelled out.
	{call: "dropTable", method: "DELETE", target: "/v1/floe/namespaces/jsdb/tables/events?purgeRequested=false", headers: jsMutation(9), status: 204},
	{call: "registerTableResult", method: "POST", target: "/v1/floe/namespaces/jsdb/register", headers: jsMutation(10),
		body: `{"name":"events","metadata-location":"{{mdloc}}","overwrite":false}`, status: 200, checks: []check{is("{{mdloc}}", "metadata-location")}},
	{call: "dropTable", method: "DELETE", target: "/v1/floe/namespaces/jsdb/tables/events?purgeRequested=true", headers: jsMutation(11), status: 204},
	{call: "dropTable", method: "DELETE", target: "/v1/floe/namespaces/jsdb/tables/page_views?purgeRequested=true", headers: jsMutation(12), status: 204},
	{call: "dropNamespace", method: "DELETE", target: "/v1/floe/namespaces/jsdb%1Fsub", headers: with(jsHeaders, "Idempotency-Key", jsKey(13)), status: 204},
	{call: "dropNamespace", method: "DELETE", target: "/v1/floe/namespaces/jsdb", headers: with(jsHeaders, "Idempotency-Key", jsKey(14)), status: 204},
	{call: "namespaceExists", method: "HEAD", target: "/v1/floe/namespaces/jsdb", headers: jsHeaders, status: 404},
}

// A new table's metadata, in the answers to its create and its load,
// carries the fields Java's reader before 1.4 requires (properties,
// snapshots, current-snapshot-id), which iceberg-go leaves out when empty.
func TestNewTableMetadataCarriesFieldsOldReadersRequire(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, http.StatusOK, n.do(t, "POST", "/v1/floe/namespaces", map[string]any{"namespace": []string{"db"}}).status)
	created := n.do(t, "POST", "/v1/floe/namespaces/db/tables", map[string]any{
		"name": "t", "schema": json.RawMessage(`{"type":"struct","fields":[]}`)})
	require.Equal(t, http.StatusOK, created.status, "%s", created.body)
	for name, r := range map[string]response{"create": created, "load": n.do(t, "GET", "/v1/floe/namespaces/db/tables/t", nil)} {
		var res struct {
			Metadata json.RawMessage `json:"metadata"`
		}
		require.NoError(t, json.Unmarshal(r.body, &res), name)
		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(res.Metadata, &fields), name)
		for _, k := range []string{"properties", "snapshots", "current-snapshot-id"} {
			assert.Contains(t, fields, k, name)
		}
	}
}

// TestETagHeaderNameAsJavaReadsIt: Java's HTTPClient keeps response
// headers in a case-sensitive map under the names as sent and looks up
// "ETag"; Go's canonical spelling "Etag" is never found there, so every
// answer that carries the tag must name it "ETag" on the wire.
func TestETagHeaderNameAsJavaReadsIt(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"e"}}).status)
	create := `{"name":"t","schema":{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true}]}}`
	commit := `{"requirements":[],"updates":[{"action":"set-properties","updates":{"k":"v"}}]}`
	for _, tc := range []struct{ what, method, path, body string }{
		{"createTable", "POST", "/v1/namespaces/e/tables", create},
		{"loadTable", "GET", "/v1/namespaces/e/tables/t", ""},
		{"loadTable with snapshots=refs", "GET", "/v1/namespaces/e/tables/t?snapshots=refs", ""},
		{"updateTable", "POST", "/v1/namespaces/e/tables/t", commit},
	} {
		head := rawHead(t, n.URL, tc.method, tc.path, tc.body)
		assert.Contains(t, head, "\r\nETag: \"", "%s: %s", tc.what, head)
		assert.NotContains(t, head, "\r\nEtag:", tc.what)
	}
}

// rawHead sends one HTTP/1.1 request over a new connection and returns the
// answer's status line and headers as they came over the wire.
func rawHead(t *testing.T, base, method, path, body string) string {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
	req := method + " " + path + " HTTP/1.1\r\nHost: " + u.Host + "\r\nConnection: close\r\n"
	if body != "" {
		req += "Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n"
	}
	_, err = io.WriteString(conn, req+"\r\n"+body)
	require.NoError(t, err)
	raw, err := io.ReadAll(conn)
	require.NoError(t, err)
	head, _, ok := strings.Cut(string(raw), "\r\n\r\n")
	require.True(t, ok, "no end of headers: %q", raw)
	require.True(t, strings.HasPrefix(head, "HTTP/1.1 200 "), head)
	return head
}
