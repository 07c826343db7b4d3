package catalog

import (
	"fmt"
	"math"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// Checks on what a commit adds to a table's metadata that iceberg-go's
// builder accepts but other clients' readers refuse: a table stored so
// could no longer be loaded by Java, PyIceberg or iceberg-rust. Only what
// is new is judged; what a table already has (registered with it, or
// written before a check existed) stays loadable by floe and is not
// refused again.

// checkInt32 refuses an id or length that Java (JsonUtil.getInt) and
// iceberg-rust (i32) cannot read.
func checkInt32(what string, v int) error {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return badRequest("%s %d does not fit in 32 bits", what, v)
	}
	return nil
}

// checkSchemaIDs refuses a schema whose id, field, element, key or value
// ids or fixed lengths do not fit in 32 bits, and returns its highest
// field id. It walks the schema itself: iceberg-go's HighestFieldID
// answers 0 for a schema holding an empty struct.
func checkSchemaIDs(s *iceberg.Schema) (highest int, err error) {
	if err := checkInt32("schema-id", s.ID); err != nil {
		return 0, err
	}
	var walk func(t iceberg.Type) error
	see := func(what string, id int) error {
		highest = max(highest, id)
		return checkInt32(fmt.Sprintf("schema %d: %s", s.ID, what), id)
	}
	walk = func(t iceberg.Type) error {
		switch t := t.(type) {
		case *iceberg.StructType:
			for _, f := range t.FieldList {
				if err := see("field id", f.ID); err != nil {
					return err
				}
				if err := walk(f.Type); err != nil {
					return err
				}
			}
		case *iceberg.ListType:
			if err := see("element-id", t.ElementID); err != nil {
				return err
			}
			return walk(t.Element)
		case *iceberg.MapType:
			if err := see("key-id", t.KeyID); err != nil {
				return err
			}
			if err := see("value-id", t.ValueID); err != nil {
				return err
			}
			if err := walk(t.KeyType); err != nil {
				return err
			}
			return walk(t.ValueType)
		case iceberg.FixedType:
			return checkInt32(fmt.Sprintf("schema %d: fixed length", s.ID), t.Len())
		}
		return nil
	}
	st := s.AsStruct()
	return highest, walk(&st)
}

// checkNewIDs refuses what after adds with an id beyond 32 bits (schemas
// and their fields, partition specs and fields, sort orders,
// last-column-id, last-partition-id), and a last-column-id below the
// highest field id of any schema, which would have the next column added
// reuse an id.
func checkNewIDs(before, after table.Metadata) error {
	oldSchemas, oldSpecs, oldOrders := map[int]bool{}, map[int]bool{}, map[int]bool{}
	if before != nil {
		for _, s := range before.Schemas() {
			oldSchemas[s.ID] = true
		}
		for _, ps := range before.PartitionSpecs() {
			oldSpecs[ps.ID()] = true
		}
		for _, o := range before.SortOrders() {
			oldOrders[o.OrderID()] = true
		}
	}
	highest, added := 0, false
	for _, s := range after.Schemas() {
		if oldSchemas[s.ID] {
			continue
		}
		added = true
		h, err := checkSchemaIDs(s)
		if err != nil {
			return err
		}
		highest = max(highest, h)
	}
	if before == nil || added || after.LastColumnID() != before.LastColumnID() {
		if err := checkInt32("last-column-id", after.LastColumnID()); err != nil {
			return err
		}
		if after.LastColumnID() < highest {
			return badRequest("a schema uses field id %d, above the table's last-column-id %d (a struct with no fields is not supported)", highest, after.LastColumnID())
		}
	}
	for _, ps := range after.PartitionSpecs() {
		if oldSpecs[ps.ID()] {
			continue
		}
		if err := checkInt32("spec-id", ps.ID()); err != nil {
			return err
		}
		for _, f := range ps.Fields() {
			if err := checkInt32(fmt.Sprintf("spec %d: field-id", ps.ID()), f.FieldID); err != nil {
				return err
			}
		}
	}
	if p := after.LastPartitionSpecID(); p != nil {
		if err := checkInt32("last-partition-id", *p); err != nil {
			return err
		}
	}
	for _, o := range after.SortOrders() {
		if !oldOrders[o.OrderID()] {
			if err := checkInt32("order-id", o.OrderID()); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkNewSnapshots refuses a snapshot after adds without a manifest list
// (or, in a format version 1 table, the manifests it embeds instead):
// Java's SnapshotParser refuses such a request, and no client could load
// the table. Nor may it lack a summary naming one of the four operations
// (checkSnapshotSummary): Java's reference server lets such a snapshot
// through, but no Iceberg client writes one, and PyIceberg and iceberg-rust
// could no longer load the table.
func checkNewSnapshots(before, after table.Metadata) error {
	old := map[int64]bool{}
	if before != nil {
		for _, s := range before.Snapshots() {
			old[s.SnapshotID] = true
		}
	}
	for _, s := range after.Snapshots() {
		if old[s.SnapshotID] {
			continue
		}
		if s.ManifestList == "" && (after.Version() > 1 || len(s.ManifestLocations) == 0) {
			return badRequest("snapshot %d has no manifest-list", s.SnapshotID)
		}
		// Java refuses it ("Sequence number must be 0 in v1"), and reads
		// the field in any version: such a table would not load there, and
		// an upgrade to v2 would leave the snapshot ahead of the table's
		// last-sequence-number.
		if after.Version() == 1 && s.SequenceNumber != 0 {
			return badRequest("snapshot %d: a format version 1 table's snapshots have no sequence number (got %d)", s.SnapshotID, s.SequenceNumber)
		}
		op := ""
		if s.Summary != nil {
			op = string(s.Summary.Operation)
		}
		if err := checkSnapshotSummary(s.SnapshotID, s.Summary != nil, false, op); err != nil {
			return err
		}
	}
	return nil
}

// snapshotOperations are the operations a snapshot's summary may name: the
// REST spec's enum, and all that PyIceberg's and iceberg-rust's parsers
// read.
var snapshotOperations = []table.Operation{table.OpAppend, table.OpReplace, table.OpOverwrite, table.OpDelete}

// checkSnapshotSummary refuses a snapshot (id) that PyIceberg or
// iceberg-rust could not parse, and with it every load of the table:
// without a summary (the REST spec's Snapshot requires one, in every
// format version; iceberg-rust requires it from version 2) unless
// summaryOptional, or with a summary whose operation (op, "" for none) is
// not one of snapshotOperations. A summary that names properties but no
// operation never gets here without one: iceberg-go reads it as an
// overwrite, as Java does.
func checkSnapshotSummary(id any, hasSummary, summaryOptional bool, op string) error {
	switch {
	case !hasSummary && summaryOptional:
		return nil
	case !hasSummary:
		return badRequest("snapshot %v has no summary: the REST spec requires one, naming its operation (append, replace, overwrite or delete)", id)
	case op == "":
		return badRequest("snapshot %v: its summary has no operation: name one of append, replace, overwrite or delete", id)
	}
	for _, o := range snapshotOperations {
		if op == string(o) {
			return nil
		}
	}
	return badRequest("snapshot %v: operation %s is not one of append, replace, overwrite or delete", id, clipped(op))
}

// maxSnapshotAhead is how far past the catalog's clock a new snapshot's
// timestamp-ms may lie.
const maxSnapshotAhead = time.Minute

// checkSnapshotTimes refuses a snapshot after adds whose timestamp-ms is
// more than maxSnapshotAhead past now. Readers and builders allow a
// table's timestamps to go back by at most a minute, so every later
// commit to such a table, whatever it changes, would be refused until the
// clock caught up with the snapshot: one write could freeze a table for
// years. The margin is that same minute: a snapshot further ahead, even
// by a few minutes, would have every commit of a writer with a right
// clock refused for as long, so the writer whose clock runs ahead is the
// one refused.
func checkSnapshotTimes(before, after table.Metadata, now time.Time) error {
	limit := now.Add(maxSnapshotAhead).UnixMilli()
	for _, s := range after.Snapshots() {
		if s.TimestampMs <= limit || (before != nil && before.SnapshotByID(s.SnapshotID) != nil) {
			continue
		}
		return badRequest("snapshot %d: timestamp-ms %d is more than %s ahead of the catalog's clock (%d): check the writer's clock",
			s.SnapshotID, s.TimestampMs, maxSnapshotAhead, now.UnixMilli())
	}
	return nil
}

// checkNewStatistics refuses a statistics file after adds or changes
// without a path or without its blob-metadata list (Java's
// StatisticsFileParser requires both), and a partition statistics file
// without a path.
func checkNewStatistics(before, after table.Metadata) error {
	type key struct {
		snapshot int64
		path     string
	}
	old, oldPart := map[key]bool{}, map[key]bool{}
	if before != nil {
		for f := range before.Statistics() {
			old[key{f.SnapshotID, f.StatisticsPath}] = true
		}
		for f := range before.PartitionStatistics() {
			oldPart[key{f.SnapshotID, f.StatisticsPath}] = true
		}
	}
	for f := range after.Statistics() {
		if old[key{f.SnapshotID, f.StatisticsPath}] {
			continue
		}
		if f.StatisticsPath == "" {
			return badRequest("statistics file of snapshot %d has no statistics-path", f.SnapshotID)
		}
		if f.BlobMetadata == nil {
			return badRequest("statistics file %s has no blob-metadata", f.StatisticsPath)
		}
	}
	for f := range after.PartitionStatistics() {
		if !oldPart[key{f.SnapshotID, f.StatisticsPath}] && f.StatisticsPath == "" {
			return badRequest("partition statistics file of snapshot %d has no statistics-path", f.SnapshotID)
		}
	}
	return nil
}
