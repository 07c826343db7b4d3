// Package ui serves the status page under /ui: server-rendered HTML pages
// of the cluster (members, leader, terms, indexes, each node's health), the
// catalog (every warehouse: namespaces, tables, views) and the purge queue,
// with Retry and Release buttons for FAILED purge jobs. The pages need no
// JavaScript and load no external asset; every value is escaped by
// html/template.
//
// Authentication is the node's (see cmd/node): with it on, a request
// carries the usual Authorization: Bearer header or the session cookie the
// login form at /ui/login sets; WithSessionToken and Unauthenticated are
// the two hooks the node's security layer calls. Authorization is the
// catalog's: reading a namespace, table or view needs what the catalog
// API needs to read it, and the cluster and purge pages, like the operator
// API, need admin. See DESIGN.md.
package ui

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/raftnode"
)

// Store is the replicated state the pages read: a raftnode.Node. Read is
// linearizable and needs a leader; StaleRead reads this node's replica.
type Store interface {
	Read(ctx context.Context, fn func(*fsm.Reader) error) error
	StaleRead(fn func(*fsm.Reader) error) error
}

// Cluster is the Raft node as the cluster page shows it: Status is what
// GET /management/v1/cluster answers, Ready what this node's /readyz
// answers (nil: ready).
type Cluster interface {
	Status(ctx context.Context) (raftnode.Status, error)
	Ready() error
}

// Objects reads table and view metadata files: the storage layer the
// catalog writes them with.
type Objects interface {
	Read(ctx context.Context, uri string) ([]byte, error)
}

// Authorizer decides what a request's principal may see and do, with the
// catalog's grants (the same methods as catalog.Authorizer).
type Authorizer interface {
	// Principal names the request's principal.
	Principal(r *http.Request) string
	// Allowed reports whether the principal holds priv on namespace (nil:
	// the catalog itself). An error means the grants could not be read.
	Allowed(r *http.Request, priv string, namespace []string) (bool, error)
	// Visible reports whether the principal may learn that namespace
	// exists.
	Visible(r *http.Request, namespace []string) (bool, error)
}

// Privileges the pages ask the Authorizer for.
const (
	privRead  = "read"
	privAdmin = "admin"
)

// DefaultPageSize is how many rows a listing shows per page.
const DefaultPageSize = 50

// Config configures the status page.
type Config struct {
	// Warehouse and Prefix are the catalog's default warehouse: its
	// location and URL prefix. Objects reads its metadata files.
	Warehouse string
	Prefix    string
	Store     Store
	Cluster   Cluster
	Objects   Objects
	// Warehouses are the catalog's named warehouses, browsed beside the
	// default one (catalog.Config.Warehouses).
	Warehouses []Warehouse
	// PurgeJobs is the operator API's purge-jobs handler
	// ((*admin.Server).PurgeJobs): Retry and Release go through it, as
	// POST /management/v1/purge-jobs/{id}/retry|release with an
	// Idempotency-Key, so they propose the same commands the operator API
	// does and a double submit applies once.
	PurgeJobs http.Handler
	// Authorizer decides what each principal may see and do; nil means
	// authentication is off and every request may do everything.
	Authorizer Authorizer
	// VerifyToken checks a token pasted into the login form exactly as
	// the node checks a bearer token, and names its principal. An error
	// wrapping ErrUnavailable means the token could not be checked now
	// (no leader, an identity provider out of reach), not that it was
	// refused. Required with an Authorizer; nil without one (there is no
	// login then).
	VerifyToken func(ctx context.Context, token string) (principal string, err error)
	// HealthClient asks the members' /readyz. Default: a client with a
	// 2-second timeout.
	HealthClient *http.Client
	// PageSize is the rows per page of every listing. Default
	// DefaultPageSize.
	PageSize   int
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Now is the clock shown in the footer. Default time.Now.
	Now func() time.Time
}

// Warehouse is a named warehouse of the catalog: its namespaces are
// stored under its reserved root (fsm.InWarehouse).
type Warehouse struct {
	// Name is the warehouse's name, as the catalog's Warehouse.Name.
	Name string
	// Location is its root URI, shown on the pages.
	Location string
	// Objects reads its metadata files. Default: Config.Objects.
	Objects Objects
}

// Server is the status page's HTTP handler.
type Server struct {
	cfg Config
	// warehouses are the warehouses browsed, the default one first.
	warehouses []*warehouse
	log        *slog.Logger
	pages      map[string]*template.Template
	requests   *prometheus.CounterVec
	mux        *http.ServeMux
}

//go:embed templates/*.html
var templateFS embed.FS

// pageNames are the templates under templates/, each rendered inside
// layout.html.
var pageNames = []string{"cluster", "catalog", "namespace", "table", "view", "purge", "login", "error"}

// New returns the status page. It fails when a required part is missing
// or a template does not parse.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Store == nil || cfg.Cluster == nil || cfg.Objects == nil || cfg.PurgeJobs == nil:
		return nil, errors.New("ui: Store, Cluster, Objects and PurgeJobs are required")
	case (cfg.Authorizer == nil) != (cfg.VerifyToken == nil):
		return nil, errors.New("ui: Authorizer and VerifyToken go together")
	}
	if cfg.HealthClient == nil {
		cfg.HealthClient = &http.Client{Timeout: 2 * time.Second}
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	whs, err := newWarehouses(cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, warehouses: whs, log: cfg.Logger.With("component", "ui"), pages: map[string]*template.Template{}}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", name, err)
		}
		s.pages[name] = t
	}
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floe_ui_requests_total", Help: "Status page requests by page and HTTP status.",
	}, []string{"page", "status"})
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(s.requests); err != nil {
			return nil, fmt.Errorf("ui: metrics: %w", err)
		}
	}
	m := http.NewServeMux()
	m.Handle("GET /ui", s.page("cluster", s.cluster))
	m.Handle("GET /ui/{$}", s.page("cluster", s.cluster))
	m.Handle("GET /ui/catalog", s.page("catalog", s.catalog))
	m.Handle("GET /ui/namespace", s.page("namespace", s.namespace))
	m.Handle("GET /ui/table", s.page("table", s.table))
	m.Handle("GET /ui/view", s.page("view", s.view))
	m.Handle("GET /ui/purge-jobs", s.page("purge", s.purgeJobs))
	m.Handle("POST /ui/purge-jobs/{id}/{action}", s.page("purge-action", s.purgeAction))
	m.Handle("GET /ui/login", s.page("login", s.loginForm))
	m.Handle("POST /ui/login", s.page("login", s.login))
	m.Handle("POST /ui/logout", s.page("logout", s.logout))
	m.Handle("/ui/", s.page("other", func(w http.ResponseWriter, r *http.Request) error {
		return &pageError{status: http.StatusNotFound, msg: "There is no page at " + r.URL.Path + "."}
	}))
	s.mux = m
	return s, nil
}

// Handler serves /ui and everything below it.
func (s *Server) Handler() http.Handler { return s.mux }

// IsPath reports whether path belongs to the status page.
func IsPath(path string) bool { return path == "/ui" || strings.HasPrefix(path, "/ui/") }

// pageError is a failure shown as an error page with its status.
type pageError struct {
	status int
	msg    string
}

func (e *pageError) Error() string { return e.msg }

func notFound(format string, args ...any) error {
	return &pageError{status: http.StatusNotFound, msg: fmt.Sprintf(format, args...)}
}

func forbidden(format string, args ...any) error {
	return &pageError{status: http.StatusForbidden, msg: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) error {
	return &pageError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// statusWriter remembers the status written, for the request counter.
type statusWriter struct {
	http.ResponseWriter
	status int
}

// Unwrap lets http.ResponseController reach the connection's writer, so
// that a handler's own write deadline (the backup lifts the whole-answer
// limit) and flushes pass through.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// page serves one page: the security headers every answer carries, the
// error page for fn's error, and the request counter under name.
func (s *Server) page(name string, fn func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// No script runs, nothing loads from elsewhere, forms post here
		// only, and no other site may frame the page.
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		sw := &statusWriter{ResponseWriter: w}
		if err := fn(sw, r); err != nil {
			s.fail(sw, r, err)
		}
		s.requests.WithLabelValues(name, strconv.Itoa(sw.status)).Inc()
	})
}

// fail renders err as the error page.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var pe *pageError
	if !errors.As(err, &pe) {
		pe = &pageError{status: http.StatusInternalServerError, msg: err.Error()}
	}
	if pe.status >= 500 {
		s.log.Error("status page request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	if pe.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	title := http.StatusText(pe.status)
	if title == "" {
		title = "Error"
	}
	s.render(w, r, pe.status, "error", title, "", errorPage{Status: pe.status, Message: pe.msg})
}

type errorPage struct {
	Status  int
	Message string
}

// navItem is one link of the header's navigation.
type navItem struct {
	Label  string
	Href   string
	Active bool
}

// layout is what layout.html shows around every page's content.
type layout struct {
	Title     string
	Nav       []navItem
	AuthOn    bool
	Principal string
	CSRF      string
	// Stale says that the page was read from this node's replica because
	// no linearizable read was possible.
	Stale   string
	Flash   string
	Node    string
	Now     string
	Content any
}

// render writes the page tmpl with content inside the layout. nav names
// the active navigation entry. The page is rendered whole before anything
// is written, so a template failure is a clean 500.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, tmpl, title, nav string, content any) {
	s.renderWith(w, r, status, tmpl, layout{Title: title, Content: content}, nav)
}

func (s *Server) renderWith(w http.ResponseWriter, r *http.Request, status int, tmpl string, l layout, nav string) {
	l.AuthOn = s.authOn()
	if !IsOpenPath(r.URL.Path) { // the login form's requests have no principal
		l.Principal = s.principal(r)
	}
	l.CSRF = s.csrfToken(w, r)
	l.Now = formatTime(s.cfg.Now())
	l.Nav = []navItem{
		{Label: "Cluster", Href: "/ui", Active: nav == "cluster"},
		{Label: "Catalog", Href: "/ui/catalog", Active: nav == "catalog"},
		{Label: "Purge jobs", Href: "/ui/purge-jobs", Active: nav == "purge"},
	}
	var buf bytes.Buffer
	if err := s.pages[tmpl].ExecuteTemplate(&buf, "layout", l); err != nil {
		s.log.Error("status page template failed", "template", tmpl, "error", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(withoutBidiControls(buf.Bytes()))
}

// withoutBidiControls is page with each bidirectional formatting character
// replaced by U+FFFD. The templates hold none, so every one came from a
// name, property or other text a client stored; rendered, an override
// (U+202E) reorders the page's own text after it, up to the end of its
// block, title included (Trojan Source). Links carry names percent-encoded
// and are not changed.
func withoutBidiControls(page []byte) []byte {
	if !bytes.ContainsFunc(page, isBidiControl) {
		return page
	}
	return bytes.Map(func(r rune) rune {
		if isBidiControl(r) {
			return utf8.RuneError
		}
		return r
	}, page)
}

// isBidiControl reports whether r is one of Unicode's explicit
// directional formatting characters (UAX #9: embeddings, overrides,
// isolates, marks).
func isBidiControl(r rune) bool {
	switch {
	case r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x200E, r == 0x200F, r == 0x061C:
		return true
	}
	return false
}

// authOn reports whether requests carry principals.
func (s *Server) authOn() bool { return s.cfg.Authorizer != nil }

// principal names the request's principal; "" with authentication off.
func (s *Server) principal(r *http.Request) string {
	if s.cfg.Authorizer == nil {
		return ""
	}
	return s.cfg.Authorizer.Principal(r)
}

// actor names who acted, for logs.
func (s *Server) actor(r *http.Request) string {
	if p := s.principal(r); p != "" {
		return p
	}
	return "anonymous"
}

func (s *Server) allowed(r *http.Request, priv string, namespace []string) (bool, error) {
	if s.cfg.Authorizer == nil {
		return true, nil
	}
	ok, err := s.cfg.Authorizer.Allowed(r, priv, namespace)
	if err != nil {
		return false, &pageError{status: http.StatusServiceUnavailable, msg: "cannot read grants: " + err.Error()}
	}
	return ok, nil
}

func (s *Server) visible(r *http.Request, namespace []string) (bool, error) {
	if s.cfg.Authorizer == nil {
		return true, nil
	}
	ok, err := s.cfg.Authorizer.Visible(r, namespace)
	if err != nil {
		return false, &pageError{status: http.StatusServiceUnavailable, msg: "cannot read grants: " + err.Error()}
	}
	return ok, nil
}

// requireAdmin refuses a principal without the admin privilege (403).
func (s *Server) requireAdmin(r *http.Request, what string) error {
	ok, err := s.allowed(r, privAdmin, nil)
	if err != nil {
		return err
	}
	if !ok {
		return forbidden("%s may not see %s: the admin privilege is needed, as for the operator API.", s.actor(r), what)
	}
	return nil
}

// requireRead refuses a principal without read on namespace as the
// catalog does: 404 when it may not even see the namespace (names it has
// no business with are not disclosed), 403 when it sees it.
func (s *Server) requireRead(r *http.Request, namespace []string, missing error) error {
	ok, err := s.allowed(r, privRead, namespace)
	if err != nil || ok {
		return err
	}
	seen, err := s.visible(r, namespace)
	if err != nil {
		return err
	}
	if !seen {
		return missing
	}
	return forbidden("%s may not read namespace %s (read privilege needed).", s.actor(r), storedName(namespace))
}

// read runs fn linearizably. When that fails for want of a leader it runs
// fn again on this node's replica and returns a note saying so: a status
// page is most needed when the cluster is unwell. fn must set, not
// accumulate, what it reads: it may run twice.
func (s *Server) read(ctx context.Context, fn func(*fsm.Reader) error) (stale string, err error) {
	if why := staleMarked(ctx); why != "" {
		// The request was authorized from this replica: its data comes
		// from there too (MarkStale).
		if serr := s.cfg.Store.StaleRead(fn); serr != nil {
			return "", &pageError{status: http.StatusServiceUnavailable, msg: "cannot read the catalog: " + serr.Error()}
		}
		return staleBanner(why), nil
	}
	var inner error
	err = s.cfg.Store.Read(ctx, func(rd *fsm.Reader) error {
		inner = fn(rd)
		return inner
	})
	if err == nil || (inner != nil && errors.Is(err, inner)) {
		return "", err
	}
	if serr := s.cfg.Store.StaleRead(fn); serr != nil {
		return "", &pageError{status: http.StatusServiceUnavailable, msg: "cannot read the catalog: " + errors.Join(err, serr).Error()}
	}
	return staleBanner(err.Error()), nil
}

func staleBanner(why string) string {
	return "No linearizable read was possible (" + why + "): this page shows this node's replica, which may be behind."
}

type staleMarkKey struct{}

// staleMark holds why a request's authorization read this node's replica.
type staleMark struct{ why atomic.Pointer[string] }

// TrackStaleReads returns ctx ready to carry MarkStale's mark through one
// page request; the node puts it on every page read (GET or HEAD) before
// it checks the request's credentials.
func TrackStaleReads(ctx context.Context) context.Context {
	return context.WithValue(ctx, staleMarkKey{}, &staleMark{})
}

// MarkStale records, for the request of ctx, that a read it was
// authenticated or authorized by came from this node's replica, for err
// (a linearizable read failed: no leader; or the request asked for a
// stale read). The page's own reads then
// come from the replica as well, never linearizably: a page must not show
// a state newer than the one that let its reader in (a grant revoked
// through another node, not yet applied here, let a page read the state
// after the revocation once the leader was back). Without TrackStaleReads
// it does nothing.
func MarkStale(ctx context.Context, err error) {
	if m, ok := ctx.Value(staleMarkKey{}).(*staleMark); ok && err != nil {
		why := err.Error()
		m.why.CompareAndSwap(nil, &why)
	}
}

// staleMarked is MarkStale's reason for the request of ctx, "" if none.
func staleMarked(ctx context.Context) string {
	if m, ok := ctx.Value(staleMarkKey{}).(*staleMark); ok {
		if why := m.why.Load(); why != nil {
			return *why
		}
	}
	return ""
}

// nsSeparator joins namespace levels in names and in the ns parameter, as
// the catalog advertises it; a level never contains it.
const nsSeparator = "."

// nsName joins namespace levels as a warehouse's clients name them
// (without a named warehouse's reserved root).
func nsName(levels []string) string { return strings.Join(levels, nsSeparator) }

// storedName renders stored namespace levels for a message: a named
// warehouse's namespace a.b reads "a.b in warehouse W", never showing the
// reserved level.
func storedName(levels []string) string {
	wh, rest := fsm.SplitWarehouse(levels)
	if wh == "" {
		return nsName(rest)
	}
	return nsName(rest) + " in warehouse " + wh
}

// nsParam parses the ns query parameter into namespace levels, as the
// warehouse's clients name them. A level never holds a control character
// (the catalog refuses them), so a reserved level cannot be named here.
func nsParam(r *http.Request) ([]string, error) {
	v := r.URL.Query().Get("ns")
	if v == "" {
		return nil, badRequest("the ns parameter (the namespace, levels joined by %q) is required", nsSeparator)
	}
	levels := strings.Split(v, nsSeparator)
	for _, l := range levels {
		if l == "" || strings.ContainsFunc(l, unicode.IsControl) {
			return nil, badRequest("malformed namespace %q", v)
		}
	}
	return levels, nil
}

// pager is the page links of one listing: First is empty on the first
// page, Next when no page follows.
type pager struct {
	Page  int
	First string
	Next  string
}

// maxPage bounds a page number taken from a query: the offset of a
// snapshot page is computed from it, and must not overflow.
const maxPage = 1 << 20

// pageOf reads a listing's page number and cursor from the query: key-page
// and key-after (the listing's last name on the page before).
func pageOf(r *http.Request, key string) (page int, after string) {
	q := r.URL.Query()
	page, err := strconv.Atoi(q.Get(key + "-page"))
	if err != nil || page < 1 || page > maxPage {
		page = 1
	}
	return page, q.Get(key + "-after")
}

// cursorPager links a cursor-paginated listing: base is the page's path
// with its own fixed parameters, next the cursor of the next page ("" when
// none follows).
func cursorPager(base string, fixed url.Values, key string, page int, next string) pager {
	p := pager{Page: page}
	if page > 1 {
		p.First = withParams(base, fixed, nil)
	}
	if next != "" {
		p.Next = withParams(base, fixed, url.Values{key + "-after": {next}, key + "-page": {strconv.Itoa(page + 1)}})
	}
	return p
}

func withParams(base string, fixed, extra url.Values) string {
	q := url.Values{}
	for k, v := range fixed {
		q[k] = v
	}
	for k, v := range extra {
		q[k] = v
	}
	if len(q) == 0 {
		return base
	}
	return base + "?" + q.Encode()
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"ms":    func(ms int64) string { return formatMs(ms) },
	"bytes": humanBytes,
}

func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

func formatMs(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return formatTime(time.UnixMilli(ms))
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
