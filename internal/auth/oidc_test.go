package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"

	"github.com/floe-catalog/floe/internal/testenv"
)

// rsaKeys are generated once: RSA key generation is slow under -race.
var rsaKeys = sync.OnceValue(func() []*rsa.PrivateKey {
	keys := make([]*rsa.PrivateKey, 3)
	for i := range keys {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		keys[i] = k
	}
	return keys
})

// testIssuer is an OpenID Connect issuer: a discovery document and a JWKS
// endpoint, signing with RSA keys.
type testIssuer struct {
	srv *httptest.Server

	mu        sync.Mutex
	published map[string]*rsa.PrivateKey // kid -> key, served in the JWKS
	current   string                     // kid that signs
	down      bool                       // discovery answers 503
	discovery int                        // discovery requests served
	jwks      int                        // JWKS requests served
	jwksDown  bool                       // the JWKS endpoint answers 503
	hold      chan struct{}              // when set, JWKS requests wait for it to close
	held      chan struct{}              // receives once per JWKS request that waits on hold
}

func newTestIssuer(t *testing.T) *testIssuer {
	t.Helper()
	ti := &testIssuer{published: map[string]*rsa.PrivateKey{"k1": rsaKeys()[0]}, current: "k1"}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		ti.mu.Lock()
		down := ti.down
		ti.discovery++
		ti.mu.Unlock()
		if down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                ti.srv.URL,
			"jwks_uri":                              ti.srv.URL + "/keys",
			"authorization_endpoint":                ti.srv.URL + "/auth",
			"token_endpoint":                        ti.srv.URL + "/token",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, r *http.Request) {
		ti.mu.Lock()
		hold, held := ti.hold, ti.held
		ti.mu.Unlock()
		if hold != nil {
			held <- struct{}{}
			<-hold
		}
		ti.mu.Lock()
		defer ti.mu.Unlock()
		ti.jwks++
		if ti.jwksDown {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		var set jose.JSONWebKeySet
		for kid, k := range ti.published {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid, Algorithm: "RS256", Use: "sig"})
		}
		_ = json.NewEncoder(w).Encode(set)
	})
	ti.srv = httptest.NewServer(mux)
	t.Cleanup(ti.srv.Close)
	return ti
}

func (ti *testIssuer) URL() string { return ti.srv.URL }

// rotate publishes a new key and signs with it from now on.
func (ti *testIssuer) rotate(kid string, k *rsa.PrivateKey) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	ti.published[kid] = k
	ti.current = kid
}

func (ti *testIssuer) setDown(down bool) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	ti.down = down
}

func (ti *testIssuer) counts() (discovery, jwks int) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	return ti.discovery, ti.jwks
}

// token signs claims with the current key.
func (ti *testIssuer) token(t *testing.T, claims map[string]any) string {
	t.Helper()
	ti.mu.Lock()
	kid, key := ti.current, ti.published[ti.current]
	ti.mu.Unlock()
	return signRSA(t, kid, key, claims)
}

func signRSA(t *testing.T, kid string, key *rsa.PrivateKey, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := josejwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// oidcClaims are valid claims for the test issuer at now.
func oidcClaims(iss string, now time.Time) map[string]any {
	return map[string]any{
		"iss": iss, "sub": "user-123", "aud": "floe", "email": "alice@example.com",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		"groups":       []string{"analysts", "ops"},
		"realm_access": map[string]any{"roles": []string{"reader"}},
	}
}

func newTestOIDCVerifier(t *testing.T, ti *testIssuer, clock *fakeClock, edit func(*OIDCConfig)) *OIDCVerifier {
	t.Helper()
	cfg := OIDCConfig{IssuerURL: ti.URL(), Audience: "floe", RolesClaim: "groups", Now: clock.Now}
	if edit != nil {
		edit(&cfg)
	}
	v, err := NewOIDCVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestOIDCVerifyValid(t *testing.T) {
	ti := newTestIssuer(t)
	clock := newFakeClock()
	ctx := context.Background()

	v := newTestOIDCVerifier(t, ti, clock, nil)
	p, err := v.Verify(ctx, ti.token(t, oidcClaims(ti.URL(), clock.Now())))
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "user-123" || p.Via != ViaOIDC || !slices.Equal(p.Roles, []string{"analysts", "ops"}) {
		t.Fatalf("principal = %+v", p)
	}

	byEmail := newTestOIDCVerifier(t, ti, clock, func(c *OIDCConfig) {
		c.PrincipalClaim, c.RolesClaim = "email", "realm_access.roles"
	})
	p, err = byEmail.Verify(ctx, ti.token(t, oidcClaims(ti.URL(), clock.Now())))
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "alice@example.com" || !slices.Equal(p.Roles, []string{"reader"}) {
		t.Fatalf("principal = %+v", p)
	}

	// An audience array that contains ours is accepted.
	c := oidcClaims(ti.URL(), clock.Now())
	c["aud"] = []string{"account", "floe"}
	if _, err := v.Verify(ctx, ti.token(t, c)); err != nil {
		t.Fatalf("aud array: %v", err)
	}
}

func TestOIDCVerifyRejects(t *testing.T) {
	ti := newTestIssuer(t)
	clock := newFakeClock()
	ctx := context.Background()
	v := newTestOIDCVerifier(t, ti, clock, nil)
	now := clock.Now()
	with := func(edit func(map[string]any)) map[string]any {
		c := oidcClaims(ti.URL(), now)
		edit(c)
		return c
	}
	hs, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: jose.JSONWebKey{Key: []byte(strings.Repeat("k", 32)), KeyID: "k1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hsTok, err := josejwt.Signed(hs).Claims(oidcClaims(ti.URL(), now)).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tok  string
		want error
	}{
		{"wrong audience", ti.token(t, with(func(c map[string]any) { c["aud"] = "other" })), ErrInvalidToken},
		{"wrong issuer", ti.token(t, with(func(c map[string]any) { c["iss"] = "https://evil.example" })), ErrInvalidToken},
		{"expired", ti.token(t, with(func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() })), ErrExpiredToken},
		{"no exp", ti.token(t, with(func(c map[string]any) { delete(c, "exp") })), ErrInvalidToken},
		{"signed by an unpublished key with a published kid", signRSA(t, "k1", rsaKeys()[2], oidcClaims(ti.URL(), now)), ErrInvalidToken},
		{"unknown kid", signRSA(t, "nope", rsaKeys()[2], oidcClaims(ti.URL(), now)), ErrInvalidToken},
		{"HS256", hsTok, ErrInvalidToken},
		{"no principal claim", ti.token(t, with(func(c map[string]any) { delete(c, "sub") })), ErrInvalidToken},
		{"roles claim not strings", ti.token(t, with(func(c map[string]any) { c["groups"] = []any{"a", 1} })), ErrInvalidToken},
		{"principal root", ti.token(t, with(func(c map[string]any) { c["sub"] = RootPrincipal })), ErrInvalidToken},
		{"principal anonymous", ti.token(t, with(func(c map[string]any) { c["sub"] = AnonymousPrincipal })), ErrInvalidToken},
		// Names that read as a reserved one in an audit line.
		{"principal Root", ti.token(t, with(func(c map[string]any) { c["sub"] = "Root" })), ErrInvalidToken},
		{"principal root with a zero-width space", ti.token(t, with(func(c map[string]any) { c["sub"] = "root\u200b" })), ErrInvalidToken},
		{"principal root with a space", ti.token(t, with(func(c map[string]any) { c["sub"] = "root " })), ErrInvalidToken},
		{"principal with a NUL", ti.token(t, with(func(c map[string]any) { c["sub"] = "ro\x00ot" })), ErrInvalidToken},
		{"principal with a bidi override", ti.token(t, with(func(c map[string]any) { c["sub"] = "alice\u202egnp.exe" })), ErrInvalidToken},
		{"garbage", "a.b.c", ErrInvalidToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify(ctx, tc.tok)
			wantErr(t, err, tc.want)
		})
	}

	// Leeway: expired 10s ago is still accepted.
	if _, err := v.Verify(ctx, ti.token(t, with(func(c map[string]any) { c["exp"] = now.Add(-10 * time.Second).Unix() }))); err != nil {
		t.Fatalf("within leeway: %v", err)
	}
}

// warmVerifier returns a verifier of a new issuer that has verified one
// token of the issuer's first key (so the keys are cached), its clock,
// and the JWKS fetch count after that.
func warmVerifier(t *testing.T) (*testIssuer, *fakeClock, *OIDCVerifier, int) {
	t.Helper()
	ti := newTestIssuer(t)
	clock := newFakeClock()
	v := newTestOIDCVerifier(t, ti, clock, nil)
	if _, err := v.Verify(context.Background(), ti.token(t, oidcClaims(ti.URL(), clock.Now()))); err != nil {
		t.Fatal(err)
	}
	_, jwks := ti.counts()
	return ti, clock, v, jwks
}

func TestOIDCKeyRotation(t *testing.T) {
	ti, clock, v, jwksBefore := warmVerifier(t)
	ctx := context.Background()

	clock.Advance(time.Second)
	ti.rotate("k2", rsaKeys()[1])
	tok := ti.token(t, oidcClaims(ti.URL(), clock.Now()))
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Fatalf("token of the rotated key: %v", err)
	}
	if _, jwks := ti.counts(); jwks != jwksBefore+1 {
		t.Fatalf("JWKS fetched %d times for the rotation, want 1", jwks-jwksBefore)
	}
	// The new key is cached now.
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if _, jwks := ti.counts(); jwks != jwksBefore+1 {
		t.Fatal("a known kid fetched the JWKS again")
	}
}

// A key the issuer withdraws stops verifying once the cached keys are
// older than maxKeyAge, though the issuer's current key keeps every other
// token verifying (which alone never fetched the keys again); with the
// issuer unreachable, the cached keys still serve.
func TestOIDCWithdrawnKeyStopsVerifying(t *testing.T) {
	ti, clock, v, _ := warmVerifier(t)
	ctx := context.Background()
	withdrawn := signRSA(t, "k1", rsaKeys()[0], oidcClaims(ti.URL(), clock.Now()))
	clock.Advance(time.Second)
	ti.rotate("k2", rsaKeys()[1])
	if _, err := v.Verify(ctx, ti.token(t, oidcClaims(ti.URL(), clock.Now()))); err != nil {
		t.Fatalf("token of the rotated key: %v", err)
	}
	ti.mu.Lock()
	delete(ti.published, "k1")
	ti.mu.Unlock()
	clock.Advance(maxKeyAge / 2)
	if _, err := v.Verify(ctx, ti.token(t, oidcClaims(ti.URL(), clock.Now()))); err != nil {
		t.Fatal(err)
	}
	clock.Advance(maxKeyAge)
	if _, err := v.Verify(ctx, ti.token(t, oidcClaims(ti.URL(), clock.Now()))); err != nil {
		t.Fatalf("current key after the keys aged: %v", err)
	}
	_, err := v.Verify(ctx, withdrawn)
	wantErr(t, err, ErrInvalidToken)

	ti.mu.Lock()
	ti.jwksDown = true
	ti.mu.Unlock()
	clock.Advance(maxKeyAge + time.Second)
	_, before := ti.counts()
	for range 3 {
		if _, err := v.Verify(ctx, ti.token(t, oidcClaims(ti.URL(), clock.Now()))); err != nil {
			t.Fatalf("cached key with the issuer unreachable: %v", err)
		}
	}
	if _, after := ti.counts(); after != before+1 {
		t.Fatalf("the issuer was asked %d times, want once until agedRetryAfter", after-before)
	}
}

func TestOIDCUnknownKidFetchesAreSpaced(t *testing.T) {
	ti := newTestIssuer(t)
	clock := newFakeClock()
	ctx := context.Background()
	v := newTestOIDCVerifier(t, ti, clock, nil)
	valid := ti.token(t, oidcClaims(ti.URL(), clock.Now()))
	if _, err := v.Verify(ctx, valid); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	_, jwksBefore := ti.counts()
	for i := range 20 {
		forged := signRSA(t, "forged-"+string(rune('a'+i)), rsaKeys()[2], oidcClaims(ti.URL(), clock.Now()))
		_, err := v.Verify(ctx, forged)
		wantErr(t, err, ErrInvalidToken)
	}
	if _, jwks := ti.counts(); jwks-jwksBefore != 1 {
		t.Fatalf("20 forged kids within 100ms fetched the JWKS %d times, want 1", jwks-jwksBefore)
	}
	// Forged signatures under the real kid are refused without a fetch
	// within the spacing, and with one fetch after it.
	for i := range 20 {
		if i == 10 {
			clock.Advance(minForcedRefresh)
		}
		forged := signRSA(t, "k1", rsaKeys()[2], oidcClaims(ti.URL(), clock.Now()))
		_, err := v.Verify(ctx, forged)
		wantErr(t, err, ErrInvalidToken)
	}
	if _, jwks := ti.counts(); jwks-jwksBefore != 2 {
		t.Fatalf("forged signatures under a known kid fetched the JWKS %d times, want 1 more", jwks-jwksBefore-1)
	}
	// The known key keeps working meanwhile.
	if _, err := v.Verify(ctx, valid); err != nil {
		t.Fatalf("known kid refused during a flood: %v", err)
	}
	// A rotation is picked up once the spacing has passed.
	ti.rotate("k2", rsaKeys()[1])
	clock.Advance(minForcedRefresh)
	if _, err := v.Verify(ctx, ti.token(t, oidcClaims(ti.URL(), clock.Now()))); err != nil {
		t.Fatalf("rotated key after the spacing: %v", err)
	}
}

// Tokens of a key no cached key verifies, arriving while a fetch runs,
// wait for that fetch and share it.
func TestOIDCTokensShareAFetchInFlight(t *testing.T) {
	ti, clock, v, jwksBefore := warmVerifier(t)
	ctx := context.Background()
	clock.Advance(time.Second)
	ti.rotate("k2", rsaKeys()[1])
	hold, held := make(chan struct{}), make(chan struct{}, 8)
	ti.mu.Lock()
	ti.hold, ti.held = hold, held
	ti.mu.Unlock()
	tok := ti.token(t, oidcClaims(ti.URL(), clock.Now()))
	errs := make(chan error, 5)
	go func() { _, err := v.Verify(ctx, tok); errs <- err }()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("no fetch started")
	}
	// The spacing has passed, yet these join the running fetch.
	clock.Advance(time.Second)
	for range 4 {
		go func() { _, err := v.Verify(ctx, tok); errs <- err }()
	}
	time.Sleep(50 * time.Millisecond) // let them reach the fetch; joining late is fine too
	close(hold)
	for range 5 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("token of the rotated key: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a verification did not return")
		}
	}
	// Any that came after the fetch ended found k2 cached: one fetch in all.
	if _, jwks := ti.counts(); jwks-jwksBefore != 1 {
		t.Fatalf("JWKS fetched %d times, want 1", jwks-jwksBefore)
	}
}

func TestParseJWKSKeepsPublicSignatureKeys(t *testing.T) {
	rsaPub := func(kid, alg, use string) jose.JSONWebKey {
		return jose.JSONWebKey{Key: &rsaKeys()[0].PublicKey, KeyID: kid, Algorithm: alg, Use: use}
	}
	var raws []json.RawMessage
	add := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		raws = append(raws, b)
	}
	add(rsaPub("sig", "RS256", "sig"))
	add(rsaPub("no-alg-no-use", "", ""))
	add(rsaPub("enc", "RSA-OAEP", "enc"))
	add(rsaPub("hs-alg", "HS256", "sig"))
	add(jose.JSONWebKey{Key: []byte(strings.Repeat("k", 32)), KeyID: "oct"})
	add(jose.JSONWebKey{Key: rsaKeys()[1], KeyID: "private", Algorithm: "RS256"})
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	add(jose.JSONWebKey{Key: &ecKey.PublicKey, KeyID: "ec", Algorithm: "ES256", Use: "sig"})
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	add(jose.JSONWebKey{Key: edPub, KeyID: "ed", Algorithm: "EdDSA"})
	add(map[string]any{"kty": "XYZ", "kid": "unknown-type"})
	add(map[string]any{"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"})
	add("not an object")
	// A decoy spelling of "use" does not hide an encryption key.
	raws = append(raws, json.RawMessage(strings.Replace(string(mustJSON(t, rsaPub("enc-decoy", "", "enc"))), "{", `{"USE":"sig",`, 1)))
	doc, err := json.Marshal(map[string]any{"keys": raws})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := parseJWKS(doc)
	if err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, k := range keys {
		kids = append(kids, k.KeyID)
		if !k.IsPublic() {
			t.Fatalf("key %q kept with its private half", k.KeyID)
		}
	}
	if want := []string{"sig", "no-alg-no-use", "ec", "ed"}; !slices.Equal(kids, want) {
		t.Fatalf("kept %v, want %v", kids, want)
	}
	for _, bad := range []string{"", "[]", `{"keys":{}}`, "<html>"} {
		if _, err := parseJWKS([]byte(bad)); err == nil {
			t.Fatalf("parseJWKS(%q) succeeded", bad)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A key set document larger than the bound is refused as soon as the bound
// is passed: the issuer below never ends its body, so a reader that waited
// for the end would fail on its timeout instead.
func TestOIDCRefusesAnOversizedKeySet(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"keys":[],"pad":"`))
		_, _ = w.Write([]byte(strings.Repeat("x", maxJWKSBytes)))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	k := newIssuerKeys(srv.URL, srv.Client(), time.Now, slog.New(slog.DiscardHandler))
	_, _, err := k.refresh(context.Background(), 0)
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized key set: %v", err)
	}
}

// A token that read the cache before a fetch ended, and failed on it, gets
// the fetched keys without a fetch of its own and without being refused
// for the spacing.
func TestOIDCLateTokenUsesTheFetchThatEnded(t *testing.T) {
	ti := newTestIssuer(t)
	clock := newFakeClock()
	k := newIssuerKeys(ti.URL()+"/keys", ti.srv.Client(), clock.Now, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	keys, _, err := k.refresh(ctx, 0)
	if err != nil || len(keys) != 1 {
		t.Fatalf("first fetch: %v keys, %v", len(keys), err)
	}
	_, jwks := ti.counts()
	keys, _, err = k.refresh(ctx, 0) // saw generation 0, before the fetch ended
	if err != nil || len(keys) != 1 {
		t.Fatalf("late token: %v keys, %v", len(keys), err)
	}
	if _, now := ti.counts(); now != jwks {
		t.Fatal("a late token fetched again")
	}
	if _, _, err := k.refresh(ctx, 1); !errors.Is(err, errKidSpaced) {
		t.Fatalf("a token that saw the fetched keys, within the spacing: %v", err)
	}
}

// A failed fetch keeps the keys of the last good one; a token without a
// kid is checked against every key. A token no cached key verifies while
// the keys cannot be fetched could not be checked: 503 (ErrUnavailable),
// not 401, which would make a client drop valid credentials; once the
// keys are fetched again, a forgery is a 401.
func TestOIDCKeepsKeysWhenAFetchFails(t *testing.T) {
	ti, clock, v, _ := warmVerifier(t)
	ctx := context.Background()
	valid := ti.token(t, oidcClaims(ti.URL(), clock.Now()))
	ti.mu.Lock()
	ti.jwksDown = true
	ti.mu.Unlock()
	clock.Advance(time.Second)
	_, jwksBefore := ti.counts()
	_, err := v.Verify(ctx, signRSA(t, "unknown", rsaKeys()[2], oidcClaims(ti.URL(), clock.Now())))
	wantErr(t, err, ErrUnavailable)
	if _, jwks := ti.counts(); jwks != jwksBefore+1 {
		t.Fatalf("the unknown kid fetched the JWKS %d times, want 1", jwks-jwksBefore)
	}
	if _, err := v.Verify(ctx, valid); err != nil {
		t.Fatalf("known key after a failed fetch: %v", err)
	}
	if _, err := v.Verify(ctx, signRSA(t, "", rsaKeys()[0], oidcClaims(ti.URL(), clock.Now()))); err != nil {
		t.Fatalf("token without a kid: %v", err)
	}
	_, err = v.Verify(ctx, signRSA(t, "", rsaKeys()[2], oidcClaims(ti.URL(), clock.Now())))
	wantErr(t, err, ErrUnavailable)

	ti.mu.Lock()
	ti.jwksDown = false
	ti.mu.Unlock()
	clock.Advance(time.Second)
	_, err = v.Verify(ctx, signRSA(t, "unknown", rsaKeys()[2], oidcClaims(ti.URL(), clock.Now())))
	wantErr(t, err, ErrInvalidToken)
	_, err = v.Verify(ctx, signRSA(t, "", rsaKeys()[2], oidcClaims(ti.URL(), clock.Now())))
	wantErr(t, err, ErrInvalidToken)
}

func TestAsymmetricAlgs(t *testing.T) {
	got := asymmetricAlgs([]string{"HS256", "RS256", "none", "ES256", "EdDSA", "HS512"})
	if !slices.Equal(got, []string{"RS256", "ES256", "EdDSA"}) {
		t.Fatalf("asymmetricAlgs = %v", got)
	}
}

func TestOIDCLazyDiscovery(t *testing.T) {
	ti := newTestIssuer(t)
	ti.setDown(true)
	clock := newFakeClock()
	ctx := context.Background()
	v := newTestOIDCVerifier(t, ti, clock, func(c *OIDCConfig) { c.DiscoveryRetry = 10 * time.Second })
	if d, _ := ti.counts(); d != 0 {
		t.Fatalf("construction contacted the issuer %d times", d)
	}
	tok := ti.token(t, oidcClaims(ti.URL(), clock.Now()))

	_, err := v.Verify(ctx, tok)
	wantErr(t, err, ErrUnavailable)
	// Within the retry interval: fail fast, no new discovery.
	clock.Advance(5 * time.Second)
	_, err = v.Verify(ctx, tok)
	wantErr(t, err, ErrUnavailable)
	if d, _ := ti.counts(); d != 1 {
		t.Fatalf("discovery tried %d times within the retry interval, want 1", d)
	}
	// The issuer comes back; after the interval, discovery succeeds.
	ti.setDown(false)
	clock.Advance(5 * time.Second)
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Fatalf("after the issuer came back: %v", err)
	}
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if d, _ := ti.counts(); d != 2 {
		t.Fatalf("discovery ran %d times, want 2", d)
	}
}

func TestOIDCDiscoverForced(t *testing.T) {
	ti := newTestIssuer(t)
	ti.setDown(true)
	clock := newFakeClock()
	v := newTestOIDCVerifier(t, ti, clock, nil)
	wantErr(t, v.Discover(context.Background()), ErrUnavailable)
	ti.setDown(false)
	if err := v.Discover(context.Background()); err != nil {
		t.Fatalf("Discover ignores the retry interval: %v", err)
	}
}

func TestOIDCExplicitJWKSSkipsDiscovery(t *testing.T) {
	ti := newTestIssuer(t)
	ti.setDown(true)
	clock := newFakeClock()
	v := newTestOIDCVerifier(t, ti, clock, func(c *OIDCConfig) { c.JWKSURL = ti.URL() + "/keys" })
	if _, err := v.Verify(context.Background(), ti.token(t, oidcClaims(ti.URL(), clock.Now()))); err != nil {
		t.Fatal(err)
	}
	if d, jwks := ti.counts(); d != 0 || jwks != 1 {
		t.Fatalf("discovery %d, JWKS %d; want 0, 1", d, jwks)
	}
}

func TestOIDCConfigValidation(t *testing.T) {
	for name, cfg := range map[string]OIDCConfig{
		"no issuer":      {Audience: "a"},
		"no audience":    {IssuerURL: "https://idp.example"},
		"negative retry": {IssuerURL: "https://idp.example", Audience: "a", DiscoveryRetry: -1},
	} {
		if _, err := NewOIDCVerifier(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestRolesFromClaims(t *testing.T) {
	claims := map[string]any{
		"groups":                       []any{"a", "b"},
		"role":                         "admin",
		"empty":                        "",
		"null":                         nil,
		"number":                       3.0,
		"mixed":                        []any{"a", true},
		"realm_access":                 map[string]any{"roles": []any{"r1"}},
		"https://example.com/roles":    []any{"namespaced"},
		"a.b":                          []any{"dotted top-level"},
		"a":                            map[string]any{"b": []any{"nested"}},
		"resource_access":              map[string]any{"floe": map[string]any{"roles": []any{"deep"}}},
		"resource_access_not_a_object": "x",
	}
	for _, tc := range []struct {
		name    string
		want    []string
		wantErr bool
	}{
		{"", nil, false},
		{"groups", []string{"a", "b"}, false},
		{"role", []string{"admin"}, false},
		{"empty", nil, false},
		{"null", nil, false},
		{"absent", nil, false},
		{"number", nil, true},
		{"mixed", nil, true},
		{"realm_access.roles", []string{"r1"}, false},
		{"https://example.com/roles", []string{"namespaced"}, false},
		{"a.b", []string{"dotted top-level"}, false},
		{"resource_access.floe.roles", []string{"deep"}, false},
		{"resource_access_not_a_object.x", nil, false},
	} {
		got, err := rolesFromClaims(claims, tc.name)
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("rolesFromClaims(%q) = %v, %v; want %v, error %v", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestPeekIssuer(t *testing.T) {
	enc := func(s string) string { return jwtB64.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		raw  string
		want string
		ok   bool
	}{
		{enc(`{"alg":"RS256"}`) + "." + enc(`{"iss":"https://idp"}`) + ".sig", "https://idp", true},
		{enc(`{}`) + "." + enc(`{"sub":"x"}`) + ".sig", "", true},
		{enc(`{}`) + "." + enc(`{"iss":5}`) + ".sig", "", false},
		{enc(`{}`) + "." + enc(`not json`) + ".sig", "", false},
		{"a.!!!.c", "", false},
		{"a.b", "", false},
		{"floe_x", "", false},
	} {
		got, ok := peekIssuer(tc.raw)
		if got != tc.want || ok != tc.ok {
			t.Errorf("peekIssuer(%q) = %q, %v", tc.raw, got, ok)
		}
	}
}

// A password in the issuer or key set URL (basic auth to the IdP) is never
// logged nor put in an error message: it is masked as url.URL.Redacted
// masks it.
func TestOIDCURLPasswordsAreNotLogged(t *testing.T) {
	const pw = "IDP-PASSWORD-123"
	ti := newTestIssuer(t)
	withPW := strings.Replace(ti.URL(), "http://", "http://u:"+pw+"@", 1)
	clock := newFakeClock()
	var logs testenv.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	// Discovery fails (the issuer is down): its warning and the error.
	ti.setDown(true)
	v := newTestOIDCVerifier(t, ti, clock, func(c *OIDCConfig) { c.IssuerURL, c.Logger = withPW, log })
	_, err := v.Verify(context.Background(), ti.token(t, oidcClaims(withPW, clock.Now())))
	wantErr(t, err, ErrUnavailable)
	_, err2 := v.Verify(context.Background(), ti.token(t, oidcClaims(withPW, clock.Now())))
	wantErr(t, err2, ErrUnavailable)

	// The issuer is up: its document names the issuer without the
	// password, which go-oidc reports quoting the URL as given.
	ti.setDown(false)
	v = newTestOIDCVerifier(t, ti, clock, func(c *OIDCConfig) { c.IssuerURL, c.Logger = withPW, log })
	err3 := v.Discover(context.Background())
	wantErr(t, err3, ErrUnavailable)
	if !strings.Contains(err3.Error(), "did not match") {
		t.Fatalf("not the mismatch this test checks: %v", err3)
	}

	// The key set is fetched from an explicit URL with a password.
	v = newTestOIDCVerifier(t, ti, clock, func(c *OIDCConfig) { c.IssuerURL, c.JWKSURL, c.Logger = withPW, withPW+"/keys", log })
	if _, err := v.Verify(context.Background(), ti.token(t, oidcClaims(withPW, clock.Now()))); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "OIDC discovery failed") || !strings.Contains(logs.String(), "OIDC signing keys fetched") {
		t.Fatalf("the log lines this test checks are missing:\n%s", logs.String())
	}
	for what, s := range map[string]string{"log": logs.String(), "first error": err.Error(), "error within the retry interval": err2.Error(), "mismatch error": err3.Error()} {
		if strings.Contains(s, pw) {
			t.Errorf("the %s holds the URL's password:\n%s", what, s)
		}
	}
}
