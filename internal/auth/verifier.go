package auth

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Verifier checks floe's access tokens against the key ring.
type Verifier struct {
	cfg    JWTConfig
	keys   *keyCache
	parser *jwt.Parser
}

// NewVerifier returns a Verifier. It fails if cfg lacks Keys or Audience or
// its durations are inconsistent.
func NewVerifier(cfg JWTConfig) (*Verifier, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	parser := jwt.NewParser(
		jwt.WithValidMethods([]string{signingAlg}),
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithAudience(cfg.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(cfg.Leeway),
		jwt.WithTimeFunc(cfg.Now),
		jwt.WithStrictDecoding(),
	)
	return &Verifier{
		cfg:    cfg,
		keys:   &keyCache{src: cfg.Keys, ttl: cfg.KeyCacheTTL, now: cfg.Now},
		parser: parser,
	}, nil
}

// Issuer returns the "iss" claim of floe's tokens.
func (v *Verifier) Issuer() string { return v.cfg.Issuer }

// RetiredKeyWindow is how long a retired key keeps verifying:
// MaxTokenTTL + Leeway. See SigningKey.Verifies.
func (v *Verifier) RetiredKeyWindow() time.Duration { return v.cfg.MaxTokenTTL + v.cfg.Leeway }

// Verify checks a token and returns its principal (Via ViaJWT). The token
// must be signed with EdDSA by a key of the ring that still verifies (see
// SigningKey.Verifies), carry this cluster's iss and aud, a subject, and an
// exp that has not passed (with Leeway). Errors wrap ErrExpiredToken for an
// expired token, ErrUnavailable if the ring cannot be read, and
// ErrInvalidToken for everything else.
func (v *Verifier) Verify(ctx context.Context, raw string) (Principal, error) {
	c, err := v.verify(ctx, raw)
	if err != nil {
		return Principal{}, err
	}
	return Principal{Name: c.Subject, Roles: c.Roles, Via: ViaJWT}, nil
}

// errUnknownKey is the keyfunc's error for a kid not in the ring.
var errUnknownKey = errors.New("unknown signing key")

// errRetiredKey is the keyfunc's error for a key retired too long ago.
var errRetiredKey = errors.New("signing key retired")

// verify is Verify returning all claims; the token endpoint needs the scope
// and client of a token it exchanges.
func (v *Verifier) verify(ctx context.Context, raw string) (*floeClaims, error) {
	claims := &floeClaims{}
	_, err := v.parser.ParseWithClaims(raw, claims, func(t *jwt.Token) (any, error) {
		return v.publicKey(ctx, t)
	})
	switch {
	case err == nil:
	case errors.Is(err, ErrUnavailable):
		return nil, err
	case errors.Is(err, jwt.ErrTokenExpired):
		return nil, fmt.Errorf("%w: %v", ErrExpiredToken, err)
	default:
		return nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if claims.Subject == "" {
		return nil, fmt.Errorf("%w: no subject", ErrInvalidToken)
	}
	return claims, nil
}

// publicKey is the keyfunc: the public key named by the token's kid, if it
// still verifies.
func (v *Verifier) publicKey(ctx context.Context, t *jwt.Token) (any, error) {
	kid, ok := t.Header["kid"].(string)
	if !ok || kid == "" {
		return nil, errors.New("no kid header")
	}
	key, found, err := v.keys.get(ctx, kid)
	if err != nil {
		return nil, fmt.Errorf("%w: read key ring: %v", ErrUnavailable, err)
	}
	if !found {
		return nil, fmt.Errorf("%w %q", errUnknownKey, kid)
	}
	if !key.Verifies(v.cfg.Now(), v.RetiredKeyWindow()) {
		return nil, fmt.Errorf("%w: %q", errRetiredKey, kid)
	}
	if len(key.Public) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("signing key %q has no valid public key", kid)
	}
	return key.Public, nil
}
