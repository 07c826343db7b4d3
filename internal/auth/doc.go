// Package auth authenticates callers of the catalog and decides what they
// may do.
//
// It holds the pieces that need no replicated state of their own:
//
//   - Principal and the request context that carries it;
//   - secret hashing (argon2id, for OAuth client secrets) and static bearer
//     tokens (floe_<id>_<secret>, stored as a SHA-256);
//   - Ed25519 signing keys, the Issuer that signs floe's JWT access tokens
//     and the Verifier that checks them against a key ring (KeySource);
//   - OIDCVerifier, for access tokens of an external OpenID Connect issuer;
//   - Authenticator, which reads "Authorization: Bearer" and tries the root
//     token, static tokens, floe JWTs and OIDC in that order;
//   - TokenHandler, the Iceberg REST "POST /v1/oauth/tokens" endpoint
//     (client_credentials and a minimal token exchange);
//   - Allowed and Visible, the pure authorization decision over grants.
//
// The replicated state (key ring, OAuth clients, static tokens, grants) is
// read through the small interfaces KeySource, ClientSource and TokenSource;
// this package imports nothing else from the module. See DESIGN.md.
package auth
