package auth

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Issuer signs floe's access tokens with the active key of the ring.
type Issuer struct {
	cfg JWTConfig
}

// NewIssuer returns an Issuer. It fails if cfg lacks Keys or Audience or
// its durations are inconsistent.
func NewIssuer(cfg JWTConfig) (*Issuer, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &Issuer{cfg: cfg}, nil
}

// IssueRequest describes a token to issue.
type IssueRequest struct {
	// Principal is the "sub" claim. Required.
	Principal string
	// Roles are recorded in the token; Verify returns them.
	Roles []string
	// ClientID is the OAuth client the token is for; empty if none.
	ClientID string
	// ClientGeneration is the client's clientGeneration, carried by the
	// token so that a token exchange can tell the client from another
	// created later under the same id; empty if none.
	ClientGeneration string
	// Scope is the "scope" claim; empty for none.
	Scope string
	// TTL is the token's lifetime: 0 means JWTConfig.TokenTTL, and anything
	// above JWTConfig.MaxTokenTTL is shortened to it.
	TTL time.Duration
}

// Issue signs a token for req with the active key (see ActiveKey), reading
// the ring afresh so that a retired key never signs. It returns the token
// and its lifetime. It fails with ErrNoSigningKey if there is no active key
// or this node lacks its private half, with the KeySource's error if the
// ring cannot be read, and on an empty Principal or negative TTL.
func (i *Issuer) Issue(ctx context.Context, req IssueRequest) (token string, expiresIn time.Duration, err error) {
	if req.Principal == "" {
		return "", 0, errors.New("auth: issue: empty principal")
	}
	ttl := req.TTL
	if ttl < 0 {
		return "", 0, errors.New("auth: issue: negative TTL")
	}
	if ttl == 0 {
		ttl = i.cfg.TokenTTL
	}
	ttl = min(ttl, i.cfg.MaxTokenTTL).Truncate(time.Second)
	if ttl < time.Second {
		return "", 0, errors.New("auth: issue: TTL under one second")
	}
	keys, err := i.cfg.Keys.SigningKeys(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("auth: issue: read key ring: %w", err)
	}
	key, ok := ActiveKey(keys)
	if !ok {
		return "", 0, ErrNoSigningKey
	}
	if len(key.Private) == 0 {
		return "", 0, fmt.Errorf("%w: key %s has no private key on this node", ErrNoSigningKey, key.ID)
	}
	now := i.cfg.Now().Truncate(time.Second)
	claims := floeClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    i.cfg.Issuer,
			Subject:   req.Principal,
			Audience:  jwt.ClaimStrings{i.cfg.Audience},
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			ID:        hex.EncodeToString(randomBytes(16)),
		},
		Scope:            req.Scope,
		Roles:            req.Roles,
		ClientID:         req.ClientID,
		ClientGeneration: req.ClientGeneration,
	}
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	t.Header["kid"] = key.ID
	token, err = t.SignedString(key.Private)
	if err != nil {
		return "", 0, fmt.Errorf("auth: issue: sign with key %s: %w", key.ID, err)
	}
	return token, ttl, nil
}
