package storage

import (
	"bytes"
	"compress/gzip"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestIsTableMetadata(t *testing.T) {
	gz := func(s string) string {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = w.Write([]byte(s))
		_ = w.Close()
		return b.String()
	}
	for raw, want := range map[string]bool{
		`{"format-version":2,"table-uuid":"u","location":"s3://b/t"}`: true,
		gz(`{"format-version":2,"table-uuid":"u"}`):                   true,
		`{"format-version":1,"view-uuid":"u","location":"s3://b/v"}`:  false,
		gz(`{"view-uuid":"u"}`):                                       false,
		`{"table-uuid":"u","view-uuid":"u"}`:                          false,
		`["table-uuid"]`:                                              false,
		"PAR1\x00\x01":                                                false,
		"\x1f\x8b\x08 not gzip":                                       false,
		``:                                                            false,
		`{"format-version":2,"table-uuid":"u"} {"view-uuid":"trailing"}`:       false,
		`{"format-version":2,"properties":{"view-uuid":"x"},"table-uuid":"u"}`: true,
		// The view parser reads keys without regard to case.
		`{"format-version":1,"View-Uuid":"u","table-uuid":"t"}`: false,
		`{"format-version":2,"TABLE-UUID":"u"}`:                 true,
	} {
		assert.Equal(t, want, IsTableMetadata([]byte(raw)), "%q", raw)
	}
	for uri, want := range map[string]bool{
		"s3://b/v/metadata/00001-a.metadata.json":    true,
		"s3://b/v/metadata/00001-a.gz.metadata.json": true,
		"s3://b/v/metadata/v1.metadata.JSON.gz":      true,
		"s3://b/v/data/x.parquet":                    false,
		"s3://b/v.json/metadata/snap-1.avro":         false,
		// As storage reads the name: a trailing slash or dot segment
		// does not hide it.
		"file:///w/v/metadata/00000-a.metadata.json/":  true,
		"file:///w/v/metadata/00000-a.metadata.json/.": true,
		"s3://b/v/metadata/00000-a.metadata.json//":    true,
	} {
		assert.Equal(t, want, MayBeViewMetadata(uri), uri)
	}
}
