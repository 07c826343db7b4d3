package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floe-catalog/floe/catalog"
	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/idempotency"
	"github.com/floe-catalog/floe/internal/admin"
	"github.com/floe-catalog/floe/internal/auth"
	"github.com/floe-catalog/floe/internal/raftnode"
	"github.com/floe-catalog/floe/internal/ui"
)

// Authentication modes (--auth).
const (
	authOff = "off"
	authOn  = "on"
)

// replica is the replicated state auth reads: a raftnode.Node.
type replica interface {
	Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
	Read(ctx context.Context, fn func(*fsm.Reader) error) error
	StaleRead(fn func(*fsm.Reader) error) error
}

var _ replica = (*raftnode.Node)(nil)

// security is the node's authentication, authorization and audit, as
// configured. With --auth=off it authenticates nobody and allows
// everything; the audit log works either way.
type security struct {
	on        bool
	store     replica
	authn     *auth.Authenticator
	tokens    http.Handler // POST /v1/oauth/tokens; with auth off, auth.NewOpenTokenHandler
	verifier  *auth.Verifier
	audit     *auditLog // nil: no audit log
	nodeID    string
	rotateAge time.Duration
	log       *slog.Logger
	// names are the host names this node is reached by as configured
	// (--http-addr, --http-advertise): with auth off, a browser's write
	// to any other name is refused (see rebound).
	names []string
}

// newSecurity builds the node's security from cfg. It fails on settings
// the auth library refuses (a short root token).
func newSecurity(cfg config, logger *slog.Logger, reg prometheus.Registerer, node replica, nodeID string) (*security, error) {
	s := &security{on: cfg.Auth == authOn, store: node, nodeID: nodeID, rotateAge: cfg.AuthKeyRotation, log: logger.With("component", "auth")}
	for _, a := range []string{cfg.HTTPAddr, cfg.HTTPAdvertise} {
		if h, _, err := net.SplitHostPort(a); err == nil && h != "" {
			s.names = append(s.names, h)
		}
	}
	if cfg.AuditLog != "" {
		a, err := openAuditLog(cfg.AuditLog, nodeID)
		if err != nil {
			return nil, err
		}
		s.audit = a
	}
	if !s.on {
		logger.Warn("authentication is off (--auth=off): anyone who can reach this node can read, change, drop and purge every table and use the operator API")
		// Clients configured with a credential still ask for a token
		// first; they get one that authorizes nothing, since nothing
		// needs authorizing.
		s.tokens = auth.NewOpenTokenHandler(s.log, reg)
		return s, nil
	}
	jwtCfg := auth.JWTConfig{
		Keys: keySource{node}, Audience: cfg.AuthAudience,
		TokenTTL: cfg.AuthTokenTTL, MaxTokenTTL: cfg.AuthMaxTokenTTL,
	}
	verifier, err := auth.NewVerifier(jwtCfg)
	if err != nil {
		return nil, err
	}
	issuer, err := auth.NewIssuer(jwtCfg)
	if err != nil {
		return nil, err
	}
	var oidc *auth.OIDCVerifier
	if cfg.AuthOIDCIssuer != "" {
		if oidc, err = auth.NewOIDCVerifier(auth.OIDCConfig{
			IssuerURL: cfg.AuthOIDCIssuer, Audience: cfg.AuthOIDCAudience, JWKSURL: cfg.AuthOIDCJWKSURL,
			PrincipalClaim: cfg.AuthOIDCPrincipalClaim, RolesClaim: cfg.AuthOIDCRolesClaim, Logger: s.log,
		}); err != nil {
			return nil, err
		}
	}
	if s.authn, err = auth.NewAuthenticator(auth.AuthenticatorConfig{
		RootToken: cfg.AuthRootToken, Tokens: tokenSource{node}, JWT: verifier, OIDC: oidc,
		Logger: s.log, Registerer: reg,
	}); err != nil {
		return nil, err
	}
	th, err := auth.NewTokenHandler(auth.TokenHandlerConfig{
		Clients: clientSource{node}, Issuer: issuer, Verifier: verifier, Logger: s.log, Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	s.tokens, s.verifier = th, verifier
	return s, nil
}

// keyWindow is how long a retired signing key keeps verifying.
func (s *security) keyWindow() time.Duration {
	if s.verifier == nil {
		return 0
	}
	return s.verifier.RetiredKeyWindow()
}

// principal names the request's principal: "anonymous" when auth is off.
func (s *security) principal(r *http.Request) string {
	if p, ok := auth.FromContext(r.Context()); ok {
		return p.Name
	}
	return auth.AnonymousPrincipal
}

// tokenPath is the OAuth token endpoint.
const tokenPath = "/v1/oauth/tokens"

// openPaths are answered without a token: the handshake clients make
// before they have one, the token endpoint, the probes and metrics, and
// the status page's login form.
func openPath(r *http.Request) bool {
	switch r.URL.Path {
	case "/v1/config", tokenPath, "/healthz", "/readyz", "/metrics":
		return true
	}
	return ui.IsOpenPath(r.URL.Path)
}

// requestIDHeader names a request in the audit log and in answers.
const requestIDHeader = "X-Request-Id"

type requestIDKey struct{}

func requestID(r *http.Request) string {
	id, _ := r.Context().Value(requestIDKey{}).(string)
	return id
}

// requestIDs gives every request an id before anything can refuse it
// (the in-flight cap, a dot segment): the caller's X-Request-Id when it
// is plain, else a new UUIDv7, named in the answer and the audit log.
func requestIDs(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, withRequestID(w, r))
	})
}

// withRequestID returns r carrying its request id, and sets it on the
// answer, unless an outer handler did both already.
func withRequestID(w http.ResponseWriter, r *http.Request) *http.Request {
	if requestID(r) != "" {
		return r
	}
	id := r.Header.Get(requestIDHeader)
	if !validRequestID(id) {
		if u, err := uuid.NewV7(); err == nil {
			id = u.String()
		}
	}
	w.Header().Set(requestIDHeader, id)
	return r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
}

// validRequestID accepts a caller's request id when it is short and plain.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// wrap puts security in front of h: a request id on every request; with
// auth on, a principal on every request but the open ones (401 otherwise),
// and the admin privilege on the operator API (403 otherwise). The status
// page (/ui) also takes the token from its session cookie, checked like the
// header, and sends a browser without a valid one to its login form.
// Refusals, operator API mutations and status page actions go to the audit
// log; the catalog audits its own.
func (s *security) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = withAuthConsistency(withRequestID(w, r))
		if ui.IsPath(r.URL.Path) && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			r = r.WithContext(withPageAuthReads(r.Context()))
		}
		// A page of another origin (another site, or another port of this
		// host) must not change anything here, even with authentication
		// off (a page could POST to a local node): floe answers no CORS
		// preflight, so the only requests such a page can make are simple
		// ones, and none is legitimate (crossOrigin).
		mutating := r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodOptions
		if mutating && crossOrigin(r) {
			writeJSON(w, http.StatusForbidden, map[string]any{"error": map[string]any{
				"message": "requests from a page of another origin may not change anything", "type": "ForbiddenException", "code": http.StatusForbidden}})
			s.record(r, opOf(r), "", http.StatusForbidden)
			return
		}
		if mutating && !s.on && s.rebound(r) {
			writeJSON(w, http.StatusForbidden, map[string]any{"error": map[string]any{
				"message": fmt.Sprintf("a browser's request for host %q, which is not how this node is configured to be reached (--http-addr, --http-advertise), may not change anything while authentication is off: a page can reach a local node under its own site's name (DNS rebinding); use the node's address, or --auth=on", r.Host),
				"type":    "ForbiddenException", "code": http.StatusForbidden}})
			s.record(r, opOf(r), "", http.StatusForbidden)
			return
		}
		management := strings.HasPrefix(r.URL.Path, "/management/")
		statusPage := ui.IsPath(r.URL.Path)
		if s.on && !openPath(r) {
			fromCookie := false
			if statusPage {
				r, fromCookie = ui.WithSessionToken(r)
			}
			p, err := s.authn.Authenticate(r)
			if err != nil {
				rec := &statusWriter{ResponseWriter: w}
				switch {
				case statusPage && errors.Is(err, auth.ErrUnavailable):
					ui.AuthUnavailable(rec, r)
				case statusPage:
					ui.Unauthenticated(rec, r, fromCookie)
				default:
					auth.DefaultOnFail(rec, r, err)
				}
				// A refused credential is "unauthenticated" whatever the
				// answer: the status page answers a browser with a
				// redirect to its login form, not a 401.
				s.recordOutcome(r, opOf(r), "", rec.status, "unauthenticated")
				return
			}
			r = withGrantsMemo(r.WithContext(auth.WithPrincipal(r.Context(), p)))
			if management {
				ok, err := s.allowed(r, auth.PrivilegeAdmin, nil)
				if err != nil || !ok {
					status, typ, msg := http.StatusForbidden, "ForbiddenException", p.Name+" may not use the operator API (admin privilege needed)"
					if err != nil {
						status, typ, msg = http.StatusServiceUnavailable, "ServiceUnavailableException", "cannot read grants: "+err.Error()
					}
					writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": status}})
					s.record(r, opOf(r), "", status)
					return
				}
			}
		}
		// Operator API mutations, backups (a copy of every secret hash
		// and signing key), status page actions and token requests
		// (issued or refused: a guessed secret shows as a 401) are
		// audited.
		if management && (r.Method != http.MethodGet && r.Method != http.MethodHead || r.URL.Path == "/management/v1/backup") ||
			statusPage && r.Method == http.MethodPost || r.URL.Path == tokenPath {
			id, target := "", ""
			if r.URL.Path == tokenPath {
				r, id = tokenClientID(r)
			} else if management {
				r, target = operatorTarget(r)
			}
			rec := &statusWriter{ResponseWriter: w}
			h.ServeHTTP(rec, r)
			if id != "" {
				target = s.clientTarget(id, rec.status)
			}
			s.record(r, opOf(r), target, rec.status)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// maxAuditedTokenRequest bounds the token request body read for its
// client id; the token endpoint refuses larger ones anyway.
const maxAuditedTokenRequest = 64 << 10

// tokenClientID returns the client id a token request names (HTTP Basic,
// else the form's client_id), unverified, for its audit line (see
// clientTarget), and r with its body intact for the token endpoint. ""
// when it names none.
func tokenClientID(r *http.Request) (*http.Request, string) {
	id := ""
	if user, _, ok := r.BasicAuth(); ok {
		// Form-encoded, as the token endpoint reads it (RFC 6749, 2.3.1).
		if u, err := url.QueryUnescape(user); err == nil {
			id = u
		}
	} else if r.Body != nil {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxAuditedTokenRequest+1))
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
		if err == nil && len(body) <= maxAuditedTokenRequest {
			if form, err := url.ParseQuery(string(body)); err == nil {
				id = form.Get("client_id")
			}
		}
	}
	return r, id
}

// operatorTargetFields are the fields of operator API request bodies that
// say what a change is about (a grant's grantee, privilege and scope; a
// client's or token's principal; a member's id and address), in the order
// an audit target names them. None holds a secret: secrets are generated
// by the node and only answered.
var operatorTargetFields = []string{"grantee", "privilege", "warehouse", "namespace", "principal", "roles", "id", "address"}

// maxAuditedTargetValue bounds one field's value in an audit target.
const maxAuditedTargetValue = 256

// operatorTarget returns the audit target of an operator API change: the
// operatorTargetFields its JSON body holds, as name=value pairs (string
// lists joined by '.' for a namespace, ',' otherwise), and r with its body
// intact for the handler. "" for a body that is not a JSON object, or
// larger than the token endpoint's bound; the path (the operation) names
// the rest.
func operatorTarget(r *http.Request) (*http.Request, string) {
	if r.Body == nil {
		return r, ""
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxAuditedTokenRequest+1))
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
	if err != nil || len(body) > maxAuditedTokenRequest {
		return r, ""
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return r, ""
	}
	var parts []string
	for _, name := range operatorTargetFields {
		raw, ok := fields[name]
		if !ok {
			continue
		}
		var v string
		var list []string
		switch {
		case json.Unmarshal(raw, &v) == nil:
		case json.Unmarshal(raw, &list) == nil:
			sep := ","
			if name == "namespace" {
				sep = "."
			}
			v = strings.Join(list, sep)
		default:
			continue
		}
		if len(v) > maxAuditedTargetValue {
			v = v[:maxAuditedTargetValue] + "…"
		}
		parts = append(parts, name+"="+v)
	}
	return r, strings.Join(parts, " ")
}

// clientTarget is the audit target of a token request naming client id
// (answered status): the client when the token was issued or the client
// exists, else "client:(unknown)". An id no client has is never written:
// it may be a secret sent in the wrong field. With authentication off every
// request gets a token and no client exists, so every id is unknown.
func (s *security) clientTarget(id string, status int) string {
	if id == "" {
		return ""
	}
	known := s.on && status == http.StatusOK
	if !known && s.on && s.store != nil && len(id) <= 255 {
		_ = s.store.StaleRead(func(rd *fsm.Reader) error {
			_, known = rd.AuthClient(id)
			return nil
		})
	}
	if !known {
		return "client:(unknown)"
	}
	return "client:" + id
}

// verifyToken checks a token exactly as wrap checks a bearer token, for
// the status page's login form, and names its principal.
func (s *security) verifyToken(ctx context.Context, token string) (string, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, "/ui/login", nil)
	if err != nil {
		return "", err
	}
	// As the pages it leads to are checked: a node without a leader
	// still lets a browser sign in to read its replica.
	r = r.WithContext(withPageAuthReads(ctx))
	r.Header.Set("Authorization", "Bearer "+token)
	p, err := s.authn.Authenticate(r)
	if errors.Is(err, auth.ErrUnavailable) {
		return "", fmt.Errorf("%w: %v", ui.ErrUnavailable, err)
	}
	if err != nil {
		return "", err
	}
	return p.Name, nil
}

// opOf names an operator API or refused request for the audit log.
func opOf(r *http.Request) string { return r.Method + " " + r.URL.Path }

// statusWriter remembers the status written.
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

// record writes one audit line, when there is an audit log.
func (s *security) record(r *http.Request, op, target string, status int) {
	s.recordOutcome(r, op, target, status, outcomeOf(status))
}

func (s *security) recordOutcome(r *http.Request, op, target string, status int, outcome string) {
	if s.audit == nil {
		return
	}
	s.audit.write(r, s.principal(r), requestID(r), op, target, status, outcome)
}

// Audit implements catalog.Auditor.
func (s *security) Audit(r *http.Request, op, target string, status int, denied bool) {
	outcome := outcomeOf(status)
	if denied {
		outcome = outcomeDenied
	}
	s.recordOutcome(r, op, target, status, outcome)
}

// allowed reports whether the request's principal holds priv on namespace,
// read as authRead reads: a grant revoked on any node is refused by every
// node once the revoke is acknowledged.
func (s *security) allowed(r *http.Request, priv string, namespace []string) (bool, error) {
	p, ok := auth.FromContext(r.Context())
	if !ok {
		return !s.on, nil
	}
	if p.IsRoot() {
		// Allowed everything, whatever the grants: they are not read,
		// so that root is not refused when they cannot be.
		return true, nil
	}
	grants, err := s.grants(r.Context(), p)
	if err != nil {
		return false, err
	}
	return auth.Allowed(p, grants, priv, namespace), nil
}

// stillAdmin checks again what wrap checked when an operator API request
// came in, for an answer that goes on long after (the change feed): that
// its credential is still valid (a token not expired nor deleted) and its
// principal still holds admin, with the grants read afresh. Without it a
// stream kept sending every catalog change to a caller whose token had
// expired or whose admin grant was revoked.
func (s *security) stillAdmin(r *http.Request) error {
	if !s.on {
		return nil
	}
	p, err := s.authn.Authenticate(r)
	if errors.Is(err, auth.ErrUnavailable) {
		return fmt.Errorf("%w: cannot check the credential now: %v", admin.ErrUnavailable, err)
	}
	if err != nil {
		return fmt.Errorf("its credential is no longer accepted: %w", err)
	}
	grants, err := s.readGrants(r.Context(), p)
	if err != nil {
		// No leader, say: nothing is known to have changed.
		return fmt.Errorf("%w: cannot read grants now: %v", admin.ErrUnavailable, err)
	}
	if !auth.Allowed(p, grants, auth.PrivilegeAdmin, nil) {
		return fmt.Errorf("%s no longer holds the admin privilege", p.Name)
	}
	return nil
}

// grants are the grants of p and of its roles: those its token carries and
// those the replicated state gives it.
func (s *security) grants(ctx context.Context, p auth.Principal) ([]auth.Grant, error) {
	m, ok := ctx.Value(grantsMemoKey{}).(*grantsMemo)
	if !ok {
		return s.readGrants(ctx, p)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.read && m.principal == p.Name {
		return m.grants, nil
	}
	g, err := s.readGrants(ctx, p)
	if err != nil {
		return nil, err
	}
	m.grants, m.principal, m.read = g, p.Name, true
	return g, nil
}

// grantsMemo holds the grants one request read: a request checks them
// once per namespace it lists or touches (listNamespaces asks for every
// namespace), and each check was a linearizable read and a decode of every
// grant, so listing 3000 namespaces for a principal with 700 grants took
// seconds. Within a request the grants are those of its first check, read
// after the request arrived: a grant revoked before then is refused, as
// the README promises; the request does not change grants itself.
type grantsMemo struct {
	mu        sync.Mutex
	read      bool
	principal string
	grants    []auth.Grant
}

type grantsMemoKey struct{}

// withGrantsMemo gives r a grantsMemo of its own.
func withGrantsMemo(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), grantsMemoKey{}, &grantsMemo{}))
}

// readGrants reads the grants of p and of its roles.
func (s *security) readGrants(ctx context.Context, p auth.Principal) ([]auth.Grant, error) {
	var out []auth.Grant
	err := authRead(ctx, s.store, func(rd *fsm.Reader) error {
		out = nil // it may run twice (authRead)
		roles := append(append([]string(nil), p.Roles...), rd.PrincipalRoles(p.Name)...)
		for _, g := range rd.Grants(fsm.GranteesOf(p.Name, roles)...) {
			out = append(out, auth.Grant{Grantee: g.Grantee, Namespace: g.Namespace, Privilege: g.Privilege})
		}
		return nil
	})
	return out, err
}

// authorizer is the catalog's view of security (catalog.Authorizer).
type authorizer struct{ s *security }

func (a authorizer) Principal(r *http.Request) string { return a.s.principal(r) }

func (a authorizer) Allowed(r *http.Request, priv string, namespace []string) (bool, error) {
	return a.s.allowed(r, priv, namespace)
}

func (a authorizer) Visible(r *http.Request, namespace []string) (bool, error) {
	p, ok := auth.FromContext(r.Context())
	if !ok {
		return !a.s.on, nil
	}
	if p.IsRoot() {
		return true, nil
	}
	grants, err := a.s.grants(r.Context(), p)
	if err != nil {
		return false, err
	}
	return auth.Visible(p, grants, namespace), nil
}

// lead keeps a signing key active while this node leads: it adds the first
// one, and rotates when the active key is older than --auth-key-rotation
// (retired keys keep verifying the tokens they signed until those expire).
func (s *security) lead(ctx context.Context) {
	check := func() {
		var keys []fsm.SigningKey
		if err := s.store.Read(ctx, func(rd *fsm.Reader) error { keys = rd.SigningKeys(); return nil }); err != nil {
			s.log.Warn("cannot read signing keys", "error", err)
			return
		}
		now := time.Now()
		var newest int64 = -1
		for _, k := range keys {
			if k.RetiredMs == 0 && k.CreatedMs > newest {
				newest = k.CreatedMs
			}
		}
		if newest >= 0 && (s.rotateAge <= 0 || now.Sub(time.UnixMilli(newest)) < s.rotateAge) {
			return
		}
		cmd, err := admin.RotateCommand(now, s.keyWindow())
		if err != nil {
			s.log.Error("cannot generate a signing key", "error", err)
			return
		}
		res, err := s.store.Propose(ctx, cmd)
		if err == nil {
			err = res.Err()
		}
		if err != nil {
			s.log.Warn("signing key rotation failed; retrying", "error", err)
			return
		}
		s.log.Info("signing key rotated", "key_id", cmd.Key.ID, "first", newest < 0)
	}
	check()
	// Checked a few times per rotation period, at most once a minute and
	// at least once a second, so a short --auth-key-rotation is kept.
	every := time.Minute
	if s.rotateAge > 0 {
		every = min(every, max(s.rotateAge/4, time.Second))
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			check()
		}
	}
}

// --- adapters from the replicated state to the auth library ---

// staleAuthKey marks the context of a request that asked for a stale read.
type staleAuthKey struct{}

// withAuthConsistency marks r when it is a GET or HEAD asking for a stale
// read (catalog.ReadConsistencyHeader) whose data are read from the local
// replica too: the records it is checked against are then read as its data
// is, so that a follower without a leader still answers it. Only the
// catalog's routes (/v1/) and the status page read their data so; the
// operator API reads linearizably whatever the request asks (a backup
// holds the token signing keys), and storage credentials are a live
// secret rather than stale data: a request to either is checked
// linearizably, so that a revoked grant or a deleted token is refused as
// soon as the change is acknowledged, however far behind this node is.
func withAuthConsistency(r *http.Request) *http.Request {
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.Header.Get(catalog.ReadConsistencyHeader) == "stale" &&
		readsReplica(r) && !asksForCredentials(r) {
		return r.WithContext(context.WithValue(r.Context(), staleAuthKey{}, true))
	}
	return r
}

// readsReplica reports whether r is to a route that serves a stale read
// from the local replica: the catalog's and the status page's.
func readsReplica(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/v1/") || ui.IsPath(r.URL.Path)
}

// asksForCredentials reports whether r may be answered with storage
// credentials: a read of one table that asks for delegated access (any
// mechanism: the catalog decides which it offers), or the route that only
// vends them. Clients that send the delegation header on every request
// keep stale listings (and their checks) on the replica.
func asksForCredentials(r *http.Request) bool {
	return strings.HasSuffix(r.URL.Path, "/credentials") ||
		len(r.Header.Values(catalog.AccessDelegationHeader)) > 0 && strings.Contains(r.URL.Path, "/tables/")
}

// authRead reads the records a request is authenticated and authorized
// against (grants, roles, static tokens) linearizably, so that a grant
// revoked or a token deleted through any node is refused by every node
// once the change is acknowledged (a node's own replica may not have
// applied it yet); from the local replica for a request that asked for a
// stale read (withAuthConsistency).
func authRead(ctx context.Context, store replica, fn func(*fsm.Reader) error) error {
	if stale, _ := ctx.Value(staleAuthKey{}).(bool); stale {
		ui.MarkStale(ctx, errStaleAsked)
		return store.StaleRead(fn)
	}
	err := store.Read(ctx, fn)
	if err == nil || ctx.Err() != nil {
		return err
	}
	if page, _ := ctx.Value(pageAuthKey{}).(bool); !page {
		return err
	}
	if serr := store.StaleRead(fn); serr != nil {
		return errors.Join(err, serr)
	}
	ui.MarkStale(ctx, err)
	return nil
}

// errStaleAsked is why a request that asked for a stale read was checked
// against this node's replica.
var errStaleAsked = errors.New("the request asked for " + catalog.ReadConsistencyHeader + ": stale")

// pageAuthKey marks the context of a status page read (GET or HEAD) and
// of a sign-in.
type pageAuthKey struct{}

// withPageAuthReads makes authRead read as the status page reads its
// data: linearizably, else, when that fails (no leader), from this node's
// replica, which the page then says it shows; and once a check has read
// the replica, the page's data comes from there too (ui.MarkStale). A
// page changes nothing; its actions (POST) keep linearizable checks.
func withPageAuthReads(ctx context.Context) context.Context {
	return context.WithValue(ui.TrackStaleReads(ctx), pageAuthKey{}, true)
}

type keySource struct{ store replica }

func (k keySource) SigningKeys(ctx context.Context) ([]auth.SigningKey, error) {
	var keys []fsm.SigningKey
	err := k.store.Read(ctx, func(rd *fsm.Reader) error { keys = rd.SigningKeys(); return nil })
	if err != nil {
		// No leader: verify with what this replica has.
		if serr := k.store.StaleRead(func(rd *fsm.Reader) error { keys = rd.SigningKeys(); return nil }); serr != nil {
			return nil, errors.Join(err, serr)
		}
		ui.MarkStale(ctx, err)
	}
	out := make([]auth.SigningKey, 0, len(keys))
	for _, sk := range keys {
		if sk.Algorithm != "EdDSA" || len(sk.PublicKey) != ed25519.PublicKeySize {
			continue
		}
		k := auth.SigningKey{ID: sk.ID, Public: ed25519.PublicKey(sk.PublicKey), CreatedAt: time.UnixMilli(sk.CreatedMs)}
		if len(sk.PrivateKey) == ed25519.PrivateKeySize {
			k.Private = ed25519.PrivateKey(sk.PrivateKey)
		}
		if sk.RetiredMs != 0 {
			k.RetiredAt = time.UnixMilli(sk.RetiredMs)
		}
		out = append(out, k)
	}
	return out, nil
}

type tokenSource struct{ store replica }

func (t tokenSource) StaticToken(ctx context.Context, id string) (auth.TokenRecord, bool, error) {
	var (
		rec auth.TokenRecord
		ok  bool
	)
	err := authRead(ctx, t.store, func(rd *fsm.Reader) error {
		var tk fsm.AuthToken
		if tk, ok = rd.AuthToken(id); ok {
			rec = auth.TokenRecord{Hash: tk.Hash, Principal: tk.Principal, Roles: rd.PrincipalRoles(tk.Principal)}
			if tk.ExpiresMs != 0 {
				rec.ExpiresAt = time.UnixMilli(tk.ExpiresMs)
			}
		}
		return nil
	})
	return rec, ok, err
}

// clientSource reads clients linearizably: a client deleted on any node
// gets no token from any node afterwards. Issuing a token is rare next to
// the secret hash it verifies, so the read costs nothing that matters.
type clientSource struct{ store replica }

func (c clientSource) Client(ctx context.Context, id string) (auth.ClientRecord, bool, error) {
	var (
		rec auth.ClientRecord
		ok  bool
	)
	err := c.store.Read(ctx, func(rd *fsm.Reader) error {
		var cl fsm.AuthClient
		if cl, ok = rd.AuthClient(id); ok {
			roles := append(append([]string(nil), cl.Roles...), rd.PrincipalRoles(cl.Principal)...)
			rec = auth.ClientRecord{SecretHash: cl.SecretHash, Principal: cl.Principal, Roles: roles, CreatedMs: cl.CreatedMs}
		}
		return nil
	})
	return rec, ok, err
}

// idempotencyKeyOf is the request's Idempotency-Key, for the audit line.
func idempotencyKeyOf(r *http.Request) string {
	k := r.Header.Get(idempotency.Header)
	if len(k) > 128 {
		return k[:128]
	}
	return k
}

// rebound reports whether r is a browser's request (it carries Origin or
// Sec-Fetch-Site, which other clients do not send) for a host name that is
// not how this node is reached: not an IP address, not localhost, not the
// host of --http-addr or --http-advertise. A page of another site whose
// name the attacker makes resolve to this node (DNS rebinding) is
// same-origin to the browser, so crossOrigin passes it; with auth off
// nothing else would stop it. API clients, which send neither header,
// reach the node under any name.
func (s *security) rebound(r *http.Request) bool {
	if r.Header.Get("Origin") == "" && r.Header.Get("Sec-Fetch-Site") == "" {
		return false
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if net.ParseIP(host) != nil || strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return false
	}
	for _, n := range s.names {
		if strings.EqualFold(strings.Trim(n, "[]"), host) {
			return false
		}
	}
	return true
}

// crossOrigin reports whether r comes from a page of another origin than
// the node's. A browser says so in Sec-Fetch-Site (same-origin, or none
// for what the user typed, is the node's own; same-site, another port of
// the host, and cross-site are not). A browser too old to send it is
// judged by Origin (sent with every POST, PUT and DELETE): another host
// or port than the one the request was sent to (its Host, or a proxy's
// X-Forwarded-Host or Forwarded host, headers a page cannot set without a
// preflight) is another origin, and so is "null". Other clients send
// neither header.
func crossOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return false
	case "same-site", "cross-site":
		return true
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return true
	}
	origin := hostPort(u.Host, u.Scheme)
	hosts := []string{r.Host}
	for _, v := range r.Header.Values("X-Forwarded-Host") {
		hosts = append(hosts, strings.Split(v, ",")...)
	}
	for _, v := range r.Header.Values("Forwarded") {
		for part := range strings.SplitSeq(v, ";") {
			for elem := range strings.SplitSeq(part, ",") {
				if k, h, ok := strings.Cut(strings.TrimSpace(elem), "="); ok && strings.EqualFold(k, "host") {
					hosts = append(hosts, strings.Trim(h, `"`))
				}
			}
		}
	}
	for _, h := range hosts {
		if strings.EqualFold(hostPort(strings.TrimSpace(h), u.Scheme), origin) {
			return false
		}
	}
	return true
}

// hostPort is host with the scheme's default port left out, so that
// "example.com:443" and "example.com" compare equal for https.
func hostPort(host, scheme string) string {
	switch {
	case scheme == "https" && strings.HasSuffix(host, ":443"):
		return strings.TrimSuffix(host, ":443")
	case scheme == "http" && strings.HasSuffix(host, ":80"):
		return strings.TrimSuffix(host, ":80")
	}
	return host
}
