package auth

import "context"

// How a principal authenticated (Principal.Via).
const (
	ViaJWT         = "jwt"
	ViaOIDC        = "oidc"
	ViaStaticToken = "static-token"
	ViaRoot        = "root"
)

// RootPrincipal is the name of the principal the root token authenticates.
const RootPrincipal = "root"

// AnonymousPrincipal is the name logs, audit lines and records of who
// changed what give a request without a principal (authentication off).
const AnonymousPrincipal = "anonymous"

// Reserved reports whether name is one only floe itself gives: a client,
// token, grant or external identity of that name would read as the root
// token's, or as no one's, in the audit log and in records of who changed
// what.
func Reserved(name string) bool {
	return name == RootPrincipal || name == AnonymousPrincipal
}

// RootRole is the role the root principal carries implicitly.
const RootRole = "admin"

// Principal is an authenticated caller.
type Principal struct {
	// Name identifies the caller: the OAuth client's principal, a static
	// token's principal, the OIDC principal claim, or "root".
	Name string
	// Roles the caller holds, as of when its credentials were issued (for
	// floe JWTs) or checked (static tokens, OIDC).
	Roles []string
	// Via is how the caller authenticated: ViaJWT, ViaOIDC, ViaStaticToken
	// or ViaRoot.
	Via string
}

// IsRoot reports whether p is the root principal authenticated by the root
// token. A principal merely named "root" by another mechanism is not.
func (p Principal) IsRoot() bool {
	return p.Via == ViaRoot && p.Name == RootPrincipal
}

type principalKey struct{}

// WithPrincipal returns a context that carries p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal stored by WithPrincipal; ok is false if
// there is none.
func FromContext(ctx context.Context) (p Principal, ok bool) {
	p, ok = ctx.Value(principalKey{}).(Principal)
	return p, ok
}
