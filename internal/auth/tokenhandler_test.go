package auth

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// memClients is an in-memory ClientSource.
type memClients struct {
	mu   sync.Mutex
	recs map[string]ClientRecord
	err  error
}

func (m *memClients) Client(_ context.Context, id string) (ClientRecord, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return ClientRecord{}, false, m.err
	}
	rec, ok := m.recs[id]
	return rec, ok, nil
}

func (m *memClients) set(id string, rec ClientRecord) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs[id] = rec
}

func (m *memClients) remove(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, id)
}

type handlerFixture struct {
	*jwtFixture
	clients *memClients
	handler *TokenHandler
	logs    *bytes.Buffer
	secret  string
}

func newHandlerFixture(t *testing.T, edit func(*TokenHandlerConfig)) *handlerFixture {
	t.Helper()
	f := newJWTFixture(t)
	secret := NewSecret()
	clients := &memClients{recs: map[string]ClientRecord{
		"etl":      {SecretHash: cheapHash(t, secret), Principal: "etl-service", Roles: []string{"writers"}},
		"svc:odd":  {SecretHash: cheapHash(t, secret)},
		"corrupt":  {SecretHash: "$argon2id$garbage", Principal: "x"},
		"reporter": {SecretHash: cheapHash(t, secret), Principal: "reporter", Roles: []string{"readers"}},
	}}
	logs := &bytes.Buffer{}
	cfg := TokenHandlerConfig{
		Clients:    clients,
		Issuer:     f.issuer,
		Verifier:   f.verifier,
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer: prometheus.NewRegistry(),
	}
	if edit != nil {
		edit(&cfg)
	}
	h, err := NewTokenHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &handlerFixture{jwtFixture: f, clients: clients, handler: h, logs: logs, secret: secret}
}

// post sends a form to the handler; basic, if non-nil, is user and
// password for HTTP Basic authentication (sent as given).
func (f *handlerFixture) post(form url.Values, basic []string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/oauth/tokens", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if basic != nil {
		r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(basic[0]+":"+basic[1])))
	}
	w := httptest.NewRecorder()
	f.handler.ServeHTTP(w, r)
	return w
}

type tokenBody struct {
	AccessToken     string `json:"access_token"`
	TokenType       string `json:"token_type"`
	ExpiresIn       int64  `json:"expires_in"`
	IssuedTokenType string `json:"issued_token_type"`
	Scope           string `json:"scope"`
	Error           string `json:"error"`
	Description     string `json:"error_description"`
}

func decode(t *testing.T, w *httptest.ResponseRecorder) tokenBody {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("Cache-Control %q", cc)
	}
	var b tokenBody
	if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	return b
}

func clientForm(id, secret string) url.Values {
	v := url.Values{"grant_type": {"client_credentials"}, "scope": {"PRINCIPAL_ROLE:ALL"}}
	if id != "" {
		v.Set("client_id", id)
	}
	if secret != "" {
		v.Set("client_secret", secret)
	}
	return v
}

func TestTokenClientCredentials(t *testing.T) {
	f := newHandlerFixture(t, nil)
	w := f.post(clientForm("etl", f.secret), nil)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	b := decode(t, w)
	if b.TokenType != "bearer" || b.ExpiresIn != 3600 || b.IssuedTokenType != TokenTypeAccessToken || b.Scope != "PRINCIPAL_ROLE:ALL" {
		t.Fatalf("response %+v", b)
	}
	p, err := f.verifier.Verify(context.Background(), b.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "etl-service" || !slices.Equal(p.Roles, []string{"writers"}) || p.Via != ViaJWT {
		t.Fatalf("principal %+v", p)
	}
	claims, err := f.verifier.verify(context.Background(), b.AccessToken)
	if err != nil || claims.ClientID != "etl" || claims.Scope != "PRINCIPAL_ROLE:ALL" {
		t.Fatalf("claims %+v, %v", claims, err)
	}

	// No scope: none echoed.
	form := clientForm("etl", f.secret)
	form.Del("scope")
	if b := decode(t, f.post(form, nil)); b.Scope != "" || b.AccessToken == "" {
		t.Fatalf("no scope: %+v", b)
	}
	if got := testutil.ToFloat64(f.handler.metrics.issued.WithLabelValues("client_credentials")); got != 2 {
		t.Fatalf("floe_auth_tokens_issued_total = %v", got)
	}
}

func TestTokenClientCredentialsBasic(t *testing.T) {
	f := newHandlerFixture(t, nil)
	form := url.Values{"grant_type": {"client_credentials"}}

	// RFC 6749 2.3.1: id and secret are form-encoded before base64.
	w := f.post(form, []string{url.QueryEscape("svc:odd"), url.QueryEscape(f.secret)})
	if w.Code != http.StatusOK {
		t.Fatalf("Basic: %d %s", w.Code, w.Body)
	}
	p, err := f.verifier.Verify(context.Background(), decode(t, w).AccessToken)
	if err != nil || p.Name != "svc:odd" {
		t.Fatalf("principal defaults to the client id: %+v %v", p, err)
	}

	// Basic and a matching body is fine; a conflicting body is not.
	both := clientForm("etl", f.secret)
	if w := f.post(both, []string{"etl", f.secret}); w.Code != http.StatusOK {
		t.Fatalf("Basic + same body: %d %s", w.Code, w.Body)
	}
	if w := f.post(clientForm("reporter", f.secret), []string{"etl", f.secret}); w.Code != http.StatusBadRequest || decode(t, w).Error != "invalid_request" {
		t.Fatalf("Basic + other body: %d %s", w.Code, w.Body)
	}

	// Wrong secret with Basic: 401 with a Basic challenge.
	w = f.post(form, []string{"etl", "wrong"})
	if w.Code != http.StatusUnauthorized || decode(t, w).Error != "invalid_client" || !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Basic") {
		t.Fatalf("wrong secret, Basic: %d %q %s", w.Code, w.Header().Get("WWW-Authenticate"), w.Body)
	}
}

func TestTokenClientCredentialsRefused(t *testing.T) {
	f := newHandlerFixture(t, nil)
	for _, tc := range []struct {
		name   string
		form   url.Values
		status int
		code   string
	}{
		{"wrong secret", clientForm("etl", "wrong"), 401, "invalid_client"},
		{"unknown client", clientForm("nobody", f.secret), 401, "invalid_client"},
		{"corrupt stored hash", clientForm("corrupt", f.secret), 401, "invalid_client"},
		{"no client_id", clientForm("", f.secret), 400, "invalid_request"},
		{"no client_secret", clientForm("etl", ""), 400, "invalid_request"},
		{"no grant_type", url.Values{"client_id": {"etl"}, "client_secret": {f.secret}}, 400, "invalid_request"},
		{"password grant", url.Values{"grant_type": {"password"}, "username": {"a"}, "password": {"b"}}, 400, "unsupported_grant_type"},
		{"refresh_token grant", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}}, 400, "unsupported_grant_type"},
		{"duplicate parameter", url.Values{"grant_type": {"client_credentials"}, "client_id": {"etl", "etl"}, "client_secret": {f.secret}}, 400, "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := f.post(tc.form, nil)
			b := decode(t, w)
			if w.Code != tc.status || b.Error != tc.code || b.AccessToken != "" {
				t.Fatalf("%d %+v; want %d %s", w.Code, b, tc.status, tc.code)
			}
			if w.Header().Get("WWW-Authenticate") != "" {
				t.Fatal("Basic challenge without Basic authentication")
			}
		})
	}
	if got := testutil.ToFloat64(f.handler.metrics.failed.WithLabelValues("invalid_client")); got != 3 {
		t.Fatalf("failed{invalid_client} = %v", got)
	}
	if !strings.Contains(f.logs.String(), "stored secret hash of client is unusable") {
		t.Fatal("corrupt hash not logged")
	}
}

func TestTokenRequestShape(t *testing.T) {
	f := newHandlerFixture(t, nil)
	body := clientForm("etl", f.secret).Encode()
	withScope := func(scope string) string {
		v := clientForm("etl", f.secret)
		v.Set("scope", scope)
		return v.Encode()
	}
	for _, tc := range []struct {
		name        string
		method      string
		contentType string
		body        string
		target      string
		status      int
	}{
		{"GET", http.MethodGet, "", "", "/v1/oauth/tokens", http.StatusMethodNotAllowed},
		{"JSON body", http.MethodPost, "application/json", `{"grant_type":"client_credentials"}`, "/v1/oauth/tokens", http.StatusBadRequest},
		{"no content type", http.MethodPost, "", body, "/v1/oauth/tokens", http.StatusBadRequest},
		{"charset parameter", http.MethodPost, "application/x-www-form-urlencoded; charset=UTF-8", body, "/v1/oauth/tokens", http.StatusOK},
		{"too large", http.MethodPost, "application/x-www-form-urlencoded", body + "&pad=" + strings.Repeat("x", maxTokenRequestLen), "/v1/oauth/tokens", http.StatusBadRequest},
		{"bad encoding", http.MethodPost, "application/x-www-form-urlencoded", "grant_type=%zz", "/v1/oauth/tokens", http.StatusBadRequest},
		{"usual scope", http.MethodPost, "application/x-www-form-urlencoded", withScope("catalog PRINCIPAL_ROLE:ALL"), "/v1/oauth/tokens", http.StatusOK},
		{"scope too long", http.MethodPost, "application/x-www-form-urlencoded", withScope(strings.Repeat("s", maxScopeBytes+1)), "/v1/oauth/tokens", http.StatusBadRequest},
		{"scope with control characters", http.MethodPost, "application/x-www-form-urlencoded", withScope("a\x00b\nc\x1b[31m"), "/v1/oauth/tokens", http.StatusBadRequest},
		{"credentials in the query only", http.MethodPost, "application/x-www-form-urlencoded", "grant_type=client_credentials",
			"/v1/oauth/tokens?client_id=etl&client_secret=" + url.QueryEscape(f.secret), http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.body))
			if tc.contentType != "" {
				r.Header.Set("Content-Type", tc.contentType)
			}
			w := httptest.NewRecorder()
			f.handler.ServeHTTP(w, r)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			if tc.status == http.StatusMethodNotAllowed && w.Header().Get("Allow") != http.MethodPost {
				t.Fatal("no Allow header")
			}
		})
	}
}

func TestTokenUnavailable(t *testing.T) {
	f := newHandlerFixture(t, nil)
	f.clients.mu.Lock()
	f.clients.err = errors.New("replica not ready")
	f.clients.mu.Unlock()
	w := f.post(clientForm("etl", f.secret), nil)
	if w.Code != http.StatusServiceUnavailable || decode(t, w).Error != "invalid_request" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("client store down: %d %s", w.Code, w.Body)
	}

	g := newHandlerFixture(t, nil)
	g.keys.retire(g.key.ID, g.clock.Now())
	if w := g.post(clientForm("etl", g.secret), nil); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("no signing key: %d %s", w.Code, w.Body)
	}
}

func TestTokenBusy(t *testing.T) {
	f := newHandlerFixture(t, func(c *TokenHandlerConfig) {
		c.MaxConcurrentHashes = 2
		c.MaxHashWait = time.Millisecond
	})
	// Every verification slot is taken and none is released.
	f.handler.sem <- struct{}{}
	f.handler.sem <- struct{}{}
	w := f.post(clientForm("etl", f.secret), nil)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("busy: %d %s", w.Code, w.Body)
	}
	if got := testutil.ToFloat64(f.handler.metrics.failed.WithLabelValues("busy")); got != 1 {
		t.Fatalf("failed{busy} = %v", got)
	}
	// A freed slot serves the next request.
	<-f.handler.sem
	if w := f.post(clientForm("etl", f.secret), nil); w.Code != http.StatusOK {
		t.Fatalf("after release: %d %s", w.Code, w.Body)
	}
}

func TestTokenBusyGivesUpWithRequest(t *testing.T) {
	f := newHandlerFixture(t, func(c *TokenHandlerConfig) {
		c.MaxConcurrentHashes = 1
		c.MaxHashWait = time.Hour
	})
	f.handler.sem <- struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/oauth/tokens", strings.NewReader(clientForm("etl", f.secret).Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	f.handler.ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("cancelled request: %d", w.Code)
	}
}

func TestTokenConcurrentRequests(t *testing.T) {
	f := newHandlerFixture(t, func(c *TokenHandlerConfig) { c.MaxConcurrentHashes = 2; c.MaxHashWait = time.Minute })
	var wg sync.WaitGroup
	codes := make([]int, 16)
	for i := range codes {
		wg.Go(func() {
			secret := f.secret
			if i%2 == 1 {
				secret = "wrong"
			}
			codes[i] = f.post(clientForm("etl", secret), nil).Code
		})
	}
	wg.Wait()
	for i, c := range codes {
		want := http.StatusOK
		if i%2 == 1 {
			want = http.StatusUnauthorized
		}
		if c != want {
			t.Fatalf("request %d: %d, want %d", i, c, want)
		}
	}
	if n := len(f.handler.sem); n != 0 {
		t.Fatalf("%d verification slots leaked", n)
	}
}

func exchangeForm(subject string) url.Values {
	return url.Values{
		"grant_type":         {GrantTokenExchange},
		"subject_token":      {subject},
		"subject_token_type": {TokenTypeAccessToken},
	}
}

func TestTokenExchange(t *testing.T) {
	f := newHandlerFixture(t, nil)
	ctx := context.Background()
	first := decode(t, f.post(clientForm("etl", f.secret), nil)).AccessToken

	// Roles changed since the first token: the refreshed one has the new.
	etl, _, _ := f.clients.Client(ctx, "etl")
	f.clients.set("etl", ClientRecord{SecretHash: etl.SecretHash, Principal: "etl-service", Roles: []string{"writers", "admins"}})
	f.clock.Advance(30 * time.Minute)
	w := f.post(exchangeForm(first), nil)
	if w.Code != http.StatusOK {
		t.Fatalf("exchange: %d %s", w.Code, w.Body)
	}
	b := decode(t, w)
	refreshed := b.AccessToken
	if b.IssuedTokenType != TokenTypeAccessToken || b.Scope != "PRINCIPAL_ROLE:ALL" || b.ExpiresIn != 3600 {
		t.Fatalf("response %+v", b)
	}
	p, err := f.verifier.Verify(ctx, b.AccessToken)
	if err != nil || p.Name != "etl-service" || !slices.Equal(p.Roles, []string{"writers", "admins"}) {
		t.Fatalf("refreshed principal %+v, %v", p, err)
	}
	claims, _ := f.verifier.verify(ctx, b.AccessToken)
	if claims.ExpiresAt.Time.Sub(f.clock.Now()) != time.Hour {
		t.Fatalf("refreshed token expires at %v", claims.ExpiresAt)
	}

	// A requested scope replaces the subject token's.
	form := exchangeForm(first)
	form.Set("scope", "catalog")
	form.Set("requested_token_type", TokenTypeAccessToken)
	if b := decode(t, f.post(form, nil)); b.Scope != "catalog" {
		t.Fatalf("scope %q", b.Scope)
	}
	// The JWT token type is accepted too (iceberg-go sends it).
	form = exchangeForm(first)
	form.Set("subject_token_type", TokenTypeJWT)
	if w := f.post(form, nil); w.Code != http.StatusOK {
		t.Fatalf("jwt token type: %d %s", w.Code, w.Body)
	}

	// A token issued without a client is refreshed for the same principal.
	direct := f.issue(t, IssueRequest{Principal: "bob", Roles: []string{"r"}, Scope: "s"})
	b = decode(t, f.post(exchangeForm(direct), nil))
	p, err = f.verifier.Verify(ctx, b.AccessToken)
	if err != nil || p.Name != "bob" || !slices.Equal(p.Roles, []string{"r"}) || b.Scope != "s" {
		t.Fatalf("direct token: %+v %v %+v", p, err, b)
	}

	// A token refreshed from the client's is refreshed again.
	if w := f.post(exchangeForm(refreshed), nil); w.Code != http.StatusOK {
		t.Fatalf("second refresh: %d %s", w.Code, w.Body)
	}

	// A token of an earlier release, without client_gen, issued after the
	// client was created, is refreshed (a running Java session survives
	// the upgrade).
	legacy := f.issue(t, IssueRequest{Principal: "etl-service", ClientID: "etl"})
	if w := f.post(exchangeForm(legacy), nil); w.Code != http.StatusOK {
		t.Fatalf("token without client_gen: %d %s", w.Code, w.Body)
	}

	// The client is deleted: no more refreshes.
	f.clients.remove("etl")
	w = f.post(exchangeForm(first), nil)
	if w.Code != http.StatusBadRequest || decode(t, w).Error != "invalid_grant" {
		t.Fatalf("deleted client: %d %s", w.Code, w.Body)
	}
	// Nor once a client is created again under its id, here for another
	// principal: the old tokens are not the new client's.
	f.clock.Advance(2 * time.Second)
	f.clients.set("etl", ClientRecord{SecretHash: cheapHash(t, NewSecret()), Principal: "other", Roles: []string{"admins"},
		CreatedMs: f.clock.Now().UnixMilli()})
	for _, tok := range []string{first, refreshed, legacy} {
		w = f.post(exchangeForm(tok), nil)
		if w.Code != http.StatusBadRequest || decode(t, w).Error != "invalid_grant" {
			t.Fatalf("client created again: %d %s", w.Code, w.Body)
		}
	}
	if got := testutil.ToFloat64(f.handler.metrics.issued.WithLabelValues("token_exchange")); got != 6 {
		t.Fatalf("issued{token_exchange} = %v", got)
	}
}

func TestTokenExchangeRefused(t *testing.T) {
	f := newHandlerFixture(t, nil)
	valid := f.issue(t, IssueRequest{Principal: "bob"})
	expiring := f.issue(t, IssueRequest{Principal: "bob", TTL: time.Minute})
	f.clock.Advance(time.Minute + DefaultLeeway + time.Second)
	other := newJWTFixture(t).issue(t, IssueRequest{Principal: "bob"}) // another ring
	for _, tc := range []struct {
		name string
		form url.Values
		code string
	}{
		{"expired subject", exchangeForm(expiring), "invalid_grant"},
		{"foreign subject", exchangeForm(other), "invalid_grant"},
		{"garbage subject", exchangeForm("not-a-token"), "invalid_grant"},
		{"no subject", url.Values{"grant_type": {GrantTokenExchange}, "subject_token_type": {TokenTypeAccessToken}}, "invalid_request"},
		{"no subject type", url.Values{"grant_type": {GrantTokenExchange}, "subject_token": {valid}}, "invalid_request"},
		{"id_token subject type", func() url.Values {
			v := exchangeForm(valid)
			v.Set("subject_token_type", "urn:ietf:params:oauth:token-type:id_token")
			return v
		}(), "invalid_request"},
		{"refresh token requested", func() url.Values {
			v := exchangeForm(valid)
			v.Set("requested_token_type", "urn:ietf:params:oauth:token-type:refresh_token")
			return v
		}(), "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := f.post(tc.form, nil)
			if b := decode(t, w); w.Code != http.StatusBadRequest || b.Error != tc.code {
				t.Fatalf("%d %+v, want 400 %s", w.Code, b, tc.code)
			}
		})
	}

	// The key ring cannot be read: 503, not invalid_grant.
	f.keys.setErr(errors.New("ring closed"))
	f.clock.Advance(DefaultKeyCacheTTL)
	if w := f.post(exchangeForm(valid), nil); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("ring down: %d %s", w.Code, w.Body)
	}

	// Without a Verifier, token exchange is not offered.
	g := newHandlerFixture(t, func(c *TokenHandlerConfig) { c.Verifier = nil })
	if w := g.post(exchangeForm(valid), nil); decode(t, w).Error != "unsupported_grant_type" {
		t.Fatalf("no verifier: %d %s", w.Code, w.Body)
	}
}

// TestTokenExchangeOfAnExpiredTokenWithTheClientsCredentials: Java's
// client refreshes a token that has already expired by exchanging it with
// its client's credentials (HTTP Basic); authenticated, that issues the
// client's token as client_credentials would. Wrong credentials, or none,
// still leave an expired subject refused.
func TestTokenExchangeOfAnExpiredTokenWithTheClientsCredentials(t *testing.T) {
	f := newHandlerFixture(t, nil)
	expired := decode(t, f.post(clientForm("etl", f.secret), nil)).AccessToken
	f.clock.Advance(time.Hour + DefaultLeeway + time.Second)

	w := f.post(exchangeForm(expired), []string{"etl", f.secret})
	if w.Code != http.StatusOK {
		t.Fatalf("expired subject with the client's credentials: %d %s", w.Code, w.Body)
	}
	p, err := f.verifier.Verify(context.Background(), decode(t, w).AccessToken)
	if err != nil || p.Name != "etl-service" {
		t.Fatalf("the client's principal: %+v %v", p, err)
	}
	inForm := exchangeForm(expired)
	inForm.Set("client_id", "etl")
	inForm.Set("client_secret", f.secret)
	if w := f.post(inForm, nil); w.Code != http.StatusOK {
		t.Fatalf("credentials in the form: %d %s", w.Code, w.Body)
	}
	if w := f.post(exchangeForm(expired), []string{"etl", "wrong"}); w.Code != http.StatusUnauthorized || decode(t, w).Error != "invalid_client" {
		t.Fatalf("wrong secret: %d %s", w.Code, w.Body)
	}
	if w := f.post(exchangeForm(expired), nil); w.Code != http.StatusBadRequest || decode(t, w).Error != "invalid_grant" {
		t.Fatalf("no credentials: %d %s", w.Code, w.Body)
	}
	// A subject that is not a floe token at all is refused whatever comes
	// with it.
	if w := f.post(exchangeForm("not-a-token"), []string{"etl", f.secret}); w.Code != http.StatusBadRequest || decode(t, w).Error != "invalid_grant" {
		t.Fatalf("garbage subject: %d %s", w.Code, w.Body)
	}
}

func TestTokenHandlerNeverLogsSecrets(t *testing.T) {
	f := newHandlerFixture(t, nil)
	tok := decode(t, f.post(clientForm("etl", f.secret), nil)).AccessToken
	f.post(clientForm("etl", "wrong-secret-value"), nil)
	// A secret sent as the client id names no client: not logged either.
	f.post(clientForm("secret-in-the-id-field", f.secret), nil)
	f.post(clientForm("corrupt", f.secret), nil)
	f.post(exchangeForm(tok), nil)
	f.post(exchangeForm(tok+"x"), nil)
	f.keys.setErr(errors.New("ring closed"))
	f.clock.Advance(DefaultKeyCacheTTL)
	f.post(exchangeForm(tok), nil)
	logs := f.logs.String()
	if logs == "" {
		t.Fatal("nothing logged; the test checks nothing")
	}
	for _, s := range append([]string{f.secret, "wrong-secret-value", "secret-in-the-id-field", tok}, strings.Split(tok, ".")...) {
		if strings.Contains(logs, s) {
			t.Fatalf("logs contain a secret or token: %q", s)
		}
	}
}

func TestNewTokenHandlerValidation(t *testing.T) {
	f := newJWTFixture(t)
	for name, cfg := range map[string]TokenHandlerConfig{
		"no clients":     {Issuer: f.issuer},
		"no issuer":      {Clients: &memClients{}},
		"negative limit": {Clients: &memClients{}, Issuer: f.issuer, MaxConcurrentHashes: -1},
	} {
		if _, err := NewTokenHandler(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// With authentication off, a client configured with a credential still gets
// a token, whatever the credential, and can refresh it; malformed requests
// are refused as by the real endpoint.
func TestOpenTokenHandler(t *testing.T) {
	logs := &bytes.Buffer{}
	f := &handlerFixture{handler: NewOpenTokenHandler(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), prometheus.NewRegistry())}
	const secret = "s3cr3t-never-logged"
	for _, tc := range []struct {
		name  string
		form  url.Values
		basic []string
	}{
		{"client id and secret", clientForm("anyone", secret), nil},
		{"secret only (credential without a client id)", clientForm("", secret), nil},
		{"Basic", url.Values{"grant_type": {"client_credentials"}}, []string{"anyone", secret}},
		{"token exchange", url.Values{"grant_type": {GrantTokenExchange}, "subject_token": {OpenToken}, "subject_token_type": {TokenTypeAccessToken}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := f.post(tc.form, tc.basic)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			b := decode(t, w)
			if b.AccessToken != OpenToken || b.TokenType != "bearer" || b.ExpiresIn <= 0 || b.IssuedTokenType != TokenTypeAccessToken {
				t.Fatalf("answer %+v", b)
			}
			if b.Scope != tc.form.Get("scope") {
				t.Fatalf("scope %q, want %q", b.Scope, tc.form.Get("scope"))
			}
		})
	}
	for _, tc := range []struct {
		name string
		form url.Values
		code string
	}{
		{"no grant type", url.Values{"client_id": {"x"}}, oauthInvalidRequest},
		{"unknown grant", url.Values{"grant_type": {"password"}}, oauthUnsupportedGrantType},
		{"exchange without a subject token", url.Values{"grant_type": {GrantTokenExchange}, "subject_token_type": {TokenTypeAccessToken}}, oauthInvalidRequest},
		{"exchange of an unknown token type", url.Values{"grant_type": {GrantTokenExchange}, "subject_token": {"t"}, "subject_token_type": {"urn:x"}}, oauthInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := f.post(tc.form, nil)
			if w.Code != http.StatusBadRequest {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if b := decode(t, w); b.Error != tc.code {
				t.Fatalf("error %q, want %q", b.Error, tc.code)
			}
		})
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/oauth/tokens", strings.NewReader(`{"grant_type":"client_credentials"}`))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	f.handler.ServeHTTP(w, r)
	if w.Code != http.StatusBadRequest {
		t.Fatalf("JSON body: status %d", w.Code)
	}
	if strings.Contains(logs.String(), secret) {
		t.Fatal("a secret was logged")
	}
}

// A form labelled as coded (Content-Encoding: gzip) is refused, not read
// as it is: a gzipped form was refused for a grant_type it held, and a
// plain one so labelled was accepted.
func TestTokenRequestCodedBody(t *testing.T) {
	f := newHandlerFixture(t, nil)
	for coding, want := range map[string]int{"gzip": http.StatusBadRequest, "deflate, gzip": http.StatusBadRequest, "identity": http.StatusOK, "": http.StatusOK} {
		r := httptest.NewRequest(http.MethodPost, "/v1/oauth/tokens", strings.NewReader(clientForm("etl", f.secret).Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if coding != "" {
			r.Header.Set("Content-Encoding", coding)
		}
		w := httptest.NewRecorder()
		f.handler.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("Content-Encoding %q: status %d, want %d: %s", coding, w.Code, want, w.Body)
		}
	}
}
