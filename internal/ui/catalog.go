package ui

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/view"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/storage"
)

// link is a name and where it leads.
type link struct {
	Name string
	Href string
}

// kv is one property.
type kv struct {
	Key   string
	Value string
}

func sortedProps(m map[string]string) []kv {
	out := make([]kv, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, kv{k, m[k]})
	}
	return out
}

// warehouseRow is one warehouse in the catalog page's list of them.
type warehouseRow struct {
	// Name is empty for the default warehouse.
	Name     string
	Location string
	Prefix   string
	Href     string
	Current  bool
}

// catalogPage is one warehouse and its top-level namespaces, those the
// principal may see, with every warehouse served when there are named
// ones.
type catalogPage struct {
	// Name is the warehouse's name, empty for the default one.
	Name       string
	Warehouse  string
	Prefix     string
	Crumbs     []link
	Warehouses []warehouseRow
	Namespaces []link
	Pager      pager
}

func (s *Server) catalog(w http.ResponseWriter, r *http.Request) error {
	wh, err := s.warehouseOf(r)
	if err != nil {
		return err
	}
	page, after := pageOf(r, "ns")
	p := catalogPage{Name: wh.name, Warehouse: wh.location, Prefix: wh.prefix, Crumbs: wh.crumbs(nil)}
	if len(s.warehouses) > 1 {
		for _, o := range s.warehouses {
			p.Warehouses = append(p.Warehouses, warehouseRow{
				Name: o.name, Location: o.location, Prefix: o.prefix, Href: o.catalogHref(), Current: o == wh,
			})
		}
	}
	list, more, stale, err := s.visibleChildren(r, wh.root(), after)
	if err != nil {
		return err
	}
	for _, ns := range list {
		levels := external(ns.Levels)
		p.Namespaces = append(p.Namespaces, link{Name: nsName(levels), Href: wh.namespaceHref(levels)})
	}
	// The next page starts after the last namespace shown: a cursor never
	// names one the principal may not see.
	next := ""
	if more {
		next = p.Namespaces[len(p.Namespaces)-1].Name
	}
	p.Pager = cursorPager("/ui/catalog", wh.params(url.Values{}), "ns", page, next)
	title := "Catalog"
	if wh.name != "" {
		title = "Warehouse " + wh.name
	}
	s.renderWith(w, r, http.StatusOK, "catalog", layout{Title: title, Stale: stale, Content: &p}, "catalog")
	return nil
}

func lastLevel(levels []string) string { return levels[len(levels)-1] }

// visibleChildren lists up to a page of the child namespaces of parent
// after the child named after that the principal may see, as
// listNamespaces does: it reads on past those it may not see (a page of
// them used to end the listing, hiding every namespace after it), and
// more reports whether one it may see follows the page (so that no next
// link leads to an empty page, which would tell hidden ones exist).
// stale is s.read's, from the last read.
func (s *Server) visibleChildren(r *http.Request, parent []string, after string) (shown []fsm.Namespace, more bool, stale string, err error) {
	// The grants first (the node reads them once per request): a check
	// that reads this replica makes the listing read it too (MarkStale),
	// which it cannot do for a listing read before.
	if _, err := s.visible(r, parent); err != nil {
		return nil, false, "", err
	}
	for {
		var (
			list []fsm.Namespace
			rest bool
		)
		stale, err = s.read(r.Context(), func(rd *fsm.Reader) error {
			list, rest = rd.Namespaces(parent, after, max(s.cfg.PageSize, visibleChunk))
			return nil
		})
		if err != nil {
			return nil, false, "", err
		}
		for _, ns := range list {
			ok, err := s.visible(r, ns.Levels)
			if err != nil {
				return nil, false, "", err
			}
			if !ok {
				continue
			}
			if len(shown) == s.cfg.PageSize {
				return shown, true, stale, nil
			}
			shown = append(shown, ns)
		}
		if !rest || len(list) == 0 {
			return shown, false, stale, nil
		}
		after = lastLevel(list[len(list)-1].Levels)
	}
}

// visibleChunk is the least number of namespaces visibleChildren reads at
// a time: a small page among many hidden ones takes few reads.
const visibleChunk = 100

// namespacePage is one namespace: its properties, child namespaces, tables
// and views, each listing paginated on its own.
type namespacePage struct {
	Name string
	// Warehouse names a named warehouse; empty for the default one.
	Warehouse  string
	Crumbs     []link
	Properties []kv
	CreatedMs  int64
	UpdatedMs  int64
	Children   []link
	ChildPager pager
	// CanRead: the principal may read the namespace, so its properties,
	// tables and views are shown.
	CanRead    bool
	Tables     []link
	TablePager pager
	Views      []link
	ViewPager  pager
}

func (s *Server) namespace(w http.ResponseWriter, r *http.Request) error {
	wh, err := s.warehouseOf(r)
	if err != nil {
		return err
	}
	levels, err := nsParam(r)
	if err != nil {
		return err
	}
	// stored: the levels in the state machine and in grants.
	stored := wh.stored(levels)
	missing := notFound("Namespace %s does not exist%s.", nsName(levels), wh.in())
	seen, err := s.visible(r, stored)
	if err != nil {
		return err
	}
	if !seen {
		return missing
	}
	canRead, err := s.allowed(r, privRead, stored)
	if err != nil {
		return err
	}
	p := namespacePage{Name: nsName(levels), Warehouse: wh.name, Crumbs: wh.crumbs(levels), CanRead: canRead}
	childPage, childAfter := pageOf(r, "ns")
	tablePage, tableAfter := pageOf(r, "tables")
	viewPage, viewAfter := pageOf(r, "views")
	var (
		ns                                fsm.Namespace
		exists, moreNS, moreTab, moreView bool
		tables                            []fsm.Table
		views                             []fsm.View
	)
	stale, err := s.read(r.Context(), func(rd *fsm.Reader) error {
		ns, exists = rd.Namespace(stored)
		tables, moreTab, views, moreView = nil, false, nil, false
		if canRead {
			tables, moreTab = rd.Tables(stored, tableAfter, s.cfg.PageSize)
			views, moreView = rd.Views(stored, viewAfter, s.cfg.PageSize)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !exists {
		return missing
	}
	if canRead {
		p.Properties, p.CreatedMs, p.UpdatedMs = sortedProps(ns.Properties), ns.CreatedMs, ns.UpdatedMs
	}
	children, moreNS, childStale, err := s.visibleChildren(r, stored, childAfter)
	if err != nil {
		return err
	}
	if stale == "" {
		stale = childStale
	}
	lastVisibleChild := ""
	for _, c := range children {
		p.Children = append(p.Children, link{Name: lastLevel(c.Levels), Href: wh.namespaceHref(external(c.Levels))})
		lastVisibleChild = lastLevel(c.Levels)
	}
	for _, t := range tables {
		p.Tables = append(p.Tables, link{Name: t.Name, Href: wh.tableHref(levels, t.Name)})
	}
	for _, v := range views {
		p.Views = append(p.Views, link{Name: v.Name, Href: wh.viewHref(levels, v.Name)})
	}
	fixed := wh.params(url.Values{"ns": {nsName(levels)}})
	nextOf := func(more bool, last func() string) string {
		if !more {
			return ""
		}
		return last()
	}
	p.ChildPager = cursorPager("/ui/namespace", fixed, "ns", childPage,
		nextOf(moreNS && lastVisibleChild != "", func() string { return lastVisibleChild }))
	p.TablePager = cursorPager("/ui/namespace", fixed, "tables", tablePage,
		nextOf(moreTab && len(tables) > 0, func() string { return tables[len(tables)-1].Name }))
	p.ViewPager = cursorPager("/ui/namespace", fixed, "views", viewPage,
		nextOf(moreView && len(views) > 0, func() string { return views[len(views)-1].Name }))
	s.renderWith(w, r, http.StatusOK, "namespace", layout{Title: "Namespace " + p.Name + wh.in(), Stale: stale, Content: &p}, "catalog")
	return nil
}

// field is one column of a schema.
type field struct {
	ID       int
	Name     string
	Type     string
	Required bool
	Doc      string
}

func fieldsOf(sc *iceberg.Schema) []field {
	if sc == nil {
		return nil
	}
	var out []field
	for _, f := range sc.Fields() {
		out = append(out, field{ID: f.ID, Name: f.Name, Type: f.Type.String(), Required: f.Required, Doc: f.Doc})
	}
	return out
}

// snapshotRow is one snapshot: its id, time and operation summary.
type snapshotRow struct {
	ID        int64
	ParentID  string
	Timestamp int64
	Operation string
	Summary   []kv
	Current   bool
}

// tablePage is one table: what the state machine holds (location,
// metadata location) and what its current metadata file says.
type tablePage struct {
	// Warehouse names a named warehouse; empty for the default one.
	Warehouse        string
	Namespace        string
	NamespaceHref    string
	Crumbs           []link
	Name             string
	UUID             string
	Location         string
	MetadataLocation string
	CreatedMs        int64
	UpdatedMs        int64
	// MetadataErr: the metadata file could not be read or parsed; only
	// the state machine's side is shown.
	MetadataErr    string
	FormatVersion  int
	SchemaID       int
	Fields         []field
	PartitionSpec  string
	CurrentID      string
	SnapshotCount  int
	Snapshots      []snapshotRow
	SnapshotPager  pager
	Properties     []kv
	LastUpdatedMs  int64
	MetaLocation   string
	LocationDiffer bool
}

func (s *Server) table(w http.ResponseWriter, r *http.Request) error {
	wh, err := s.warehouseOf(r)
	if err != nil {
		return err
	}
	levels, err := nsParam(r)
	if err != nil {
		return err
	}
	name := r.URL.Query().Get("name")
	if name == "" {
		return badRequest("the name parameter (the table's name) is required")
	}
	stored := wh.stored(levels)
	id := fsm.Ident{Namespace: stored, Name: name}
	missing := notFound("Table %s.%s does not exist%s.", nsName(levels), name, wh.in())
	if err := s.requireRead(r, stored, missing); err != nil {
		return err
	}
	var (
		t  fsm.Table
		ok bool
	)
	stale, err := s.read(r.Context(), func(rd *fsm.Reader) error {
		t, ok = rd.Table(id)
		return nil
	})
	if err != nil {
		return err
	}
	if !ok {
		return missing
	}
	p := tablePage{
		Warehouse: wh.name, Namespace: nsName(levels), NamespaceHref: wh.namespaceHref(levels), Crumbs: wh.crumbs(levels), Name: name,
		UUID: t.UUID, Location: t.Location, MetadataLocation: t.MetadataLocation, CreatedMs: t.CreatedMs, UpdatedMs: t.UpdatedMs,
	}
	if meta, err := readTableMetadata(r.Context(), wh.objects, t.MetadataLocation); err != nil {
		p.MetadataErr = err.Error()
	} else {
		s.fillTable(r, &p, meta, wh, levels)
	}
	s.renderWith(w, r, http.StatusOK, "table", layout{Title: "Table " + p.Namespace + "." + name + wh.in(), Stale: stale, Content: &p}, "catalog")
	return nil
}

// fillTable adds what the metadata file says: schema, partition spec,
// snapshots (newest first, paginated), properties.
func (s *Server) fillTable(r *http.Request, p *tablePage, meta table.Metadata, wh *warehouse, levels []string) {
	p.FormatVersion = meta.Version()
	if sc := meta.CurrentSchema(); sc != nil {
		p.SchemaID = sc.ID
		p.Fields = fieldsOf(sc)
	}
	p.PartitionSpec = meta.PartitionSpec().String()
	p.Properties = sortedProps(meta.Properties())
	p.LastUpdatedMs = meta.LastUpdatedMillis()
	p.MetaLocation = meta.Location()
	p.LocationDiffer = meta.Location() != p.Location
	var current int64 = -1
	if cs := meta.CurrentSnapshot(); cs != nil {
		current = cs.SnapshotID
		p.CurrentID = strconv.FormatInt(cs.SnapshotID, 10)
	}
	snaps := slices.Clone(meta.Snapshots())
	sort.SliceStable(snaps, func(i, j int) bool { return snaps[i].TimestampMs > snaps[j].TimestampMs })
	p.SnapshotCount = len(snaps)
	page, _ := pageOf(r, "snapshots")
	from := (page - 1) * s.cfg.PageSize
	if from >= len(snaps) {
		page, from = 1, 0
	}
	to := min(from+s.cfg.PageSize, len(snaps))
	for _, sn := range snaps[from:to] {
		row := snapshotRow{ID: sn.SnapshotID, Timestamp: sn.TimestampMs, Current: sn.SnapshotID == current, ParentID: "-"}
		if sn.ParentSnapshotID != nil {
			row.ParentID = strconv.FormatInt(*sn.ParentSnapshotID, 10)
		}
		if sn.Summary != nil {
			row.Operation = string(sn.Summary.Operation)
			row.Summary = sortedProps(sn.Summary.Properties)
		}
		p.Snapshots = append(p.Snapshots, row)
	}
	fixed := wh.params(url.Values{"ns": {nsName(levels)}, "name": {p.Name}})
	p.SnapshotPager = pager{Page: page}
	if page > 1 {
		p.SnapshotPager.First = withParams("/ui/table", fixed, nil)
	}
	if to < len(snaps) {
		p.SnapshotPager.Next = withParams("/ui/table", fixed, url.Values{"snapshots-page": {strconv.Itoa(page + 1)}})
	}
}

// readMetadataFile reads a metadata file through the storage layer of its
// warehouse, gunzipping it when it is compressed, as the catalog does.
func readMetadataFile(ctx context.Context, objects Objects, loc string) ([]byte, error) {
	raw, err := objects.Read(ctx, loc)
	if err != nil {
		return nil, fmt.Errorf("cannot read metadata file %s: %w", loc, err)
	}
	// Bounded, as the catalog's: a small file must not inflate to
	// exhaust the node's memory on every page view.
	if raw, err = storage.Ungzipped(raw); err != nil {
		return nil, fmt.Errorf("unreadable metadata file %s: %w", loc, err)
	}
	return raw, nil
}

func readTableMetadata(ctx context.Context, objects Objects, loc string) (table.Metadata, error) {
	raw, err := readMetadataFile(ctx, objects, loc)
	if err != nil {
		return nil, err
	}
	meta, err := table.ParseMetadataBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("unreadable metadata file %s: %w", loc, err)
	}
	return meta, nil
}

// representation is one SQL text of a view version.
type representation struct {
	Dialect string
	SQL     string
}

// viewPage is one view: what the state machine holds and what its current
// metadata file says about the current version.
type viewPage struct {
	// Warehouse names a named warehouse; empty for the default one.
	Warehouse        string
	Namespace        string
	NamespaceHref    string
	Crumbs           []link
	Name             string
	UUID             string
	Location         string
	MetadataLocation string
	CreatedMs        int64
	UpdatedMs        int64
	MetadataErr      string
	FormatVersion    int
	VersionID        int64
	VersionMs        int64
	DefaultNamespace string
	DefaultCatalog   string
	Summary          []kv
	SQL              []representation
	SchemaID         int
	Fields           []field
	Properties       []kv
	VersionCount     int
}

func (s *Server) view(w http.ResponseWriter, r *http.Request) error {
	wh, err := s.warehouseOf(r)
	if err != nil {
		return err
	}
	levels, err := nsParam(r)
	if err != nil {
		return err
	}
	name := r.URL.Query().Get("name")
	if name == "" {
		return badRequest("the name parameter (the view's name) is required")
	}
	stored := wh.stored(levels)
	missing := notFound("View %s.%s does not exist%s.", nsName(levels), name, wh.in())
	if err := s.requireRead(r, stored, missing); err != nil {
		return err
	}
	var (
		v  fsm.View
		ok bool
	)
	stale, err := s.read(r.Context(), func(rd *fsm.Reader) error {
		v, ok = rd.View(fsm.Ident{Namespace: stored, Name: name})
		return nil
	})
	if err != nil {
		return err
	}
	if !ok {
		return missing
	}
	p := viewPage{
		Warehouse: wh.name, Namespace: nsName(levels), NamespaceHref: wh.namespaceHref(levels), Crumbs: wh.crumbs(levels), Name: name,
		UUID: v.UUID, Location: v.Location, MetadataLocation: v.MetadataLocation, CreatedMs: v.CreatedMs, UpdatedMs: v.UpdatedMs,
	}
	raw, err := readMetadataFile(r.Context(), wh.objects, v.MetadataLocation)
	var meta view.Metadata
	if err == nil {
		if meta, err = view.ParseMetadataBytes(raw); err != nil {
			err = fmt.Errorf("unreadable view metadata file %s: %w", v.MetadataLocation, err)
		}
	}
	if err != nil {
		p.MetadataErr = err.Error()
	} else {
		p.FormatVersion = meta.FormatVersion()
		p.Properties = sortedProps(meta.Properties())
		p.VersionCount = len(meta.Versions())
		if cv := meta.CurrentVersion(); cv != nil {
			p.VersionID, p.VersionMs, p.DefaultCatalog = cv.VersionID, cv.TimestampMS, cv.DefaultCatalog
			p.DefaultNamespace = nsName(cv.DefaultNamespace)
			p.Summary = sortedProps(cv.Summary)
			for _, rep := range cv.Representations {
				p.SQL = append(p.SQL, representation{Dialect: rep.Dialect, SQL: rep.Sql})
			}
			sc := meta.SchemasByID()[cv.SchemaID]
			if sc == nil {
				sc = meta.CurrentSchema()
			}
			if sc != nil {
				p.SchemaID = sc.ID
				p.Fields = fieldsOf(sc)
			}
		}
	}
	s.renderWith(w, r, http.StatusOK, "view", layout{Title: "View " + p.Namespace + "." + name + wh.in(), Stale: stale, Content: &p}, "catalog")
	return nil
}
