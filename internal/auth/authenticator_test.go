package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const testRootToken = "root-token-0123456789"

// memTokens is an in-memory TokenSource.
type memTokens struct {
	mu   sync.Mutex
	recs map[string]TokenRecord
	err  error
}

func (m *memTokens) StaticToken(_ context.Context, id string) (TokenRecord, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return TokenRecord{}, false, m.err
	}
	rec, ok := m.recs[id]
	return rec, ok, nil
}

// newStatic stores a fresh static token and returns it.
func (m *memTokens) newStatic(principal string, roles []string, expires time.Time) string {
	id, token := NewStaticToken()
	_, secret, _ := ParseStaticToken(token)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.recs == nil {
		m.recs = map[string]TokenRecord{}
	}
	m.recs[id] = TokenRecord{Hash: HashToken(secret), Principal: principal, Roles: roles, ExpiresAt: expires}
	return token
}

type authFixture struct {
	*jwtFixture
	tokens *memTokens
	issuer *testIssuer
	auth   *Authenticator
	reg    *prometheus.Registry
}

func newAuthFixture(t *testing.T) *authFixture {
	t.Helper()
	f := newJWTFixture(t)
	ti := newTestIssuer(t)
	ov, err := NewOIDCVerifier(OIDCConfig{IssuerURL: ti.URL(), Audience: "floe", RolesClaim: "groups", Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	tokens := &memTokens{}
	reg := prometheus.NewRegistry()
	a, err := NewAuthenticator(AuthenticatorConfig{
		RootToken: testRootToken, Tokens: tokens, JWT: f.verifier, OIDC: ov, Now: f.clock.Now, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &authFixture{jwtFixture: f, tokens: tokens, issuer: ti, auth: a, reg: reg}
}

func bearerRequest(header string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/v1/config", nil)
	if header != "" {
		r.Header.Set("Authorization", header)
	}
	return r
}

func TestAuthenticateMechanisms(t *testing.T) {
	f := newAuthFixture(t)
	static := f.tokens.newStatic("etl", []string{"writers"}, time.Time{})
	floeJWT := f.jwtFixture.issue(t, IssueRequest{Principal: "alice", Roles: []string{"analysts"}})
	oidcJWT := f.issuer.token(t, oidcClaims(f.issuer.URL(), f.clock.Now()))
	for _, tc := range []struct {
		name   string
		header string
		want   Principal
	}{
		{"root", "Bearer " + testRootToken, Principal{Name: "root", Roles: []string{"admin"}, Via: ViaRoot}},
		{"static token", "Bearer " + static, Principal{Name: "etl", Roles: []string{"writers"}, Via: ViaStaticToken}},
		{"floe JWT", "Bearer " + floeJWT, Principal{Name: "alice", Roles: []string{"analysts"}, Via: ViaJWT}},
		{"OIDC JWT", "Bearer " + oidcJWT, Principal{Name: "user-123", Roles: []string{"analysts", "ops"}, Via: ViaOIDC}},
		{"lower-case scheme", "bearer " + floeJWT, Principal{Name: "alice", Roles: []string{"analysts"}, Via: ViaJWT}},
		{"upper-case scheme, extra spaces", "  BEARER   " + floeJWT + " ", Principal{Name: "alice", Roles: []string{"analysts"}, Via: ViaJWT}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := f.auth.Authenticate(bearerRequest(tc.header))
			if err != nil {
				t.Fatal(err)
			}
			if p.Name != tc.want.Name || p.Via != tc.want.Via || !slices.Equal(p.Roles, tc.want.Roles) {
				t.Fatalf("principal = %+v, want %+v", p, tc.want)
			}
		})
	}
	for via, want := range map[string]float64{ViaRoot: 1, ViaStaticToken: 1, ViaJWT: 3, ViaOIDC: 1} {
		if got := testutil.ToFloat64(f.auth.metrics.authenticated.WithLabelValues(via)); got != want {
			t.Errorf("floe_auth_authenticated_total{via=%q} = %v, want %v", via, got, want)
		}
	}
}

func TestAuthenticateFailures(t *testing.T) {
	f := newAuthFixture(t)
	now := f.clock.Now()
	static := f.tokens.newStatic("etl", nil, time.Time{})
	expiredStatic := f.tokens.newStatic("old", nil, now.Add(-time.Second))
	id, _, _ := ParseStaticToken(static)
	_, otherSecretToken := NewStaticToken()
	wrongSecret := "floe_" + id + "_" + otherSecretToken[22:]
	_, unknownStaticToken := NewStaticToken()

	floeShort := f.jwtFixture.issue(t, IssueRequest{Principal: "alice", TTL: time.Minute})
	oidcExpired := f.issuer.token(t, func() map[string]any {
		c := oidcClaims(f.issuer.URL(), now)
		c["exp"] = now.Add(-time.Hour).Unix()
		return c
	}())
	oidcWrongAud := f.issuer.token(t, func() map[string]any {
		c := oidcClaims(f.issuer.URL(), now)
		c["aud"] = "someone-else"
		return c
	}())
	// A token of another issuer that is neither floe nor the OIDC issuer
	// goes to floe's verifier, which refuses its iss.
	strangerJWT := signRSA(t, "k1", rsaKeys()[0], oidcClaims("https://stranger.example", now))

	f.clock.Advance(time.Minute + DefaultLeeway + time.Second) // floeShort has expired

	for _, tc := range []struct {
		name   string
		header string
		token  string // must not appear in the error
		want   error
	}{
		{"no header", "", "", ErrNoCredentials},
		{"basic scheme", "Basic YWxpY2U6c2VjcmV0", "YWxpY2U6c2VjcmV0", ErrInvalidToken},
		{"empty bearer", "Bearer ", "", ErrInvalidToken},
		{"scheme only", "Bearer", "", ErrInvalidToken},
		{"wrong root token", "Bearer " + testRootToken + "x", testRootToken + "x", ErrInvalidToken},
		{"static, wrong secret", "Bearer " + wrongSecret, wrongSecret, ErrInvalidToken},
		{"static, unknown id", "Bearer " + unknownStaticToken, unknownStaticToken, ErrInvalidToken},
		{"static, expired", "Bearer " + expiredStatic, expiredStatic, ErrExpiredToken},
		{"floe JWT, expired", "Bearer " + floeShort, floeShort, ErrExpiredToken},
		{"OIDC, expired", "Bearer " + oidcExpired, oidcExpired, ErrExpiredToken},
		{"OIDC, wrong audience", "Bearer " + oidcWrongAud, oidcWrongAud, ErrInvalidToken},
		{"stranger issuer", "Bearer " + strangerJWT, strangerJWT, ErrInvalidToken},
		{"opaque garbage", "Bearer s3cr3t-but-not-a-token", "s3cr3t-but-not-a-token", ErrInvalidToken},
		{"control character", "Bearer abc\x01def", "abc\x01def", ErrInvalidToken},
		{"too long", "Bearer " + strings.Repeat("a", maxTokenLen+1), strings.Repeat("a", maxTokenLen+1), ErrInvalidToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.auth.Authenticate(bearerRequest(tc.header))
			wantErr(t, err, tc.want)
			for _, s := range []error{ErrNoCredentials, ErrInvalidToken, ErrExpiredToken, ErrUnavailable} {
				if s != tc.want && errors.Is(err, s) {
					t.Errorf("error also wraps %v", s)
				}
			}
			if tc.token != "" && strings.Contains(err.Error(), tc.token) {
				t.Fatalf("error %q contains the token", err)
			}
			for _, seg := range strings.Split(tc.token, ".") {
				if len(seg) >= 8 && strings.Contains(err.Error(), seg) {
					t.Fatalf("error %q contains a token segment", err)
				}
			}
		})
	}
	if got := testutil.ToFloat64(f.auth.metrics.rejected.WithLabelValues(reasonExpired)); got != 3 {
		t.Errorf("floe_auth_rejected_total{reason=expired} = %v", got)
	}
	if got := testutil.ToFloat64(f.auth.metrics.rejected.WithLabelValues(reasonNoCredentials)); got != 1 {
		t.Errorf("floe_auth_rejected_total{reason=no_credentials} = %v", got)
	}
}

func TestAuthenticateSeveralHeaders(t *testing.T) {
	f := newAuthFixture(t)
	r := bearerRequest("Bearer " + testRootToken)
	r.Header.Add("Authorization", "Bearer other")
	_, err := f.auth.Authenticate(r)
	wantErr(t, err, ErrInvalidToken)
}

func TestAuthenticateUnavailable(t *testing.T) {
	f := newAuthFixture(t)
	static := f.tokens.newStatic("etl", nil, time.Time{})
	floeJWT := f.jwtFixture.issue(t, IssueRequest{Principal: "alice"})
	f.tokens.mu.Lock()
	f.tokens.err = errors.New("store closed")
	f.tokens.mu.Unlock()
	f.keys.setErr(errors.New("ring closed"))
	f.clock.Advance(DefaultKeyCacheTTL)
	f.issuer.setDown(true)
	oidcJWT := f.issuer.token(t, oidcClaims(f.issuer.URL(), f.clock.Now()))
	for name, tok := range map[string]string{"static": static, "jwt": floeJWT, "oidc": oidcJWT} {
		_, err := f.auth.Authenticate(bearerRequest("Bearer " + tok))
		wantErr(t, err, ErrUnavailable)
		if errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s: unavailable also reported invalid", name)
		}
		if strings.Contains(err.Error(), tok) {
			t.Errorf("%s: error contains the token", name)
		}
	}
}

func TestAuthenticateDisabledMechanisms(t *testing.T) {
	f := newJWTFixture(t)
	a, err := NewAuthenticator(AuthenticatorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	_, static := NewStaticToken()
	for name, tok := range map[string]string{
		"root token without one configured": testRootToken,
		"static token without a store":      static,
		"JWT without a verifier":            f.issue(t, IssueRequest{Principal: "a"}),
	} {
		_, err := a.Authenticate(bearerRequest("Bearer " + tok))
		if !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestNewAuthenticatorValidation(t *testing.T) {
	if _, err := NewAuthenticator(AuthenticatorConfig{RootToken: "short"}); err == nil {
		t.Error("short root token accepted")
	}
	f := newJWTFixture(t)
	ov, err := NewOIDCVerifier(OIDCConfig{IssuerURL: DefaultIssuer, Audience: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewAuthenticator(AuthenticatorConfig{JWT: f.verifier, OIDC: ov}); err == nil {
		t.Error("OIDC issuer equal to floe's accepted")
	}
}

func TestRedact(t *testing.T) {
	tok := "aaaaaaaaaa.bbbbbbbbbb.cc"
	got := redact("bad aaaaaaaaaa and bbbbbbbbbb and "+tok+" cc", tok)
	if strings.Contains(got, "aaaaaaaaaa") || strings.Contains(got, "bbbbbbbbbb") {
		t.Fatalf("redact = %q", got)
	}
	if !strings.Contains(got, " cc") {
		t.Fatalf("short segments are kept: %q", got)
	}
}
