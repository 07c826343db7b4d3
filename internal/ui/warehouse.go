package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode"

	"github.com/floe-catalog/floe/fsm"
)

// whParam is the query parameter naming the warehouse a catalog page
// browses: absent for the default warehouse, a named warehouse's name
// otherwise.
const whParam = "wh"

// warehouse is one warehouse the catalog pages browse, the default one
// included.
type warehouse struct {
	// name is the warehouse's name in the state machine and in the wh
	// parameter: "" for the default warehouse.
	name string
	// location and prefix are what the catalog page shows: its root URI
	// and the URL prefix clients use.
	location string
	prefix   string
	objects  Objects
}

// newWarehouses returns the default warehouse (from cfg) and the named
// ones, the default first. A name must be non-empty, unique and free of
// control characters, as the catalog requires.
func newWarehouses(cfg Config) ([]*warehouse, error) {
	out := []*warehouse{{location: cfg.Warehouse, prefix: cfg.Prefix, objects: cfg.Objects}}
	seen := map[string]bool{}
	for _, wc := range cfg.Warehouses {
		if wc.Name == "" || strings.ContainsFunc(wc.Name, unicode.IsControl) {
			return nil, fmt.Errorf("ui: warehouse name %q is empty or holds a control character", wc.Name)
		}
		if seen[wc.Name] {
			return nil, fmt.Errorf("ui: warehouse %q is defined twice", wc.Name)
		}
		seen[wc.Name] = true
		w := &warehouse{name: wc.Name, location: wc.Location, prefix: wc.Name, objects: wc.Objects}
		if w.objects == nil {
			w.objects = cfg.Objects
		}
		out = append(out, w)
	}
	return out, nil
}

// warehouseOf is the warehouse the request's wh parameter names: the
// default one without it, a 404 page for a warehouse not served.
func (s *Server) warehouseOf(r *http.Request) (*warehouse, error) {
	name := r.URL.Query().Get(whParam)
	for _, w := range s.warehouses {
		if w.name == name {
			return w, nil
		}
	}
	return nil, notFound("There is no warehouse %q.", name)
}

// stored returns the stored levels of the warehouse's namespace levels:
// what the state machine and the Authorizer take.
func (w *warehouse) stored(levels []string) []string { return fsm.InWarehouse(w.name, levels) }

// root is the stored parent of the warehouse's top-level namespaces: none
// for the default warehouse, the reserved root of a named one.
func (w *warehouse) root() []string {
	if w.name == "" {
		return nil
	}
	return []string{fsm.WarehouseRoot(w.name)}
}

// external returns stored levels as the warehouse's clients name them.
func external(levels []string) []string {
	_, rest := fsm.SplitWarehouse(levels)
	return rest
}

// in is what titles and messages append to name the warehouse: nothing
// for the default one.
func (w *warehouse) in() string {
	if w.name == "" {
		return ""
	}
	return " in warehouse " + w.name
}

// params returns v with the wh parameter of a named warehouse added, so
// every link stays in the warehouse.
func (w *warehouse) params(v url.Values) url.Values {
	if w.name != "" {
		v.Set(whParam, w.name)
	}
	return v
}

// Links to the pages of the warehouse, with their parameters escaped.

func (w *warehouse) catalogHref() string {
	return withParams("/ui/catalog", w.params(url.Values{}), nil)
}

func (w *warehouse) namespaceHref(levels []string) string {
	return "/ui/namespace?" + w.params(url.Values{"ns": {nsName(levels)}}).Encode()
}

func (w *warehouse) tableHref(levels []string, name string) string {
	return "/ui/table?" + w.params(url.Values{"ns": {nsName(levels)}, "name": {name}}).Encode()
}

func (w *warehouse) viewHref(levels []string, name string) string {
	return "/ui/view?" + w.params(url.Values{"ns": {nsName(levels)}, "name": {name}}).Encode()
}

// crumbs links the warehouse (a named one only: the catalog link leads to
// the default one), every ancestor of a namespace, and the namespace
// itself.
func (w *warehouse) crumbs(levels []string) []link {
	var out []link
	if w.name != "" {
		out = append(out, link{Name: "warehouse " + w.name, Href: w.catalogHref()})
	}
	for i := range levels {
		out = append(out, link{Name: levels[i], Href: w.namespaceHref(levels[:i+1])})
	}
	return out
}
