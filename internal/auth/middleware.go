package auth

import (
	"encoding/json"
	"errors"
	"net/http"
)

// Require returns middleware that authenticates every request for which
// open (may be nil) is false, stores the principal with WithPrincipal and
// calls the next handler. A request that fails to authenticate is passed to
// onFail with the Authenticate error; nil onFail writes DefaultOnFail's
// answer.
func Require(a *Authenticator, open func(*http.Request) bool, onFail func(w http.ResponseWriter, r *http.Request, err error)) func(http.Handler) http.Handler {
	if onFail == nil {
		onFail = DefaultOnFail
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if open != nil && open(r) {
				next.ServeHTTP(w, r)
				return
			}
			p, err := a.Authenticate(r)
			if err != nil {
				onFail(w, r, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
		})
	}
}

// DefaultOnFail answers an authentication failure with the Iceberg REST
// error model: 503 ServiceUnavailableException for ErrUnavailable,
// otherwise 401 NotAuthorizedException with a WWW-Authenticate: Bearer
// challenge (error="invalid_token" when a token was sent, RFC 6750).
func DefaultOnFail(w http.ResponseWriter, r *http.Request, err error) {
	status, typ, msg := http.StatusUnauthorized, "NotAuthorizedException", "Not authorized: "
	switch {
	case errors.Is(err, ErrUnavailable):
		status, typ, msg = http.StatusServiceUnavailable, "ServiceUnavailableException", "Authentication unavailable, retry later"
	case errors.Is(err, ErrNoCredentials):
		w.Header().Set("WWW-Authenticate", `Bearer realm="floe"`)
		msg += "credentials required"
	case errors.Is(err, ErrExpiredToken):
		w.Header().Set("WWW-Authenticate", `Bearer realm="floe", error="invalid_token", error_description="token expired"`)
		msg += "token expired"
	default:
		w.Header().Set("WWW-Authenticate", `Bearer realm="floe", error="invalid_token"`)
		msg += "invalid credentials"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]any{"message": msg, "type": typ, "code": status},
	})
}
