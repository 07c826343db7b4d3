package storage

import (
	"encoding/json"
	"path"
	"strings"
)

// MayBeViewMetadata reports whether the file at uri is named as a view's
// metadata file may be (its name holds ".json", in any case: Java and
// iceberg-go name them <version>-<uuid>.metadata.json, gzipped ones end
// .gz.metadata.json or .metadata.json.gz). Code that deletes files inside
// a live view's location reads such a file first (IsTableMetadata); other
// files there (a table that shares the location writes its data files and
// manifests beside the view's metadata) are not views'.
//
// The name is judged as storage reads it: "x.metadata.json/" and
// "x.metadata.json/." are that file to the local store, so trailing
// slashes and dot segments do not hide it. A URI that does not parse may
// be a view's.
func MayBeViewMetadata(uri string) bool {
	_, _, key, err := ParseURI(uri)
	if err != nil {
		return true
	}
	key = path.Clean("/" + key)
	name := key[strings.LastIndex(key, "/")+1:]
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
	// Keys are matched as the view and table parsers (encoding/json)
	// match them, without regard to case: a view file spelling
	// "View-Uuid" is still a view's.
	table, view := false, false
	for k := range fields {
		table = table || strings.EqualFold(k, "table-uuid")
		view = view || strings.EqualFold(k, "view-uuid")
	}
	return table && !view
}
