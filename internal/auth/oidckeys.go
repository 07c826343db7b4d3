package auth

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// spacedKeySet wraps go-oidc's RemoteKeySet, which fetches the issuer's
// keys again whenever a token names a kid it does not hold. A kid whose
// signature has verified before goes straight through; a kid that never
// has is tried at most once per minForcedRefresh, so forged tokens with
// random kids cost the issuer at most ten key fetches a second.
type spacedKeySet struct {
	inner oidc.KeySet
	now   func() time.Time

	mu          sync.Mutex
	known       map[string]bool // kids whose signatures verified
	lastUnknown time.Time       // last time an unknown kid was tried
}

func newSpacedKeySet(inner oidc.KeySet, now func() time.Time) *spacedKeySet {
	return &spacedKeySet{inner: inner, now: now, known: map[string]bool{}}
}

// errKidSpaced refuses an unknown kid tried too soon after another.
var errKidSpaced = errors.New("unknown signing key; not fetching the issuer's keys again so soon")

// VerifySignature implements oidc.KeySet. go-oidc has already checked the
// algorithm and passes its parsed token in ctx, which is handed on as is.
func (k *spacedKeySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	kid := peekKid(jwt)
	if !k.mayTry(kid) {
		return nil, errKidSpaced
	}
	payload, err := k.inner.VerifySignature(ctx, jwt)
	if err == nil {
		k.mu.Lock()
		k.known[kid] = true // only the issuer's real keys get here
		k.mu.Unlock()
	}
	return payload, err
}

// mayTry reports whether a token with this kid may be verified now, and
// records the attempt of an unknown kid.
func (k *spacedKeySet) mayTry(kid string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.known[kid] {
		return true
	}
	now := k.now()
	if !k.lastUnknown.IsZero() && now.Sub(k.lastUnknown) < minForcedRefresh {
		return false
	}
	k.lastUnknown = now
	return true
}

// asymmetricAlgs keeps the algorithms go-oidc verifies (all asymmetric) of
// a discovery document's list, so an issuer advertising HS256 cannot make
// floe accept MACs keyed with public data. Empty result: go-oidc's default,
// RS256.
func asymmetricAlgs(algs []string) []string {
	var out []string
	for _, a := range algs {
		switch a {
		case oidc.RS256, oidc.RS384, oidc.RS512, oidc.ES256, oidc.ES384, oidc.ES512, oidc.PS256, oidc.PS384, oidc.PS512, oidc.EdDSA:
			out = append(out, a)
		}
	}
	return out
}
