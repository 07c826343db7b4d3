package auth

import (
	"encoding/json"
	"fmt"
	"strings"
)

// rolesFromClaims reads the roles claim: absent is no roles, a string is
// one role, an array must hold only strings. A name that is not a
// top-level claim is tried as a dotted path into nested objects.
func rolesFromClaims(claims map[string]any, name string) ([]string, error) {
	if name == "" {
		return nil, nil
	}
	value, ok := claims[name]
	if !ok {
		value, ok = lookupPath(claims, strings.Split(name, "."))
	}
	if !ok || value == nil {
		return nil, nil
	}
	switch val := value.(type) {
	case string:
		if val == "" {
			return nil, nil
		}
		return []string{val}, nil
	case []any:
		roles := make([]string, 0, len(val))
		for _, e := range val {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("roles claim %q holds a non-string", name)
			}
			roles = append(roles, s)
		}
		return roles, nil
	default:
		return nil, fmt.Errorf("roles claim %q is neither a string nor an array", name)
	}
}

func lookupPath(claims map[string]any, path []string) (any, bool) {
	var cur any = claims
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// peekKid returns the "kid" header of a JWT without verifying anything; ""
// if there is none or raw is not a JWT.
func peekKid(raw string) string {
	header, _, ok := strings.Cut(raw, ".")
	if !ok {
		return ""
	}
	b, err := jwtB64.DecodeString(strings.TrimRight(header, "="))
	if err != nil {
		return ""
	}
	var h struct {
		KeyID string `json:"kid"`
	}
	if json.Unmarshal(b, &h) != nil {
		return ""
	}
	return h.KeyID
}

// peekIssuer returns the "iss" claim of a JWT without verifying anything,
// to route it to the right verifier. ok is false if raw is not three
// base64url segments with a JSON object payload.
func peekIssuer(raw string) (iss string, ok bool) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return "", false
	}
	payload, err := jwtB64.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return "", false
	}
	var claims struct {
		Issuer string `json:"iss"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", false
	}
	return claims.Issuer, true
}
