package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// metadataFixture is a table's metadata of the given format version with
// snapshots, refs, logs and strings that encoding/json escapes.
func metadataFixture(version int) string {
	v3 := ""
	if version == 3 {
		v3 = `"next-row-id": 4000,`
	}
	rowID := func(id int) string {
		if version == 3 {
			return fmt.Sprintf(`, "first-row-id": %d`, id)
		}
		return ""
	}
	if version == 1 {
		return `{
	"format-version": 1,
	"table-uuid": "0e4a5a3c-52f3-4b8b-9d1c-3f8c8f1f1a01",
	"location": "s3://bucket/ns/t&<1>",
	"last-updated-ms": 1700000000000,
	"last-column-id": 2,
	"schema": {"type": "struct", "fields": [
		{"id": 1, "name": "id", "required": true, "type": "long"},
		{"id": 2, "name": "d<a>t&a", "required": false, "type": "string", "doc": "line\u2028sep \"quoted\" é"}
	]},
	"partition-spec": [{"name": "id", "transform": "identity", "source-id": 1, "field-id": 1000}],
	"properties": {"owner": "<script>&amp;", "unicode": "ünï\u2029"},
	"current-snapshot-id": -1,
	"snapshots": [{"snapshot-id": 1925, "timestamp-ms": 1700000000000}]
}`
	}
	return fmt.Sprintf(`{
	"format-version": %d,
	"table-uuid": "0e4a5a3c-52f3-4b8b-9d1c-3f8c8f1f1a0%d",
	"location": "s3://bucket/ns/t&<%d>",
	"last-sequence-number": 2,
	"last-updated-ms": 1700000000000,
	"last-column-id": 3,
	%s
	"current-schema-id": 1,
	"schemas": [
		{"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": true, "type": "long"}]},
		{"type": "struct", "schema-id": 1, "identifier-field-ids": [1], "fields": [
			{"id": 1, "name": "id", "required": true, "type": "long"},
			{"id": 2, "name": "d<a>t&a", "required": false, "type": "string", "doc": "line\u2028sep \"quoted\" é"},
			{"id": 3, "name": "ts", "required": false, "type": "timestamptz"}
		]}
	],
	"default-spec-id": 0,
	"partition-specs": [{"spec-id": 0, "fields": [{"name": "id_bucket", "transform": "bucket[16]", "source-id": 1, "field-id": 1000}]}],
	"last-partition-id": 1000,
	"default-sort-order-id": 1,
	"sort-orders": [{"order-id": 0, "fields": []}, {"order-id": 1, "fields": [
		{"transform": "identity", "source-id": 1, "direction": "asc", "null-order": "nulls-first"}
	]}],
	"properties": {"owner": "<script>&amp;", "unicode": "ünï\u2029", "write.metadata.previous-versions-max": "3"},
	"current-snapshot-id": 3055729675574597004,
	"snapshots": [
		{"snapshot-id": 3051729675574597004, "timestamp-ms": 1699999990000, "sequence-number": 1,
		 "summary": {"operation": "append", "added-files": "1"}, "manifest-list": "s3://bucket/ns/t/metadata/snap-1.avro"%s},
		{"snapshot-id": 3055729675574597004, "parent-snapshot-id": 3051729675574597004, "timestamp-ms": 1700000000000,
		 "sequence-number": 2, "summary": {"operation": "append"}, "manifest-list": "s3://bucket/ns/t/metadata/snap-2.avro", "schema-id": 1%s}
	],
	"snapshot-log": [
		{"snapshot-id": 3051729675574597004, "timestamp-ms": 1699999990000},
		{"snapshot-id": 3055729675574597004, "timestamp-ms": 1700000000000}
	],
	"metadata-log": [
		{"metadata-file": "s3://bucket/ns/t/metadata/00000-a.metadata.json", "timestamp-ms": 1699999980000},
		{"metadata-file": "s3://bucket/ns/t/metadata/00001-b.metadata.json", "timestamp-ms": 1699999990000}
	],
	"refs": {
		"main": {"snapshot-id": 3055729675574597004, "type": "branch"},
		"tag<&>": {"snapshot-id": 3051729675574597004, "type": "tag", "max-ref-age-ms": 10000000}
	}
}`, version, version, version, v3, rowID(1000), rowID(2000))
}

// The commit path writes encodeMetadata's bytes to the file and into the
// answer. They must be exactly json.Marshal's (what floe wrote before, and
// what every other node writes), and iceberg-go must read them back as the
// same metadata: for every format version, for metadata as parsed and as
// rebuilt by a commit, with strings encoding/json escapes.
func TestMetadataEncodingIsByteCompatible(t *testing.T) {
	for _, version := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			parsed, err := table.ParseMetadataBytes([]byte(metadataFixture(version)))
			require.NoError(t, err)
			builder, err := table.MetadataBuilderFromBase(parsed, "s3://bucket/ns/t/metadata/00002-c.metadata.json")
			require.NoError(t, err)
			require.NoError(t, table.NewSetPropertiesUpdate(iceberg.Properties{"k<&>": "v\u2028<b>"}).Apply(builder))
			committed, err := builder.Build()
			require.NoError(t, err)

			for name, meta := range map[string]table.Metadata{"parsed": parsed, "committed": committed} {
				want, err := json.Marshal(meta)
				require.NoError(t, err)
				want = withRequiredFields(want)
				got, err := encodeMetadata(meta)
				require.NoError(t, err)
				require.Equal(t, string(want), string(got), name)
				assert.NotContains(t, string(got), "<", "%s: HTML characters stay escaped", name)

				back, err := table.ParseMetadataBytes(got)
				require.NoError(t, err, name)
				assert.True(t, meta.Equals(back), "%s: parsed back equal", name)
				again, err := encodeMetadata(back)
				require.NoError(t, err)
				assert.Equal(t, string(got), string(again), "%s: stable through a round trip", name)
			}

			// The answer carries the file's bytes and is the body writeJSON
			// writes.
			raw, err := encodeMetadata(committed)
			require.NoError(t, err)
			tm := &tableMetadata{location: "s3://bucket/ns/t&<1>/metadata/00003-\u2028.metadata.json", raw: raw, meta: committed}
			direct := httptest.NewRecorder()
			writeCommitResult(direct, tm)
			viaEncoder := httptest.NewRecorder()
			writeJSON(viaEncoder, http.StatusOK, commitTableResponse{MetadataLocation: tm.location, Metadata: tm.raw})
			require.Equal(t, viaEncoder.Body.String(), direct.Body.String())
			assert.Equal(t, http.StatusOK, direct.Code)
			assert.Equal(t, "application/json", direct.Header().Get("Content-Type"))
			assert.Equal(t, fmt.Sprint(direct.Body.Len()), direct.Header().Get("Content-Length"))
			var res commitTableResponse
			require.NoError(t, json.Unmarshal(direct.Body.Bytes(), &res))
			assert.Equal(t, tm.location, res.MetadataLocation)
			assert.True(t, strings.Contains(direct.Body.String(), string(raw)), "the file's bytes, unchanged")
		})
	}
}

// A table's metadata carries the fields Java's reader before 1.4 requires,
// also when iceberg-go would leave them out (no properties, no snapshot):
// with the value Java writes for "none", once each, and still read back
// by iceberg-go as the same metadata.
func TestMetadataCarriesFieldsOldReadersRequire(t *testing.T) {
	sc := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "properties", Type: iceberg.PrimitiveTypes.Int64, Required: true, Doc: `"snapshots": a "doc"`})
	for _, version := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			meta, err := table.NewMetadata(sc, iceberg.UnpartitionedSpec, table.UnsortedSortOrder, "s3://b/ns/t",
				iceberg.Properties{"format-version": fmt.Sprint(version)})
			require.NoError(t, err)
			raw, err := encodeMetadata(meta)
			require.NoError(t, err)
			fields := topLevelFields(t, raw)
			assert.JSONEq(t, `{}`, string(fields["properties"]))
			assert.JSONEq(t, `[]`, string(fields["snapshots"]))
			if version < 3 {
				assert.JSONEq(t, `-1`, string(fields["current-snapshot-id"]))
			} else {
				assert.JSONEq(t, `null`, string(fields["current-snapshot-id"]), "iceberg-go writes v3's itself")
			}
			back, err := table.ParseMetadataBytes(raw)
			require.NoError(t, err)
			assert.True(t, meta.Equals(back))
			assert.Nil(t, back.CurrentSnapshot())
			again, err := encodeMetadata(back)
			require.NoError(t, err)
			assert.Equal(t, string(raw), string(again), "stable through a round trip")
		})
	}
	// Present fields are left as they are.
	full := []byte(metadataFixture(2))
	parsed, err := table.ParseMetadataBytes(full)
	require.NoError(t, err)
	want, err := json.Marshal(parsed)
	require.NoError(t, err)
	got, err := encodeMetadata(parsed)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got))
	assert.Equal(t, `{"properties":{},"snapshots":[],"current-snapshot-id":-1}`, string(withRequiredFields([]byte(`{}`))))

}

// topLevelFields returns the top-level fields of the JSON object raw,
// failing on a field that occurs twice.
func topLevelFields(t *testing.T, raw []byte) map[string]json.RawMessage {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	require.NoError(t, err)
	require.Equal(t, json.Delim('{'), tok)
	out := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		require.NoError(t, err)
		key := tok.(string)
		var v json.RawMessage
		require.NoError(t, dec.Decode(&v))
		require.NotContains(t, out, key, "field %q written twice", key)
		out[key] = v
	}
	return out
}

func TestWithRequiredFieldsReadsTheTopLevelOnly(t *testing.T) {
	all := `"properties":{},"snapshots":[],"current-snapshot-id":-1`
	for _, tc := range []struct{ name, in, want string }{
		{"empty", `{}`, `{` + all + `}`},
		{"nested keys of the same names", `{"statistics":[{"blob-metadata":[{"properties":{"snapshots":1}}]}],"refs":{"current-snapshot-id":{}}}`,
			`{"statistics":[{"blob-metadata":[{"properties":{"snapshots":1}}]}],"refs":{"current-snapshot-id":{}},` + all + `}`},
		{"pretty-printed, all present", "{\n  \"properties\" : { },\n  \"snapshots\" : [ ],\n  \"current-snapshot-id\" : 7\n}\n", "{\n  \"properties\" : { },\n  \"snapshots\" : [ ],\n  \"current-snapshot-id\" : 7\n}\n"},
		{"escaped key", `{"propert\u0069es":{"a":"b"},"snapshots":[1],"current-snapshot-id":1}`, `{"propert\u0069es":{"a":"b"},"snapshots":[1],"current-snapshot-id":1}`},
		{"quotes inside strings and keys", `{"doc":"\"snapshots\":[]","a\"properties":{"\\":"}"}}`, `{"doc":"\"snapshots\":[]","a\"properties":{"\\":"}"},` + all + `}`},
		{"not an object", `[1,2]`, `[1,2]`},
		{"truncated", `{"a":{"b":1}`, `{"a":{"b":1}`},
		{"trailing data", `{}{}`, `{}{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(withRequiredFields([]byte(tc.in)))
			assert.Equal(t, tc.want, got)
			if json.Valid([]byte(tc.in)) && strings.HasPrefix(tc.in, "{") {
				require.True(t, json.Valid([]byte(got)), got)
				topLevelFields(t, []byte(got)) // fails on a field written twice
			}
		})
	}
}

// FuzzWithRequiredFields: on any JSON object, the result is valid JSON
// holding the input's fields unchanged plus each required field once.
func FuzzWithRequiredFields(f *testing.F) {
	for _, s := range []string{`{}`, `{"properties":{"snapshots":[]}}`, "{ \"a\" : [ { } ] }", `{"\u0070roperties":1}`, `{"a":"\"}"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var before map[string]json.RawMessage
		if json.Unmarshal([]byte(in), &before) != nil || !strings.HasPrefix(strings.TrimSpace(in), "{") {
			return
		}
		dec := json.NewDecoder(strings.NewReader(in))
		if _, err := dec.Token(); err != nil {
			return
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return
			}
			if seen[tok.(string)] {
				return // duplicate keys in the input: out of scope
			}
			seen[tok.(string)] = true
			var v json.RawMessage
			if dec.Decode(&v) != nil {
				return
			}
		}
		out := withRequiredFields([]byte(in))
		require.True(t, json.Valid(out), "%q -> %q", in, out)
		after := topLevelFields(t, out)
		for k, v := range before {
			require.JSONEq(t, string(v), string(after[k]), "field %q", k)
		}
		for _, rf := range requiredFields {
			require.Contains(t, after, rf.key)
		}
		require.Len(t, after, len(before)+len(requiredFields)-countPresent(before))
	})
}

func countPresent(fields map[string]json.RawMessage) int {
	n := 0
	for _, rf := range requiredFields {
		if _, ok := fields[rf.key]; ok {
			n++
		}
	}
	return n
}

// withEmptyCollections changes nothing in a document but a null value of
// a key named properties, blob-metadata or fields, which becomes the empty
// map or list: not a key spelled with an escaped quote before it, not a
// string that looks like one.
func FuzzWithEmptyCollections(f *testing.F) {
	for _, s := range []string{
		`{"properties":null}`, `{"a":[{"blob-metadata":null,"fields":null,"properties":null}]}`,
		`{"x\"properties":null}`, `{"a":"\"properties\":null"}`, `{"a":"\\","properties":null}`,
		`{"properties":{"properties":"null"}}`, `{"fields":null,"fields2":null}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var before any
		if json.Unmarshal([]byte(in), &before) != nil {
			return
		}
		// Its contract is compact JSON as encoding/json writes it: no
		// white space, and keys spelled without \u escapes.
		var compact bytes.Buffer
		if json.Compact(&compact, []byte(in)) != nil || compact.String() != in || strings.Contains(in, `\u`) {
			return
		}
		out := withEmptyCollections([]byte(in))
		require.True(t, json.Valid(out), "%q -> %q", in, out)
		var after any
		require.NoError(t, json.Unmarshal(out, &after))
		requireSameButEmptied(t, before, after, "", in)
	})
}

// requireSameButEmptied requires after to equal before but where before
// has null under one of emptyCollections' keys (key is the key holding
// the values compared, "" for none).
func requireSameButEmptied(t *testing.T, before, after any, key, in string) {
	t.Helper()
	if before == nil {
		for _, c := range emptyCollections {
			if `"`+key+`":null` == string(c.null) {
				require.Equal(t, string(c.empty), `"`+key+`":`+string(mustMarshal(after)), "%q at %q", in, key)
				return
			}
		}
	}
	switch b := before.(type) {
	case map[string]any:
		a, ok := after.(map[string]any)
		require.True(t, ok, "%q at %q", in, key)
		require.Len(t, a, len(b), "%q at %q", in, key)
		for k, v := range b {
			requireSameButEmptied(t, v, a[k], k, in)
		}
	case []any:
		a, ok := after.([]any)
		require.True(t, ok, "%q at %q", in, key)
		require.Len(t, a, len(b), "%q at %q", in, key)
		for i := range b {
			requireSameButEmptied(t, b[i], a[i], "", in)
		}
	default:
		require.Equal(t, before, after, "%q at %q", in, key)
	}
}
