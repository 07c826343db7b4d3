package fsm

import "strings"

// Warehouses. The default warehouse's namespaces are stored at the root of
// the namespace tree, as they always were. A named warehouse's namespaces
// are stored under one reserved first level, warehouseMark followed by the
// warehouse's name: its namespace a.b is the levels [mark+name, a, b], its
// tables and views are keyed under those levels, and every index (location
// ownership, purge jobs, grants) sees them like any other. Names never
// contain control characters (the catalog refuses them), so a reserved
// level cannot collide with a user's namespace; the reserved level itself
// is never stored as a namespace, and exists implicitly.
const warehouseMark = "\x1e"

// WarehouseRoot is the reserved first namespace level of the named
// warehouse name; "" (the default warehouse) has none.
func WarehouseRoot(name string) string {
	if name == "" {
		return ""
	}
	return warehouseMark + name
}

// InWarehouse returns the stored levels of the namespace levels of the
// warehouse name: levels unchanged for the default warehouse (""), else
// levels under the warehouse's reserved root. levels is not modified.
func InWarehouse(name string, levels []string) []string {
	if name == "" {
		return levels
	}
	out := make([]string, 0, len(levels)+1)
	return append(append(out, WarehouseRoot(name)), levels...)
}

// SplitWarehouse is the inverse of InWarehouse: the warehouse of stored
// levels ("" for the default) and its namespace levels within it.
func SplitWarehouse(levels []string) (name string, rest []string) {
	if len(levels) > 0 && isWarehouseRoot(levels[0]) {
		return levels[0][len(warehouseMark):], levels[1:]
	}
	return "", levels
}

func isWarehouseRoot(level string) bool { return strings.HasPrefix(level, warehouseMark) }

// isWarehouseRootOnly reports whether levels are a named warehouse's root
// alone: a namespace that exists implicitly and is never stored.
func isWarehouseRootOnly(levels []string) bool {
	return len(levels) == 1 && isWarehouseRoot(levels[0])
}

// nsName renders stored namespace levels for messages: a named warehouse's
// namespace a.b reads "name:a.b".
func nsName(levels []string) string {
	if wh, rest := SplitWarehouse(levels); len(rest) < len(levels) {
		return wh + ":" + strings.Join(rest, ".")
	}
	return strings.Join(levels, ".")
}
