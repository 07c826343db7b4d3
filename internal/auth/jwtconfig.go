package auth

import (
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Defaults of JWTConfig.
const (
	DefaultIssuer      = "floe"
	DefaultTokenTTL    = time.Hour
	DefaultMaxTokenTTL = 24 * time.Hour
	DefaultLeeway      = 30 * time.Second
	DefaultKeyCacheTTL = time.Second
)

// JWTConfig configures both the Issuer and the Verifier of floe's own
// tokens. Every node must use the same Issuer, Audience and MaxTokenTTL.
type JWTConfig struct {
	// Keys is the replicated key ring. Required.
	Keys KeySource
	// Issuer is the "iss" claim. Default "floe".
	Issuer string
	// Audience is the "aud" claim, e.g. the cluster id. Required: it keeps
	// a token of one cluster from being accepted by another that shares
	// keys by accident (a restored backup).
	Audience string
	// TokenTTL is the lifetime of tokens issued without an explicit TTL.
	// Default 1h.
	TokenTTL time.Duration
	// MaxTokenTTL bounds every token's lifetime; longer requests are
	// shortened to it. A retired key keeps verifying for MaxTokenTTL+Leeway
	// after its retirement. Default 24h.
	MaxTokenTTL time.Duration
	// Leeway is the clock skew tolerated on exp, nbf and iat. Default 30s.
	Leeway time.Duration
	// KeyCacheTTL is how long the Verifier reuses the key ring it read.
	// Default 1s. A token with an unknown kid re-reads it once, unless
	// another unknown kid did less than 100ms ago.
	KeyCacheTTL time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (c *JWTConfig) setDefaults() error {
	if c.Keys == nil {
		return errors.New("auth: JWTConfig.Keys is required")
	}
	if c.Audience == "" {
		return errors.New("auth: JWTConfig.Audience is required")
	}
	if c.Issuer == "" {
		c.Issuer = DefaultIssuer
	}
	if c.TokenTTL == 0 {
		c.TokenTTL = DefaultTokenTTL
	}
	if c.MaxTokenTTL == 0 {
		c.MaxTokenTTL = DefaultMaxTokenTTL
	}
	if c.Leeway == 0 {
		c.Leeway = DefaultLeeway
	}
	if c.KeyCacheTTL == 0 {
		c.KeyCacheTTL = DefaultKeyCacheTTL
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.TokenTTL < 0 || c.MaxTokenTTL < 0 || c.Leeway < 0 || c.KeyCacheTTL < 0 {
		return errors.New("auth: JWTConfig durations must not be negative")
	}
	if c.TokenTTL > c.MaxTokenTTL {
		return fmt.Errorf("auth: TokenTTL %v exceeds MaxTokenTTL %v", c.TokenTTL, c.MaxTokenTTL)
	}
	return nil
}

// signingAlg is the only algorithm floe signs with and accepts.
const signingAlg = "EdDSA"

// floeClaims are the claims of floe's access tokens.
type floeClaims struct {
	jwt.RegisteredClaims
	// Scope is the OAuth scope the token was issued for.
	Scope string `json:"scope,omitempty"`
	// Roles are the principal's roles when the token was issued.
	Roles []string `json:"roles,omitempty"`
	// ClientID is the OAuth client the token was issued to (RFC 9068); a
	// token exchange looks the client up again by it.
	ClientID string `json:"client_id,omitempty"`
	// ClientGeneration names the client as it was when the token was
	// issued (clientGeneration); a token exchange refuses a token of a
	// client deleted and created again under the same id.
	ClientGeneration string `json:"client_gen,omitempty"`
}

// jwtB64 is the JWS segment encoding.
var jwtB64 = base64.RawURLEncoding
