package auth

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRequire(t *testing.T) {
	f := newAuthFixture(t)
	var seen Principal
	var seenOK bool
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, seenOK = FromContext(r.Context())
		w.WriteHeader(http.StatusNoContent)
	})
	open := func(r *http.Request) bool { return r.URL.Path == "/v1/oauth/tokens" }
	h := Require(f.auth, open, nil)(next)

	serve := func(path, header string) *httptest.ResponseRecorder {
		seen, seenOK = Principal{}, false
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	if w := serve("/v1/oauth/tokens", ""); w.Code != http.StatusNoContent || seenOK {
		t.Fatalf("open path: %d, principal %v", w.Code, seenOK)
	}
	if w := serve("/v1/config", "Bearer "+testRootToken); w.Code != http.StatusNoContent || !seenOK || !seen.IsRoot() {
		t.Fatalf("authenticated: %d, %+v %v", w.Code, seen, seenOK)
	}

	w := serve("/v1/config", "")
	if w.Code != http.StatusUnauthorized || !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("no credentials: %d %q", w.Code, w.Header().Get("WWW-Authenticate"))
	}
	var body struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	if err := json.NewDecoder(w.Body).Decode(&body); err != nil || body.Error.Code != 401 || body.Error.Type != "NotAuthorizedException" {
		t.Fatalf("body %+v, %v", body, err)
	}
	w = serve("/v1/config", "Bearer nope")
	if w.Code != http.StatusUnauthorized || !strings.Contains(w.Header().Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Fatalf("invalid token: %d %q", w.Code, w.Header().Get("WWW-Authenticate"))
	}
	if seenOK {
		t.Fatal("next handler ran for a refused request")
	}

	// A custom onFail gets the error.
	var failErr error
	h2 := Require(f.auth, nil, func(w http.ResponseWriter, r *http.Request, err error) {
		failErr = err
		w.WriteHeader(http.StatusTeapot)
	})(next)
	w = httptest.NewRecorder()
	h2.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/oauth/tokens", nil))
	if w.Code != http.StatusTeapot || !errors.Is(failErr, ErrNoCredentials) {
		t.Fatalf("custom onFail: %d, %v", w.Code, failErr)
	}
}

func TestDefaultOnFailUnavailable(t *testing.T) {
	w := httptest.NewRecorder()
	DefaultOnFail(w, httptest.NewRequest(http.MethodGet, "/", nil), ErrUnavailable)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("WWW-Authenticate") != "" {
		t.Fatalf("%d %q", w.Code, w.Header().Get("WWW-Authenticate"))
	}
}
