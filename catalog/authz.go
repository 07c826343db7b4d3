package catalog

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/gorilla/mux"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/location"
)

// Privileges a grant gives, on a namespace (with its children and tables)
// or on the whole catalog. What each implies is the Authorizer's business.
const (
	PrivRead  = "read"
	PrivWrite = "write"
	PrivDrop  = "drop"
	// PrivPurge is a drop that deletes the table's files.
	PrivPurge = "purge"
	PrivAdmin = "admin"
)

// Authorizer decides what a request's principal may do. The server asks it
// before serving any route but getConfig; a nil Authorizer allows
// everything (authentication off).
type Authorizer interface {
	// Principal names the request's principal: it is part of every
	// Idempotency-Key binding (two principals never share a key's answer)
	// and is recorded as who dropped a table.
	Principal(r *http.Request) string
	// Allowed reports whether the principal holds priv on namespace (nil:
	// the catalog itself). An error means the grants could not be read.
	Allowed(r *http.Request, priv string, namespace []string) (bool, error)
	// Visible reports whether the principal may learn that namespace
	// exists: it holds some privilege on it, on an ancestor or on a
	// descendant.
	Visible(r *http.Request, namespace []string) (bool, error)
}

// Auditor records the outcome of mutations and refused requests. op is the
// spec's operationId, target the namespace or table the request named ("" for
// none), status the HTTP status answered. denied is set when the request was
// refused for lack of a privilege, also when the answer is a 404 that hides
// what the caller may not see.
type Auditor interface {
	Audit(r *http.Request, op, target string, status int, denied bool)
}

// anonymous is the principal of every request when there is no Authorizer.
const anonymous = "anonymous"

// principalOf names who the request acts for.
func (s *Server) principalOf(r *http.Request) string {
	if s.cfg.Authorizer == nil {
		return anonymous
	}
	if p := s.cfg.Authorizer.Principal(r); p != "" {
		return p
	}
	return anonymous
}

// authorize answers whether the request may act with priv on namespace
// (nil: the catalog). A principal that may not even see the namespace gets
// the 404 the route would give for a missing one (notFound), so that names
// it has no business with are not disclosed; one that sees it but lacks
// priv gets 403.
func (s *Server) authorize(r *http.Request, priv string, namespace []string, notFound func() error) error {
	a := s.cfg.Authorizer
	if a == nil {
		return nil
	}
	ok, err := a.Allowed(r, priv, namespace)
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	wh, ns := fsm.SplitWarehouse(namespace)
	if len(ns) > 0 && notFound != nil {
		visible, err := a.Visible(r, namespace)
		if err != nil {
			return err
		}
		if !visible {
			// Answered as missing, so as not to tell that it exists, but
			// audited as what it is: a refusal.
			markDenied(r)
			return notFound()
		}
	}
	what := "the catalog"
	switch {
	case len(ns) > 0:
		what = "namespace " + nsString(namespace)
	case wh != "":
		what = "warehouse " + wh
	}
	return &apiError{status: http.StatusForbidden, typ: "ForbiddenException",
		msg: fmt.Sprintf("%s may not %s in %s", s.principalOf(r), priv, what)}
}

// visible reports whether the request's principal may see namespace.
func (s *Server) visible(r *http.Request, namespace []string) (bool, error) {
	if s.cfg.Authorizer == nil {
		return true, nil
	}
	return s.cfg.Authorizer.Visible(r, namespace)
}

// routePrivilege is the privilege each route needs on the namespace in its
// path. Routes that name their namespaces in the body (createNamespace,
// renameTable, renameView, commitTransaction) or list what may be seen
// (listNamespaces) check in their handlers; getConfig is open.
var routePrivilege = map[string]string{
	"loadNamespace":    PrivRead,
	"namespaceExists":  PrivRead,
	"dropNamespace":    PrivDrop,
	"updateProperties": PrivWrite,
	"listFunctions":    PrivRead,
	"loadFunction":     PrivRead,
	"listTables":       PrivRead,
	"createTable":      PrivWrite,
	"registerTable":    PrivWrite,
	"loadTable":        PrivRead,
	"tableExists":      PrivRead,
	"loadCredentials":  PrivRead,
	"reportMetrics":    PrivRead,
	"updateTable":      PrivWrite,
	"dropTable":        PrivDrop, // PrivPurge with purgeRequested
	"unregisterTable":  PrivDrop,
	"listViews":        PrivRead,
	"loadView":         PrivRead,
	"viewExists":       PrivRead,
	"createView":       PrivWrite,
	"registerView":     PrivWrite,
	"replaceView":      PrivWrite,
	"dropView":         PrivDrop,
}

// authorizeRoute checks the privilege op needs on the namespace in the
// request's path, before anything else runs (an Idempotency-Key replay
// included). Malformed paths are left to the handler's own parsing.
func (s *Server) authorizeRoute(op string, r *http.Request) error {
	if s.cfg.Authorizer == nil {
		return nil
	}
	priv, ok := routePrivilege[op]
	if !ok {
		return nil
	}
	levels, err := namespaceVar(r)
	if err != nil {
		return nil
	}
	if op == "dropTable" {
		if purge, err := boolParam(r, "purgeRequested"); err == nil && purge {
			priv = PrivPurge
		}
	}
	// The 404 that hides what the caller may not see names it as written
	// (see varsAsWritten).
	written, shown := varsAsWritten(r), levels
	if l, err := parseNamespace(written["namespace"]); err == nil {
		shown = levelsIn(r.Context(), l)
	}
	notFound := func() error { return notFoundNamespace("namespace does not exist: %s", nsString(shown)) }
	if name, isTable := written["table"]; isTable {
		notFound = func() error {
			return notFoundTable("table does not exist: %s", fmt.Sprintf("%s.%s", nsString(shown), name))
		}
	}
	if name, isView := written["view"]; isView {
		notFound = func() error {
			return notFoundView("view does not exist: %s", fmt.Sprintf("%s.%s", nsString(shown), name))
		}
	}
	return s.authorize(r, priv, levels, notFound)
}

// readOnlyCredentials reports whether vended credentials for a table in
// namespace must be read-only: the principal may read but not write there.
func (s *Server) readOnlyCredentials(r *http.Request, namespace []string) (bool, error) {
	if s.cfg.Authorizer == nil {
		return false, nil
	}
	ok, err := s.cfg.Authorizer.Allowed(r, PrivWrite, namespace)
	return !ok, err
}

// auditTargetKey carries a request's audit target: what it named, set by
// the handler when the name is in the body.
type auditTargetKey struct{}

type auditTarget struct {
	name   string
	denied bool // refused for lack of a privilege, whatever the status
}

func withAuditTarget(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), auditTargetKey{}, &auditTarget{}))
}

// setAuditTarget names what the request acts on, for the audit line.
func setAuditTarget(r *http.Request, name string) {
	if t, ok := r.Context().Value(auditTargetKey{}).(*auditTarget); ok {
		t.name = name
	}
}

// markDenied records that the request was refused for lack of a
// privilege, for the audit line, when the answer does not say so (a 404
// for what the caller may not see).
func markDenied(r *http.Request) {
	if t, ok := r.Context().Value(auditTargetKey{}).(*auditTarget); ok {
		t.denied = true
	}
}

// audit records a mutation (any method but GET and HEAD) or a refused
// request (401, 403, or a 404 for what the caller may not see) with the
// Auditor.
func (s *Server) audit(r *http.Request, op string, status int) {
	if s.cfg.Auditor == nil {
		return
	}
	target, denied := "", false
	if t, ok := r.Context().Value(auditTargetKey{}).(*auditTarget); ok {
		target, denied = t.name, t.denied
	}
	mutation := r.Method != http.MethodGet && r.Method != http.MethodHead && op != "reportMetrics"
	if !mutation && !denied && status != http.StatusUnauthorized && status != http.StatusForbidden {
		return
	}
	if target == "" {
		vars := mux.Vars(r)
		if ns, err := parseNamespace(vars["namespace"]); err == nil && vars["namespace"] != "" {
			target = nsString(ns)
			if t, ok := vars["table"]; ok {
				target += "." + t
			}
			if v, ok := vars["view"]; ok {
				target += "." + v
			}
			if f, ok := vars["function"]; ok {
				target += "." + f
			}
		}
	}
	s.cfg.Auditor.Audit(r, op, target, status, denied)
}

// scopeKey carries, in a request's context, the *scopeGrants checkScope
// answers from.
type scopeKey struct{}

// scopeGrants are the questions checkScope asks about a request's
// principal: whether it may place tables anywhere the catalog allows
// (write on the whole warehouse), and whether it may write in a namespace.
type scopeGrants struct {
	wide   func() (bool, error)
	writes func(namespace []string) (bool, error)
}

// withScope records how to answer checkScope for r's principal; the
// grants are read only if a location is checked.
func (s *Server) withScope(r *http.Request) *http.Request {
	if s.cfg.Authorizer == nil {
		return r
	}
	// Write on the whole warehouse (on the catalog, for the default one).
	root := s.whOf(r.Context()).root()
	g := &scopeGrants{
		wide:   func() (bool, error) { return s.cfg.Authorizer.Allowed(r, PrivWrite, root) },
		writes: func(ns []string) (bool, error) { return s.cfg.Authorizer.Allowed(r, PrivWrite, ns) },
	}
	return r.WithContext(context.WithValue(r.Context(), scopeKey{}, g))
}

// checkScope refuses (403) a table or view location, or a registered
// metadata file, outside the namespace's own location
// (<warehouse>/<levels>) for a principal without write on the whole
// warehouse (the catalog, for the default warehouse): a writer in one namespace must not claim, read through vended
// credentials, or purge files of another namespace's tables (dropped
// ones included) by naming their location. Catalog-wide writers may place
// tables anywhere the allowed locations permit. Without an Authorizer
// nothing is checked.
func (s *Server) checkScope(ctx context.Context, namespace []string, loc string) error {
	return s.checkScopeOf(ctx, namespace, loc, true)
}

// checkScopeOf is checkScope; placed says whether loc is being given to a
// table or view (created, registered, moved) rather than kept, the only
// case checkShadowedTable is asked.
func (s *Server) checkScopeOf(ctx context.Context, namespace []string, loc string, placed bool) error {
	if s.cfg.Authorizer == nil {
		return nil
	}
	g, _ := ctx.Value(scopeKey{}).(*scopeGrants)
	if g != nil {
		allowed, err := g.wide()
		if err != nil {
			return err
		}
		if allowed {
			return nil
		}
	}
	scope := strings.TrimRight(s.whOf(ctx).location, "/") + "/" + strings.Join(external(namespace), "/")
	if !location.IsWithin(scope, loc) {
		return &apiError{status: http.StatusForbidden, typ: "ForbiddenException",
			msg: fmt.Sprintf("location %s lies outside %s, the location of namespace %s: only a principal with write on the whole catalog places tables and views elsewhere", loc, scope, nsString(namespace))}
	}
	if !placed {
		return nil
	}
	return s.checkShadowedTable(ctx, g, namespace, loc)
}

// lister is storage that can list the objects under a prefix
// (storage.Mux).
type lister interface {
	List(ctx context.Context, prefix string, fn func(uri string) error) error
}

// checkShadowedTable refuses (403) loc, inside the location of the nested
// namespace a.b(.c…), when an ancestor's directory (<warehouse>/a/b) is
// also a table's: the default location of table b of namespace a is the
// directory of namespace a.b. Once that table is dropped without purge,
// its files stay there, and a principal who may write only in a.b could
// register its metadata, or place a table over its data directory, and
// so read and change another namespace's table. A directory holds a
// table when no live table or view holds it (those the ownership index
// governs: a table may sit at a namespace's directory, and views share
// places with tables) and a metadata file lies directly in its metadata/
// directory. A principal with write on the table's namespace passes. A
// read or listing that fails refuses the location (503): the check cannot
// be skipped.
func (s *Server) checkShadowedTable(ctx context.Context, g *scopeGrants, namespace []string, loc string) error {
	ext := external(namespace)
	if g == nil || len(ext) < 2 {
		return nil
	}
	ls, ok := s.whOf(ctx).objects.(lister)
	if !ok {
		return nil
	}
	mark := len(namespace) - len(ext) // the warehouse's level, for a named one
	root := strings.TrimRight(s.whOf(ctx).location, "/")
	for j := 2; j <= len(ext); j++ {
		dir := root + "/" + strings.Join(ext[:j], "/")
		live := false
		if err := s.store.Read(ctx, func(rd *fsm.Reader) error {
			probe := dir + "/metadata/x"
			_, t := rd.LocationOwner(probe)
			_, v := rd.ViewOverlapping(probe)
			live = t || v
			return nil
		}); err != nil {
			return err
		}
		if live {
			continue
		}
		held, err := holdsTableMetadata(ctx, ls, dir)
		if err != nil {
			return &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableException", retryAfter: "1",
				msg: fmt.Sprintf("cannot check whether %s holds a table's files: %v; nothing was applied", dir, err)}
		}
		if !held {
			continue
		}
		owner := namespace[:mark+j-1]
		if ok, err := g.writes(owner); err != nil {
			return err
		} else if ok {
			continue
		}
		return &apiError{status: http.StatusForbidden, typ: "ForbiddenException",
			msg: fmt.Sprintf("location %s lies in %s, which holds the files of table %s (live, or dropped without purge): only a principal with write on namespace %s, or on the whole catalog, places tables and views there",
				loc, dir, nsString(append(slices.Clone(owner), ext[j-1])), nsString(owner))}
	}
	return nil
}

// maxShadowListed bounds the objects holdsTableMetadata reads under one
// metadata/ directory before it gives up (and answers false): a table's
// metadata files sort first there, before the subdirectories of a table
// named "metadata" of the nested namespace.
const maxShadowListed = 1000

// errListStop ends a listing early.
var errListStop = errors.New("stop listing")

// holdsTableMetadata reports whether a metadata file (*.metadata.json,
// gzipped or not) lies directly in dir's metadata/ directory.
func holdsTableMetadata(ctx context.Context, ls lister, dir string) (bool, error) {
	prefix := dir + "/metadata/"
	// Listed URIs lie under prefix, in its spelling or another of the
	// same place (file://localhost/x is listed as file:///x): a direct
	// child has as many slashes as the prefix.
	depth := strings.Count(prefix, "/")
	found, n := false, 0
	err := ls.List(ctx, prefix, func(uri string) error {
		n++
		name := uri[strings.LastIndex(uri, "/")+1:]
		if strings.Count(uri, "/") == depth && strings.Contains(strings.ToLower(name), ".json") {
			found = true
			return errListStop
		}
		if n >= maxShadowListed {
			return errListStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errListStop) {
		return false, err
	}
	return found, nil
}
