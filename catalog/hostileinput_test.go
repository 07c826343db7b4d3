package catalog_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// snapshotUpdates is a commit body adding a snapshot with this id,
// sequence number and time, and making it main's head.
func snapshotUpdates(id, seq, ms int64) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"requirements":[],"updates":[
		{"action":"add-snapshot","snapshot":{"snapshot-id":%d,"sequence-number":%d,"timestamp-ms":%d,
		 "manifest-list":"file:///tmp/floe-none/snap.avro","summary":{"operation":"append"},"schema-id":0}},
		{"action":"set-snapshot-ref","ref-name":"main","type":"branch","snapshot-id":%d}]}`, id, seq, ms, id))
}

// A commit whose metadata iceberg-go builds but its parser, or Java's,
// would refuse is a 400 that changes nothing: the node that wrote such a
// version served it from its cache while every other node, and it after
// a restart, answered 500 for the table, and Java engines could not load
// it at all.
func TestCommitsWriteOnlyReadableMetadata(t *testing.T) {
	n := startNodeWithNamespaceA(t)
	now := time.Now().UnixMilli()
	create := func(name, version, spec string) string {
		body := fmt.Sprintf(`{"name":%q,"properties":{"format-version":%q},"schema":{"type":"struct","schema-id":0,"fields":[
			{"id":1,"name":"id","type":"long","required":true},
			{"id":2,"name":"ts","type":"timestamptz","required":false}]}%s}`, name, version, spec)
		r := n.do(t, "POST", "/v1/namespaces/a/tables", json.RawMessage(body))
		require.Equal(t, 200, r.status, "%s", r.body)
		return "/v1/namespaces/a/tables/" + name
	}
	location := func(path string) string {
		r := n.do(t, "GET", path, nil)
		require.Equal(t, 200, r.status, "%s", r.body)
		return r.json(t)["metadata-location"].(string)
	}
	refused := func(name, path string, body any) {
		t.Run(name, func(t *testing.T) {
			before := location(path)
			r := n.do(t, "POST", path, body)
			assert.Equal(t, 400, r.status, "%s", r.body)
			assert.Equal(t, "BadRequestException", r.errorType(t))
			assert.Equal(t, before, location(path), "a refused commit changes nothing")
		})
	}

	seq := create("seq", "2", "")
	require.Equal(t, 200, n.do(t, "POST", seq, snapshotUpdates(200, 5, now)).status)
	refused("a sequence number below the table's", seq, snapshotUpdates(201, 1, now))
	refused("snapshot id -1 as main's head", create("neg", "2", ""), snapshotUpdates(-1, 1, now))
	refused("sequence number -1", create("negseq", "2", ""), snapshotUpdates(300, -1, now))
	refused("a sequence number in a v1 table", create("v1", "1", ""), snapshotUpdates(300, 7, now))

	day := create("day", "2", `,"partition-spec":{"spec-id":0,"fields":[{"source-id":2,"field-id":1000,"name":"ts_day","transform":"day"}]}`)
	refused("the default spec's source dropped", day, json.RawMessage(`{"requirements":[],"updates":[
		{"action":"add-schema","schema":{"type":"struct","schema-id":1,"fields":[{"id":1,"name":"id","type":"long","required":true}]}},
		{"action":"set-current-schema","schema-id":-1}]}`))
	refused("the default spec's source retyped", day, json.RawMessage(`{"requirements":[],"updates":[
		{"action":"add-schema","schema":{"type":"struct","schema-id":1,"fields":[{"id":1,"name":"id","type":"long","required":true},{"id":2,"name":"ts","type":"string","required":false}]}},
		{"action":"set-current-schema","schema-id":-1}]}`))
	// Unpartitioned first, the column dropped, then the old spec made the
	// default again.
	r := n.do(t, "POST", day, json.RawMessage(`{"requirements":[],"updates":[
		{"action":"add-spec","spec":{"spec-id":1,"fields":[]}},{"action":"set-default-spec","spec-id":-1},
		{"action":"add-schema","schema":{"type":"struct","schema-id":1,"fields":[{"id":1,"name":"id","type":"long","required":true}]}},
		{"action":"set-current-schema","schema-id":-1}]}`))
	require.Equal(t, 200, r.status, "%s", r.body)
	refused("an old spec made the default without its source", day, json.RawMessage(`{"requirements":[],"updates":[{"action":"set-default-spec","spec-id":0}]}`))

	future := create("future", "2", "")
	refused("a snapshot an hour ahead", future, snapshotUpdates(400, 1, now+time.Hour.Milliseconds()))
	// A writer's clock a little ahead is let through, and the table takes
	// commits after it.
	r = n.do(t, "POST", future, snapshotUpdates(401, 1, now+30_000))
	require.Equal(t, 200, r.status, "%s", r.body)
	r = n.do(t, "POST", future, json.RawMessage(`{"requirements":[],"updates":[{"action":"set-properties","updates":{"k":"v"}}]}`))
	assert.Equal(t, 200, r.status, "%s", r.body)
}

// A register that is refused leaves the metadata file it read out of the
// cache: anyone who can write into an allowed location could otherwise
// fill the node's memory with files no table holds.
func TestRefusedRegisterCachesNothing(t *testing.T) {
	n := startNodeWithNamespaceA(t)
	r := n.do(t, "POST", "/v1/namespaces/a/tables", withName("t"))
	require.Equal(t, 200, r.status, "%s", r.body)
	owned := r.json(t)["metadata-location"].(string)
	n.restart() // an empty cache
	before := n.gauge(t, "floe_catalog_metadata_cache_bytes")
	// The file declares t's location, which t owns.
	r = n.do(t, "POST", "/v1/namespaces/a/register", map[string]any{"name": "r", "metadata-location": owned})
	require.Equal(t, 409, r.status, "%s", r.body)
	assert.Equal(t, before, n.gauge(t, "floe_catalog_metadata_cache_bytes"))
	// A load caches it.
	require.Equal(t, 200, n.do(t, "GET", "/v1/namespaces/a/tables/t", nil).status)
	assert.Greater(t, n.gauge(t, "floe_catalog_metadata_cache_bytes"), before)
}

// A namespace's properties are bounded as they would be after an update,
// not only per request: they live in the replicated state, rewritten
// whole by each update.
func TestNamespacePropertiesAreBounded(t *testing.T) {
	n := startNodeWithNamespaceA(t)
	big := strings.Repeat("x", 300<<10)
	update := func(keys ...string) response {
		u := map[string]string{}
		for _, k := range keys {
			u[k] = big
		}
		return n.do(t, "POST", "/v1/namespaces/a/properties", map[string]any{"updates": u})
	}
	require.Equal(t, 200, update("k1", "k2").status)
	r := update("k3", "k4")
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Equal(t, "BadRequestException", r.errorType(t))
	props := n.do(t, "GET", "/v1/namespaces/a", nil).json(t)["properties"].(map[string]any)
	assert.NotContains(t, props, "k3", "a refused update changes nothing")
	// Replacing values within the bound, or removing some, goes through.
	assert.Equal(t, 200, update("k1", "k2").status)
	r = n.do(t, "POST", "/v1/namespaces/a/properties", map[string]any{"removals": []string{"k1"}, "updates": map[string]string{"k3": big}})
	assert.Equal(t, 200, r.status, "%s", r.body)
}

// A path segment that is not valid UTF-8 is a 400. Names are stored
// through JSON, which reads invalid bytes as U+FFFD, so without the check
// a DELETE of caf%E9 (Latin-1 é) dropped the namespace named with U+FFFD,
// and a staged create under bad%FF stored a table no GET could name.
func TestPathSegmentsMustBeUTF8(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"caf\ufffd"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("r\ufffd")).status)
	before := n.state(t)
	for _, c := range []struct{ method, path string }{
		{"HEAD", "/v1/namespaces/caf%E9"},
		{"DELETE", "/v1/namespaces/caf%E8"},
		{"GET", "/v1/namespaces?parent=caf%E9"},
		{"DELETE", "/v1/namespaces/a/tables/r%FF"},
		{"DELETE", "/v1/namespaces/a/views/r%FF"},
		{"POST", "/v1/namespaces/a/tables/bad%FFname"},
	} {
		body := any(nil)
		if c.method == "POST" {
			body = json.RawMessage(`{"requirements":[{"type":"assert-create"}],"updates":[]}`)
		}
		r := n.do(t, c.method, c.path, body)
		assert.Equal(t, 400, r.status, "%s %s: %s", c.method, c.path, r.body)
	}
	assert.Equal(t, before, n.state(t))
}

// A table in namespace a.x, beside a table a.x, has no free default
// location: every one lies inside a.x's. The create is a 400 saying so,
// not the 409 every client reads as "the table exists" (Spark's CREATE
// TABLE IF NOT EXISTS would silently do nothing).
func TestDefaultLocationInsideATableIsA400(t *testing.T) {
	n := startNodeWithNamespaceA(t)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("x")).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a", "x"}}).status)
	r := n.do(t, "POST", "/v1/namespaces/a%1Fx/tables", withName("y"))
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Equal(t, "BadRequestException", r.errorType(t))
	assert.Contains(t, string(r.body), "give this table a location")
	// With a location of its own it is created.
	body := withName("y")
	body["location"] = n.warehouse + "/elsewhere/y"
	r = n.do(t, "POST", "/v1/namespaces/a%1Fx/tables", body)
	assert.Equal(t, 200, r.status, "%s", r.body)
}

// set-location to the table's own location with a trailing '/' is the
// same location, as on a create: not a move, and nothing changes.
func TestSetLocationWithATrailingSlashIsTheSameLocation(t *testing.T) {
	n := startNodeWithNamespaceA(t)
	r := n.do(t, "POST", "/v1/namespaces/a/tables", withName("t"))
	require.Equal(t, 200, r.status, "%s", r.body)
	metaLoc := r.json(t)["metadata-location"]
	loc := r.json(t)["metadata"].(map[string]any)["location"].(string)
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", json.RawMessage(`{"requirements":[],"updates":[{"action":"set-location","location":"`+loc+`/"}]}`))
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, loc, r.json(t)["metadata"].(map[string]any)["location"])
	assert.Equal(t, metaLoc, r.json(t)["metadata-location"], "no new version")
}

// A change adding more snapshots than any engine adds is a 400 before
// the builder, whose cost grows faster than their number, runs; many
// updates of other kinds (an expiry's removals) pass.
func TestTooManySnapshotsIsA400(t *testing.T) {
	n := startNodeWithNamespaceA(t)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("t")).status)
	now := time.Now().UnixMilli()
	updates := make([]string, 1001)
	for i := range updates {
		updates[i] = fmt.Sprintf(`{"action":"add-snapshot","snapshot":{"snapshot-id":%d,"sequence-number":%d,"timestamp-ms":%d,"manifest-list":"file:///tmp/floe-none/s.avro","summary":{"operation":"append"},"schema-id":0}}`, i+1, i+1, now)
	}
	r := n.do(t, "POST", "/v1/namespaces/a/tables/t", json.RawMessage(`{"requirements":[],"updates":[`+strings.Join(updates, ",")+`]}`))
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "at most 1000 snapshots")
	props := make([]string, 5000)
	for i := range props {
		props[i] = fmt.Sprintf(`{"action":"set-properties","updates":{"k%d":"v"}}`, i)
	}
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", json.RawMessage(`{"requirements":[],"updates":[`+strings.Join(updates[:10], ",")+`,`+strings.Join(props, ",")+`]}`))
	assert.Equal(t, 200, r.status, "%s", r.body)
}

// startNodeWithNamespaceA starts a node holding namespace a.
func startNodeWithNamespaceA(t *testing.T) *node {
	t.Helper()
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	return n
}

// A body the server cut off (here by its read timeout) is a 400 that says
// so, without the sockets' addresses the read error carries.
func TestBodyCutOffIsA400NamingNoSocket(t *testing.T) {
	n := startNode(t, warehouses()[0])
	srv := httptest.NewUnstartedServer(n.srv.Handler())
	srv.Config.ReadTimeout = 300 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /v1/namespaces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"namespace\":")
	require.NoError(t, err)
	// Bounds a hang only; the body never ends.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, 400, resp.StatusCode, "%s", body)
	assert.Contains(t, string(body), "the request body did not arrive in time")
	assert.NotContains(t, string(body), "127.0.0.1")
}

// TestDeclaredOversizeBodyIsRefusedAtOnce: a request declaring a body over
// the limit is answered 413 before any of it is read: a client sending
// "Expect: 100-continue" gets the 413, not a "100 Continue" and a wait.
func TestDeclaredOversizeBodyIsRefusedAtOnce(t *testing.T) {
	n := startNode(t, warehouses()[0])
	srv := httptest.NewServer(n.srv.Handler())
	t.Cleanup(srv.Close)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /v1/namespaces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Expect: 100-continue\r\nContent-Length: 50000000\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second))) // bounds a hang only
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s", body)
	assert.Contains(t, string(body), "request body exceeds")
}

// TestHeadWhereverGet: HEAD is served wherever GET is, as the GET's answer
// without a body; where the spec makes HEAD an operation (tableExists),
// that operation answers.
func TestHeadWhereverGet(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"h"}}).status)
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/v1/config", 200}, {"/v1/namespaces", 200}, {"/v1/floe/namespaces/h/tables", 200},
		{"/v1/namespaces/h/views", 200}, {"/v1/namespaces/h", 204}, {"/v1/namespaces/h/tables/none", 404},
	} {
		r := n.doRaw(t, "HEAD", tc.path, nil) // HEAD beside GET is RFC 9110's, not the spec's
		assert.Equal(t, tc.status, r.status, tc.path)
		assert.Empty(t, r.body, tc.path)
	}
	r := n.doRaw(t, "PUT", "/v1/namespaces", nil)
	require.Equal(t, 405, r.status)
	assert.Contains(t, r.header.Get("Allow"), "HEAD")
}

// TestStoragePropertiesAreTheCatalogs: a table property that says how
// clients reach storage (iceberg-go and PyIceberg build FileIO from table
// properties too) is not kept at create or commit (Flink's connector sends
// its catalog options as table properties: refusing them would fail its
// creates), and a metadata file carrying one is refused at register, so
// that a table's writer cannot send other clients' storage requests
// elsewhere; other s3.* properties (a storage class, say) stay a table's.
func TestStoragePropertiesAreTheCatalogs(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"sp"}}).status)
	props := func(r response) map[string]any {
		t.Helper()
		require.Equal(t, 200, r.status, "%s", r.body)
		p, _ := r.json(t)["metadata"].(map[string]any)["properties"].(map[string]any)
		return p
	}
	for i, k := range []string{"s3.proxy-uri", "s3.endpoint", "S3.Endpoint", "s3.access-key-id", "s3.signer.uri", "py-io-impl", "adls.sas-token.acct", "client.secret-access-key"} {
		body := withName(fmt.Sprintf("t%d", i))
		body["properties"] = map[string]string{k: "http://127.0.0.1:1", "owner": "flink"}
		p := props(n.do(t, "POST", "/v1/namespaces/sp/tables", body))
		assert.NotContains(t, p, k, "create with %s", k)
		assert.Equal(t, "flink", p["owner"], "the other properties are kept")
	}
	created := n.do(t, "POST", "/v1/namespaces/sp/tables", withName("t"))
	require.Equal(t, 200, created.status)
	p := props(n.do(t, "POST", "/v1/namespaces/sp/tables/t", setProp("s3.proxy-uri", "http://127.0.0.1:1")))
	assert.NotContains(t, p, "s3.proxy-uri")
	p = props(n.do(t, "POST", "/v1/namespaces/sp/tables/t", setProp("s3.write.storage-class", "STANDARD_IA")))
	assert.Equal(t, "STANDARD_IA", p["s3.write.storage-class"])
	p = props(n.do(t, "GET", "/v1/namespaces/sp/tables/t", nil))
	assert.NotContains(t, p, "s3.proxy-uri")

	// Register: a metadata file carrying one is refused (the catalog does
	// not write that file, so it cannot leave the property out).
	meta := created.json(t)["metadata"].(map[string]any)
	meta["properties"] = map[string]any{"s3.endpoint": "http://127.0.0.1:1"}
	meta["location"] = meta["location"].(string) + "-reg"
	meta["table-uuid"] = "0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8e"
	b, err := json.Marshal(meta)
	require.NoError(t, err)
	file := meta["location"].(string) + "/metadata/00000-reg.metadata.json"
	require.NoError(t, n.objects.Write(context.Background(), file, b))
	r := n.do(t, "POST", "/v1/namespaces/sp/register", map[string]any{"name": "reg", "metadata-location": file})
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "configures how clients reach storage")
}

// A new name holding a percent-escape is refused: iceberg-go sends a
// table's name into the path unescaped, so its load or drop of "t%41"
// reached the table "tA" that Java reaches as "tA" (Java sends t%2541).
func TestNewNamesWithPercentEscapesAreRefused(t *testing.T) {
	n := startNodeWithNamespaceA(t)
	schema := json.RawMessage(`{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true}]}`)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", map[string]any{"name": "tA", "schema": schema}).status)

	for name, r := range map[string]response{
		"table": n.do(t, "POST", "/v1/namespaces/a/tables", map[string]any{"name": "t%41", "schema": schema,
			"location": strings.TrimSuffix(n.warehouse, "/") + "/a/t41"}),
		"namespace level": n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a%2Eb"}}),
		"rename destination": n.do(t, "POST", "/v1/tables/rename", map[string]any{
			"source": map[string]any{"namespace": []string{"a"}, "name": "tA"}, "destination": map[string]any{"namespace": []string{"a"}, "name": "t%41x"}}),
	} {
		assert.Equal(t, 400, r.status, "%s: %s", name, r.body)
		assert.Contains(t, string(r.body), "percent-escape", name)
	}
	list := n.do(t, "GET", "/v1/namespaces/a/tables", nil)
	require.Equal(t, 200, list.status)
	assert.Equal(t, []any{map[string]any{"namespace": []any{"a"}, "name": "tA"}}, list.json(t)["identifiers"], "nothing created or renamed")
	assert.Equal(t, 404, n.do(t, "GET", "/v1/namespaces/a%252Eb", nil).status)
}

// A new name holding '?', '#' or '\\' is refused: iceberg-js before 1.0
// puts names into paths unescaped, and its purging drop of "t?x" sent
// ".../tables/t?x=&purgeRequested=true", which purged the table "t"; a
// WHATWG URL parser reads '\\' as '/'.
func TestNewNamesThatEndAPathAreRefused(t *testing.T) {
	n := startNodeWithNamespaceA(t)
	schema := json.RawMessage(`{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true}]}`)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", map[string]any{"name": "t", "schema": schema}).status)
	for _, bad := range []string{"t?x", "t#y", "t\\u"} {
		for what, r := range map[string]response{
			"table": n.do(t, "POST", "/v1/namespaces/a/tables", map[string]any{"name": bad, "schema": schema,
				"location": strings.TrimSuffix(n.warehouse, "/") + "/a/other"}),
			"view":            n.do(t, "POST", "/v1/namespaces/a/views", createViewBody(bad, "select 1", "a")),
			"namespace level": n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a", bad}}),
			"rename destination": n.do(t, "POST", "/v1/tables/rename", map[string]any{
				"source": map[string]any{"namespace": []string{"a"}, "name": "t"}, "destination": map[string]any{"namespace": []string{"a"}, "name": bad}}),
		} {
			assert.Equal(t, 400, r.status, "%s %q: %s", what, bad, r.body)
			assert.Equal(t, "BadRequestException", r.errorType(t), "%s %q", what, bad)
		}
	}
	list := n.do(t, "GET", "/v1/namespaces/a/tables", nil)
	require.Equal(t, 200, list.status)
	assert.Equal(t, []any{map[string]any{"namespace": []any{"a"}, "name": "t"}}, list.json(t)["identifiers"], "nothing created or renamed")
}

// A new name or location holding a character XML cannot carry (U+FFFF,
// U+FFFE) is refused: S3's DeleteObjects body would carry U+FFFD in its
// place, so a purge of "v\uFFFF" deleted the table "v\uFFFD"'s files.
func TestNamesAndLocationsXMLCannotCarryAreRefused(t *testing.T) {
	n := startNodeWithNamespaceA(t)
	schema := json.RawMessage(`{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true}]}`)
	wh := strings.TrimSuffix(n.warehouse, "/")
	for name, r := range map[string]response{
		"table":           n.do(t, "POST", "/v1/namespaces/a/tables", map[string]any{"name": "v\uFFFF", "schema": schema}),
		"namespace level": n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"z\uFFFE"}}),
		"view":            n.do(t, "POST", "/v1/namespaces/a/views", createViewBody("w\uFFFF", "select 1", "a")),
		"location": n.do(t, "POST", "/v1/namespaces/a/tables", map[string]any{"name": "t", "schema": schema,
			"location": wh + "/a/v\uFFFE"}),
	} {
		assert.Equal(t, 400, r.status, "%s: %s", name, r.body)
		assert.Contains(t, string(r.body), "XML requests cannot carry", name)
	}
	list := n.do(t, "GET", "/v1/namespaces/a/tables", nil)
	require.Equal(t, 200, list.status)
	assert.Empty(t, list.json(t)["identifiers"], "nothing created")
	require.Equal(t, 200, n.do(t, "GET", "/v1/namespaces", nil).status)
	assert.Equal(t, 404, n.do(t, "GET", "/v1/namespaces/z%EF%BF%BE", nil).status)
}

// A query parameter given twice is a 400 that changes nothing: its readers
// (authorization, the Idempotency-Key binding, the handler) would not all
// read the same value, and "purgeRequested=true&purgeRequested=false"
// purged.
func TestRepeatedQueryParameterIsA400(t *testing.T) {
	n := startNodeWithNamespaceA(t)
	schema := json.RawMessage(`{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true}]}`)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", map[string]any{"name": "t", "schema": schema}).status)

	r := n.do(t, "DELETE", "/v1/namespaces/a/tables/t?purgeRequested=true&purgeRequested=false", nil)
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "purgeRequested given 2 times")
	assert.Equal(t, 200, n.do(t, "GET", "/v1/namespaces/a/tables/t", nil).status, "the table is still there")
	assert.Equal(t, 400, n.do(t, "GET", "/v1/namespaces/a/tables?pageToken=&pageToken=", nil).status)
	assert.Equal(t, 400, n.do(t, "GET", "/v1/namespaces/a/tables/t?snapshots=all&snapshots=refs", nil).status)
}

// A properties update with neither updates nor removals but other fields
// (a misspelling) is a 400, not a 200 that changed nothing; so is a body
// that is not an object. An empty object is a valid update of nothing.
func TestPropertiesUpdateOfUnknownFieldsIsA400(t *testing.T) {
	n := startNodeWithNamespaceA(t)
	for _, body := range []string{`{"update":{"k":"v"}}`, `null`, `[]`} {
		r := n.do(t, "POST", "/v1/namespaces/a/properties", json.RawMessage(body))
		assert.Equal(t, 400, r.status, "%s: %s", body, r.body)
		assert.Equal(t, "BadRequestException", r.errorType(t))
	}
	r := n.do(t, "POST", "/v1/namespaces/a/properties", json.RawMessage(`{}`))
	assert.Equal(t, 200, r.status, "%s", r.body)
	r = n.do(t, "POST", "/v1/namespaces/a/properties", json.RawMessage(`{"updates":{"k":"v"},"extra":1}`))
	assert.Equal(t, 200, r.status, "%s", r.body)
}

// What iceberg-go would store in a form Java cannot read, or drop while
// answering success, is a 400 that changes nothing: a sort field of
// several source columns (Java's SortOrderParser requires source-id; a
// create kept only the first column), and a snapshot's key-id (iceberg-go
// has no such field: an encrypted manifest list would lose its key).
// (Answers for the v3 table skip spec validation: they carry
// "current-snapshot-id": null, as Java writes v3 metadata, which the
// REST spec's schema does not allow.)
func TestWhatIcebergGoWouldDropIsRefused(t *testing.T) {
	n := startNodeWithNamespaceA(t)
	body := func(name, version, extra string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"name":%q,"properties":{"format-version":%q},"schema":{"type":"struct","schema-id":0,"fields":[
			{"id":1,"name":"id","type":"long","required":true},{"id":2,"name":"x","type":"long","required":false}]}%s}`, name, version, extra))
	}
	current := func(name string) string {
		r := n.doRaw(t, "GET", "/v1/namespaces/a/tables/"+name, nil)
		require.Equal(t, 200, r.status, "%s", r.body)
		return r.json(t)["metadata-location"].(string)
	}
	r := n.do(t, "POST", "/v1/namespaces/a/tables", body("t", "2", ""))
	require.Equal(t, 200, r.status, "%s", r.body)
	r = n.doRaw(t, "POST", "/v1/namespaces/a/tables", body("k", "3", ""))
	require.Equal(t, 200, r.status, "%s", r.body)
	beforeT, beforeK := current("t"), current("k")

	r = n.do(t, "POST", "/v1/namespaces/a/tables", body("w", "2", `,"write-order":{"order-id":1,"fields":[{"source-ids":[1,2],"transform":"identity","direction":"asc","null-order":"nulls-first"}]}`))
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "source-ids")
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", json.RawMessage(`{"requirements":[],"updates":[
		{"action":"add-sort-order","sort-order":{"order-id":1,"fields":[{"source-ids":[1,2],"transform":"bucket[4]","direction":"asc","null-order":"nulls-first"}]}},
		{"action":"set-default-sort-order","sort-order-id":-1}]}`))
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "source-ids")
	r = n.doRaw(t, "POST", "/v1/namespaces/a/tables/k", json.RawMessage(fmt.Sprintf(`{"requirements":[],"updates":[
		{"action":"add-snapshot","snapshot":{"snapshot-id":11,"sequence-number":1,"timestamp-ms":%d,"first-row-id":0,"added-rows":3,"key-id":"k1",
		 "manifest-list":"file:///tmp/floe-none/snap.avro","summary":{"operation":"append"},"schema-id":0}},
		{"action":"set-snapshot-ref","ref-name":"main","type":"branch","snapshot-id":11}]}`, time.Now().UnixMilli())))
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "key-id")
	// The same with the keys escaped, as every JSON decoder reads them.
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", json.RawMessage(`{"requirements":[],"updates":[
		{"action":"add-sort-order","sort-order":{"order-id":1,"fields":[{"source\u002dids":[1,2],"transform":"bucket[4]","direction":"asc","null-order":"nulls-first"}]}},
		{"action":"set-default-sort-order","sort-order-id":-1}]}`))
	assert.Equal(t, 400, r.status, "%s", r.body)
	r = n.doRaw(t, "POST", "/v1/namespaces/a/tables/k", json.RawMessage(fmt.Sprintf(`{"requirements":[],"updates":[
		{"action":"add-snapshot","snapshot":{"snapshot-id":11,"sequence-number":1,"timestamp-ms":%d,"first-row-id":0,"added-rows":3,"key\u002did":"k1",
		 "manifest-list":"file:///tmp/floe-none/snap.avro","summary":{"operation":"append"},"schema-id":0}},
		{"action":"set-snapshot-ref","ref-name":"main","type":"branch","snapshot-id":11}]}`, time.Now().UnixMilli())))
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Equal(t, beforeT, current("t"), "nothing committed")
	assert.Equal(t, beforeK, current("k"), "nothing committed")
	assert.Equal(t, 404, n.doRaw(t, "GET", "/v1/namespaces/a/tables/w", nil).status)

	// A single source column in the source-ids form is what Java reads.
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", json.RawMessage(`{"requirements":[],"updates":[
		{"action":"add-sort-order","sort-order":{"order-id":1,"fields":[{"source-ids":[2],"transform":"identity","direction":"asc","null-order":"nulls-first"}]}},
		{"action":"set-default-sort-order","sort-order-id":-1}]}`))
	require.Equal(t, 200, r.status, "%s", r.body)

	// A metadata file whose snapshots have key-ids is not registered: the
	// next commit would drop them.
	r = n.doRaw(t, "GET", "/v1/namespaces/a/tables/k", nil)
	m := r.json(t)["metadata"].(map[string]any)
	m["location"] = m["location"].(string) + "-enc"
	m["last-sequence-number"], m["next-row-id"], m["current-snapshot-id"] = 1, 1, 12
	m["snapshots"] = []any{map[string]any{"snapshot-id": 12, "sequence-number": 1, "timestamp-ms": m["last-updated-ms"], "first-row-id": 0, "added-rows": 1,
		"key-id": "k1", "manifest-list": m["location"].(string) + "/metadata/snap-12.avro", "summary": map[string]any{"operation": "append"}, "schema-id": 0}}
	m["refs"] = map[string]any{"main": map[string]any{"snapshot-id": 12, "type": "branch"}}
	r = registerDoc(t, n, "enc", m, true)
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "key-id")
	assert.Equal(t, 404, n.doRaw(t, "GET", "/v1/namespaces/a/tables/enc", nil).status)
}

// A new snapshot must carry what PyIceberg and iceberg-rust parse every
// load with: a summary (the REST spec requires one in every format
// version) naming one of the spec's four operations. Without, iceberg-go
// stored it, and every later load or commit of the table failed in those
// clients. Refused as a 400 that changes nothing, in a commit and in a
// registered file (served as stored).
func TestSnapshotSummariesOtherClientsCannotParseAreRefused(t *testing.T) {
	n := startNodeWithNamespaceA(t)
	create := func(name, version string) string {
		r := n.do(t, "POST", "/v1/namespaces/a/tables", json.RawMessage(fmt.Sprintf(`{"name":%q,"properties":{"format-version":%q},
			"schema":{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true}]}}`, name, version)))
		require.Equal(t, 200, r.status, "%s", r.body)
		return r.json(t)["metadata-location"].(string)
	}
	commit := func(name string, id int, seq int, summary string) response {
		if summary != "" {
			summary = `,"summary":` + summary
		}
		return n.do(t, "POST", "/v1/namespaces/a/tables/"+name, json.RawMessage(fmt.Sprintf(`{"requirements":[],"updates":[
			{"action":"add-snapshot","snapshot":{"snapshot-id":%d,"sequence-number":%d,"timestamp-ms":%d,
			 "manifest-list":"file:///tmp/floe-none/snap-%d.avro"%s,"schema-id":0}},
			{"action":"set-snapshot-ref","ref-name":"main","type":"branch","snapshot-id":%d}]}`, id, seq, time.Now().UnixMilli(), id, summary, id)))
	}
	current := func(name string) string {
		r := n.do(t, "GET", "/v1/namespaces/a/tables/"+name, nil)
		require.Equal(t, 200, r.status, "%s", r.body)
		return r.json(t)["metadata-location"].(string)
	}
	before := create("t", "2")
	for _, c := range []struct{ summary, want string }{
		{"", "has no summary"},
		{`{}`, "no operation"},
		{`{"operation":"compact"}`, `operation \"compact\" is not one of`},
		{`{"operation":"Append"}`, "is not one of"},
	} {
		r := commit("t", 31, 1, c.summary)
		assert.Equal(t, 400, r.status, "summary %s: %s", c.summary, r.body)
		assert.Contains(t, string(r.body), c.want, c.summary)
	}
	assert.Equal(t, before, current("t"), "nothing committed")

	// Properties without an operation are read as an overwrite, as Java
	// reads them, and served with it.
	r := commit("t", 32, 1, `{"added-data-files":"1"}`)
	require.Equal(t, 200, r.status, "%s", r.body)
	snaps := r.json(t)["metadata"].(map[string]any)["snapshots"].([]any)
	assert.Equal(t, "overwrite", snaps[0].(map[string]any)["summary"].(map[string]any)["operation"])
	// Nor in format version 1, where iceberg-rust reads none, but the
	// REST spec's Snapshot still requires one.
	beforeV1 := create("v1", "1")
	r = commit("v1", 33, 0, "")
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Equal(t, beforeV1, current("v1"), "nothing committed")
	r = commit("v1", 33, 0, `{"operation":"append"}`)
	require.Equal(t, 200, r.status, "%s", r.body)

	// A registered file is served as it is stored: a summary without an
	// operation is refused there too.
	meta := r.json(t)["metadata"].(map[string]any)
	for i, summary := range []any{map[string]any{"added-data-files": "1"}, map[string]any{}, map[string]any{"operation": "compact"}, nil} {
		m := maps.Clone(meta)
		m["location"] = fmt.Sprintf("%s-reg%d", meta["location"], i)
		m["format-version"], m["last-sequence-number"] = 2, 1
		m["table-uuid"] = fmt.Sprintf("6a1c1f4e-0000-4000-8000-%012d", i)
		snap := map[string]any{"snapshot-id": 33, "sequence-number": 1, "timestamp-ms": meta["last-updated-ms"],
			"manifest-list": m["location"].(string) + "/metadata/snap-33.avro", "schema-id": 0}
		if summary != nil {
			snap["summary"] = summary
		}
		m["snapshots"] = []any{snap}
		name := fmt.Sprintf("reg%d", i)
		r = registerDoc(t, n, name, m, false)
		assert.Equal(t, 400, r.status, "summary %v: %s", summary, r.body)
		assert.Contains(t, string(r.body), "snapshot 33", "summary %v", summary)
		assert.Equal(t, 404, n.do(t, "GET", "/v1/namespaces/a/tables/"+name, nil).status)
	}
	// A format version 1 file written long ago may lack summaries: every
	// client's v1 parser reads such snapshots.
	m := maps.Clone(meta)
	m["location"] = fmt.Sprintf("%s-regv1", meta["location"])
	m["table-uuid"] = "6a1c1f4e-0000-4000-8000-000000000099"
	m["snapshots"] = []any{map[string]any{"snapshot-id": 33, "timestamp-ms": meta["last-updated-ms"],
		"manifest-list": m["location"].(string) + "/metadata/snap-33.avro", "schema-id": 0}}
	r = registerDoc(t, n, "regv1", m, true)
	assert.Equal(t, 200, r.status, "%s", r.body)
}

// registerDoc writes the metadata document m into its own location's
// metadata directory and registers it in namespace a as name; raw skips
// the spec validation of the answer.
func registerDoc(t *testing.T, n *node, name string, m map[string]any, raw bool) response {
	t.Helper()
	b, err := json.Marshal(m)
	require.NoError(t, err)
	file := m["location"].(string) + "/metadata/00001-" + name + ".metadata.json"
	require.NoError(t, n.objects.Write(context.Background(), file, b))
	body := map[string]any{"name": name, "metadata-location": file}
	if raw {
		return n.doRaw(t, "POST", "/v1/namespaces/a/register", body)
	}
	return n.do(t, "POST", "/v1/namespaces/a/register", body)
}
