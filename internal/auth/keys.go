package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// SigningKey is one Ed25519 key of the key ring that signs floe's JWTs.
type SigningKey struct {
	// ID is the JWT "kid" of tokens signed with the key.
	ID string
	// Private signs tokens. It may be nil on a node that only verifies.
	Private ed25519.PrivateKey
	// Public verifies tokens.
	Public ed25519.PublicKey
	// CreatedAt orders keys: the newest non-retired key signs.
	CreatedAt time.Time
	// RetiredAt is when the key stopped signing; zero if it has not.
	RetiredAt time.Time
}

// KeySource is the replicated key ring.
type KeySource interface {
	// SigningKeys returns every key of the ring, retired ones included, in
	// any order. An error means the ring could not be read; the caller
	// fails with ErrUnavailable (verification) or the error (issuing).
	SigningKeys(ctx context.Context) ([]SigningKey, error)
}

// NewSigningKey generates a key created at now, with a random 16-hex-digit
// ID. It fails only if key generation fails.
func NewSigningKey(now time.Time) (SigningKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return SigningKey{}, fmt.Errorf("generate signing key: %w", err)
	}
	return SigningKey{ID: hex.EncodeToString(randomBytes(8)), Private: priv, Public: pub, CreatedAt: now}, nil
}

// Retired reports whether the key has stopped signing.
func (k SigningKey) Retired() bool { return !k.RetiredAt.IsZero() }

// Verifies reports whether the key still verifies tokens at now: it is not
// retired, or it was retired less than window ago. The window is the
// longest lifetime of a token plus the clock leeway
// (Verifier.RetiredKeyWindow), so every token a key signed expires before
// the key stops verifying. A key for which Verifies is false may be removed
// from the ring.
func (k SigningKey) Verifies(now time.Time, window time.Duration) bool {
	return !k.Retired() || now.Sub(k.RetiredAt) < window
}

// ActiveKey returns the key that signs new tokens: the non-retired key with
// the latest CreatedAt, ties broken by the greater ID. ok is false if every
// key is retired or keys is empty.
func ActiveKey(keys []SigningKey) (active SigningKey, ok bool) {
	for _, k := range keys {
		if k.Retired() {
			continue
		}
		if !ok || k.CreatedAt.After(active.CreatedAt) || (k.CreatedAt.Equal(active.CreatedAt) && k.ID > active.ID) {
			active, ok = k, true
		}
	}
	return active, ok
}
