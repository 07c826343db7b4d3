package storage

import (
	"encoding/json"
	"strings"
)

// MayBeViewMetadata reports whether the file at uri is named as a view's
// metadata file may be (its name holds ".json", in any case: Java and
// iceberg-go name them <version>-<uuid>.metadata.json, gzipped ones end
// .gz.metadata.json or .metadata.json.gz). Code that deletes files inside
// a live view's location reads such a file first (IsTableMetadata); other
// files there (a table that shares the location writes its data files and
// manifests beside the view's metadata) are not views'.
func MayBeViewMetadata(uri string) bool {
	name := uri[strings.LastIndex(uri, "/")+1:]
	return strings.Contains(strings.ToLower(name), ".json")
}

// IsTableMetadata reports whether raw, a file's content (gzipped or not),
// is a table's metadata file: a JSON object with "table-uuid" and without
// "view-uuid". Anything else (a view's metadata, a file that is not JSON,
// a corrupt gzip stream) is not, and is kept by code that deletes only a
// table's files from a place a live view shares.
func IsTableMetadata(raw []byte) bool {
	raw, err := Ungzipped(raw)
	if err != nil {
		return false
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return false
	}
	_, table := fields["table-uuid"]
	_, view := fields["view-uuid"]
	return table && !view
}
