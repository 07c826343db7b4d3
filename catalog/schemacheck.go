package catalog

import (
	"fmt"
	"slices"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/storage"
)

// checkNewSchemasAndSpecs refuses, as a 400, a schema or partition spec
// that after has and before (nil for a new table) has not, when Java's
// reader would refuse to load it: iceberg-go builds such metadata without
// complaint, and a table holding it could then not be loaded by Java
// engines. Schemas and specs already in before are not judged again: a
// table registered with them stays usable.
//
// Schemas: every identifier field exists, is a required primitive that is
// not a float or a double, and is nested only in required structs.
// Specs: names are unique; every field but a void placeholder has a known
// transform (stricter than Java's reader, which loads an unknown one: a
// new spec naming one here is a mistake), a source in the current schema
// that is a primitive the transform can take, a positive bucket count or
// truncate width, and a name that is no other column's.
func checkNewSchemasAndSpecs(before, after table.Metadata) error {
	var oldSchemas []*iceberg.Schema
	oldSpecs := map[int]bool{}
	if before != nil {
		oldSchemas = before.Schemas()
		for _, ps := range before.PartitionSpecs() {
			oldSpecs[ps.ID()] = true
		}
	}
	if err := checkNewSchemas(oldSchemas, after.Schemas()); err != nil {
		return err
	}
	current := after.CurrentSchema()
	for _, ps := range after.PartitionSpecs() {
		if !oldSpecs[ps.ID()] {
			if err := checkPartitionSpec(&ps, current); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkIdentifierFields(s *iceberg.Schema) error {
	for _, id := range s.IdentifierFieldIDs {
		f, ok := s.FindFieldByID(id)
		if !ok {
			return badRequest("schema %d: identifier field %d is not a field of the schema", s.ID, id)
		}
		if _, ok := f.Type.(iceberg.PrimitiveType); !ok {
			return badRequest("schema %d: identifier field %q is not a primitive (%s)", s.ID, f.Name, f.Type)
		}
		if !f.Required {
			return badRequest("schema %d: identifier field %q is optional", s.ID, f.Name)
		}
		switch f.Type.(type) {
		case iceberg.Float32Type, iceberg.Float64Type:
			return badRequest("schema %d: identifier field %q is a %s", s.ID, f.Name, f.Type)
		}
		if err := checkIdentifierAncestors(s, id); err != nil {
			return err
		}
	}
	return nil
}

// checkIdentifierAncestors: the field with id sits in structs only, each
// of them required.
func checkIdentifierAncestors(s *iceberg.Schema, id int) error {
	var walk func(fields []iceberg.NestedField) (bool, error)
	walk = func(fields []iceberg.NestedField) (bool, error) {
		for _, f := range fields {
			if f.ID == id {
				return true, nil
			}
			var inner []iceberg.NestedField
			switch t := f.Type.(type) {
			case *iceberg.StructType:
				inner = t.FieldList
			case *iceberg.ListType:
				if found, _ := walk([]iceberg.NestedField{t.ElementField()}); found {
					return true, badRequest("schema %d: identifier field %d is inside the list %q", s.ID, id, f.Name)
				}
				continue
			case *iceberg.MapType:
				if found, _ := walk([]iceberg.NestedField{t.KeyField(), t.ValueField()}); found {
					return true, badRequest("schema %d: identifier field %d is inside the map %q", s.ID, id, f.Name)
				}
				continue
			default:
				continue
			}
			found, err := walk(inner)
			if found {
				if err == nil && !f.Required {
					err = badRequest("schema %d: identifier field %d is inside the optional struct %q", s.ID, id, f.Name)
				}
				return true, err
			}
		}
		return false, nil
	}
	_, err := walk(s.Fields())
	return err
}

func checkPartitionSpec(ps *iceberg.PartitionSpec, s *iceberg.Schema) error {
	names := map[string]bool{}
	for _, pf := range ps.Fields() {
		if names[pf.Name] {
			return badRequest("partition spec %d: field name %q is used twice", ps.ID(), pf.Name)
		}
		names[pf.Name] = true
		if _, void := pf.Transform.(iceberg.VoidTransform); void {
			// The placeholder a v1 table keeps for a dropped field, under
			// the field's old name and source (which may be gone): Java
			// skips it too.
			continue
		}
		switch t := pf.Transform.(type) {
		case iceberg.BucketTransform:
			if t.NumBuckets <= 0 {
				return badRequest("partition spec %d: field %q: bucket count must be positive", ps.ID(), pf.Name)
			}
		case iceberg.TruncateTransform:
			if t.Width <= 0 {
				return badRequest("partition spec %d: field %q: truncate width must be positive", ps.ID(), pf.Name)
			}
		case iceberg.UnknownTransform:
			// Readers load a spec with an unknown transform (a newer
			// one) and skip it when filtering; a new spec naming one
			// here is a mistake ("bogus", "bucket[-3]").
			return badRequest("partition spec %d: field %q: unknown transform %q", ps.ID(), pf.Name, t.String())
		}
		if err := checkSources(ps, pf, s); err != nil {
			return err
		}
		if col, ok := s.FindFieldByName(pf.Name); ok && (len(pf.SourceIDs) != 1 || pf.SourceIDs[0] != col.ID) {
			return badRequest("partition spec %d: field name %q is another column's", ps.ID(), pf.Name)
		}
	}
	return nil
}

// checkSources refuses a partition field whose sources are not primitive
// fields of schema s that its transform can take.
func checkSources(ps *iceberg.PartitionSpec, pf iceberg.PartitionField, s *iceberg.Schema) error {
	for _, src := range pf.SourceIDs {
		f, ok := s.FindFieldByID(src)
		if !ok {
			return badRequest("partition spec %d: field %q: source %d is not a field of the current schema", ps.ID(), pf.Name, src)
		}
		if _, ok := f.Type.(iceberg.PrimitiveType); !ok {
			return badRequest("partition spec %d: field %q: source %q is not a primitive (%s)", ps.ID(), pf.Name, f.Name, f.Type)
		}
		if !pf.Transform.CanTransform(f.Type) {
			return badRequest("partition spec %d: field %q: transform %s cannot take %q (%s)", ps.ID(), pf.Name, pf.Transform, f.Name, f.Type)
		}
	}
	return nil
}

// checkDefaultSpec refuses metadata after whose default partition spec
// has a field, other than a void placeholder, whose source the current
// schema lacks or its transform cannot take, when the pair of default
// spec and current schema differs from before's (nil for a new table).
// Java's builder refuses such a change, and its parser binds the default
// spec to the current schema: Java engines could not load the table.
// Dropping a partition source column, retyping it, or making an older
// spec the default again are the ways in. A pair a table already has
// (registered with it) is not judged again.
func checkDefaultSpec(before, after table.Metadata) error {
	if before != nil && before.DefaultPartitionSpec() == after.DefaultPartitionSpec() &&
		before.CurrentSchema().ID == after.CurrentSchema().ID {
		return nil
	}
	ps := after.PartitionSpec()
	current := after.CurrentSchema()
	for _, pf := range ps.Fields() {
		if _, void := pf.Transform.(iceberg.VoidTransform); void {
			continue
		}
		if err := checkSources(&ps, pf, current); err != nil {
			err.(*apiError).msg += fmt.Sprintf(" (spec %d is the table's default)", ps.ID())
			return err
		}
	}
	return nil
}

// checkNewSchemas checks the field ids, identifier fields and shape
// (checkSchemaShape) of the schemas in after that before (nil for a new
// table or view) has not, by schema id.
func checkNewSchemas(before, after []*iceberg.Schema) error {
	old := map[int]bool{}
	for _, s := range before {
		old[s.ID] = true
	}
	for _, s := range after {
		if !old[s.ID] {
			if _, err := checkSchemaIDs(s); err != nil {
				return err
			}
			if err := checkIdentifierFields(s); err != nil {
				return err
			}
			if err := checkSchemaShape(s); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkNewTableMetadata is every check a table's new metadata after must
// pass that its metadata before (nil for a new table) did not have to:
// checkNewSchemasAndSpecs, checkDefaultSpec, checkNewIDs,
// checkNewSnapshots, checkNewStatistics, checkWritePaths and
// checkStorageProperties.
func checkNewTableMetadata(before, after table.Metadata) error {
	for _, check := range []func(before, after table.Metadata) error{
		checkNewSchemasAndSpecs, checkDefaultSpec, checkNewIDs, checkNewSnapshots, checkNewStatistics,
		func(before, after table.Metadata) error { return checkWritePaths(before, after) },
		checkStorageProperties,
	} {
		if err := check(before, after); err != nil {
			return err
		}
	}
	return nil
}

// storageProperties are FileIO settings that say how a client reaches
// storage, or as whom: iceberg-go and PyIceberg build a table's FileIO
// from its properties as well as the catalog's answer, and a key the
// answer does not set is taken from the table. A writer of one table
// could so send every other reader's and writer's storage requests (signed,
// with their credentials) through a host of its choosing, pick their
// FileIO implementation, or plant credentials in metadata any reader
// sees. Entries ending in "." are prefixes.
var storageProperties = []string{
	"s3.endpoint", "s3.proxy-uri", "s3.access-key-id", "s3.secret-access-key", "s3.session-token",
	"s3.signer", "s3.signer.", "s3.remote-signing-enabled", "s3.sts.", "s3.role-", "s3.retry-strategy-impl",
	// PyIceberg's and Java's client-wide settings: credentials, roles,
	// the region, the credentials refresh endpoint.
	"client.",
	// Stores floe does not serve, whose clients read the same way.
	"gcs.", "adls.",
	"io-impl", "py-io-impl",
}

// isStorageProperty reports whether k is one of storageProperties.
func isStorageProperty(k string) bool {
	k = strings.ToLower(k)
	for _, p := range storageProperties {
		if k == p || (strings.HasSuffix(p, ".") && strings.HasPrefix(k, p)) {
			return true
		}
	}
	return false
}

// checkStorageProperties refuses a storage property (storageProperties)
// that after sets to a value before did not have: how clients reach the
// warehouse is the catalog's to say (its answer's config), not a table's.
// Values a table already has are not judged again at a commit.
func checkStorageProperties(before, after table.Metadata) error {
	for k, v := range after.Properties() {
		if !isStorageProperty(k) || (before != nil && before.Properties()[k] == v) {
			continue
		}
		return badRequest("table property %s configures how clients reach storage; the catalog says that in its answers, a table may not", k)
	}
	return nil
}

// writePathProperties name where engines write a table's files instead of
// below its location.
var writePathProperties = []string{
	"write.data.path", "write.metadata.path",
	"write.object-storage.path", "write.folder-storage.path", // older spellings of write.data.path
}

// checkWritePaths refuses a write path property that after sets to a
// value before did not have, when the value lies outside the table's
// location: engines would write the table's files where no purge of the
// table deletes them, or among another table's. A location belongs to one
// table, and so do the files written for it. Values a table already has
// are not judged again at a commit. A value inside one of alsoWithin is
// accepted too: a register passes the places it adopts, where a table that
// moved may still write (its own former location).
func checkWritePaths(before, after table.Metadata, alsoWithin ...string) error {
	for _, k := range writePathProperties {
		v, ok := after.Properties()[k]
		if !ok || (before != nil && before.Properties()[k] == v) {
			continue
		}
		// As for a location: an escape some clients decode and others do
		// not (t/..%2F..%2Fu) lies inside the table for one, elsewhere for
		// the other.
		if err := checkNewLocationSpelling(v); err != nil {
			return err
		}
		if fsm.LocationKey(v) == fsm.LocationKey(after.Location()) || storage.IsWithin(after.Location(), v) ||
			slices.ContainsFunc(alsoWithin, func(p string) bool { return fsm.LocationKey(v) == fsm.LocationKey(p) || storage.IsWithin(p, v) }) {
			continue
		}
		return badRequest("property %s = %q is outside the table's location %s: a table's files stay below its location, so the location must cover it", k, v, after.Location())
	}
	return nil
}
