package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Grant types and token types of the token endpoint.
const (
	GrantClientCredentials = "client_credentials"
	GrantTokenExchange     = "urn:ietf:params:oauth:grant-type:token-exchange"
	TokenTypeAccessToken   = "urn:ietf:params:oauth:token-type:access_token"
	TokenTypeJWT           = "urn:ietf:params:oauth:token-type:jwt"
)

// Defaults of TokenHandlerConfig.
const (
	DefaultMaxHashWait = 5 * time.Second
	maxTokenRequestLen = 64 << 10
)

// ClientRecord is an OAuth client as stored in the replicated state.
type ClientRecord struct {
	// SecretHash is HashSecret of the client secret.
	SecretHash string
	// Principal the client authenticates as; empty: the client id.
	Principal string
	// Roles of the principal.
	Roles []string
	// CreatedMs is when the client was created (Unix ms); 0 if unknown.
	CreatedMs int64
}

// ClientSource is the replicated store of OAuth clients.
type ClientSource interface {
	// Client returns the client with the given id. ok is false if there is
	// none. An error means the store could not be read; the endpoint then
	// answers 503.
	Client(ctx context.Context, id string) (rec ClientRecord, ok bool, err error)
}

// TokenHandlerConfig configures a TokenHandler.
type TokenHandlerConfig struct {
	// Clients looks up OAuth clients. Required.
	Clients ClientSource
	// Issuer signs the tokens. Required.
	Issuer *Issuer
	// Verifier checks the subject token of a token exchange. Nil: token
	// exchange is answered unsupported_grant_type.
	Verifier *Verifier
	// MaxConcurrentHashes bounds concurrent secret verifications (each
	// takes ~40ms of one core and 12 MiB). Default 2×GOMAXPROCS.
	MaxConcurrentHashes int
	// MaxHashWait is how long a request waits for a verification slot
	// before it is answered 503. Default 5s.
	MaxHashWait time.Duration
	Logger      *slog.Logger
	Registerer  prometheus.Registerer
}

// TokenHandler serves the Iceberg REST "POST /v1/oauth/tokens" endpoint:
// the client_credentials grant (client id and secret in the form or in
// HTTP Basic authentication) and a token exchange that refreshes a valid
// floe token. It never logs secrets or tokens.
type TokenHandler struct {
	clients  ClientSource
	issuer   *Issuer
	verifier *Verifier
	sem      chan struct{}
	maxWait  time.Duration
	log      *slog.Logger
	metrics  *tokenMetrics
	// dummyHash is verified against when the client is unknown, so that
	// an unknown client costs as much time as a wrong secret.
	dummyHash func() (string, error)
	// open: authentication is off; see NewOpenTokenHandler.
	open bool
}

// OpenToken is the access token the token endpoint hands out when
// authentication is off (NewOpenTokenHandler). It authorizes nothing: with
// authentication off no request needs a token.
const OpenToken = "floe-auth-off"

// openTokenTTL is the lifetime the open endpoint announces. Clients refresh
// before it ends, which the open endpoint also answers.
const openTokenTTL = time.Hour

// NewOpenTokenHandler returns the token endpoint of a node whose
// authentication is off. Iceberg clients configured with a credential (or
// a token to refresh) ask for a token before their first request and fail
// on a 404, so the endpoint answers as the Iceberg reference server does:
// every well-formed client_credentials or token-exchange request gets
// OpenToken, whatever its credentials, which are not looked at (a
// client_credentials request without any is answered too). A request that
// is not a POSTed form, names no grant or another one, or is a token
// exchange without a subject token of a known type is refused as by the
// real endpoint, in the OAuth error model. It never logs secrets or tokens.
func NewOpenTokenHandler(logger *slog.Logger, reg prometheus.Registerer) *TokenHandler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &TokenHandler{open: true, log: logger, metrics: newTokenMetrics(reg)}
}

// openToken is the open endpoint's answer; scope is echoed as by issue.
func openToken(scope string) *tokenResponse {
	return &tokenResponse{
		AccessToken:     OpenToken,
		TokenType:       "bearer",
		ExpiresIn:       int64(openTokenTTL / time.Second),
		IssuedTokenType: TokenTypeAccessToken,
		Scope:           scope,
	}
}

// NewTokenHandler returns the handler. It fails if Clients or Issuer is
// missing or a limit is negative.
func NewTokenHandler(cfg TokenHandlerConfig) (*TokenHandler, error) {
	if cfg.Clients == nil || cfg.Issuer == nil {
		return nil, errors.New("auth: TokenHandlerConfig.Clients and Issuer are required")
	}
	if cfg.MaxConcurrentHashes < 0 || cfg.MaxHashWait < 0 {
		return nil, errors.New("auth: TokenHandlerConfig limits must not be negative")
	}
	if cfg.MaxConcurrentHashes == 0 {
		cfg.MaxConcurrentHashes = 2 * runtime.GOMAXPROCS(0)
	}
	if cfg.MaxHashWait == 0 {
		cfg.MaxHashWait = DefaultMaxHashWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &TokenHandler{
		clients:   cfg.Clients,
		issuer:    cfg.Issuer,
		verifier:  cfg.Verifier,
		sem:       make(chan struct{}, cfg.MaxConcurrentHashes),
		maxWait:   cfg.MaxHashWait,
		log:       cfg.Logger,
		metrics:   newTokenMetrics(cfg.Registerer),
		dummyHash: sync.OnceValues(func() (string, error) { return HashSecret(NewSecret()) }),
	}, nil
}

// tokenFailure is a refused token request.
type tokenFailure struct {
	status      int
	code        string // OAuth error code
	description string
	reason      string // metric label; the code if empty
	basic       bool   // the client used Basic authentication
	// expiredSubject: a token exchange refused only because its subject
	// token expired.
	expiredSubject bool
}

// ServeHTTP answers a token request with the spec's OAuthTokenResponse or
// OAuthError: 400 for a malformed request or unsupported grant, 401
// invalid_client for an unknown client or wrong secret (with
// WWW-Authenticate: Basic when Basic was used), 400 invalid_grant for a
// subject token that does not verify, 503 when the stores cannot be read or
// too many verifications are waiting, 405 for a method other than POST.
func (h *TokenHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	grant, resp, fail := h.serve(r)
	if fail != nil {
		reason := fail.reason
		if reason == "" {
			reason = fail.code
		}
		h.metrics.failed.WithLabelValues(reason).Inc()
		if fail.status == http.StatusUnauthorized && fail.basic {
			w.Header().Set("WWW-Authenticate", `Basic realm="floe"`)
		}
		if fail.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", http.MethodPost)
		}
		if fail.status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		writeOAuthJSON(w, fail.status, oauthError{Error: fail.code, Description: fail.description})
		return
	}
	h.metrics.issued.WithLabelValues(grant).Inc()
	writeOAuthJSON(w, http.StatusOK, resp)
}

func badRequest(code, description string) *tokenFailure {
	return &tokenFailure{status: http.StatusBadRequest, code: code, description: description}
}

func unavailable(reason, description string) *tokenFailure {
	// The spec's OAuthError has no code for a server-side failure;
	// invalid_request is the closest that clients parse, and the status
	// tells them to retry.
	return &tokenFailure{status: http.StatusServiceUnavailable, code: oauthInvalidRequest, description: description, reason: reason}
}

// maxScopeBytes bounds the scope a token request may ask for; it is signed
// into the token, which a request may carry only up to maxTokenLen bytes.
const maxScopeBytes = 1024

// checkScope refuses a scope that holds anything but RFC 6749's scope
// characters (printable ASCII but '"' and '\') and spaces (how many
// between tokens is not judged: leniency costs nothing here), or is over
// maxScopeBytes: it is signed into the token and echoed in the answer.
func checkScope(scope string) *tokenFailure {
	if len(scope) > maxScopeBytes {
		return badRequest(oauthInvalidScope, fmt.Sprintf("scope is %d bytes, at most %d", len(scope), maxScopeBytes))
	}
	for i := 0; i < len(scope); i++ {
		c := scope[i]
		if c == ' ' || (c >= 0x21 && c <= 0x7e && c != '"' && c != '\\') {
			continue
		}
		return badRequest(oauthInvalidScope, "scope holds a character RFC 6749 does not allow")
	}
	return nil
}

// serve handles one request; grant is the metric label of a success.
func (h *TokenHandler) serve(r *http.Request) (grant string, resp *tokenResponse, fail *tokenFailure) {
	if r.Method != http.MethodPost {
		return "", nil, &tokenFailure{status: http.StatusMethodNotAllowed, code: oauthInvalidRequest, description: "use POST"}
	}
	form, fail := readForm(r)
	if fail != nil {
		return "", nil, fail
	}
	if fail := checkScope(form.Get("scope")); fail != nil {
		return "", nil, fail
	}
	switch form.Get("grant_type") {
	case "":
		return "", nil, badRequest(oauthInvalidRequest, "grant_type is required")
	case GrantClientCredentials:
		if h.open {
			return "client_credentials", openToken(form.Get("scope")), nil
		}
		resp, fail = h.clientCredentials(r, form)
		return "client_credentials", resp, fail
	case GrantTokenExchange:
		if h.open {
			if fail := checkExchange(form); fail != nil {
				return "", nil, fail
			}
			return "token_exchange", openToken(form.Get("scope")), nil
		}
		if h.verifier == nil {
			return "", nil, badRequest(oauthUnsupportedGrantType, "token exchange is not enabled")
		}
		resp, fail = h.tokenExchange(r.Context(), form)
		if fail != nil && fail.expiredSubject && hasClientCredentials(r, form) {
			// Java's client refreshes a token that has already expired
			// with the expired token as subject and its client's
			// credentials (HTTP Basic): "refresh using the credential".
			// Authenticated, that is a client_credentials grant; refused,
			// the session would keep its dead token until restarted.
			resp, fail = h.clientCredentials(r, form)
			return "client_credentials", resp, fail
		}
		return "token_exchange", resp, fail
	default:
		return "", nil, badRequest(oauthUnsupportedGrantType, "supported grant types: client_credentials, "+GrantTokenExchange)
	}
}

// readForm reads an application/x-www-form-urlencoded body of at most
// 64 KiB. Query string parameters are ignored: credentials do not belong in
// URLs. A parameter sent twice is refused (RFC 6749 3.2).
func readForm(r *http.Request) (url.Values, *tokenFailure) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/x-www-form-urlencoded" {
		return nil, badRequest(oauthInvalidRequest, "Content-Type must be application/x-www-form-urlencoded")
	}
	// A coded body (gzip, say) read as a form would be refused for a
	// parameter it does hold, or taken as one it does not.
	if ce := strings.TrimSpace(r.Header.Get("Content-Encoding")); ce != "" && !strings.EqualFold(ce, "identity") {
		return nil, badRequest(oauthInvalidRequest, "Content-Encoding must be identity: send the form as it is")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTokenRequestLen+1))
	if err != nil {
		return nil, badRequest(oauthInvalidRequest, "could not read the request body")
	}
	if len(body) > maxTokenRequestLen {
		return nil, badRequest(oauthInvalidRequest, "request body too large")
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, badRequest(oauthInvalidRequest, "malformed form body")
	}
	for name, values := range form {
		if len(values) > 1 {
			return nil, badRequest(oauthInvalidRequest, fmt.Sprintf("parameter %q sent more than once", name))
		}
	}
	return form, nil
}

// clientCredentials authenticates the client and issues a token for its
// principal.
func (h *TokenHandler) clientCredentials(r *http.Request, form url.Values) (*tokenResponse, *tokenFailure) {
	id, secret, basic, fail := clientCredentialsOf(r, form)
	if fail != nil {
		return nil, fail
	}
	ctx := r.Context()
	rec, ok, err := h.clients.Client(ctx, id)
	if err != nil {
		// Not the id: one that names no client may be a secret sent in the
		// wrong field, and whether this one does is unknown here.
		h.log.Error("token request: read client", "err", err)
		return nil, unavailable("unavailable", "client store unavailable, retry later")
	}
	hash := rec.SecretHash
	if !ok {
		if hash, err = h.dummyHash(); err != nil {
			return nil, &tokenFailure{status: http.StatusInternalServerError, code: oauthInvalidRequest, description: "internal error", reason: "internal"}
		}
	}
	if !h.acquire(ctx) {
		return nil, unavailable("busy", "too many concurrent token requests, retry later")
	}
	match, err := VerifySecret(hash, secret)
	h.release()
	if err != nil {
		h.log.Error("token request: stored secret hash of client is unusable", "client_id", id, "err", err)
	}
	if !ok || !match || err != nil {
		logged := "(unknown)" // may be a secret sent in the wrong field
		if ok {
			logged = id
		}
		h.log.Debug("token request: client authentication failed", "client_id", logged, "known", ok)
		return nil, &tokenFailure{status: http.StatusUnauthorized, code: oauthInvalidClient, description: "unknown client or wrong secret", basic: basic}
	}
	principal := rec.Principal
	if principal == "" {
		principal = id
	}
	scope := form.Get("scope")
	return h.issue(ctx, IssueRequest{Principal: principal, Roles: rec.Roles, ClientID: id,
		ClientGeneration: clientGeneration(rec.SecretHash), Scope: scope})
}

// sameClient reports whether a token's client is rec as it is now, not
// an earlier client under the same id. A token carries its client's
// generation; one without (issued by an earlier release, or by a node on
// one during a rolling upgrade) passes when it was issued no earlier than
// the second the client was created, so that sessions of clients created
// before the upgrade go on refreshing.
func sameClient(claims *floeClaims, rec ClientRecord) bool {
	if claims.ClientGeneration != "" {
		return subtle.ConstantTimeCompare([]byte(claims.ClientGeneration), []byte(clientGeneration(rec.SecretHash))) == 1
	}
	return claims.IssuedAt != nil && claims.IssuedAt.Unix() >= rec.CreatedMs/1000
}

// clientGeneration names one creation of a client: a digest of its secret
// hash, whose salt is drawn anew each time a client is created (a client's
// secret never changes otherwise). A client deleted and created again
// under the same id has another generation, so the tokens of the first
// cannot be exchanged for tokens of the second, whose principal and roles
// may differ, nor go on being refreshed after the secret was replaced. The
// digest tells nothing of the secret: it is of a slow hash, itself salted.
func clientGeneration(secretHash string) string {
	sum := sha256.Sum256([]byte("floe client generation\x00" + secretHash))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// clientCredentialsOf returns the client id and secret from HTTP Basic
// authentication (RFC 6749 2.3.1, form-encoded before base64) or from the
// client_id and client_secret form parameters. Both may be sent if they
// agree. basic reports whether Basic was used.
func clientCredentialsOf(r *http.Request, form url.Values) (id, secret string, basic bool, fail *tokenFailure) {
	formID, formSecret := form.Get("client_id"), form.Get("client_secret")
	user, pass, basic := r.BasicAuth()
	if basic {
		id, secret = formUnescape(user), formUnescape(pass)
		if (formID != "" && formID != id) || (formSecret != "" && formSecret != secret) {
			return "", "", basic, badRequest(oauthInvalidRequest, "client credentials in both the Authorization header and the body, and they differ")
		}
	} else {
		id, secret = formID, formSecret
	}
	if id == "" || secret == "" {
		return "", "", basic, badRequest(oauthInvalidRequest, "client_id and client_secret are required (in the body or with HTTP Basic authentication)")
	}
	return id, secret, basic, nil
}

// hasClientCredentials reports whether the request carries a client's
// credentials, by HTTP Basic or in the form (client_id and client_secret).
func hasClientCredentials(r *http.Request, form url.Values) bool {
	if _, _, basic := r.BasicAuth(); basic {
		return true
	}
	return form.Get("client_id") != "" && form.Get("client_secret") != ""
}

// formUnescape undoes the form encoding RFC 6749 asks for in Basic
// credentials; clients that skip it send values that unescape to
// themselves, or fail to unescape and are used as sent.
func formUnescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// acquire takes a verification slot, waiting at most maxWait and while the
// request lives. It reports false if it got none.
func (h *TokenHandler) acquire(ctx context.Context) bool {
	select {
	case h.sem <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(h.maxWait)
	defer t.Stop()
	select {
	case h.sem <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

func (h *TokenHandler) release() { <-h.sem }

// tokenExchange issues a fresh token for the principal of a valid floe
// subject token. If the token names an OAuth client, the client is looked
// up again: its current principal and roles are used, and a deleted client
// gets no new token.
func (h *TokenHandler) tokenExchange(ctx context.Context, form url.Values) (*tokenResponse, *tokenFailure) {
	if fail := checkExchange(form); fail != nil {
		return nil, fail
	}
	subject := form.Get("subject_token")
	claims, err := h.verifier.verify(ctx, subject)
	if errors.Is(err, ErrUnavailable) {
		h.log.Error("token exchange: verify subject token", "err", redact(err.Error(), subject))
		return nil, unavailable("unavailable", "key ring unavailable, retry later")
	}
	if err != nil {
		h.log.Debug("token exchange: subject token refused", "err", redact(err.Error(), subject))
		fail := badRequest(oauthInvalidGrant, "subject_token is not a valid floe access token")
		fail.expiredSubject = errors.Is(err, ErrExpiredToken)
		return nil, fail
	}
	req := IssueRequest{Principal: claims.Subject, Roles: claims.Roles, ClientID: claims.ClientID, Scope: claims.Scope}
	if s := form.Get("scope"); s != "" {
		req.Scope = s
	}
	if claims.ClientID != "" {
		rec, ok, err := h.clients.Client(ctx, claims.ClientID)
		if err != nil {
			h.log.Error("token exchange: read client", "client_id", claims.ClientID, "err", err)
			return nil, unavailable("unavailable", "client store unavailable, retry later")
		}
		if !ok || !sameClient(claims, rec) {
			// Deleted, or deleted and created again: the client that got
			// the token is gone either way.
			return nil, badRequest(oauthInvalidGrant, "the client of subject_token no longer exists")
		}
		req.Principal, req.Roles = rec.Principal, rec.Roles
		req.ClientGeneration = clientGeneration(rec.SecretHash)
		if req.Principal == "" {
			req.Principal = claims.ClientID
		}
	}
	return h.issue(ctx, req)
}

// checkExchange refuses a token-exchange request without a subject token or
// with token types the endpoint does not exchange.
func checkExchange(form url.Values) *tokenFailure {
	if form.Get("subject_token") == "" {
		return badRequest(oauthInvalidRequest, "subject_token is required")
	}
	switch form.Get("subject_token_type") {
	case TokenTypeAccessToken, TokenTypeJWT:
	default:
		return badRequest(oauthInvalidRequest, "subject_token_type must be "+TokenTypeAccessToken+" or "+TokenTypeJWT)
	}
	switch form.Get("requested_token_type") {
	case "", TokenTypeAccessToken:
	default:
		return badRequest(oauthInvalidRequest, "requested_token_type must be "+TokenTypeAccessToken)
	}
	return nil
}

// issue signs a token and builds the success response.
func (h *TokenHandler) issue(ctx context.Context, req IssueRequest) (*tokenResponse, *tokenFailure) {
	token, ttl, err := h.issuer.Issue(ctx, req)
	if err != nil {
		h.log.Error("token request: issue token", "principal", req.Principal, "err", err)
		return nil, unavailable("unavailable", "cannot issue tokens right now, retry later")
	}
	if len(token) > maxTokenLen {
		// Every request would refuse it (see bearer.go): say so now.
		h.log.Warn("token request: token too large to be accepted", "principal", req.Principal, "client_id", req.ClientID, "bytes", len(token), "roles", len(req.Roles))
		return nil, badRequest(oauthInvalidRequest, fmt.Sprintf("the token would be %d bytes, over the %d a request may carry: the client holds too many roles", len(token), maxTokenLen))
	}
	h.log.Debug("token issued", "principal", req.Principal, "client_id", req.ClientID, "expires_in", ttl)
	return &tokenResponse{
		AccessToken:     token,
		TokenType:       "bearer",
		ExpiresIn:       int64(ttl / time.Second),
		IssuedTokenType: TokenTypeAccessToken,
		Scope:           req.Scope,
	}, nil
}
