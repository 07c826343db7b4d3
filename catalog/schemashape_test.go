package catalog_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/catalog"
)

// A schema Java's client cannot build (two fields of one name, a required
// field of type unknown, a default that is not a value of its field's
// type) is refused with a 400 wherever a schema comes in — a table's
// create and commit, a transaction, a view's create and replace — and
// nothing changes. Defaults of every type in the spec's single-value form
// are taken.
func TestSchemasJavaCannotBuildAreRefused(t *testing.T) {
	n := startNode(t, warehouses()[0])
	for _, ns := range []string{"s", "g"} {
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{ns}}).status)
	}
	field := func(id int, name string, typ any, required bool, extra ...any) map[string]any {
		f := map[string]any{"id": id, "name": name, "type": typ, "required": required}
		for i := 0; i+1 < len(extra); i += 2 {
			f[extra[i].(string)] = extra[i+1]
		}
		return f
	}
	schema := func(fields ...any) map[string]any {
		return map[string]any{"type": "struct", "schema-id": 0, "fields": fields}
	}
	// Without the spec check of answers: the spec's single-value schema
	// is ambiguous (an int is both an integer and a long value), so an
	// answer carrying defaults fails its oneOf.
	createTable := func(ns, name string, s map[string]any) response {
		return n.doRaw(t, "POST", "/v1/namespaces/"+ns+"/tables", map[string]any{"name": name, "schema": s,
			"properties": map[string]string{"format-version": "3"}})
	}
	createView := func(ns, name string, s map[string]any) response {
		body := createViewBody(name, "select 1", ns)
		body["schema"] = s
		return n.doRaw(t, "POST", "/v1/namespaces/"+ns+"/views", body)
	}
	locations := func() string {
		t.Helper()
		var out []string
		for _, p := range []string{"/v1/namespaces/g/tables/good", "/v1/namespaces/g/views/vgood"} {
			r := n.doRaw(t, "GET", p, nil)
			require.Equal(t, 200, r.status, "%s", r.body)
			out = append(out, r.json(t)["metadata-location"].(string))
		}
		return strings.Join(out, " ")
	}

	// Every type, with a default Java reads.
	good := schema(
		field(1, "b", "boolean", false, "initial-default", true),
		field(2, "i", "int", false, "initial-default", 7, "write-default", -3),
		field(3, "l", "long", false, "write-default", 1<<40),
		field(4, "f", "float", false, "initial-default", 1.5),
		field(5, "d", "double", false, "initial-default", 2),
		field(6, "dec", "decimal(9,2)", false, "initial-default", "12.34"),
		field(7, "s", "string", false, "initial-default", "x"),
		field(8, "u", "uuid", false, "initial-default", "f79c3e09-677c-4bbd-a479-3f349cb785e7"),
		field(9, "dt", "date", false, "initial-default", "2024-01-02"),
		field(10, "tm", "time", false, "initial-default", "10:11:12.123456"),
		field(11, "ts", "timestamp", false, "initial-default", "2024-01-02T10:11:12.123456"),
		field(12, "tz", "timestamptz", false, "initial-default", "2024-01-02T10:11:12.123456+00:00"),
		field(13, "fx", "fixed[2]", false, "initial-default", "abCD"),
		field(14, "bin", "binary", false, "initial-default", "00ff"),
		// A struct's defaults are its sub-fields'.
		field(20, "st", map[string]any{"type": "struct", "fields": []any{field(21, "x", "int", false, "initial-default", 4)}}, false),
		field(22, "unk", "unknown", false),
	)
	r := createTable("g", "good", good)
	require.Equal(t, 200, r.status, "%s", r.body)
	r = createView("g", "vgood", good)
	require.Equal(t, 200, r.status, "%s", r.body)

	bad := map[string]map[string]any{
		"two fields of one name": schema(field(1, "a", "int", false), field(2, "a", "int", false)),
		"a required unknown":     schema(field(1, "a", "unknown", true)),
		"a string for an int":    schema(field(1, "a", "int", false, "initial-default", "x")),
		"a fraction for a long":  schema(field(1, "a", "long", false, "write-default", 1.5)),
		"an int beyond 32 bits":  schema(field(1, "a", "int", false, "initial-default", math.MaxInt32+1)),
		"an object for a long":   schema(field(1, "a", "long", false, "write-default", map[string]any{"x": 1})),
		"a number for a decimal": schema(field(1, "a", "decimal(9,2)", false, "initial-default", 12.34)),
		"a decimal's scale":      schema(field(1, "a", "decimal(9,2)", false, "initial-default", "12.3")),
		"a date":                 schema(field(1, "a", "date", false, "initial-default", "2024-13-40")),
		"a zone for timestamptz": schema(field(1, "a", "timestamptz", false, "initial-default", "2024-01-02T10:11:12+02:00")),
		"a fixed's length":       schema(field(1, "a", "fixed[2]", false, "initial-default", "abcdef")),
		"hex":                    schema(field(1, "a", "binary", false, "initial-default", "zz")),
		"a uuid":                 schema(field(1, "a", "uuid", false, "initial-default", "not-a-uuid")),
		// Java keeps defaults as literals, of primitive types only: a
		// nested field's default must be null.
		"a list":          schema(field(1, "a", map[string]any{"type": "list", "element-id": 2, "element": "int", "element-required": false}, false, "initial-default", []any{1, 2})),
		"a map":           schema(field(1, "a", map[string]any{"type": "map", "key-id": 2, "key": "string", "value-id": 3, "value": "long", "value-required": false}, false, "write-default", map[string]any{"keys": []any{"a"}, "values": []any{5}})),
		"a struct":        schema(field(1, "a", map[string]any{"type": "struct", "fields": []any{field(2, "x", "int", false)}}, false, "initial-default", map[string]any{"2": 4})),
		"an empty struct": schema(field(1, "a", map[string]any{"type": "struct", "fields": []any{field(2, "x", "int", false)}}, false, "initial-default", map[string]any{})),
	}
	listed := func() string {
		t.Helper()
		return string(n.do(t, "GET", "/v1/namespaces/s/tables", nil).body) + string(n.vdo(t, "GET", "/v1/namespaces/s/views", nil).body)
	}
	before, beforeLocs := listed(), locations()
	for what, s := range bad {
		r := createTable("s", "t", s)
		assert.Equal(t, 400, r.errorStatus(t), "table create, %s: %s", what, r.body)
		r = createView("s", "v", s)
		assert.Equal(t, 400, r.errorStatus(t), "view create, %s: %s", what, r.body)
		s["schema-id"] = 1
		r = n.do(t, "POST", "/v1/transactions/commit", map[string]any{"table-changes": []any{map[string]any{
			"identifier": map[string]any{"namespace": []string{"g"}, "name": "good"},
			"updates":    []any{map[string]any{"action": "add-schema", "schema": s}, map[string]any{"action": "set-current-schema", "schema-id": -1}},
		}}})
		assert.Equal(t, 400, r.errorStatus(t), "transaction, %s: %s", what, r.body)
		r = n.vdo(t, "POST", "/v1/namespaces/g/views/vgood", map[string]any{"requirements": []any{}, "updates": []any{
			map[string]any{"action": "add-schema", "schema": s},
			map[string]any{"action": "add-view-version", "view-version": map[string]any{
				"version-id": 2, "schema-id": -1, "timestamp-ms": 1, "summary": map[string]string{"engine-name": "test"},
				"representations": []any{map[string]any{"type": "sql", "sql": "select 2", "dialect": "spark"}}, "default-namespace": []string{"s"}}},
			map[string]any{"action": "set-current-view-version", "view-version-id": -1},
		}})
		assert.Equal(t, 400, r.errorStatus(t), "view replace, %s: %s", what, r.body)
	}
	assert.Equal(t, before, listed(), "nothing created")
	assert.Equal(t, beforeLocs, locations(), "nothing committed")
}

// A view version at the 32-bit bound would leave no id for the next
// version (the highest is kept however old): refused. A view file that
// a create would refuse is refused by a register too.
func TestViewVersionIDsLeaveRoomAndRegisterChecksTheFile(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"s"}}).status)
	r := n.vdo(t, "POST", "/v1/namespaces/s/views", createViewBody("v", "select 1", "s"))
	require.Equal(t, 200, r.status, "%s", r.body)
	loc := r.json(t)["metadata-location"].(string)

	// Any id near the bound: one at 2^31-2 was accepted, and every later
	// version (2^31-1) refused. A version at the highest id allowed
	// leaves room for the next ones.
	for _, id := range []int64{math.MaxInt32, math.MaxInt32 - 1, catalog.MaxNewViewVersionID + 1} {
		body := addVersionBody("select 2", "s")
		body["updates"].([]any)[0].(map[string]any)["view-version"].(map[string]any)["version-id"] = id
		r = n.vdo(t, "POST", "/v1/namespaces/s/views/v", body)
		assert.Equal(t, 400, r.errorStatus(t), "%d: %s", id, r.body)
	}
	body := addVersionBody("select 2", "s")
	body["updates"].([]any)[0].(map[string]any)["view-version"].(map[string]any)["version-id"] = catalog.MaxNewViewVersionID
	r = n.vdo(t, "POST", "/v1/namespaces/s/views/v", body)
	require.Equal(t, 200, r.status, "%s", r.body)
	r = n.vdo(t, "POST", "/v1/namespaces/s/views/v", addVersionBody("select 3", "s"))
	assert.Equal(t, 200, r.status, "the next version has an id: %s", r.body)
	// The ids that follow the highest go on past the bound, as Java's
	// builder numbers them (highest plus one); a jump far above does not.
	body = addVersionBody("select 4", "s")
	body["updates"].([]any)[0].(map[string]any)["view-version"].(map[string]any)["version-id"] = catalog.MaxNewViewVersionID + 2
	r = n.vdo(t, "POST", "/v1/namespaces/s/views/v", body)
	assert.Equal(t, 200, r.status, "a client's highest plus one: %s", r.body)
	body = addVersionBody("select 5", "s")
	body["updates"].([]any)[0].(map[string]any)["view-version"].(map[string]any)["version-id"] = math.MaxInt32 - 1
	r = n.vdo(t, "POST", "/v1/namespaces/s/views/v", body)
	assert.Equal(t, 400, r.errorStatus(t), "a jump to the bound: %s", r.body)

	if !strings.HasPrefix(loc, "file://") {
		t.Skip("the register half writes a local file")
	}
	raw, err := os.ReadFile(strings.TrimPrefix(loc, "file://"))
	require.NoError(t, err)
	var meta map[string]any
	require.NoError(t, json.Unmarshal(raw, &meta))
	dir := filepath.Join(filepath.Dir(filepath.Dir(strings.TrimPrefix(loc, "file://"))), "..", "hand")
	meta["location"] = "file://" + filepath.Clean(dir)
	// Java's ViewMetadataParser requires what iceberg-go fills in; the
	// registered file is served as it is.
	entry := func(m map[string]any) map[string]any { return m["version-log"].([]any)[0].(map[string]any) }
	write := func(what string, edit func(m, v map[string]any)) string {
		m := map[string]any{}
		b, _ := json.Marshal(meta)
		require.NoError(t, json.Unmarshal(b, &m))
		v := m["versions"].([]any)[0].(map[string]any)
		m["current-version-id"] = v["version-id"]
		m["version-log"] = []any{map[string]any{"version-id": v["version-id"], "timestamp-ms": 1}}
		edit(m, v)
		m["current-version-id"] = v["version-id"]
		file := filepath.Join(filepath.Clean(dir), "metadata", "00000-"+strings.ReplaceAll(what, " ", "-")+".metadata.json")
		require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o755))
		b, err := json.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(file, b, 0o644))
		return "file://" + file
	}
	for what, edit := range map[string]func(m, v map[string]any){
		"a version-id beyond 32 bits":             func(_, v map[string]any) { v["version-id"] = 5000000000 },
		"no default-namespace":                    func(_, v map[string]any) { delete(v, "default-namespace") },
		"no version-log":                          func(m, _ map[string]any) { delete(m, "version-log") },
		"a log entry without timestamp-ms":        func(m, _ map[string]any) { delete(entry(m), "timestamp-ms") },
		"a log entry without version-id":          func(m, _ map[string]any) { delete(entry(m), "version-id") },
		"a log entry's version-id beyond 32 bits": func(m, _ map[string]any) { entry(m)["version-id"] = 1 << 40 },
		"a version without timestamp-ms":          func(_, v map[string]any) { delete(v, "timestamp-ms") },
		"a version without schema-id":             func(_, v map[string]any) { delete(v, "schema-id") },
		"a version without summary":               func(_, v map[string]any) { delete(v, "summary") },
		"a version without representations":       func(_, v map[string]any) { delete(v, "representations") },
	} {
		r := n.vdo(t, "POST", "/v1/namespaces/s/register-view", map[string]any{"name": "hand", "metadata-location": write(what, edit)})
		assert.Equal(t, 400, r.errorStatus(t), "%s: %s", what, r.body)
	}
	assert.Equal(t, 404, n.vdo(t, "GET", "/v1/namespaces/s/views/hand", nil).status)
	// The file as written registers.
	r = n.vdo(t, "POST", "/v1/namespaces/s/register-view", map[string]any{"name": "hand", "metadata-location": write("as written", func(_, _ map[string]any) {})})
	assert.Equal(t, 200, r.status, "%s", r.body)
}

// One change adds at most MaxSchemasPerChange schemas (and, to a table,
// as many partition specs and sort orders): each is compared with every
// one the metadata has, so tens of thousands in one view change held a CPU
// for minutes and left a view every later commit of which took seconds.
func TestSchemasPerChangeAreBounded(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"s"}}).status)
	require.Equal(t, 200, n.vdo(t, "POST", "/v1/namespaces/s/views", createViewBody("v", "select 1", "s")).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/s/tables", withName("t")).status)
	adds := func(k int) []any {
		var u []any
		for i := range k {
			u = append(u, map[string]any{"action": "add-schema", "schema": map[string]any{"type": "struct", "fields": []any{
				map[string]any{"id": 1, "name": fmt.Sprintf("c%d", i), "type": "int", "required": false}}}})
		}
		return u
	}
	for _, path := range []string{"/v1/namespaces/s/views/v", "/v1/namespaces/s/tables/t"} {
		do := n.do
		if strings.Contains(path, "/views/") {
			do = n.vdo
		}
		r := do(t, "POST", path, map[string]any{"requirements": []any{}, "updates": adds(catalog.MaxSchemasPerChange + 1)})
		assert.Equal(t, 400, r.status, "%s: %s", path, r.body)
		assert.Contains(t, string(r.body), "at most", path)
		r = do(t, "POST", path, map[string]any{"requirements": []any{}, "updates": adds(catalog.MaxSchemasPerChange)})
		assert.Equal(t, 200, r.status, "%s: %s", path, r.body)
	}
}
