package auth

import "errors"

// Errors returned by Authenticate and the verifiers. They are wrapped with
// a reason that never contains the token or a secret; test them with
// errors.Is.
var (
	// ErrNoCredentials: the request has no Authorization header.
	ErrNoCredentials = errors.New("no credentials")
	// ErrInvalidToken: the credentials are malformed, unknown, badly
	// signed, signed by an unknown or retired key, or meant for another
	// issuer or audience.
	ErrInvalidToken = errors.New("invalid token")
	// ErrExpiredToken: the token was valid but has expired.
	ErrExpiredToken = errors.New("expired token")
	// ErrUnavailable: the credentials could not be checked right now (the
	// key ring, client or token store could not be read, or the OIDC issuer
	// could not be reached). The caller should answer 503, not 401.
	ErrUnavailable = errors.New("authentication unavailable")

	// ErrBadHash: a stored secret hash is not a PHC argon2id string this
	// package can verify.
	ErrBadHash = errors.New("bad secret hash")
	// ErrNoSigningKey: the key ring has no active key with a private half
	// on this node, so no token can be issued.
	ErrNoSigningKey = errors.New("no active signing key")
)
