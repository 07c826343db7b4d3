package purge

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// FixtureMetadata describes a v2 table metadata document for tests, in
// this package and in purge_test: one long column, unpartitioned, with
// snapshots 1..n whose manifest lists are Lists (the last current),
// statistics files, partition statistics files and previous metadata
// files.
type FixtureMetadata struct {
	Location                          string
	Props                             map[string]string
	Lists, Stats, PartStats, Previous []string
}

// JSON renders the document.
func (m FixtureMetadata) JSON() string {
	var snaps, st, pst, log, kv []string
	for i, l := range m.Lists {
		snaps = append(snaps, fmt.Sprintf(`{"snapshot-id": %d, "sequence-number": %d, "timestamp-ms": %d,
			"manifest-list": %q, "summary": {"operation": "append"}, "schema-id": 0}`, i+1, i+1, 1700000000000+i, l))
	}
	for i, s := range m.Stats {
		st = append(st, fmt.Sprintf(`{"snapshot-id": %d, "statistics-path": %q, "file-size-in-bytes": 1, "file-footer-size-in-bytes": 1, "blob-metadata": []}`, i+1, s))
	}
	for i, s := range m.PartStats {
		pst = append(pst, fmt.Sprintf(`{"snapshot-id": %d, "statistics-path": %q, "file-size-in-bytes": 1}`, i+1, s))
	}
	for _, p := range m.Previous {
		log = append(log, fmt.Sprintf(`{"metadata-file": %q, "timestamp-ms": 1700000000000}`, p))
	}
	for _, k := range slices.Sorted(maps.Keys(m.Props)) {
		kv = append(kv, fmt.Sprintf("%q: %q", k, m.Props[k]))
	}
	current := ""
	if len(m.Lists) > 0 {
		current = fmt.Sprintf(`"current-snapshot-id": %d,`, len(m.Lists))
	}
	return fmt.Sprintf(`{
		"format-version": 2,
		"table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
		"location": %q,
		"last-sequence-number": %d,
		"last-updated-ms": 1700000000000,
		"last-column-id": 1,
		"current-schema-id": 0,
		"schemas": [{"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": true, "type": "long"}]}],
		"default-spec-id": 0,
		"partition-specs": [{"spec-id": 0, "fields": []}],
		"last-partition-id": 999,
		"default-sort-order-id": 0,
		"sort-orders": [{"order-id": 0, "fields": []}],
		"properties": {%s},
		%s
		"snapshots": [%s],
		"statistics": [%s],
		"partition-statistics": [%s],
		"metadata-log": [%s]
	}`, m.Location, len(m.Lists), strings.Join(kv, ","), current, strings.Join(snaps, ","), strings.Join(st, ","),
		strings.Join(pst, ","), strings.Join(log, ","))
}
