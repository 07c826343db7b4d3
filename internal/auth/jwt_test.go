package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// sign makes a token with arbitrary claims and header kid.
func sign(t testing.TB, method jwt.SigningMethod, key any, kid string, claims jwt.Claims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// validClaims are the claims Issue would produce at now.
func validClaims(now time.Time) jwt.MapClaims {
	return jwt.MapClaims{
		"iss": "floe", "aud": "cluster-1", "sub": "alice", "jti": "x",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
}

func TestIssueAndVerify(t *testing.T) {
	f := newJWTFixture(t)
	ctx := context.Background()
	tok, ttl, err := f.issuer.Issue(ctx, IssueRequest{Principal: "alice", Roles: []string{"analysts", "ops"}, ClientID: "c1", Scope: "catalog"})
	if err != nil {
		t.Fatal(err)
	}
	if ttl != DefaultTokenTTL {
		t.Errorf("expiresIn = %v, want %v", ttl, DefaultTokenTTL)
	}
	p, err := f.verifier.Verify(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "alice" || p.Via != ViaJWT || !slices.Equal(p.Roles, []string{"analysts", "ops"}) {
		t.Fatalf("principal = %+v", p)
	}

	// The claims on the wire.
	claims := jwt.MapClaims{}
	parsed, _, err := jwt.NewParser().ParseUnverified(tok, claims)
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Header["alg"] != "EdDSA" || parsed.Header["kid"] != f.key.ID {
		t.Errorf("header = %v", parsed.Header)
	}
	now := f.clock.Now().Unix()
	for name, want := range map[string]any{
		"iss": "floe", "sub": "alice", "scope": "catalog", "client_id": "c1",
		"iat": float64(now), "nbf": float64(now), "exp": float64(now + 3600),
	} {
		if claims[name] != want {
			t.Errorf("claim %s = %v, want %v", name, claims[name], want)
		}
	}
	if aud, _ := claims.GetAudience(); !slices.Equal(aud, []string{"cluster-1"}) {
		t.Errorf("aud = %v", aud)
	}
	if jti, _ := claims["jti"].(string); len(jti) != 32 {
		t.Errorf("jti = %v", claims["jti"])
	}
	tok2 := f.issue(t, IssueRequest{Principal: "alice"})
	c2 := jwt.MapClaims{}
	_, _, _ = jwt.NewParser().ParseUnverified(tok2, c2)
	if c2["jti"] == claims["jti"] {
		t.Error("two tokens share a jti")
	}
}

func TestIssueTTL(t *testing.T) {
	f := newJWTFixture(t)
	for _, tc := range []struct {
		ttl, want time.Duration
		wantErr   bool
	}{
		{0, DefaultTokenTTL, false},
		{10 * time.Minute, 10 * time.Minute, false},
		{90*time.Second + 500*time.Millisecond, 90 * time.Second, false},
		{48 * time.Hour, DefaultMaxTokenTTL, false},
		{-time.Second, 0, true},
		{500 * time.Millisecond, 0, true},
	} {
		_, got, err := f.issuer.Issue(context.Background(), IssueRequest{Principal: "p", TTL: tc.ttl})
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("TTL %v: expiresIn = %v, err = %v", tc.ttl, got, err)
		}
	}
	if _, _, err := f.issuer.Issue(context.Background(), IssueRequest{}); err == nil {
		t.Error("empty principal issued")
	}
}

func TestVerifyExpiry(t *testing.T) {
	f := newJWTFixture(t)
	tok := f.issue(t, IssueRequest{Principal: "alice", TTL: 10 * time.Minute})
	f.clock.Advance(10*time.Minute + DefaultLeeway - time.Second)
	if _, err := f.verifier.Verify(context.Background(), tok); err != nil {
		t.Fatalf("within leeway: %v", err)
	}
	f.clock.Advance(2 * time.Second)
	_, err := f.verifier.Verify(context.Background(), tok)
	wantErr(t, err, ErrExpiredToken)
	if errors.Is(err, ErrInvalidToken) {
		t.Error("expired token also reported invalid")
	}
}

func TestVerifyClockSkew(t *testing.T) {
	f := newJWTFixture(t)
	now := f.clock.Now()
	// Issued by a node whose clock is ahead: iat and nbf in the future.
	ahead := sign(t, jwt.SigningMethodEdDSA, f.key.Private, f.key.ID, validClaims(now.Add(20*time.Second)))
	if _, err := f.verifier.Verify(context.Background(), ahead); err != nil {
		t.Fatalf("20s skew: %v", err)
	}
	tooFar := sign(t, jwt.SigningMethodEdDSA, f.key.Private, f.key.ID, validClaims(now.Add(2*time.Minute)))
	_, err := f.verifier.Verify(context.Background(), tooFar)
	wantErr(t, err, ErrInvalidToken)
}

func TestVerifyRejects(t *testing.T) {
	f := newJWTFixture(t)
	now := f.clock.Now()
	other, _ := NewSigningKey(now)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	with := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := validClaims(now)
		edit(c)
		return c
	}
	good := sign(t, jwt.SigningMethodEdDSA, f.key.Private, f.key.ID, validClaims(now))
	if _, err := f.verifier.Verify(context.Background(), good); err != nil {
		t.Fatalf("control token refused: %v", err)
	}
	noneTok := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, f.key.ID, validClaims(now))
	parts := strings.Split(good, ".")
	for name, tok := range map[string]string{
		"HS256 with the public key as secret": sign(t, jwt.SigningMethodHS256, []byte(f.key.Public), f.key.ID, validClaims(now)),
		"alg none":                            noneTok,
		"ES256":                               sign(t, jwt.SigningMethodES256, ecKey, f.key.ID, validClaims(now)),
		"signed by another key, same kid":     sign(t, jwt.SigningMethodEdDSA, other.Private, f.key.ID, validClaims(now)),
		"unknown kid":                         sign(t, jwt.SigningMethodEdDSA, other.Private, other.ID, validClaims(now)),
		"no kid":                              sign(t, jwt.SigningMethodEdDSA, f.key.Private, "", validClaims(now)),
		"no exp":                              sign(t, jwt.SigningMethodEdDSA, f.key.Private, f.key.ID, with(func(c jwt.MapClaims) { delete(c, "exp") })),
		"wrong iss":                           sign(t, jwt.SigningMethodEdDSA, f.key.Private, f.key.ID, with(func(c jwt.MapClaims) { c["iss"] = "other" })),
		"no iss":                              sign(t, jwt.SigningMethodEdDSA, f.key.Private, f.key.ID, with(func(c jwt.MapClaims) { delete(c, "iss") })),
		"wrong aud":                           sign(t, jwt.SigningMethodEdDSA, f.key.Private, f.key.ID, with(func(c jwt.MapClaims) { c["aud"] = "cluster-2" })),
		"no aud":                              sign(t, jwt.SigningMethodEdDSA, f.key.Private, f.key.ID, with(func(c jwt.MapClaims) { delete(c, "aud") })),
		"no sub":                              sign(t, jwt.SigningMethodEdDSA, f.key.Private, f.key.ID, with(func(c jwt.MapClaims) { delete(c, "sub") })),
		"tampered payload":                    parts[0] + "." + jwtB64.EncodeToString([]byte(`{"iss":"floe","aud":"cluster-1","sub":"root","exp":9999999999}`)) + "." + parts[2],
		"tampered signature":                  parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2])),
		"two segments":                        parts[0] + "." + parts[1],
		"garbage":                             "not.a.jwt",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := f.verifier.Verify(context.Background(), tok)
			wantErr(t, err, ErrInvalidToken)
			if strings.Contains(err.Error(), tok) {
				t.Fatal("error contains the token")
			}
		})
	}
}

func TestVerifyUnknownKidReadsRingOnce(t *testing.T) {
	f := newJWTFixture(t)
	ctx := context.Background()
	if _, err := f.verifier.Verify(ctx, f.issue(t, IssueRequest{Principal: "a"})); err != nil {
		t.Fatal(err)
	}
	before := f.keys.readCount()
	other, _ := NewSigningKey(f.clock.Now())
	tok := sign(t, jwt.SigningMethodEdDSA, other.Private, other.ID, validClaims(f.clock.Now()))
	_, err := f.verifier.Verify(ctx, tok)
	wantErr(t, err, ErrInvalidToken)
	if got := f.keys.readCount() - before; got != 1 {
		t.Fatalf("unknown kid caused %d ring reads, want 1", got)
	}
}

func TestVerifyUnknownKidRereadsAreSpaced(t *testing.T) {
	f := newJWTFixture(t)
	ctx := context.Background()
	other, _ := NewSigningKey(f.clock.Now())
	forged := sign(t, jwt.SigningMethodEdDSA, other.Private, other.ID, validClaims(f.clock.Now()))
	valid := f.issue(t, IssueRequest{Principal: "a"})
	if _, err := f.verifier.Verify(ctx, valid); err != nil { // fills the cache
		t.Fatal(err)
	}
	_, _ = f.verifier.Verify(ctx, forged) // re-reads once
	before := f.keys.readCount()
	for range 50 {
		_, err := f.verifier.Verify(ctx, forged)
		wantErr(t, err, ErrInvalidToken)
	}
	if got := f.keys.readCount() - before; got != 0 {
		t.Fatalf("a flood of unknown kids read the ring %d times within 100ms", got)
	}
	f.clock.Advance(minForcedRefresh)
	_, _ = f.verifier.Verify(ctx, forged)
	if got := f.keys.readCount() - before; got != 1 {
		t.Fatalf("after 100ms: %d reads, want 1", got)
	}
	// Known keys keep verifying meanwhile, from the cache.
	if _, err := f.verifier.Verify(ctx, valid); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyPicksUpRotationFromLaggingCache(t *testing.T) {
	f := newJWTFixture(t)
	ctx := context.Background()
	// Fill the cache with the old ring.
	if _, err := f.verifier.Verify(ctx, f.issue(t, IssueRequest{Principal: "a"})); err != nil {
		t.Fatal(err)
	}
	// Rotate: a new key arrives; the cache (fresh for 1s) does not know it.
	k2, _ := NewSigningKey(f.clock.Now())
	f.keys.add(k2)
	tok := f.issue(t, IssueRequest{Principal: "a"})
	if kid := headerKid(t, tok); kid != k2.ID {
		t.Fatalf("issued with %s, want the new key %s", kid, k2.ID)
	}
	before := f.keys.readCount()
	if _, err := f.verifier.Verify(ctx, tok); err != nil {
		t.Fatalf("token of the new key refused: %v", err)
	}
	if got := f.keys.readCount() - before; got != 1 {
		t.Fatalf("ring read %d times, want 1", got)
	}
}

func TestVerifyKeyCache(t *testing.T) {
	f := newJWTFixture(t)
	ctx := context.Background()
	tok := f.issue(t, IssueRequest{Principal: "a"})
	before := f.keys.readCount()
	for range 5 {
		if _, err := f.verifier.Verify(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.keys.readCount() - before; got != 1 {
		t.Fatalf("5 verifications read the ring %d times, want 1", got)
	}
	f.clock.Advance(DefaultKeyCacheTTL)
	if _, err := f.verifier.Verify(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if got := f.keys.readCount() - before; got != 2 {
		t.Fatalf("after the cache TTL: %d reads, want 2", got)
	}
}

func TestRotationKeepsOldTokensUntilWindow(t *testing.T) {
	f := newJWTFixture(t)
	ctx := context.Background()
	old := f.issue(t, IssueRequest{Principal: "a", TTL: DefaultMaxTokenTTL})

	// Rotate: add K2 and retire K1 at once.
	k2, _ := NewSigningKey(f.clock.Now())
	f.keys.add(k2)
	f.keys.retire(f.key.ID, f.clock.Now())
	f.clock.Advance(DefaultKeyCacheTTL)

	fresh := f.issue(t, IssueRequest{Principal: "a"})
	if kid := headerKid(t, fresh); kid != k2.ID {
		t.Fatalf("new token signed by %s, want %s", kid, k2.ID)
	}
	if _, err := f.verifier.Verify(ctx, old); err != nil {
		t.Fatalf("token of the just-retired key refused: %v", err)
	}
	window := f.verifier.RetiredKeyWindow()
	if window != DefaultMaxTokenTTL+DefaultLeeway {
		t.Fatalf("RetiredKeyWindow = %v", window)
	}
	// Just before the window closes, the old token is within its leeway
	// and the key still verifies.
	f.clock.Advance(window - DefaultKeyCacheTTL - time.Second)
	if _, err := f.verifier.Verify(ctx, old); err != nil {
		t.Fatalf("before the window closes: %v", err)
	}
	// Once the window closes every token of K1 has expired anyway; a K1
	// token that claims a later exp is refused for the key.
	f.clock.Advance(2 * time.Second)
	late := sign(t, jwt.SigningMethodEdDSA, f.key.Private, f.key.ID, validClaims(f.clock.Now()))
	_, err := f.verifier.Verify(ctx, late)
	wantErr(t, err, ErrInvalidToken)
	if !errors.Is(err, errRetiredKey) && !strings.Contains(err.Error(), "retired") {
		t.Fatalf("refused for another reason: %v", err)
	}
}

func TestRemovedKeyRevokesImmediately(t *testing.T) {
	f := newJWTFixture(t)
	tok := f.issue(t, IssueRequest{Principal: "a"})
	k2, _ := NewSigningKey(f.clock.Now())
	f.keys.mu.Lock()
	f.keys.keys = []SigningKey{k2}
	f.keys.mu.Unlock()
	f.clock.Advance(DefaultKeyCacheTTL)
	_, err := f.verifier.Verify(context.Background(), tok)
	wantErr(t, err, ErrInvalidToken)
}

func TestKeySourceErrors(t *testing.T) {
	f := newJWTFixture(t)
	tok := f.issue(t, IssueRequest{Principal: "a"})
	f.keys.setErr(errors.New("replica not ready"))
	_, err := f.verifier.Verify(context.Background(), tok)
	wantErr(t, err, ErrUnavailable)
	if errors.Is(err, ErrInvalidToken) {
		t.Error("unavailable also reported invalid")
	}
	if _, _, err := f.issuer.Issue(context.Background(), IssueRequest{Principal: "a"}); err == nil {
		t.Error("Issue succeeded without a ring")
	}
}

func TestIssueNoSigningKey(t *testing.T) {
	f := newJWTFixture(t)
	ctx := context.Background()
	f.keys.retire(f.key.ID, f.clock.Now())
	_, _, err := f.issuer.Issue(ctx, IssueRequest{Principal: "a"})
	wantErr(t, err, ErrNoSigningKey)

	verifyOnly, _ := NewSigningKey(f.clock.Now())
	verifyOnly.Private = nil
	f.keys.add(verifyOnly)
	_, _, err = f.issuer.Issue(ctx, IssueRequest{Principal: "a"})
	wantErr(t, err, ErrNoSigningKey)
}

func TestJWTConfigValidation(t *testing.T) {
	keys := &memKeys{}
	for name, cfg := range map[string]JWTConfig{
		"no keys":          {Audience: "a"},
		"no audience":      {Keys: keys},
		"ttl above max":    {Keys: keys, Audience: "a", TokenTTL: 2 * time.Hour, MaxTokenTTL: time.Hour},
		"negative leeway":  {Keys: keys, Audience: "a", Leeway: -time.Second},
		"negative max ttl": {Keys: keys, Audience: "a", MaxTokenTTL: -time.Second},
	} {
		if _, err := NewIssuer(cfg); err == nil {
			t.Errorf("%s: NewIssuer accepted", name)
		}
		if _, err := NewVerifier(cfg); err == nil {
			t.Errorf("%s: NewVerifier accepted", name)
		}
	}
}

func headerKid(t testing.TB, tok string) string {
	t.Helper()
	parsed, _, err := jwt.NewParser().ParseUnverified(tok, jwt.MapClaims{})
	if err != nil {
		t.Fatal(err)
	}
	kid, _ := parsed.Header["kid"].(string)
	return kid
}

// BenchmarkVerify measures verifying a floe token with a warm key cache.
func BenchmarkVerify(b *testing.B) {
	f := newJWTFixture(b)
	tok := f.issue(b, IssueRequest{Principal: "alice", Roles: []string{"analysts"}, Scope: "catalog"})
	ctx := context.Background()
	for b.Loop() {
		if _, err := f.verifier.Verify(ctx, tok); err != nil {
			b.Fatal(err)
		}
	}
}
