package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MinRootTokenLen is the shortest root token NewAuthenticator accepts.
const MinRootTokenLen = 16

// TokenRecord is a static token as stored in the replicated state.
type TokenRecord struct {
	// Hash is HashToken of the token's secret.
	Hash string
	// Principal the token authenticates.
	Principal string
	// Roles of the principal.
	Roles []string
	// ExpiresAt is when the token stops working; zero: never.
	ExpiresAt time.Time
}

// TokenSource is the replicated store of static tokens.
type TokenSource interface {
	// StaticToken returns the token with the given id. ok is false if there
	// is none (revoked tokens are deleted). An error means the store could
	// not be read; Authenticate then fails with ErrUnavailable.
	StaticToken(ctx context.Context, id string) (rec TokenRecord, ok bool, err error)
}

// AuthenticatorConfig configures an Authenticator. Every mechanism is
// optional; one left unset rejects its tokens as ErrInvalidToken.
type AuthenticatorConfig struct {
	// RootToken, when set, authenticates the root principal. It must be
	// at least MinRootTokenLen bytes.
	RootToken string
	// Tokens looks up static tokens ("floe_<id>_<secret>").
	Tokens TokenSource
	// JWT verifies floe's own JWTs.
	JWT *Verifier
	// OIDC verifies JWTs whose iss is its issuer.
	OIDC *OIDCVerifier
	// Now is the clock for static token expiry. Default time.Now.
	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Authenticator turns a request's bearer token into a Principal.
type Authenticator struct {
	rootHash [sha256.Size]byte
	hasRoot  bool
	tokens   TokenSource
	jwt      *Verifier
	oidc     *OIDCVerifier
	now      func() time.Time
	log      *slog.Logger
	metrics  *authMetrics
}

// NewAuthenticator returns an Authenticator. It fails if the root token is
// set but shorter than MinRootTokenLen, or if the OIDC issuer equals floe's
// own issuer (tokens could not be routed).
func NewAuthenticator(cfg AuthenticatorConfig) (*Authenticator, error) {
	if cfg.RootToken != "" && len(cfg.RootToken) < MinRootTokenLen {
		return nil, fmt.Errorf("auth: root token must be at least %d bytes", MinRootTokenLen)
	}
	if cfg.JWT != nil && cfg.OIDC != nil && cfg.JWT.Issuer() == cfg.OIDC.Issuer() {
		return nil, fmt.Errorf("auth: OIDC issuer %q is floe's own issuer", redactedURL(cfg.OIDC.Issuer()))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &Authenticator{
		tokens:  cfg.Tokens,
		jwt:     cfg.JWT,
		oidc:    cfg.OIDC,
		now:     cfg.Now,
		log:     cfg.Logger,
		metrics: newAuthMetrics(cfg.Registerer),
	}
	if cfg.RootToken != "" {
		a.rootHash, a.hasRoot = sha256.Sum256([]byte(cfg.RootToken)), true
	}
	return a, nil
}

// Authenticate reads "Authorization: Bearer <token>" and returns the
// principal it authenticates, trying in order: the root token, a static
// token (by its floe_ prefix), then a JWT, sent to the OIDC verifier if its
// unverified iss is the OIDC issuer and to floe's Verifier otherwise.
//
// Errors wrap exactly one of ErrNoCredentials (no Authorization header),
// ErrInvalidToken, ErrExpiredToken or ErrUnavailable (a store or the OIDC
// issuer could not be read: answer 503). Their text never contains the
// token.
func (a *Authenticator) Authenticate(r *http.Request) (Principal, error) {
	token, err := bearerToken(r)
	if err == nil {
		var p Principal
		if p, err = a.authenticate(r.Context(), token); err == nil {
			a.metrics.authenticated.WithLabelValues(p.Via).Inc()
			return p, nil
		}
		err = scrub(err, token)
	}
	reason := reasonOf(err)
	a.metrics.rejected.WithLabelValues(reason).Inc()
	if reason != reasonNoCredentials {
		a.log.Debug("authentication failed", "reason", reason, "err", err, "remote", r.RemoteAddr)
	}
	return Principal{}, err
}

func (a *Authenticator) authenticate(ctx context.Context, token string) (Principal, error) {
	if a.hasRoot {
		sum := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(sum[:], a.rootHash[:]) == 1 {
			return Principal{Name: RootPrincipal, Roles: []string{RootRole}, Via: ViaRoot}, nil
		}
	}
	if id, secret, ok := ParseStaticToken(token); ok {
		return a.staticToken(ctx, id, secret)
	}
	iss, ok := peekIssuer(token)
	if !ok {
		return Principal{}, fmt.Errorf("%w: not a static token or a JWT", ErrInvalidToken)
	}
	if a.oidc != nil && iss == a.oidc.Issuer() {
		return a.oidc.Verify(ctx, token)
	}
	if a.jwt != nil {
		return a.jwt.Verify(ctx, token)
	}
	return Principal{}, fmt.Errorf("%w: no verifier for issuer %q", ErrInvalidToken, iss)
}

func (a *Authenticator) staticToken(ctx context.Context, id, secret string) (Principal, error) {
	if a.tokens == nil {
		return Principal{}, fmt.Errorf("%w: static tokens are not enabled", ErrInvalidToken)
	}
	rec, ok, err := a.tokens.StaticToken(ctx, id)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: read static token %s: %v", ErrUnavailable, id, err)
	}
	if !ok || !VerifyToken(rec.Hash, secret) {
		return Principal{}, fmt.Errorf("%w: unknown static token or wrong secret (id %s)", ErrInvalidToken, id)
	}
	if !rec.ExpiresAt.IsZero() && !a.now().Before(rec.ExpiresAt) {
		return Principal{}, fmt.Errorf("%w: static token %s expired at %s", ErrExpiredToken, id, rec.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if rec.Principal == "" {
		return Principal{}, fmt.Errorf("%w: static token %s has no principal", ErrInvalidToken, id)
	}
	return Principal{Name: rec.Principal, Roles: rec.Roles, Via: ViaStaticToken}, nil
}

// scrub rebuilds err as its sentinel plus a message with the token
// redacted, so that nothing down the chain can print the token.
func scrub(err error, token string) error {
	s := sentinelOf(err)
	msg := redact(err.Error(), token)
	if msg == s.Error() {
		return s
	}
	return fmt.Errorf("%w: %s", s, strings.TrimPrefix(msg, s.Error()+": "))
}

// sentinelOf returns the package sentinel err wraps, ErrInvalidToken if
// none.
func sentinelOf(err error) error {
	for _, s := range []error{ErrNoCredentials, ErrExpiredToken, ErrUnavailable, ErrInvalidToken} {
		if errors.Is(err, s) {
			return s
		}
	}
	return ErrInvalidToken
}
