package auth

import (
	"fmt"
	"net/http"
	"strings"
)

// maxTokenLen bounds the bearer tokens Authenticate looks at; real ones are
// a few hundred bytes to a few kilobytes (OIDC tokens with many groups).
const maxTokenLen = 16 << 10

// bearerToken returns the token of "Authorization: Bearer <token>" (the
// scheme is case-insensitive). Errors wrap ErrNoCredentials when there is no
// Authorization header and ErrInvalidToken for any other scheme, several
// headers, or a token that is empty, too long or not visible ASCII.
func bearerToken(r *http.Request) (string, error) {
	values := r.Header.Values("Authorization")
	switch len(values) {
	case 0:
		return "", ErrNoCredentials
	case 1:
	default:
		return "", fmt.Errorf("%w: several Authorization headers", ErrInvalidToken)
	}
	scheme, token, _ := strings.Cut(strings.TrimSpace(values[0]), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf("%w: Authorization scheme is not Bearer", ErrInvalidToken)
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return "", fmt.Errorf("%w: empty bearer token", ErrInvalidToken)
	}
	if len(token) > maxTokenLen {
		return "", fmt.Errorf("%w: bearer token longer than %d bytes", ErrInvalidToken, maxTokenLen)
	}
	for i := 0; i < len(token); i++ {
		if token[i] <= ' ' || token[i] > '~' {
			return "", fmt.Errorf("%w: bearer token has characters outside visible ASCII", ErrInvalidToken)
		}
	}
	return token, nil
}

// redact removes a token, and each of its dot-separated segments, from a
// message a library produced about it, so errors never carry credentials.
func redact(msg, token string) string {
	if token == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, token, "[redacted]")
	for _, seg := range strings.Split(token, ".") {
		if len(seg) >= 8 {
			msg = strings.ReplaceAll(msg, seg, "[redacted]")
		}
	}
	return msg
}
