package catalog

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/iceberg-go/table"
)

// FuzzParseIdentifier checks namespace and name parsing against an
// independent statement of the rules: a {namespace} path segment is
// accepted exactly when it percent-decodes and every level between %1F
// separators (or, when it holds no %1F, "." separators) is a valid name
// without a "."; a name is valid exactly when it is 1 to
// 255 bytes without control characters. Accepted levels survive being
// joined with either separator, escaped and parsed again; refusals are 400
// in the Iceberg error model. Nothing panics.
func FuzzParseIdentifier(f *testing.F) {
	seeds := [][2]string{
		{"db", "t"},
		{"a.b.c", "events"},
		{"a%1Fb%1Fc", "events"},
		{"a%1Fb.c", "events"},
		{"a.b%1Fc", "events"},
		{"a%2Eb", "t"},
		{"a%1F", "t"},
		{".a", "t"},
		{"a..b", "t"},
		{"", ""},
		{"%", "t"},
		{"%zz", "t"},
		{"a%00b", "t\x00"},
		{"caf%C3%A9", "caf\u00e9"},
		{"%FF%FE", "\xff\xfe"},
		{strings.Repeat("x", 255), strings.Repeat("y", 256)},
		{"a%7Fb", "t\x7f"},
		{"a b/c", "with space"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, rawNamespace, name string) {
		levels, err := parseNamespace(rawNamespace)
		want, wantOK := expectedLevels(rawNamespace)
		if err != nil {
			requireBadRequest(t, err)
			if wantOK {
				t.Fatalf("parseNamespace(%q) refused levels %q: %v", rawNamespace, want, err)
			}
		} else {
			if !wantOK || !slices.Equal(levels, want) {
				t.Fatalf("parseNamespace(%q) = %q, want %q (valid %v)", rawNamespace, levels, want, wantOK)
			}
			for _, sep := range []string{nsSeparator, unitSeparator} {
				joined := strings.Join(levels, sep)
				again, err := splitNamespace(joined)
				if err != nil || !slices.Equal(again, levels) {
					t.Fatalf("splitNamespace(%q) = %q, %v; want %q", joined, again, err, levels)
				}
				again, err = parseNamespace(url.PathEscape(joined))
				if err != nil || !slices.Equal(again, levels) {
					t.Fatalf("parseNamespace(escaped %q) = %q, %v; want %q", joined, again, err, levels)
				}
			}
		}

		err = validateName("table name", name)
		if (err == nil) != validName(name) {
			t.Fatalf("validateName(%q) = %v, want valid %v", name, err, validName(name))
		}
		if err != nil {
			requireBadRequest(t, err)
		}
		if levels != nil {
			id, err := tableIdentifier{Namespace: levels, Name: name}.ident(context.Background())
			if (err == nil) != validName(name) {
				t.Fatalf("ident(%q, %q) = %v, want valid %v", levels, name, err, validName(name))
			}
			if err == nil && (!slices.Equal(id.Namespace, levels) || id.Name != name) {
				t.Fatalf("ident(%q, %q) = %+v", levels, name, id)
			}
		}
	})
}

// expectedLevels is the namespace a {namespace} path segment names, and
// whether it is acceptable.
func expectedLevels(raw string) ([]string, bool) {
	decoded, err := url.PathUnescape(raw)
	if err != nil {
		return nil, false
	}
	sep := "."
	if strings.ContainsRune(decoded, 0x1f) {
		sep = "\x1f"
	}
	levels := strings.Split(decoded, sep)
	for _, l := range levels {
		if !validName(l) || strings.Contains(l, ".") {
			return nil, false
		}
	}
	return levels, true
}

// validName: 1 to 255 bytes of valid UTF-8, no ASCII control character
// (a multi-byte UTF-8 sequence never contains a byte below 0x80).
func validName(s string) bool {
	if s == "" || len(s) > 255 || !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return false
		}
	}
	return true
}

// requireBadRequest fails unless err is a 400 in the Iceberg error model.
func requireBadRequest(t *testing.T, err error) {
	t.Helper()
	var ae *apiError
	if !errors.As(err, &ae) || ae.status != http.StatusBadRequest || ae.typ != "BadRequestException" || ae.msg == "" {
		t.Fatalf("error %v (%T) is not a 400 BadRequestException", err, err)
	}
}

// commitSeeds are CommitTableRequest bodies from the Iceberg REST spec:
// every requirement type, the common updates, and malformed ones.
var commitSeeds = []string{
	`{"requirements":[],"updates":[]}`,
	`{"identifier":{"namespace":["db"],"name":"t"},"requirements":[{"type":"assert-table-uuid","uuid":"0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8d"}],"updates":[{"action":"set-properties","updates":{"owner":"ana"}}]}`,
	`{"requirements":[{"type":"assert-create"}],"updates":[{"action":"assign-uuid","uuid":"0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8d"},{"action":"upgrade-format-version","format-version":2},{"action":"add-schema","schema":{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true}]},"last-column-id":1},{"action":"set-current-schema","schema-id":-1},{"action":"add-spec","spec":{"spec-id":0,"fields":[]}},{"action":"set-default-spec","spec-id":-1},{"action":"add-sort-order","sort-order":{"order-id":0,"fields":[]}},{"action":"set-default-sort-order","sort-order-id":-1},{"action":"set-location","location":"file:///w/db/t"}]}`,
	`{"requirements":[{"type":"assert-ref-snapshot-id","ref":"main","snapshot-id":null},{"type":"assert-last-assigned-field-id","last-assigned-field-id":1},{"type":"assert-current-schema-id","current-schema-id":0},{"type":"assert-last-assigned-partition-id","last-assigned-partition-id":999},{"type":"assert-default-spec-id","default-spec-id":0},{"type":"assert-default-sort-order-id","default-sort-order-id":0}],"updates":[{"action":"remove-properties","removals":["owner"]}]}`,
	`{"requirements":[],"updates":[{"action":"add-snapshot","snapshot":{"snapshot-id":1,"sequence-number":1,"timestamp-ms":1700000000000,"manifest-list":"file:///w/db/t/metadata/snap-1.avro","summary":{"operation":"append"},"schema-id":0}},{"action":"set-snapshot-ref","ref-name":"main","type":"branch","snapshot-id":1}]}`,
	`{"requirements":[],"updates":[{"action":"remove-snapshots","snapshot-ids":[1]},{"action":"remove-snapshot-ref","ref-name":"main"}]}`,
	`{"requirements":[],"updates":[{"action":"set-statistics","snapshot-id":1,"statistics":{"snapshot-id":1,"statistics-path":"file:///w/db/t/stats.puffin","file-size-in-bytes":10,"file-footer-size-in-bytes":4,"blob-metadata":[]}},{"action":"remove-statistics","snapshot-id":1}]}`,
	`{"requirements":[],"updates":[{"action":"frobnicate"}]}`,
	`{"requirements":[{"type":"assert-nothing"}],"updates":[]}`,
	`{"requirements":[{}],"updates":[{}]}`,
	`{"requirements":null,"updates":null}`,
	`{"updates":[]}`,
	`{"requirements":{},"updates":"x"}`,
	`[]`,
	`null`,
	``,
}

// FuzzDecodeCommit checks that decodeCommit never panics, refuses with a
// 400 in the Iceberg error model, and yields only typed requirements and
// updates; and that validating and applying an accepted commit to a new
// table's metadata builder, as a staged create does, does not panic either.
func FuzzDecodeCommit(f *testing.F) {
	for _, s := range commitSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeCommit(body)
		if err != nil {
			requireBadRequest(t, err)
			return
		}
		for i, r := range req.Requirements {
			if r == nil || r.GetType() == "" {
				t.Fatalf("requirement %d of %q decoded untyped: %#v", i, body, r)
			}
		}
		for i, u := range req.Updates {
			if u == nil || u.Action() == "" {
				t.Fatalf("update %d of %q decoded without an action: %#v", i, body, u)
			}
		}
		builder, err := table.NewMetadataBuilder(1)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range req.Requirements {
			_ = r.Validate(nil)
		}
		for _, u := range req.Updates {
			if err := u.Apply(builder); err != nil {
				return
			}
		}
		_, _ = builder.Build()
	})
}
