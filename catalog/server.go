// Package catalog serves the namespaces, tables and views of the Iceberg
// REST catalog API.
//
// The handlers are thin: they parse and validate a request, prepare a
// command (for table and view changes: build the new metadata with
// iceberg-go and write the metadata file first), propose it to the
// replicated store, and map the outcome to the Iceberg error model in one
// place (errors.go). Decisions such as "already exists" or "metadata
// changed underneath" are made by the state machine when the command is
// applied, never here.
package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/idempotency"
	"github.com/floe-catalog/floe/internal/muxallow"
	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/purge"
)

// Store is the replicated state the catalog reads and changes.
type Store interface {
	// Propose replicates cmd and returns its applied Result. A non-nil error
	// means the outcome is not a domain outcome: either nothing was applied
	// (not leader, shutdown) or the outcome is unknown.
	Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
	// Read runs fn against a linearizable view of the state.
	Read(ctx context.Context, fn func(*fsm.Reader) error) error
	// StaleRead runs fn against the local replica as it is, which may miss
	// recently acknowledged writes.
	StaleRead(fn func(*fsm.Reader) error) error
}

// apply proposes cmd and returns its Result, with a domain failure (not
// found, already exists, ...) as the error.
func (s *Server) apply(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	res, err := s.store.Propose(ctx, cmd)
	if err != nil {
		return res, err
	}
	return res, res.Err()
}

// ReadConsistencyHeader lets a client of a read-only route opt out of
// linearizable reads: with the value "stale" the answering node serves its
// local replica without asking the leader, trading freshness for latency
// and availability (it answers even without a leader).
const ReadConsistencyHeader = "X-Floe-Read-Consistency"

// read runs fn linearizably, or against the local replica when the request
// asks for stale reads. Only read-only routes call it; the checks that
// mutations build on always read linearizably.
func (s *Server) read(r *http.Request, fn func(*fsm.Reader) error) error {
	switch v := r.Header.Get(ReadConsistencyHeader); v {
	case "", "linearizable":
		return s.store.Read(r.Context(), fn)
	case "stale":
		s.metrics.staleReads.Inc()
		return s.store.StaleRead(fn)
	default:
		return badRequest("%s must be linearizable or stale, got %q", ReadConsistencyHeader, v)
	}
}

// staleReaderKey marks the context of a mutation whose client reads
// stale (withStaleReader).
type staleReaderKey struct{}

// withStaleReader marks r when it changes something and carries
// ReadConsistencyHeader: stale, as a client that sets the header on every
// request sends it: such a client reads this node's replica next, and is
// to find its own write there (readYourWrites).
func withStaleReader(r *http.Request) *http.Request {
	if r.Method == http.MethodGet || r.Method == http.MethodHead || r.Header.Get(ReadConsistencyHeader) != "stale" {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), staleReaderKey{}, true))
}

// readYourWritesWait bounds how long a proposal of a stale reader waits
// for this node's replica to apply it.
const readYourWritesWait = 2 * time.Second

// readYourWrites is the catalog's store. A write forwarded by a follower
// is answered once the leader has applied it, before the follower has: a
// client reading the follower's replica next (iceberg-go loads the view it
// just renamed) would not find its own write. A proposal marked by
// withStaleReader is therefore followed by a linearizable read barrier on
// this node, which waits until its replica has applied every write
// acknowledged so far, this one included. The write has happened either
// way: a barrier that fails or takes longer than readYourWritesWait is
// not an error of the request, whose answer may then be read stale.
type readYourWrites struct {
	Store
}

func (s readYourWrites) Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	res, err := s.Store.Propose(ctx, cmd)
	// Only after a change, or the replay of one (applied on the leader,
	// maybe not here yet): a refusal (a commit that lost its race, under
	// the table's commit lock) changed nothing to wait for.
	changed := (err == nil && res.Err() == nil) || errors.Is(err, idempotency.ErrReplayed)
	if stale, _ := ctx.Value(staleReaderKey{}).(bool); stale && changed {
		wctx, cancel := context.WithTimeout(ctx, readYourWritesWait)
		_ = s.Store.Read(wctx, func(*fsm.Reader) error { return nil })
		cancel()
	}
	return res, err
}

// Objects is where metadata and data files live.
type Objects interface {
	Write(ctx context.Context, uri string, data []byte) error
	Read(ctx context.Context, uri string) ([]byte, error)
	Delete(ctx context.Context, uris []string) (int, error)
	// ClientConfig is the FileIO configuration a client needs for files at uri.
	ClientConfig(uri string) map[string]string
}

// Config configures the catalog service.
type Config struct {
	// Warehouse is the root URI under which tables live (file:///… or s3://…).
	Warehouse string
	// AllowedLocations bounds every table location: a location must lie
	// strictly inside one of these prefixes, checked at create, register
	// and set-location. Default: the warehouse alone.
	AllowedLocations []string
	// Prefix is the path prefix advertised in /v1/config for the default
	// warehouse; its routes are served both with it (/v1/{prefix}/…) and
	// without it (/v1/…).
	Prefix string
	// Warehouses are served beside the default warehouse (Warehouse,
	// AllowedLocations, Prefix), each under its own prefix.
	Warehouses []Warehouse
	// MaxBodyBytes bounds request bodies; larger ones get 413. Default 8 MiB.
	MaxBodyBytes int64
	// CommitRetries bounds how often a commit that lost a compare-and-set is
	// rebuilt on the new metadata before answering 409. Default 10.
	CommitRetries int
	// MetadataCacheSize bounds the parsed metadata files kept in memory.
	// Default (0) 1024; negative disables the cache, so every load reads
	// and parses the file (the benchmark's baseline).
	MetadataCacheSize int
	// MetadataCacheBytes bounds the size of the metadata documents the
	// cache holds; their parsed objects take a few times as much again.
	// A document over a quarter of it is not cached. Default 128 MiB.
	MetadataCacheBytes int64
	// IdempotencyLifetime is how long an Idempotency-Key is honoured after
	// first use, advertised as idempotency-key-lifetime. Default 30m.
	IdempotencyLifetime time.Duration
	// IdempotencyDisabled turns Idempotency-Key off: not advertised, the
	// header ignored.
	IdempotencyDisabled bool
	// Vendor hands out storage credentials to clients that ask for them
	// (X-Iceberg-Access-Delegation: vended-credentials) and at
	// loadCredentials; nil: no client ever gets a credential.
	Vendor CredentialVendor
	// Authorizer decides what each request's principal may do; nil: every
	// request may do everything, as "anonymous".
	Authorizer Authorizer
	// Auditor records mutations and refused requests; nil: none.
	Auditor Auditor
	// Purger runs the purge jobs of synchronous drops taken by this
	// server; nil: a purge service private to the server (see purger).
	Purger Purger
	// Stopping is closed when the process begins to stop: synchronous
	// purges still waiting for their jobs are answered then (500: the
	// job continues elsewhere), before the HTTP server's graceful wait
	// would cut them off unanswered. Nil: never.
	Stopping   <-chan struct{}
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Now returns the time stamped into commands. Default time.Now.
	Now func() time.Time
}

// nsSeparator is the namespace separator floe advertises. A path segment
// holding the unit separator (%1F), the spec's default, is split at it
// alone, so clients that ignore the advertisement work too. Namespace
// names may contain neither.
const (
	nsSeparator        = "."
	nsSeparatorEncoded = "%2E"
	unitSeparator      = "\x1f"
	maxNameLength      = 255
	// maxNamespaceBytes bounds a namespace, its levels joined: keys the
	// state machine stores stay far below bbolt's limit.
	maxNamespaceBytes = 4096
)

var reservedPrefixes = map[string]bool{"namespaces": true, "tables": true, "transactions": true, "views": true, "config": true, "oauth": true}

// CheckPrefix refuses a URL prefix (--prefix, a named warehouse's name)
// clients could not address: empty, longer than a name may be, reserved,
// "." or ".." (which HTTP clients and servers rewrite as path segments),
// not UTF-8, or holding a '/', '?', '#', '%', a space or a control
// character.
func CheckPrefix(p string) error {
	switch {
	case p == "":
		return errors.New("empty")
	case len(p) > maxNameLength:
		return fmt.Errorf("%d bytes long, the limit is %d", len(p), maxNameLength)
	case reservedPrefixes[p]:
		return fmt.Errorf("%q is a path segment of the catalog's own routes", p)
	case p == "." || p == "..":
		return fmt.Errorf("%q is rewritten by HTTP clients and servers", p)
	case !utf8.ValidString(p):
		return errors.New("not UTF-8")
	case strings.ContainsAny(p, "/?#% "):
		return errors.New("want a single path segment without '/', '?', '#', '%' or spaces")
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return errors.New("contains a control character")
	}
	return nil
}

// Server is the catalog's HTTP service.
type Server struct {
	cfg   Config
	store Store
	// keys runs keyed requests (see keyed); its store is the one passed to
	// New, without the keyed wrapper.
	keys    *idempotency.Keys
	objects Objects
	log     *slog.Logger
	cache   *metadataCache
	// loads shares one read of a metadata file among concurrent loads
	// that miss the cache (readMetadata); bigDocs bounds the large
	// documents parsed at once (readMetadataFile).
	loads   singleflight.Group
	bigDocs *semaphore.Weighted
	metrics *metrics
	commits commitLocks
	router  *mux.Router
	// warehouses are the served warehouses, the default one first.
	warehouses []*warehouse

	purgerMu  sync.Mutex
	purgerSvc Purger
	ownPurger *purge.Service // started by this server; stopped by Close
	closed    bool

	// dropJobEvent's answer and when it is read again.
	featMu   sync.Mutex
	featOK   bool
	featNext time.Time
}

// New validates cfg and returns the catalog service.
func New(cfg Config, store Store, objects Objects) (*Server, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = "floe"
	}
	if err := CheckPrefix(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("catalog: prefix %q: %w", cfg.Prefix, err)
	}
	if err := checkRootLocation(cfg.Warehouse); err != nil {
		return nil, fmt.Errorf("catalog: warehouse: %w", err)
	}
	cfg.Warehouse = strings.TrimSuffix(cfg.Warehouse, "/")
	if len(cfg.AllowedLocations) == 0 {
		cfg.AllowedLocations = []string{cfg.Warehouse}
	}
	for _, loc := range cfg.AllowedLocations {
		if err := checkRootLocation(loc); err != nil {
			return nil, fmt.Errorf("catalog: allowed location: %w", err)
		}
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 8 << 20
	}
	if cfg.CommitRetries <= 0 {
		cfg.CommitRetries = 10
	}
	if cfg.MetadataCacheSize == 0 {
		cfg.MetadataCacheSize = 1024
	}
	if cfg.MetadataCacheBytes <= 0 {
		cfg.MetadataCacheBytes = 128 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.IdempotencyLifetime <= 0 {
		cfg.IdempotencyLifetime = idempotency.DefaultLifetime
	}
	warehouses, err := newWarehouses(cfg, objects)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:        cfg,
		store:      readYourWrites{keyedStore{Store: store}},
		keys:       idempotency.New(store, idempotency.Config{Lifetime: cfg.IdempotencyLifetime, Now: cfg.Now, Logger: cfg.Logger}),
		objects:    objects,
		log:        cfg.Logger,
		cache:      newMetadataCache(cfg.MetadataCacheSize, cfg.MetadataCacheBytes),
		bigDocs:    semaphore.NewWeighted(bigMetadataSlots),
		metrics:    newMetrics(cfg.Registerer),
		purgerSvc:  cfg.Purger,
		warehouses: warehouses,
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "floe_catalog_metadata_cache_bytes",
			Help: "Size of the metadata documents held in the in-memory cache (their parsed objects take a few times as much again).",
		}, func() float64 { return float64(s.cache.bytes.Load()) }))
	}
	s.router = s.routes()
	return s, nil
}

// Handler serves /v1/….
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.router.ServeHTTP(w, s.prefixAsRouted(r))
	})
}

// routedPrefix is a prefix as its routes are registered: as the router
// sees a request path holding it (EscapedPath, the router using encoded
// paths), so a prefix with a character a path cannot carry raw (one
// outside ASCII, a brace) still matches.
func routedPrefix(p string) string { return (&url.URL{Path: p}).EscapedPath() }

// prefixAsRouted rewrites a request whose first segment after /v1/ is a
// served prefix percent-encoded otherwise than as routed (clients escape
// "~", ";" or non-ASCII letters differently) to the routed spelling. Any
// other request is returned as it is.
func (s *Server) prefixAsRouted(r *http.Request) *http.Request {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/v1/")
	if !ok {
		return r
	}
	seg, tail, hasTail := strings.Cut(rest, "/")
	if !strings.Contains(seg, "%") {
		return r
	}
	name, err := url.PathUnescape(seg)
	if err != nil {
		return r
	}
	for _, w := range s.warehouses {
		if w.prefix != name || routedPrefix(name) == seg {
			continue
		}
		raw := "/v1/" + routedPrefix(name)
		if hasTail {
			raw += "/" + tail
		}
		path, err := url.PathUnescape(raw)
		if err != nil {
			return r
		}
		u := *r.URL
		u.Path, u.RawPath = path, raw
		r2 := new(http.Request)
		*r2 = *r
		r2.URL = &u
		return r2
	}
	return r
}

// route describes one served endpoint; the same table feeds the router and
// the endpoints list in /v1/config, so the two cannot disagree.
type route struct {
	method  string
	path    string // relative to /v1/{prefix}
	name    string
	handler func(w http.ResponseWriter, r *http.Request) error
}

func (s *Server) catalogRoutes() []route {
	return []route{
		{"GET", "/namespaces", "listNamespaces", s.listNamespaces},
		{"POST", "/namespaces", "createNamespace", s.createNamespace},
		{"GET", "/namespaces/{namespace}", "loadNamespace", s.loadNamespace},
		{"HEAD", "/namespaces/{namespace}", "namespaceExists", s.namespaceExists},
		{"DELETE", "/namespaces/{namespace}", "dropNamespace", s.dropNamespace},
		{"POST", "/namespaces/{namespace}/properties", "updateProperties", s.updateProperties},
		{"GET", "/namespaces/{namespace}/functions", "listFunctions", s.listFunctions},
		{"GET", "/namespaces/{namespace}/functions/{function}", "loadFunction", s.loadFunction},
		{"GET", "/namespaces/{namespace}/tables", "listTables", s.listTables},
		{"POST", "/namespaces/{namespace}/tables", "createTable", s.createTable},
		{"POST", "/namespaces/{namespace}/register", "registerTable", s.registerTable},
		{"GET", "/namespaces/{namespace}/tables/{table}", "loadTable", s.loadTable},
		{"HEAD", "/namespaces/{namespace}/tables/{table}", "tableExists", s.tableExists},
		{"POST", "/namespaces/{namespace}/tables/{table}", "updateTable", s.updateTable},
		{"DELETE", "/namespaces/{namespace}/tables/{table}", "dropTable", s.dropTable},
		{"POST", "/namespaces/{namespace}/tables/{table}/unregister", "unregisterTable", s.unregisterTable},
		{"POST", "/namespaces/{namespace}/tables/{table}/metrics", "reportMetrics", s.reportMetrics},
		{"GET", "/namespaces/{namespace}/tables/{table}/credentials", "loadCredentials", s.loadCredentials},
		{"POST", "/tables/rename", "renameTable", s.renameTable},
		{"POST", "/transactions/commit", "commitTransaction", s.commitTransaction},
		{"GET", "/namespaces/{namespace}/views", "listViews", s.listViews},
		{"POST", "/namespaces/{namespace}/views", "createView", s.createView},
		{"POST", "/namespaces/{namespace}/register-view", "registerView", s.registerView},
		{"GET", "/namespaces/{namespace}/views/{view}", "loadView", s.loadView},
		{"HEAD", "/namespaces/{namespace}/views/{view}", "viewExists", s.viewExists},
		{"POST", "/namespaces/{namespace}/views/{view}", "replaceView", s.replaceView},
		{"DELETE", "/namespaces/{namespace}/views/{view}", "dropView", s.dropView},
		{"POST", "/views/rename", "renameView", s.renameView},
	}
}

// unsupportedRoute is an operation of the spec that floe does not serve
// (server-side scan planning) and so does not advertise. Clients that do
// not read the endpoints list may still send some. A lookup of one plan or
// plan task finds none (404); any other such operation is the spec's
// unsupported operation (406).
type unsupportedRoute struct {
	method, path string // path relative to /v1/{prefix}
	status       int
	typ, msg     string
}

const noPlanning = "this catalog does not support server-side scan planning"

var unsupportedRoutes = []unsupportedRoute{
	{"POST", "/namespaces/{namespace}/tables/{table}/plan", http.StatusNotAcceptable, "UnsupportedOperationException", noPlanning},
	{"GET", "/namespaces/{namespace}/tables/{table}/plan/{plan-id}", http.StatusNotFound, "NoSuchPlanIdException", "plan does not exist: " + noPlanning},
	{"DELETE", "/namespaces/{namespace}/tables/{table}/plan/{plan-id}", http.StatusNotFound, "NoSuchPlanIdException", "plan does not exist: " + noPlanning},
	{"POST", "/namespaces/{namespace}/tables/{table}/tasks", http.StatusNotFound, "NoSuchPlanTaskException", "plan task does not exist: " + noPlanning},
	// signRequest lists no 404 or 406: a 5XX is what it may answer.
	{"POST", "/namespaces/{namespace}/tables/{table}/sign", http.StatusNotImplemented, "UnsupportedOperationException",
		"this catalog does not sign storage requests: a table's config never enables remote signing (s3.remote-signing-enabled)"},
}

func (s *Server) routes() *mux.Router {
	r := mux.NewRouter().UseEncodedPath()
	def := s.warehouses[0]
	r.Handle("/v1/config", s.wrap(def, "getConfig", s.getConfig)).Methods("GET", "HEAD")
	// The prefixed routes are registered first; a prefix may not be one of
	// the plain routes' first segments (reservedPrefixes), so the two sets
	// cannot shadow each other. The plain routes address the default
	// warehouse.
	type base struct {
		path string
		wh   *warehouse
	}
	var bases []base
	for _, w := range s.warehouses {
		bases = append(bases, base{"/v1/" + routedPrefix(w.prefix), w})
	}
	// HEAD is served wherever GET is (RFC 9110 9.3.2): the GET's answer
	// without its body, except where the spec makes HEAD an operation of
	// its own (namespaceExists, tableExists, viewExists).
	headed := map[string]bool{}
	for _, rt := range s.catalogRoutes() {
		if rt.method == http.MethodHead {
			headed[rt.path] = true
		}
	}
	for _, b := range append(bases, base{"/v1", def}) {
		for _, rt := range s.catalogRoutes() {
			h := rt.handler
			if keyedOps[rt.name] {
				h = s.keyed(rt.name, h)
			}
			methods := []string{rt.method}
			// Not where a GET mints credentials only to drop them.
			if rt.method == http.MethodGet && !headed[rt.path] && rt.name != "loadCredentials" {
				methods = append(methods, http.MethodHead)
			}
			r.Handle(b.path+rt.path, s.wrap(b.wh, rt.name, h)).Methods(methods...)
		}
		for _, u := range unsupportedRoutes {
			ae := &apiError{status: u.status, typ: u.typ, msg: u.msg}
			r.Handle(b.path+u.path, s.wrap(b.wh, "unsupported", func(http.ResponseWriter, *http.Request) error { return ae })).Methods(u.method)
		}
	}
	r.MethodNotAllowedHandler = s.wrap(def, "methodNotAllowed", func(w http.ResponseWriter, req *http.Request) error {
		muxallow.Set(w, r, req)
		return &apiError{status: http.StatusMethodNotAllowed, typ: "MethodNotAllowedException",
			msg: fmt.Sprintf("%s is not allowed on %s", req.Method, req.URL.Path)}
	})
	r.NotFoundHandler = s.wrap(def, "notFound", func(w http.ResponseWriter, r *http.Request) error {
		parts := strings.SplitN(strings.TrimPrefix(r.URL.EscapedPath(), "/v1/"), "/", 2)
		if _, known := s.warehouseNamed(parts[0]); strings.HasPrefix(r.URL.Path, "/v1/") && len(parts) == 2 && !reservedPrefixes[parts[0]] && !known {
			return &apiError{status: http.StatusNotFound, typ: "NoSuchWarehouseException",
				msg: fmt.Sprintf("unknown catalog prefix %q%s", parts[0], s.servedHint())}
		}
		return &apiError{status: http.StatusNotFound, typ: "NotFoundException", msg: "no such route: " + r.URL.Path}
	})
	return r
}

// locationRefusalRE matches the state machine's words for a location
// held by another table or view, or by a purge job.
var locationRefusalRE = regexp.MustCompile(`overlaps .*(, the location of |, a location table )|is being purged by purge job `)

// purgeJobRE finds the purge job a tombstone refusal names.
var purgeJobRE = regexp.MustCompile(`purge job ([0-9a-fA-F-]{36})(?: \(([A-Z]+)\))?`)

// failedJobHint ends a refusal by a FAILED purge job's tombstone.
const failedJobHint = "; it holds the table's name and location until an operator retries (floe purge retry) or releases (floe purge release) the job"

// purgeJobState ends the message of a refusal by a purge job's tombstone
// with the job's state, as the state machine's own message does: a FAILED
// job holds the name and location until an operator retries or releases it.
func purgeJobState(state string) string {
	switch state {
	case "":
		return "; retry when the job has succeeded"
	case string(fsm.JobFailed):
		return " (" + state + ")" + failedJobHint
	}
	return " (" + state + "); retry when the job has succeeded"
}

// readsNothing are the routes whose answer does not depend on the
// catalog's state: a '+' in their path that could not be settled (no
// leader) is taken as written rather than failing them.
var readsNothing = map[string]bool{"reportMetrics": true, "unsupported": true, "methodNotAllowed": true, "notFound": true}

// singleQueryParams are the query parameters of the catalog's routes:
// each may be given at most once.
var singleQueryParams = []string{"purgeRequested", "snapshots", "pageToken", "pageSize", "parent", "warehouse", "planId"}

// wrap adds the body limit, metrics, logging and error mapping to a handler
// serving the warehouse wh.
func (s *Server) wrap(wh *warehouse, name string, h func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	kind := opKindOf(name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		r = s.withScope(withAuditTarget(withWarehouse(r, wh)))
		resolved, err := s.resolvePlus(r)
		if err == nil {
			r = resolved
		} else if readsNothing[name] {
			// Its answer does not depend on what exists: the name as
			// written serves (a metrics report reaching a follower cut
			// off from its leader is still taken).
			err = nil
		}
		if err == nil {
			err = s.authorizeRoute(name, r)
		}
		if err == nil {
			err = checkContentEncoding(r)
		}
		if n := len(r.Header.Values(ReadConsistencyHeader)); err == nil && n > 1 {
			// Which one the client meant is unknown, as for
			// Idempotency-Key: a proxy's "linearizable" would otherwise
			// lose to a "stale" before it.
			err = badRequest("%s given %d times: send one", ReadConsistencyHeader, n)
		}
		if err == nil && r.ContentLength > s.cfg.MaxBodyBytes {
			// Refused before a byte is read: a client waiting for
			// "100 Continue" gets this answer at once instead, and one
			// sending anyway is not made to send megabytes first.
			err = &apiError{status: http.StatusRequestEntityTooLarge, typ: "BadRequestException",
				msg: fmt.Sprintf("request body exceeds %d bytes", s.cfg.MaxBodyBytes)}
		}
		if err == nil {
			// url.Values drops a malformed pair silently, so that
			// "?purgeRequested=%zz" would read as no purge at all.
			q, qerr := url.ParseQuery(r.URL.RawQuery)
			if qerr != nil {
				err = badRequest("malformed query string: %v", qerr)
			}
			for _, name := range singleQueryParams {
				if n := len(q[name]); err == nil && n > 1 {
					// Read once here (the first value) and once there
					// (the last), "?purgeRequested=true&purgeRequested=false"
					// would purge for one reader and not for another.
					err = badRequest("query parameter %s given %d times: give it once", name, n)
				}
			}
		}
		if err == nil {
			err = h(rec, withStaleReader(r))
		}
		if err != nil {
			ae := toAPIError(err, kind)
			if msg := wh.plain(ae.msg); msg != ae.msg {
				cp := *ae
				cp.msg = msg
				ae = &cp
			}
			// A refusal over a held location or a purge tombstone is
			// told by its type where it is the state machine's error,
			// and by its words where it was recorded under an
			// Idempotency-Key and is replayed, or came back as a failed
			// compare-and-set of a commit.
			locationRefusal := errors.Is(err, fsm.ErrLocationInUse) || errors.Is(err, fsm.ErrBeingPurged) ||
				(ae.status == http.StatusConflict && locationRefusalRE.MatchString(ae.msg))
			if s.cfg.Authorizer != nil && locationRefusal {
				// The state machine's message names the table or job
				// holding the location, which this caller may not be
				// allowed to see: the log keeps it, the answer does not.
				s.log.Info("location refused", "op", name, "path", r.URL.Path, "detail", ae.msg)
				detail := ae.msg
				ae = &apiError{status: ae.status, typ: ae.typ, msg: "the location is held by another table or view", retryAfter: ae.retryAfter, contended: ae.contended}
				if m := purgeJobRE.FindStringSubmatch(detail); m != nil {
					// A tombstone: name the job (the operator's handle on
					// it), not the table it purges.
					ae.msg = "the name or location is being purged by purge job " + m[1] + purgeJobState(m[2])
				}
			} else if m := purgeJobRE.FindStringSubmatch(ae.msg); m != nil && m[2] == string(fsm.JobFailed) && !strings.Contains(ae.msg, failedJobHint) {
				// The state machine's words (fixed: its results are
				// recorded under Idempotency-Keys, the same on every
				// release) tell a client to wait for a job that, FAILED,
				// never succeeds by itself.
				cp := *ae
				cp.msg = strings.TrimSuffix(ae.msg, "; retry when the job has succeeded") + failedJobHint
				ae = &cp
			}
			if ae.status >= 500 && r.Context().Err() != nil {
				// The client went away (or the server is stopping):
				// the answer reaches no one, and what the request
				// started goes on (a purge, a commit in the log).
				s.log.Info("request ended without its client", "op", name, "method", r.Method, "path", r.URL.Path, "status", ae.status, "error", err)
			} else if ae.status >= 500 {
				s.log.Error("request failed", "op", name, "method", r.Method, "path", r.URL.Path, "status", ae.status, "error", err)
			} else {
				s.log.Debug("request refused", "op", name, "method", r.Method, "path", r.URL.Path, "status", ae.status, "error", ae.msg)
			}
			writeAPIError(rec, r, ae)
		}
		s.audit(r, name, rec.status)
		s.metrics.requests.WithLabelValues(name, fmt.Sprint(rec.status)).Inc()
		s.metrics.latency.WithLabelValues(name).Observe(time.Since(start).Seconds())
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

// Unwrap lets http.ResponseController reach the connection's writer, so
// that a handler's own write deadline (the backup lifts the whole-answer
// limit) and flushes pass through.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// decodeBody parses a JSON request body into v: 413 over the limit, 400 for
// anything that is not one well-formed JSON value of the right shape.
func decodeBody(r *http.Request, v any) error {
	body, err := readJSONBody(r)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return badRequest("malformed request body: %v", err)
	}
	return nil
}

// stringMap is a JSON object of string values (properties). A null value
// is refused, as Java's parser refuses it, rather than stored as "".
type stringMap map[string]string

func (m *stringMap) UnmarshalJSON(b []byte) error {
	var raw map[string]*string
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw == nil {
		*m = nil
		return nil
	}
	out := make(stringMap, len(raw))
	for k, v := range raw {
		if v == nil {
			return fmt.Errorf("the value of %q is null: property values are strings", k)
		}
		out[k] = *v
	}
	*m = out
	return nil
}

// readJSONBody is readBody, and a 400 for a body that is empty or only
// white space. The body is not parsed: its decoder reports malformed JSON.
func readJSONBody(r *http.Request) ([]byte, error) {
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badRequest("request body is empty")
	}
	return body, nil
}

// maxBodyDepth bounds how deeply a request body's JSON nests. A schema
// nests about three levels per nested struct and one per list, so this
// allows schemas far deeper than any real one, while a body nested
// thousands deep (whose types iceberg-go and the checks here walk in time
// quadratic in the depth) is refused before it is decoded.
const maxBodyDepth = 256

// readBody reads the whole request body: 413 over the limit, 400 nested
// deeper than maxBodyDepth.
func readBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, typ: "BadRequestException",
				msg: fmt.Sprintf("request body exceeds %d bytes", tooLarge.Limit)}
		}
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			// Cut by the server (the whole-request read timeout, or a body
			// arriving too slowly): the error names the sockets.
			return nil, badRequest("the request body did not arrive in time")
		}
		return nil, badRequest("reading request body: %v", err)
	}
	if jsonDepthOver(body, maxBodyDepth) {
		return nil, badRequest("request body nests deeper than %d levels", maxBodyDepth)
	}
	// encoding/json would read each invalid byte as U+FFFD: two different
	// names would become one. JSON text is UTF-8 (RFC 8259).
	if !utf8.Valid(body) {
		return nil, badRequest("request body is not valid UTF-8")
	}
	// So would it read a \u escape of half a UTF-16 surrogate pair.
	if loneSurrogate(body) {
		return nil, badRequest("request body escapes half of a UTF-16 surrogate pair (\\uD800-\\uDFFF without its other half)")
	}
	return body, nil
}

// loneSurrogate reports whether the JSON text body holds a \u escape of a
// UTF-16 surrogate that is not half of a pair. Backslashes occur only in
// strings, so the text is scanned escape by escape; malformed escapes are
// left to the decoder.
func loneSurrogate(body []byte) bool {
	esc := func(i int) (rune, bool) { // the \uXXXX escape at i
		if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
			return 0, false
		}
		var r rune
		for _, c := range body[i+2 : i+6] {
			var d byte
			switch {
			case c >= '0' && c <= '9':
				d = c - '0'
			case c >= 'a' && c <= 'f':
				d = c - 'a' + 10
			case c >= 'A' && c <= 'F':
				d = c - 'A' + 10
			default:
				return 0, false
			}
			r = r<<4 | rune(d)
		}
		return r, true
	}
	for i := bytes.IndexByte(body, '\\'); i >= 0 && i < len(body); {
		r, ok := esc(i)
		switch {
		case !ok:
			i += 2 // another escape (\n, \\, ...): skip both bytes
		case r >= 0xD800 && r < 0xDC00:
			lo, ok := esc(i + 6)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 12
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		default:
			i += 6
		}
		if i >= len(body) {
			break
		}
		next := bytes.IndexByte(body[i:], '\\')
		if next < 0 {
			break
		}
		i += next
	}
	return false
}

// jsonDepthOver reports whether the JSON text body nests arrays and
// objects deeper than limit. Strings are skipped whole; malformed text is
// left to the decoder.
func jsonDepthOver(body []byte, limit int) bool {
	depth := 0
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '"':
			j := stringEnd(body, i)
			if j < 0 {
				return false
			}
			i = j
		case '{', '[':
			if depth++; depth > limit {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}

// parseNamespace decodes a {namespace} path segment: levels separated by
// %1F, or by the advertised separator when it holds no %1F.
func parseNamespace(raw string) ([]string, error) {
	decoded, err := url.PathUnescape(raw)
	if err != nil {
		return nil, badRequest("malformed namespace %q: %v", raw, err)
	}
	return splitNamespace(decoded)
}

// splitNamespace splits a decoded namespace into its levels, as the Java
// reference server does: at the unit separator when there is one (a client
// that sends it names each level whole, so "a\x1fb.c" is the levels a and
// "b.c", which no namespace here has, refused with 400), else at the
// advertised separator.
func splitNamespace(decoded string) ([]string, error) {
	sep := nsSeparator
	if strings.Contains(decoded, unitSeparator) {
		sep = unitSeparator
	}
	levels := strings.Split(decoded, sep)
	if slices.Contains(levels, "") {
		return nil, badRequest("malformed namespace %q: empty level", decoded)
	}
	if err := validateNamespace(levels); err != nil {
		return nil, err
	}
	return levels, nil
}

// checkContentEncoding refuses a request body sent compressed (or in any
// Content-Encoding but identity) with 415: no Iceberg client compresses
// its requests, and the body would otherwise be read as malformed JSON.
func checkContentEncoding(r *http.Request) error {
	for _, v := range r.Header.Values("Content-Encoding") {
		for enc := range strings.SplitSeq(v, ",") {
			if e := strings.TrimSpace(enc); e != "" && !strings.EqualFold(e, "identity") {
				return &apiError{status: http.StatusUnsupportedMediaType, typ: "UnsupportedMediaTypeException",
					msg: fmt.Sprintf("request bodies are read uncompressed; Content-Encoding %q is not supported", e)}
			}
		}
	}
	return nil
}

func validateNamespace(levels []string) error {
	if len(levels) == 0 {
		return badRequest("namespace must have at least one level")
	}
	if n := len(strings.Join(levels, unitSeparator)); n > maxNamespaceBytes {
		return badRequest("namespace is %d bytes long, the limit is %d", n, maxNamespaceBytes)
	}
	for _, l := range levels {
		if err := validateName("namespace level", l); err != nil {
			return err
		}
		if strings.Contains(l, nsSeparator) {
			return badRequest("namespace level %q contains the namespace separator %q", l, nsSeparator)
		}
	}
	return nil
}

// validateNewName refuses, for a name being created (a table, a view, a
// namespace level, or the destination of a rename), what validateName
// refuses, the names "." and "..", any name with a '/', a '?', a '#', a
// '\' or a percent-escape. As path
// segments, HTTP clients, proxies and servers rewrite "." and ".." (a
// DELETE of ".../tables/.." would reach the namespace), so such an object
// could not be addressed safely; and a '/' would make the name several
// segments of the default locations and authorization scopes derived from
// it, shared with other names. Names are not refused on reads, so an
// object named so before stays reachable through the escaped spelling
// (%2E%2E, %2F) and can be renamed or dropped.
func validateNewName(what, name string) error {
	if err := validateName(what, name); err != nil {
		return err
	}
	if name == "." || name == ".." {
		return badRequest("%s %q is not allowed: a path segment HTTP clients and proxies rewrite", what, name)
	}
	if strings.Contains(name, "/") {
		// Default locations and authorization scopes are paths built
		// from the levels and the name: "a/x" would share them with the
		// namespace a.x, and a table "sq/x" would hold part of "sq"'s.
		return badRequest("%s %q contains '/': names become path segments of default locations", what, name)
	}
	if percentEscapeRE.MatchString(name) {
		// Clients disagree on escaping a name in a path: Java escapes
		// "t%41" as t%2541, iceberg-go sends the table name as it is,
		// and floe would read that as the table "tA": an iceberg-go
		// drop of "t%41" dropped "tA".
		return badRequest("%s %q contains a percent-escape (%%XX): clients that do not escape names in paths would reach another object", what, name)
	}
	if i := strings.IndexAny(name, "?#\\"); i >= 0 {
		// A client that puts names into paths unescaped (iceberg-js
		// before 1.0) sends ".../tables/t?x=&purgeRequested=true": the
		// path names "t", and its purging drop of "t?x" purged "t". A
		// WHATWG URL parser (browsers, Node's fetch) reads '\' as '/'.
		return badRequest("%s %q contains %q: clients that do not escape names in paths would reach another object", what, name, name[i:i+1])
	}
	if i := strings.IndexFunc(name, storage.NotXMLChar); i >= 0 {
		return badRequest("%s %q contains %U, which object stores' XML requests cannot carry: names become parts of default locations", what, name, []rune(name[i:])[0])
	}
	return nil
}

// percentEscapeRE matches a percent-escape: '%' and two hex digits.
var percentEscapeRE = regexp.MustCompile(`%[0-9A-Fa-f]{2}`)

// sameIdent reports whether a and b name the same table or view.
func sameIdent(a, b fsm.Ident) bool {
	return a.Name == b.Name && slices.Equal(a.Namespace, b.Namespace)
}

// validateNewDestination is validateNewName for the name a rename
// gives. The destination's namespace levels are not judged: a rename
// creates no namespace, and one that does not exist is the rename's 404;
// one named before the rules for new names tightened stays usable.
func validateNewDestination(what string, to fsm.Ident) error {
	return validateNewName(what, to.Name)
}

// validateName refuses names a catalog cannot store or address: empty,
// over-long, or containing control characters (which also keeps the state
// machine's key separators out of names).
func validateName(what, name string) error {
	if name == "" {
		return badRequest("%s must not be empty", what)
	}
	if len(name) > maxNameLength {
		return badRequest("%s is %d bytes long, the limit is %d", what, len(name), maxNameLength)
	}
	// A body is checked whole, a path segment here: stored names pass
	// through JSON, which reads invalid bytes as U+FFFD, so %E9 and %E8
	// would each reach the entry named with U+FFFD.
	if !utf8.ValidString(name) {
		return badRequest("%s %q is not valid UTF-8", what, name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return badRequest("%s %q contains a control character", what, name)
		}
	}
	return nil
}

// nsString renders a namespace for messages, as the client names it in
// the warehouse it addresses.
func nsString(levels []string) string { return strings.Join(external(levels), ".") }

// opKindOf tells the error mapping whether op is a table or view commit.
func opKindOf(op string) opKind {
	if op == "updateTable" || op == "commitTransaction" || op == "replaceView" {
		return opCommit
	}
	return opOther
}

// boolParam reads a boolean query parameter the way the reference server
// does: "true" or "false" in any case; absent or empty is false; anything
// else is a 400.
func boolParam(r *http.Request, name string) (bool, error) {
	v := strings.TrimSpace(r.URL.Query().Get(name))
	switch {
	case v == "" || strings.EqualFold(v, "false"):
		return false, nil
	case strings.EqualFold(v, "true"):
		return true, nil
	}
	return false, badRequest("%s must be true or false, got %q", name, v)
}
