package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// Reader reads the state machine inside one bbolt read transaction. It is
// valid only inside the View callback that handed it out.
type Reader struct {
	tx *bolt.Tx
}

// AppliedIndex is the applied index this view reflects.
func (r *Reader) AppliedIndex() uint64 {
	return getUint64(r.tx.Bucket(bucketRaft), keyAppliedIndex)
}

// Namespace returns the namespace and whether it exists.
func (r *Reader) Namespace(levels []string) (Namespace, bool) {
	var ns Namespace
	ok := r.get(bucketNamespaces, namespaceKey(levels), &ns)
	return ns, ok
}

// Table returns the table and whether it exists.
func (r *Reader) Table(id Ident) (Table, bool) {
	var t Table
	ok := r.get(bucketTables, tableKey(id), &t)
	return t, ok
}

// firstUserKey sorts before every key whose first level is a name (names
// hold no control characters) and after every named warehouse's keys.
const firstUserKey = "\x20"

// Namespaces lists the direct children of parent (the default warehouse's
// top-level namespaces when parent is empty; a named warehouse's when parent
// is its root alone) in name order, starting after the child named after, at
// most limit of them (limit <= 0: all). more reports whether any follow.
func (r *Reader) Namespaces(parent []string, after string, limit int) (out []Namespace, more bool) {
	more = r.children(parent, after, limit, func(k, v []byte) {
		var ns Namespace
		mustUnmarshal(k, v, &ns)
		out = append(out, ns)
	})
	return out, more
}

// NamespaceLevels lists the levels of parent's direct children as
// Namespaces does, from the keys alone: no record (with its properties)
// is decoded.
func (r *Reader) NamespaceLevels(parent []string, after string, limit int) (out [][]string, more bool) {
	more = r.children(parent, after, limit, func(k, _ []byte) {
		out = append(out, strings.Split(string(k), levelSep))
	})
	return out, more
}

// children calls fn with the key and value of each of parent's direct
// children, as Namespaces lists them, and reports whether more follow.
func (r *Reader) children(parent []string, after string, limit int, fn func(k, v []byte)) (more bool) {
	prefix := []byte{}
	if len(parent) > 0 {
		prefix = append(namespaceKey(parent), levelSep...)
	}
	start := append(append([]byte{}, prefix...), after...)
	if len(parent) == 0 && string(start) < firstUserKey {
		// Top-level namespaces of the default warehouse: the named
		// warehouses' namespaces, stored under reserved levels that sort
		// first, are not among them.
		start = []byte(firstUserKey)
	}
	c := r.tx.Bucket(bucketNamespaces).Cursor()
	n := 0
	for k, v := c.Seek(start); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		rest := k[len(prefix):]
		if bytes.Contains(rest, []byte(levelSep)) || (after != "" && string(rest) <= after) {
			continue // a grandchild, or the page boundary itself
		}
		if limit > 0 && n == limit {
			return true
		}
		fn(k, v)
		n++
	}
	return false
}

// Tables lists the tables of a namespace in name order, starting after the
// table named after, at most limit of them (limit <= 0: all).
func (r *Reader) Tables(namespace []string, after string, limit int) (out []Table, more bool) {
	prefix := tablePrefix(namespace)
	c := r.tx.Bucket(bucketTables).Cursor()
	k, v := c.Seek(append(append([]byte{}, prefix...), after...))
	for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if after != "" && string(k[len(prefix):]) <= after {
			continue
		}
		if limit > 0 && len(out) == limit {
			return out, true
		}
		var t Table
		mustUnmarshal(k, v, &t)
		out = append(out, t)
	}
	return out, false
}

// TableNames lists the names of a namespace's tables as Tables does, from
// the keys alone: no record is decoded, so a listing of many tables costs
// their names, not their records.
func (r *Reader) TableNames(namespace []string, after string, limit int) (out []string, more bool) {
	return names(r.tx.Bucket(bucketTables), tablePrefix(namespace), after, limit)
}

// names lists the keys of b under prefix, with the prefix cut off, in
// order, starting after after, at most limit of them (limit <= 0: all).
func names(b *bolt.Bucket, prefix []byte, after string, limit int) (out []string, more bool) {
	c := b.Cursor()
	for k, _ := c.Seek(append(append([]byte{}, prefix...), after...)); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		name := string(k[len(prefix):])
		if after != "" && name <= after {
			continue
		}
		if limit > 0 && len(out) == limit {
			return out, true
		}
		out = append(out, name)
	}
	return out, false
}

// ForEachTable calls fn for every table in the catalog, stopping at the first error.
func (r *Reader) ForEachTable(fn func(Table) error) error {
	return r.tx.Bucket(bucketTables).ForEach(func(k, v []byte) error {
		var t Table
		mustUnmarshal(k, v, &t)
		return fn(t)
	})
}

func (r *Reader) get(bucket, key []byte, v any) bool {
	raw := r.tx.Bucket(bucket).Get(key)
	if raw == nil {
		return false
	}
	mustUnmarshal(key, raw, v)
	return true
}

func mustUnmarshal(k, raw []byte, v any) {
	if err := json.Unmarshal(raw, v); err != nil {
		panic(fmt.Sprintf("fsm: corrupt value at %q: %v", k, err))
	}
}
