package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// Static bearer tokens look like
//
//	floe_<id>_<secret>
//
// where id is 16 lower-case hex characters (8 random bytes) and secret is 32
// random bytes in unpadded base64url (43 characters). The base64url alphabet
// contains '_', so the token is split by position, not by searching for the
// last '_': the prefix and the id have fixed lengths and the id never
// contains '_'.
const (
	staticTokenPrefix = "floe_"
	staticIDLen       = 16
	staticSecretLen   = 43 // base64.RawURLEncoding.EncodedLen(32)
	staticTokenLen    = len(staticTokenPrefix) + staticIDLen + 1 + staticSecretLen
)

// NewStaticToken returns a fresh token id and the full token. Store the id
// with HashToken of the secret half (ParseStaticToken(token)); hand the
// token to its owner once and never store it.
func NewStaticToken() (id, token string) {
	id = hex.EncodeToString(randomBytes(staticIDLen / 2))
	token, _ = NewStaticTokenWithID(id)
	return id, token
}

// NewStaticTokenWithID is NewStaticToken for a given id, which must be 16
// lower-case hex characters (ok false otherwise): a fresh secret under a
// known id, for a creation that must name the same id when retried.
func NewStaticTokenWithID(id string) (token string, ok bool) {
	if len(id) != staticIDLen || strings.Trim(id, "0123456789abcdef") != "" {
		return "", false
	}
	return staticTokenPrefix + id + "_" + NewSecret(), true
}

// ParseStaticToken splits a token made by NewStaticToken into its id and
// secret. ok is false for anything else (wrong prefix, length, id
// characters or secret encoding); it never fails otherwise.
func ParseStaticToken(token string) (id, secret string, ok bool) {
	if len(token) != staticTokenLen || !strings.HasPrefix(token, staticTokenPrefix) {
		return "", "", false
	}
	rest := token[len(staticTokenPrefix):]
	id, secret = rest[:staticIDLen], rest[staticIDLen+1:]
	if rest[staticIDLen] != '_' || !isLowerHex(id) {
		return "", "", false
	}
	if b, err := base64.RawURLEncoding.Strict().DecodeString(secret); err != nil || len(b) != 32 {
		return "", "", false
	}
	return id, secret, true
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// HashToken returns the lower-case hex SHA-256 of a static token's secret.
// A fast hash is right here, unlike for client secrets: the secret is 256
// random bits, so no dictionary or brute-force attack on a stolen hash is
// feasible however cheap each guess is, and Authenticate checks a static
// token on every request.
func HashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// VerifyToken reports whether secret matches hash (as made by HashToken),
// comparing in constant time. A malformed hash never matches.
func VerifyToken(hash, secret string) bool {
	want, err := hex.DecodeString(hash)
	if err != nil || len(want) != sha256.Size {
		return false
	}
	got := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(got[:], want) == 1
}
