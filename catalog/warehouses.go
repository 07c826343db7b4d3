package catalog

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/purge"
)

// Warehouse is a named warehouse served beside the default one: its own
// namespaces, tables and views (stored apart in the state machine, see
// fsm.InWarehouse), its own storage root and allowed locations, and its
// own storage settings. Clients reach it with the prefix Name
// (/v1/{Name}/…), which /v1/config?warehouse=Name hands them.
type Warehouse struct {
	// Name is the warehouse's name and URL prefix: one path segment.
	Name string
	// Location is the root URI under which its tables live by default.
	Location string
	// AllowedLocations bound its tables' locations. Default: Location.
	AllowedLocations []string
	// Objects reads and writes its metadata files. Default: the objects
	// passed to New.
	Objects Objects
	// Vendor hands out credentials for its tables' files. Default:
	// Config.Vendor.
	Vendor CredentialVendor
}

// warehouse is one served warehouse, the default one included.
type warehouse struct {
	// name is the warehouse's name in the state machine: "" for the
	// default warehouse, whose namespaces sit at the root.
	name string
	// prefix is the URL prefix clients use: the name of a named warehouse,
	// Config.Prefix for the default one.
	prefix   string
	location string
	allowed  []string
	objects  Objects
	vendor   CredentialVendor
}

// levels returns the stored levels of the warehouse's namespace ns.
func (w *warehouse) levels(ns []string) []string { return fsm.InWarehouse(w.name, ns) }

// root is the namespace a top-level namespace of the warehouse has as its
// parent: none (the catalog) for the default warehouse, the reserved root
// of a named one. Grants on it cover the whole warehouse.
func (w *warehouse) root() []string {
	if w.name == "" {
		return nil
	}
	return []string{fsm.WarehouseRoot(w.name)}
}

// isRoot reports whether stored levels are the warehouse's root itself: no
// namespace, the whole warehouse.
func (w *warehouse) isRoot(levels []string) bool {
	_, rest := fsm.SplitWarehouse(levels)
	return len(rest) == 0
}

// external returns stored levels as the client names them: without the
// warehouse's reserved root.
func external(levels []string) []string {
	_, rest := fsm.SplitWarehouse(levels)
	return rest
}

// plain removes the warehouse's name from a message of the state machine,
// which renders a named warehouse's namespaces as "name:a.b": the client
// asked within the warehouse and names them without it. Only such a
// rendering's mark goes: "name:" at the start of a word and followed by
// a level (never by a space, as in prose), once per word, so that a
// level the client named "name:q" keeps its text.
func (w *warehouse) plain(msg string) string {
	if w.name == "" {
		return msg
	}
	mark := w.name + ":"
	var b strings.Builder
	for i := 0; i < len(msg); {
		wordStart := i == 0 || strings.ContainsRune(" \t\n\"'(,[{", rune(msg[i-1]))
		if wordStart && strings.HasPrefix(msg[i:], mark) && i+len(mark) < len(msg) && msg[i+len(mark)] != ' ' {
			// Drop the mark and keep the rest of the word as it is.
			i += len(mark)
			end := strings.IndexAny(msg[i:], " \t\n")
			if end < 0 {
				end = len(msg) - i
			}
			b.WriteString(msg[i : i+end])
			i += end
			continue
		}
		b.WriteByte(msg[i])
		i++
	}
	return b.String()
}

type warehouseKey struct{}

// withWarehouse records the warehouse a request addresses.
func withWarehouse(r *http.Request, w *warehouse) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), warehouseKey{}, w))
}

// whOf is the warehouse of the request whose context is ctx: the default
// one when the context names none (background work, tests).
func (s *Server) whOf(ctx context.Context) *warehouse {
	if w, ok := ctx.Value(warehouseKey{}).(*warehouse); ok {
		return w
	}
	return s.warehouses[0]
}

// levelsIn returns the stored levels of namespace ns of the warehouse the
// request whose context is ctx addresses.
func levelsIn(ctx context.Context, ns []string) []string {
	if w, ok := ctx.Value(warehouseKey{}).(*warehouse); ok {
		return w.levels(ns)
	}
	return ns
}

// newWarehouses validates the default warehouse (from cfg) and the named
// ones, and returns them, the default first.
func newWarehouses(cfg Config, objects Objects) ([]*warehouse, error) {
	def := &warehouse{prefix: cfg.Prefix, location: cfg.Warehouse, allowed: cfg.AllowedLocations, objects: objects, vendor: cfg.Vendor}
	out := []*warehouse{def}
	seen := map[string]bool{cfg.Prefix: true}
	for _, wc := range cfg.Warehouses {
		if err := CheckPrefix(wc.Name); err != nil {
			return nil, fmt.Errorf("catalog: warehouse name %q: %w", wc.Name, err)
		}
		if strings.Contains(wc.Name, ":") {
			// A warehouse is named by its prefix or by its location, and
			// a location holds a ':'.
			return nil, fmt.Errorf("catalog: warehouse name %q: holds a ':'", wc.Name)
		}
		if seen[wc.Name] {
			return nil, fmt.Errorf("catalog: warehouse %q is defined twice (or is the default warehouse's prefix)", wc.Name)
		}
		seen[wc.Name] = true
		if err := checkRootLocation(wc.Location); err != nil {
			return nil, fmt.Errorf("catalog: warehouse %s: location: %w", wc.Name, err)
		}
		w := &warehouse{
			name: wc.Name, prefix: wc.Name,
			location: strings.TrimSuffix(wc.Location, "/"),
			allowed:  slices.Clone(wc.AllowedLocations),
			objects:  wc.Objects,
		}
		if len(w.allowed) == 0 {
			w.allowed = []string{w.location}
		}
		for _, loc := range w.allowed {
			if err := checkRootLocation(loc); err != nil {
				return nil, fmt.Errorf("catalog: warehouse %s: allowed location: %w", wc.Name, err)
			}
		}
		if w.objects == nil {
			w.objects = objects
		}
		if w.vendor = wc.Vendor; w.vendor == nil {
			w.vendor = cfg.Vendor
		}
		out = append(out, w)
	}
	return out, nil
}

// warehouseNamed finds the warehouse a client's warehouse property names:
// its prefix, or its location in any spelling of it that names the same
// place (s3a:// or s3n:// for s3://, file:/x for file:///x, a trailing
// slash), as Spark and Hadoop configurations often spell it.
func (s *Server) warehouseNamed(v string) (*warehouse, bool) {
	for _, w := range s.warehouses {
		if v == w.prefix || strings.TrimRight(v, "/") == w.location {
			return w, true
		}
	}
	if key := fsm.LocationKey(v); key != "" && !strings.HasPrefix(key, "raw:") {
		for _, w := range s.warehouses {
			if fsm.LocationKey(w.location) == key {
				return w, true
			}
		}
	}
	return nil, false
}

// servedHint names the URL prefixes served, for the message of an unknown
// one: " (this catalog serves ...)"; nothing with authorization on, where
// /v1/config answers without a token, and a principal of one warehouse
// need not learn the others' names.
func (s *Server) servedHint() string {
	if s.cfg.Authorizer != nil {
		return ""
	}
	var out []string
	for _, w := range s.warehouses {
		out = append(out, fmt.Sprintf("%q", w.prefix))
	}
	return " (this catalog serves " + strings.Join(out, ", ") + ")"
}

// purgeBases is the storage of the private purge service (a server built
// without Config.Purger), for purge.StorageFor: each warehouse's, with the
// storage settings it gives clients, the default warehouse's first.
func (s *Server) purgeBases() []purge.Base {
	var out []purge.Base
	for _, w := range s.warehouses {
		out = append(out, purge.Base{Warehouse: w.name, Objects: w.objects, FileIO: w.objects.ClientConfig(w.location)})
	}
	return out
}

// allowedEverywhere is every warehouse's allowed locations: what a purge
// may delete.
func (s *Server) allowedEverywhere() []string {
	var out []string
	for _, w := range s.warehouses {
		out = append(out, w.allowed...)
	}
	return out
}
