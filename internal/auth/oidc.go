package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/coreos/go-oidc/v3/oidc"
)

// Defaults of OIDCConfig.
const (
	DefaultPrincipalClaim = "sub"
	DefaultDiscoveryRetry = 10 * time.Second
	DefaultOIDCTimeout    = 10 * time.Second
)

// OIDCConfig configures an OIDCVerifier.
type OIDCConfig struct {
	// IssuerURL is the issuer; tokens' "iss" must equal it exactly.
	// Required.
	IssuerURL string
	// Audience must be one of a token's "aud" values, usually the client
	// id registered for floe at the issuer. Required.
	Audience string
	// JWKSURL, when set, is where the issuer's keys are fetched, and
	// discovery is skipped. Empty: the jwks_uri of the discovery document
	// at IssuerURL/.well-known/openid-configuration.
	JWKSURL string
	// PrincipalClaim names the claim whose string value is the principal.
	// Default "sub".
	PrincipalClaim string
	// RolesClaim names the claim holding the roles, a string (one role) or
	// an array of strings. A name absent from the claims is tried as a
	// dotted path into nested objects ("realm_access.roles"). Empty: no
	// roles.
	RolesClaim string
	// SigningAlgs are the accepted algorithms. Default: the asymmetric ones
	// the discovery document lists; RS256 if it lists none or JWKSURL is
	// set.
	SigningAlgs []string
	// Leeway is the clock skew tolerated on exp. Default 30s.
	Leeway time.Duration
	// DiscoveryRetry is how long Verify fails fast with ErrUnavailable
	// after a failed discovery before trying again. Default 10s.
	DiscoveryRetry time.Duration
	// HTTPClient fetches the discovery document and the keys. Default: a
	// client with a 10s timeout.
	HTTPClient *http.Client
	// Now is the clock. Default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// OIDCVerifier checks access tokens issued by an external OpenID Connect
// issuer. Construction does no I/O: discovery (unless JWKSURL is set)
// happens on the first Verify and is retried, at most once per
// DiscoveryRetry, until it succeeds, so a node starts while its issuer is
// unreachable. Keys are cached and fetched again when none verifies a
// token, at most once per 100ms (issuerKeys).
type OIDCVerifier struct {
	cfg OIDCConfig
	log *slog.Logger

	mu          sync.Mutex
	verifier    *oidc.IDTokenVerifier // nil until discovery succeeds
	lastAttempt time.Time
	lastErr     error
}

// NewOIDCVerifier returns a verifier for cfg. It fails only on an invalid
// configuration; it does not contact the issuer.
func NewOIDCVerifier(cfg OIDCConfig) (*OIDCVerifier, error) {
	if cfg.IssuerURL == "" {
		return nil, errors.New("auth: OIDCConfig.IssuerURL is required")
	}
	if cfg.Audience == "" {
		return nil, errors.New("auth: OIDCConfig.Audience is required")
	}
	if cfg.PrincipalClaim == "" {
		cfg.PrincipalClaim = DefaultPrincipalClaim
	}
	if cfg.Leeway == 0 {
		cfg.Leeway = DefaultLeeway
	}
	if cfg.DiscoveryRetry == 0 {
		cfg.DiscoveryRetry = DefaultDiscoveryRetry
	}
	if cfg.Leeway < 0 || cfg.DiscoveryRetry < 0 {
		return nil, errors.New("auth: OIDCConfig durations must not be negative")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: DefaultOIDCTimeout}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	v := &OIDCVerifier{cfg: cfg, log: cfg.Logger}
	if cfg.JWKSURL != "" {
		v.verifier = v.newIDTokenVerifier(cfg.JWKSURL, cfg.SigningAlgs)
	}
	return v, nil
}

// Issuer returns the issuer URL whose tokens this verifier accepts.
func (v *OIDCVerifier) Issuer() string { return v.cfg.IssuerURL }

// newIDTokenVerifier builds go-oidc's verifier over the keys at jwksURL.
// Expiry is checked against a clock set back by Leeway, since go-oidc has
// no leeway of its own for exp. Empty algs: go-oidc's default, RS256.
func (v *OIDCVerifier) newIDTokenVerifier(jwksURL string, algs []string) *oidc.IDTokenVerifier {
	keys := newIssuerKeys(jwksURL, v.cfg.HTTPClient, v.cfg.Now, v.log)
	return oidc.NewVerifier(v.cfg.IssuerURL, keys, &oidc.Config{
		ClientID:             v.cfg.Audience,
		SupportedSigningAlgs: algs,
		Now:                  func() time.Time { return v.cfg.Now().Add(-v.cfg.Leeway) },
	})
}

// Discover runs discovery now if it has not succeeded yet, for a node that
// wants to warm up or report a misconfigured issuer at start. Failing is
// not fatal: Verify tries again later. Errors wrap ErrUnavailable.
func (v *OIDCVerifier) Discover(ctx context.Context) error {
	_, err := v.idTokenVerifier(ctx, true)
	return err
}

// idTokenVerifier returns go-oidc's verifier, running discovery if needed.
// Unless force is set, a discovery that failed less than DiscoveryRetry ago
// is not retried. Discovery runs under the lock, so concurrent first
// requests wait for one attempt; it is bounded by the HTTP client's timeout.
func (v *OIDCVerifier) idTokenVerifier(ctx context.Context, force bool) (*oidc.IDTokenVerifier, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.verifier != nil {
		return v.verifier, nil
	}
	now := v.cfg.Now()
	if !force && !v.lastAttempt.IsZero() && now.Sub(v.lastAttempt) < v.cfg.DiscoveryRetry {
		return nil, fmt.Errorf("%w: OIDC discovery at %s failed: %v", ErrUnavailable, redactedURL(v.cfg.IssuerURL), v.lastErr)
	}
	v.lastAttempt = now
	// Discovery must not fail because the one request that triggered it
	// gave up: detach from its cancellation, keep its values.
	dctx, cancel := context.WithTimeout(oidc.ClientContext(context.WithoutCancel(ctx), v.cfg.HTTPClient), DefaultOIDCTimeout)
	defer cancel()
	provider, err := oidc.NewProvider(dctx, v.cfg.IssuerURL)
	// go-oidc quotes the issuer URL as given when the document names
	// another (always so when the URL carries a password).
	err = scrubbed(err, v.cfg.IssuerURL)
	if err != nil {
		v.lastErr = err
		v.log.Warn("OIDC discovery failed", "issuer", redactedURL(v.cfg.IssuerURL), "err", err)
		return nil, fmt.Errorf("%w: OIDC discovery at %s: %v", ErrUnavailable, redactedURL(v.cfg.IssuerURL), err)
	}
	var meta struct {
		JWKSURL string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := provider.Claims(&meta); err != nil || meta.JWKSURL == "" {
		v.lastErr = errors.New("discovery document has no jwks_uri")
		v.log.Warn("OIDC discovery failed", "issuer", redactedURL(v.cfg.IssuerURL), "err", v.lastErr)
		return nil, fmt.Errorf("%w: OIDC discovery at %s: %v", ErrUnavailable, redactedURL(v.cfg.IssuerURL), v.lastErr)
	}
	algs := v.cfg.SigningAlgs
	if len(algs) == 0 {
		algs = asymmetricAlgs(meta.Algs)
	}
	v.verifier = v.newIDTokenVerifier(meta.JWKSURL, algs)
	v.lastErr = nil
	v.log.Info("OIDC discovery succeeded", "issuer", redactedURL(v.cfg.IssuerURL))
	return v.verifier, nil
}

// Verify checks a token of the OIDC issuer: signature by one of its keys
// with an accepted algorithm, iss, aud containing Audience, exp (with
// Leeway) and nbf, and a non-empty string principal claim that is not Reserved. It returns the
// principal (Via ViaOIDC) with the roles of RolesClaim. Errors wrap
// ErrExpiredToken for an expired token, ErrUnavailable while discovery
// fails or the keys a token needs could not be fetched (the issuer's keys
// cannot tell it from a forgery then), and ErrInvalidToken for everything
// else.
//
// A token no cached key verifies makes the issuer's keys be fetched
// again, at most once per 100ms, so that forged tokens cannot make floe
// hammer the issuer; other such tokens are refused as ErrInvalidToken
// meanwhile (see issuerKeys).
func (v *OIDCVerifier) Verify(ctx context.Context, raw string) (Principal, error) {
	verifier, err := v.idTokenVerifier(ctx, false)
	if err != nil {
		return Principal{}, err
	}
	ctx, unreachable := withKeysUnreachable(ctx)
	tok, err := verifier.Verify(ctx, raw)
	if err != nil && unreachable.Load() {
		return Principal{}, fmt.Errorf("%w: the issuer's signing keys could not be fetched: %v", ErrUnavailable, err)
	}
	if err != nil {
		var expired *oidc.TokenExpiredError
		if errors.As(err, &expired) && expired.Expiry.IsZero() {
			return Principal{}, fmt.Errorf("%w: no exp claim", ErrInvalidToken)
		}
		if errors.As(err, &expired) {
			return Principal{}, fmt.Errorf("%w: expired at %s", ErrExpiredToken, expired.Expiry.UTC().Format(time.RFC3339))
		}
		return Principal{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return Principal{}, fmt.Errorf("%w: claims: %v", ErrInvalidToken, err)
	}
	name, ok := claims[v.cfg.PrincipalClaim].(string)
	if !ok || name == "" {
		return Principal{}, fmt.Errorf("%w: no string claim %q", ErrInvalidToken, v.cfg.PrincipalClaim)
	}
	// Audit lines and created-by fields name the caller alone: an
	// external "root" or "anonymous" would read as the root token or as no
	// credential at all.
	if Reserved(name) {
		return Principal{}, fmt.Errorf("%w: claim %q names %q, which is reserved", ErrInvalidToken, v.cfg.PrincipalClaim, name)
	}
	if err := checkExternalName(name); err != nil {
		return Principal{}, fmt.Errorf("%w: claim %q: %v", ErrInvalidToken, v.cfg.PrincipalClaim, err)
	}
	roles, err := rolesFromClaims(claims, v.cfg.RolesClaim)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	return Principal{Name: name, Roles: roles, Via: ViaOIDC}, nil
}

// checkExternalName refuses an external principal name that reads as
// another in an audit line or on the status page: one that is not UTF-8,
// holds a control or invisible formatting character (a zero-width space,
// a bidirectional override) or spaces at either end, or is a reserved
// name in other letter case ("Root" beside "root").
func checkExternalName(name string) error {
	if !utf8.ValidString(name) {
		return errors.New("the principal is not UTF-8")
	}
	if strings.TrimSpace(name) != name {
		return errors.New("the principal begins or ends with a space")
	}
	for _, r := range name {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return fmt.Errorf("the principal holds the character %U", r)
		}
	}
	if strings.EqualFold(name, RootPrincipal) || strings.EqualFold(name, AnonymousPrincipal) {
		return fmt.Errorf("the principal %q reads as a reserved name", name)
	}
	return nil
}

// redactedURL is u for logs and error messages: a password in it (basic
// auth in an issuer or key set URL) replaced with "xxxxx", as url.URL's
// Redacted does. A string that does not parse is not shown at all.
func redactedURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}

// scrubbed is err with the passwords of urls masked in its message, in the
// URLs as given and in any URL built from their user information; errors.Is
// and errors.As still see err. A nil err stays nil.
func scrubbed(err error, urls ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, u := range urls {
		p, perr := url.Parse(u)
		if perr != nil || p.User == nil {
			continue
		}
		if _, ok := p.User.Password(); !ok {
			continue
		}
		msg = strings.ReplaceAll(msg, u, p.Redacted())
		msg = strings.ReplaceAll(msg, p.User.String()+"@", url.UserPassword(p.User.Username(), "xxxxx").String()+"@")
	}
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{msg: msg, err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }
