package auth

import (
	"encoding/json"
	"net/http"
)

// OAuth error codes of the Iceberg REST spec's OAuthError (RFC 6749 5.2).
const (
	oauthInvalidRequest       = "invalid_request"
	oauthInvalidClient        = "invalid_client"
	oauthInvalidGrant         = "invalid_grant"
	oauthUnsupportedGrantType = "unsupported_grant_type"
	oauthInvalidScope         = "invalid_scope"
)

// oauthError is the spec's OAuthError body.
type oauthError struct {
	Error       string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

// tokenResponse is the spec's OAuthTokenResponse body.
type tokenResponse struct {
	AccessToken     string `json:"access_token"`
	TokenType       string `json:"token_type"`
	ExpiresIn       int64  `json:"expires_in"`
	IssuedTokenType string `json:"issued_token_type"`
	Scope           string `json:"scope,omitempty"`
}

// writeOAuthJSON writes a token endpoint answer. Token responses must not
// be cached (RFC 6749 5.1), and neither should errors.
func writeOAuthJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
