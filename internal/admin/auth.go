package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/idempotency"
	"github.com/floe-catalog/floe/internal/auth"
	"github.com/floe-catalog/floe/internal/raftnode"
)

// AuthConfig configures the auth operator API.
type AuthConfig struct {
	// KeyWindow is how long a retired signing key must still verify (the
	// longest token lifetime plus clock leeway); keys retired longer ago
	// are pruned at the next rotation.
	KeyWindow time.Duration
	// DefaultPrefix is the default warehouse's prefix, and Warehouses the
	// named warehouses this node serves: a grant naming another warehouse
	// would cover nothing, and is refused (a revoke is not: it removes
	// what an earlier grant named).
	DefaultPrefix string
	Warehouses    []string
}

// Auth returns the operator API for authentication and authorization
// state, stamping with the server's clock:
//
//	GET    /management/v1/auth/clients                 OAuth2 clients (no secrets)
//	POST   /management/v1/auth/clients                 create: {"principal", "id"?, "description"?, "roles"?};
//	                                                   answers the secret once
//	DELETE /management/v1/auth/clients/{id}
//	GET    /management/v1/auth/tokens                  static tokens (no secrets)
//	POST   /management/v1/auth/tokens                  create: {"principal", "description"?, "expires-in-seconds"?};
//	                                                   answers the token once
//	DELETE /management/v1/auth/tokens/{id}
//	GET    /management/v1/auth/keys                    signing keys (public half, dates)
//	POST   /management/v1/auth/keys/rotate             a new signing key; the others retire
//	GET    /management/v1/auth/grants                  grants; ?grantee= filters
//	POST   /management/v1/auth/grants                  {"grantee", "namespace"?, "privilege"}
//	POST   /management/v1/auth/grants/revoke           the same body
//	GET    /management/v1/auth/principals              principals and their roles
//	PUT    /management/v1/auth/principals/{name}/roles {"roles": [...]}
//
// Mutations honour Idempotency-Key. A replayed creation answers without the
// secret: it is shown once, and only its hash is stored.
func (s *Server) Auth(store PurgeStore, cfg AuthConfig) http.Handler {
	a := &authAPI{store: store, keys: s.keysOver(store), now: s.cfg.Now, srv: s, cfg: cfg}
	r := mux.NewRouter()
	r.Handle("/management/v1/auth/clients", s.wrap(a.listClients)).Methods("GET", "HEAD")
	r.Handle("/management/v1/auth/clients", s.wrap(a.createClient)).Methods("POST")
	r.Handle("/management/v1/auth/clients/{id}", s.wrap(a.deleteClient)).Methods("DELETE")
	r.Handle("/management/v1/auth/tokens", s.wrap(a.listTokens)).Methods("GET", "HEAD")
	r.Handle("/management/v1/auth/tokens", s.wrap(a.createToken)).Methods("POST")
	r.Handle("/management/v1/auth/tokens/{id}", s.wrap(a.deleteToken)).Methods("DELETE")
	r.Handle("/management/v1/auth/keys", s.wrap(a.listKeys)).Methods("GET", "HEAD")
	r.Handle("/management/v1/auth/keys/rotate", s.wrap(a.rotate)).Methods("POST")
	r.Handle("/management/v1/auth/grants", s.wrap(a.listGrants)).Methods("GET", "HEAD")
	r.Handle("/management/v1/auth/grants", s.wrap(a.grant(false))).Methods("POST")
	r.Handle("/management/v1/auth/grants/revoke", s.wrap(a.grant(true))).Methods("POST")
	r.Handle("/management/v1/auth/principals", s.wrap(a.listPrincipals)).Methods("GET", "HEAD")
	r.Handle("/management/v1/auth/principals/{name}/roles", s.wrap(a.setRoles)).Methods("PUT")
	r.NotFoundHandler = s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("%w: no such route %s %s", ErrNotFound, r.Method, r.URL.Path)
	})
	r.MethodNotAllowedHandler = s.methodNotAllowed(r)
	return r
}

type authAPI struct {
	store PurgeStore
	keys  *idempotency.Keys
	now   func() time.Time
	srv   *Server
	cfg   AuthConfig
}

// Privileges a grant may give.
var privileges = []string{"read", "write", "drop", "purge", "admin"}

// nameRE is what principal, role and client names may be.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,255}$`)

// refuseRoot refuses to create anything (a client, a token, a grant, a
// role) for the root principal: only the root token authenticates as
// root, and such a thing would read as root's in the audit log while
// holding none of its power. Revoking and clearing stay allowed, for what
// an earlier release let through.
func refuseRoot(principal string) error {
	switch principal {
	case auth.RootPrincipal:
		return fmt.Errorf("%w: principal %q is reserved for the root token", ErrBadRequest, principal)
	case anonymous:
		// Logs and audit lines name a request without a principal so.
		return fmt.Errorf("%w: principal %q is reserved for requests without one", ErrBadRequest, principal)
	}
	return nil
}

func checkName(what, v string) error {
	if !nameRE.MatchString(v) {
		shown := v
		if len(shown) > 64 {
			shown = shown[:64] + "…"
		}
		return fmt.Errorf("%w: %s %q must be 1 to 255 letters, digits or . _ @ -", ErrBadRequest, what, shown)
	}
	if v == "." || v == ".." {
		// A path segment of the operator API that could never be
		// addressed (.../clients/..).
		return fmt.Errorf("%w: %s may not be %q", ErrBadRequest, what, v)
	}
	return nil
}

// readBody reads a JSON body into v (400 when it does not parse) and
// returns the raw bytes for the Idempotency-Key binding.
func readBody(r *http.Request, v any) ([]byte, error) {
	body, err := readAllBody(r)
	if err != nil {
		return nil, err
	}
	if err := decodeStrict(body, v); err != nil {
		return nil, err
	}
	return body, nil
}

// run proposes cmd, through the Idempotency-Key flow when the request has
// a key, and calls answer with the outcome (replayed: the stored one).
// Domain failures map to 404 (ErrNotFound), 409 (ErrAlreadyExists) and 400
// (ErrInvalidCommand).
func (a *authAPI) run(w http.ResponseWriter, r *http.Request, op string, route []string, body []byte, cmd fsm.Command, answer func(replayed bool) error) error {
	check := func(res fsm.Result, replayed bool) error {
		if err := res.Err(); err != nil {
			switch {
			case errors.Is(err, fsm.ErrNotFound):
				return fmt.Errorf("%w: %v", ErrNotFound, err)
			case errors.Is(err, fsm.ErrAlreadyExists):
				return fmt.Errorf("%w: %v", ErrConflict, err)
			case errors.Is(err, fsm.ErrInvalidCommand):
				return fmt.Errorf("%w: %v", ErrBadRequest, err)
			}
			return err
		}
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		a.srv.log.Info("auth state changed", "op", op, "target", route, "by", a.srv.principal(r), "replayed", replayed)
		return answer(replayed)
	}
	propose := func(ctx context.Context) error {
		res, err := idempotency.Propose(ctx, a.store, cmd)
		switch {
		case errors.Is(err, idempotency.ErrReplayed), errors.Is(err, raftnode.ErrUnknownOutcome):
			return err // replayed; or a 500: the change may have taken effect
		case err != nil:
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return check(res, false)
	}
	raw := r.Header.Get(idempotency.Header)
	if raw == "" {
		return propose(r.Context())
	}
	key, _, err := idempotency.ParseKey(raw)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	replay := func(ctx context.Context, res fsm.Result) error { return check(res, true) }
	_, err = a.keys.Run(r.Context(), a.keys.Bind(key, op, route, a.srv.principal(r), body), propose, replay, nil)
	return err
}

// derivedID is the id a keyed creation names (see keyedID).
type derivedID struct {
	id  string // "" without an Idempotency-Key
	use bool   // id is free: this request creates under it
}

// keyedID derives, for a creation with an Idempotency-Key, the id of what
// it creates from the key (16 hex characters of a SHA-256 over kind and
// key), so that a replay can name, and read back, what the first request
// created. The id is used only while exists says nothing holds it: a key
// reused after its record expired gets a random id, never another's.
func (a *authAPI) keyedID(r *http.Request, kind string, exists func(rd *fsm.Reader, id string) bool) (derivedID, error) {
	raw := r.Header.Get(idempotency.Header)
	if raw == "" {
		return derivedID{}, nil
	}
	key, _, err := idempotency.ParseKey(raw)
	if err != nil {
		return derivedID{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	sum := sha256.Sum256([]byte(kind + ":" + key))
	d := derivedID{id: hex.EncodeToString(sum[:8])}
	taken := false
	if err := a.read(r.Context(), func(rd *fsm.Reader) error {
		taken = exists(rd, d.id)
		return nil
	}); err != nil {
		return derivedID{}, err
	}
	d.use = !taken
	return d, nil
}

func (a *authAPI) read(ctx context.Context, fn func(*fsm.Reader) error) error {
	if err := a.store.Read(ctx, fn); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return nil
}

// --- clients ---

type clientView struct {
	ID          string   `json:"client-id"`
	Principal   string   `json:"principal"`
	Description string   `json:"description,omitempty"`
	Roles       []string `json:"roles,omitempty"`
	CreatedMs   int64    `json:"created-ms"`
	CreatedBy   string   `json:"created-by,omitempty"`
	// Secret and Credential are present only in the answer that created
	// the client.
	Secret     string `json:"client-secret,omitempty"`
	Credential string `json:"credential,omitempty"`
}

func (a *authAPI) listClients(w http.ResponseWriter, r *http.Request) error {
	out := []clientView{}
	if err := a.read(r.Context(), func(rd *fsm.Reader) error {
		for _, c := range rd.AuthClients() {
			out = append(out, clientView{ID: c.ID, Principal: c.Principal, Description: c.Description, Roles: c.Roles, CreatedMs: c.CreatedMs, CreatedBy: c.CreatedBy})
		}
		return nil
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"clients": out})
	return nil
}

func (a *authAPI) createClient(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		ID          string   `json:"id"`
		Principal   string   `json:"principal"`
		Description string   `json:"description"`
		Roles       []string `json:"roles"`
	}
	body, err := readBody(r, &req)
	if err != nil {
		return err
	}
	given := req.ID != ""
	derived, err := a.keyedID(r, "client", func(rd *fsm.Reader, id string) bool { _, ok := rd.AuthClient(id); return ok })
	if err != nil {
		return err
	}
	switch {
	case given:
	case derived.use:
		req.ID = derived.id
	default:
		req.ID = auth.NewSecret()[:16]
	}
	if err := checkName("client id", req.ID); err != nil {
		return err
	}
	if err := checkName("principal", req.Principal); err != nil {
		return err
	}
	if err := refuseRoot(req.Principal); err != nil {
		return err
	}
	for _, role := range req.Roles {
		if err := checkName("role", role); err != nil {
			return err
		}
	}
	secret := auth.NewSecret()
	hash, err := auth.HashSecret(secret)
	if err != nil {
		return err
	}
	// A client id is never silently replaced: its owner would lose access.
	// The state machine refuses it (IfAbsent), whether or not the request
	// carries an Idempotency-Key; a retry of a keyed creation that took
	// effect is answered from its record before that.
	c := fsm.AuthClient{ID: req.ID, SecretHash: hash, Principal: req.Principal, Description: req.Description,
		Roles: req.Roles, CreatedMs: a.now().UnixMilli(), CreatedBy: a.srv.principal(r)}
	// The binding names the id the request asked for, or the one derived
	// from its key: a replay, which finds the derived id taken, binds the
	// same.
	route := req.ID
	if !given && derived.id != "" {
		route = derived.id
	}
	return a.run(w, r, "createAuthClient", []string{route}, body, fsm.PutAuthClient{Client: c, IfAbsent: true}, func(replayed bool) error {
		v := clientView{ID: c.ID, Principal: c.Principal, Description: c.Description, Roles: c.Roles, CreatedMs: c.CreatedMs, CreatedBy: c.CreatedBy}
		if !replayed {
			v.Secret, v.Credential = secret, c.ID+":"+secret
		} else {
			// The client the first request created, as it is stored.
			id := req.ID
			if !given {
				id = derived.id
			}
			if err := a.read(r.Context(), func(rd *fsm.Reader) error {
				if st, ok := rd.AuthClient(id); ok && id != "" && st.Principal == c.Principal {
					v = clientView{ID: st.ID, Principal: st.Principal, Description: st.Description, Roles: st.Roles, CreatedMs: st.CreatedMs, CreatedBy: st.CreatedBy}
				}
				return nil
			}); err != nil {
				return err
			}
		}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusCreated, v)
		return nil
	})
}

func (a *authAPI) deleteClient(w http.ResponseWriter, r *http.Request) error {
	id := mux.Vars(r)["id"]
	return a.run(w, r, "deleteAuthClient", []string{id}, nil, fsm.DeleteAuthClient{ID: id}, func(bool) error {
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// --- static tokens ---

type tokenView struct {
	ID          string `json:"id"`
	Principal   string `json:"principal"`
	Description string `json:"description,omitempty"`
	CreatedMs   int64  `json:"created-ms"`
	CreatedBy   string `json:"created-by,omitempty"`
	ExpiresMs   int64  `json:"expires-ms,omitempty"`
	// Token is present only in the answer that created it.
	Token string `json:"token,omitempty"`
}

func (a *authAPI) listTokens(w http.ResponseWriter, r *http.Request) error {
	out := []tokenView{}
	if err := a.read(r.Context(), func(rd *fsm.Reader) error {
		for _, t := range rd.AuthTokens() {
			out = append(out, tokenView{ID: t.ID, Principal: t.Principal, Description: t.Description, CreatedMs: t.CreatedMs, CreatedBy: t.CreatedBy, ExpiresMs: t.ExpiresMs})
		}
		return nil
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": out})
	return nil
}

// maxTokenLifetimeSeconds bounds a static token's expires-in-seconds: 100
// years, far inside what a time.Duration (and an expiry in milliseconds)
// can hold, so that no lifetime wraps around into the past.
const maxTokenLifetimeSeconds = 100 * 365 * 24 * 3600

func (a *authAPI) createToken(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Principal   string `json:"principal"`
		Description string `json:"description"`
		ExpiresIn   int64  `json:"expires-in-seconds"`
	}
	body, err := readBody(r, &req)
	if err != nil {
		return err
	}
	if err := checkName("principal", req.Principal); err != nil {
		return err
	}
	if err := refuseRoot(req.Principal); err != nil {
		return err
	}
	if req.ExpiresIn < 0 || req.ExpiresIn > maxTokenLifetimeSeconds {
		return fmt.Errorf("%w: expires-in-seconds must be from 0 (never) to %d (100 years), got %d", ErrBadRequest, maxTokenLifetimeSeconds, req.ExpiresIn)
	}
	id, token := auth.NewStaticToken()
	derived, err := a.keyedID(r, "static-token", func(rd *fsm.Reader, id string) bool { _, ok := rd.AuthToken(id); return ok })
	if err != nil {
		return err
	}
	if derived.use {
		tok, ok := auth.NewStaticTokenWithID(derived.id)
		if !ok {
			return fmt.Errorf("derived token id %q is malformed", derived.id)
		}
		id, token = derived.id, tok
	}
	_, secret, _ := auth.ParseStaticToken(token)
	now := a.now()
	t := fsm.AuthToken{ID: id, Hash: auth.HashToken(secret), Principal: req.Principal, Description: req.Description,
		CreatedMs: now.UnixMilli(), CreatedBy: a.srv.principal(r)}
	if req.ExpiresIn > 0 {
		t.ExpiresMs = now.Add(time.Duration(req.ExpiresIn) * time.Second).UnixMilli()
	}
	return a.run(w, r, "createAuthToken", []string{req.Principal}, body, fsm.PutAuthToken{Token: t}, func(replayed bool) error {
		v := tokenView{ID: t.ID, Principal: t.Principal, Description: t.Description, CreatedMs: t.CreatedMs, CreatedBy: t.CreatedBy, ExpiresMs: t.ExpiresMs}
		if !replayed {
			v.Token = token
		} else if derived.id != "" {
			// The token the first request created, as it is stored.
			if err := a.read(r.Context(), func(rd *fsm.Reader) error {
				// Only one for the same principal: a key reused after its
				// record expired (which clients must not do) named
				// another's.
				if st, ok := rd.AuthToken(derived.id); ok && st.Principal == t.Principal {
					v = tokenView{ID: st.ID, Principal: st.Principal, Description: st.Description, CreatedMs: st.CreatedMs, CreatedBy: st.CreatedBy, ExpiresMs: st.ExpiresMs}
				}
				return nil
			}); err != nil {
				return err
			}
		}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusCreated, v)
		return nil
	})
}

func (a *authAPI) deleteToken(w http.ResponseWriter, r *http.Request) error {
	id := mux.Vars(r)["id"]
	return a.run(w, r, "deleteAuthToken", []string{id}, nil, fsm.DeleteAuthToken{ID: id}, func(bool) error {
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// --- signing keys ---

type keyView struct {
	ID        string `json:"id"`
	Algorithm string `json:"alg"`
	PublicKey []byte `json:"public-key"`
	CreatedMs int64  `json:"created-ms"`
	RetiredMs int64  `json:"retired-ms,omitempty"`
}

func (a *authAPI) listKeys(w http.ResponseWriter, r *http.Request) error {
	out := []keyView{}
	if err := a.read(r.Context(), func(rd *fsm.Reader) error {
		for _, k := range rd.SigningKeys() {
			out = append(out, keyView{ID: k.ID, Algorithm: k.Algorithm, PublicKey: k.PublicKey, CreatedMs: k.CreatedMs, RetiredMs: k.RetiredMs})
		}
		return nil
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": out})
	return nil
}

// RotateCommand returns the command that adds a fresh signing key and
// retires the others at now, pruning keys retired more than window ago.
func RotateCommand(now time.Time, window time.Duration) (fsm.AddSigningKey, error) {
	k, err := auth.NewSigningKey(now)
	if err != nil {
		return fsm.AddSigningKey{}, err
	}
	return fsm.AddSigningKey{
		Key:          fsm.SigningKey{ID: k.ID, Algorithm: "EdDSA", PrivateKey: k.Private, PublicKey: k.Public, CreatedMs: now.UnixMilli()},
		RetireOthers: true, AtMs: now.UnixMilli(), PruneBeforeMs: now.Add(-window).UnixMilli(),
	}, nil
}

func (a *authAPI) rotate(w http.ResponseWriter, r *http.Request) error {
	if _, err := noFields(r); err != nil {
		return err
	}
	hasKey := func(rd *fsm.Reader, id string) bool {
		return slices.ContainsFunc(rd.SigningKeys(), func(k fsm.SigningKey) bool { return k.ID == id })
	}
	derived, err := a.keyedID(r, "signing-key", hasKey)
	if err != nil {
		return err
	}
	cmd, err := RotateCommand(a.now(), a.cfg.KeyWindow)
	if err != nil {
		return err
	}
	if derived.use {
		cmd.Key.ID = derived.id
	}
	return a.run(w, r, "rotateSigningKey", nil, nil, cmd, func(replayed bool) error {
		id, created := cmd.Key.ID, cmd.Key.CreatedMs
		if replayed {
			// The key the first request added, named by the id derived
			// from the key: this request's own key was never added.
			id, created = derived.id, 0
			if err := a.read(r.Context(), func(rd *fsm.Reader) error {
				for _, k := range rd.SigningKeys() {
					if k.ID == derived.id {
						created = k.CreatedMs
					}
				}
				return nil
			}); err != nil {
				return err
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "created-ms": created})
		return nil
	})
}

// --- grants and roles ---

type grantBody struct {
	Grantee string `json:"grantee"`
	// Warehouse names a named warehouse: the grant applies to its
	// Namespace, or to the whole warehouse when Namespace is empty. None:
	// the default warehouse's Namespace, or the whole catalog.
	Warehouse *string  `json:"warehouse,omitempty"`
	Namespace []string `json:"namespace,omitempty"`
	Privilege string   `json:"privilege"`
}

// maxGrantLevel and maxGrantNamespace are the catalog's bounds on a
// namespace level and a whole namespace: a grant beyond them could never
// match a namespace.
const (
	maxGrantLevel     = 255
	maxGrantNamespace = 4096
)

func (a *authAPI) listGrants(w http.ResponseWriter, r *http.Request) error {
	// A misspelt or repeated filter would otherwise be ignored, and the
	// answer would list every grant, or one grantee's as if all.
	q := r.URL.Query()
	if err := onlyParams(q, "grantee"); err != nil {
		return err
	}
	if n := len(q["grantee"]); n > 1 {
		return fmt.Errorf("%w: grantee given %d times: give it once", ErrBadRequest, n)
	}
	var grantees []string
	if g := q.Get("grantee"); g != "" {
		// The form a grant names its grantee in: any other matches
		// nothing, which would read as "no grants".
		if kind, name, ok := cut(g); !ok || (kind != "principal" && kind != "role") || checkName(kind, name) != nil {
			return fmt.Errorf("%w: grantee %q must be principal:NAME or role:NAME", ErrBadRequest, g)
		}
		grantees = append(grantees, g)
	}
	out := []grantBody{}
	if err := a.read(r.Context(), func(rd *fsm.Reader) error {
		for _, g := range rd.Grants(grantees...) {
			wh, ns := fsm.SplitWarehouse(g.Namespace)
			gb := grantBody{Grantee: g.Grantee, Namespace: ns, Privilege: g.Privilege}
			if wh != "" {
				gb.Warehouse = &wh
			}
			out = append(out, gb)
		}
		return nil
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"grants": out})
	return nil
}

func (a *authAPI) grant(revoke bool) func(w http.ResponseWriter, r *http.Request) error {
	op := "grant"
	if revoke {
		op = "revoke"
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		var req grantBody
		body, err := readBody(r, &req)
		if err != nil {
			return err
		}
		kind, name, ok := cut(req.Grantee)
		if !ok || (kind != "principal" && kind != "role") {
			return fmt.Errorf("%w: grantee %q must be principal:NAME or role:NAME", ErrBadRequest, req.Grantee)
		}
		if err := checkName(kind, name); err != nil {
			return err
		}
		if kind == "principal" && !revoke {
			if err := refuseRoot(name); err != nil {
				return err
			}
		}
		if !slices.Contains(privileges, req.Privilege) {
			return fmt.Errorf("%w: privilege %q must be one of %v", ErrBadRequest, req.Privilege, privileges)
		}
		if req.Namespace != nil && len(req.Namespace) == 0 {
			// Left out, the grant covers everything: an empty list is
			// more likely a mistake than a way to say so.
			return fmt.Errorf("%w: namespace is an empty list; leave it out for a grant on the whole catalog (or the whole warehouse)", ErrBadRequest)
		}
		total := -1 // the catalog counts the separators between levels
		for _, l := range req.Namespace {
			if l == "" {
				return fmt.Errorf("%w: namespace has an empty level", ErrBadRequest)
			}
			if hasControl(l) {
				return fmt.Errorf("%w: namespace level %q contains a control character", ErrBadRequest, l)
			}
			if len(l) > maxGrantLevel {
				return fmt.Errorf("%w: a namespace level is at most %d bytes; no namespace could match", ErrBadRequest, maxGrantLevel)
			}
			total += len(l) + 1
		}
		if total > maxGrantNamespace {
			return fmt.Errorf("%w: a namespace is at most %d bytes; no namespace could match", ErrBadRequest, maxGrantNamespace)
		}
		wh := ""
		if req.Warehouse != nil {
			wh = *req.Warehouse
			if wh == "" {
				// As for the namespace: an empty name is more likely an
				// unset variable than a way to say "everywhere".
				return fmt.Errorf("%w: warehouse is empty; leave it out for a grant on the whole catalog (or the default warehouse's namespace)", ErrBadRequest)
			}
		}
		if hasControl(wh) || strings.Contains(wh, "/") {
			return fmt.Errorf("%w: warehouse %q is not a warehouse name", ErrBadRequest, wh)
		}
		if err := a.checkGrantWarehouse(wh, revoke); err != nil {
			return err
		}
		g := fsm.Grant{Grantee: req.Grantee, Namespace: fsm.InWarehouse(wh, req.Namespace), Privilege: req.Privilege}
		if !revoke {
			g.CreatedMs, g.CreatedBy = a.now().UnixMilli(), a.srv.principal(r)
		}
		return a.run(w, r, op, []string{req.Grantee}, body, fsm.SetGrant{Grant: g, Revoke: revoke}, func(bool) error {
			w.WriteHeader(http.StatusNoContent)
			return nil
		})
	}
}

// checkGrantWarehouse refuses a grant (not a revoke) naming a warehouse
// (wh, "" for none) this node does not serve as a named one: the default
// warehouse's prefix (its namespaces are named without a warehouse), or a
// name no warehouse has. Either would be stored as a grant covering
// nothing.
func (a *authAPI) checkGrantWarehouse(wh string, revoke bool) error {
	if wh == "" || revoke {
		return nil
	}
	if wh == a.cfg.DefaultPrefix {
		return fmt.Errorf("%w: warehouse %q is the default warehouse's prefix: leave warehouse out for a grant on its namespaces", ErrBadRequest, wh)
	}
	if !slices.Contains(a.cfg.Warehouses, wh) {
		served := "none"
		if len(a.cfg.Warehouses) > 0 {
			served = strings.Join(a.cfg.Warehouses, ", ")
		}
		return fmt.Errorf("%w: no warehouse named %q is served (named warehouses: %s)", ErrBadRequest, wh, served)
	}
	return nil
}

func cut(grantee string) (kind, name string, ok bool) {
	for i := 0; i < len(grantee); i++ {
		if grantee[i] == ':' {
			return grantee[:i], grantee[i+1:], true
		}
	}
	return "", "", false
}

func (a *authAPI) listPrincipals(w http.ResponseWriter, r *http.Request) error {
	out := []fsm.PrincipalRoles{}
	if err := a.read(r.Context(), func(rd *fsm.Reader) error {
		out = append(out, rd.AllPrincipalRoles()...)
		return nil
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"principals": out})
	return nil
}

func (a *authAPI) setRoles(w http.ResponseWriter, r *http.Request) error {
	name := mux.Vars(r)["name"]
	if err := checkName("principal", name); err != nil {
		return err
	}
	var req struct {
		Roles *[]string `json:"roles"`
	}
	body, err := readBody(r, &req)
	if err != nil {
		return err
	}
	if req.Roles == nil {
		return fmt.Errorf("%w: roles is required (an empty list removes every role)", ErrBadRequest)
	}
	if len(*req.Roles) > 0 {
		if err := refuseRoot(name); err != nil {
			return err
		}
	}
	for _, role := range *req.Roles {
		if err := checkName("role", role); err != nil {
			return err
		}
	}
	return a.run(w, r, "setPrincipalRoles", []string{name}, body, fsm.SetPrincipalRoles{Principal: name, Roles: *req.Roles}, func(bool) error {
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}
