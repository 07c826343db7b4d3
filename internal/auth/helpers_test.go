package auth

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// memKeys is an in-memory KeySource that counts reads.
type memKeys struct {
	mu    sync.Mutex
	keys  []SigningKey
	reads int
	err   error
}

func (m *memKeys) SigningKeys(context.Context) ([]SigningKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	if m.err != nil {
		return nil, m.err
	}
	return append([]SigningKey(nil), m.keys...), nil
}

func (m *memKeys) add(k SigningKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keys = append(m.keys, k)
}

func (m *memKeys) retire(id string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.keys {
		if m.keys[i].ID == id {
			m.keys[i].RetiredAt = at
		}
	}
}

func (m *memKeys) setErr(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.err = err
}

func (m *memKeys) readCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reads
}

// jwtFixture is an Issuer and a Verifier over one in-memory ring.
type jwtFixture struct {
	clock    *fakeClock
	keys     *memKeys
	issuer   *Issuer
	verifier *Verifier
	key      SigningKey
}

func newJWTFixture(t testing.TB) *jwtFixture {
	t.Helper()
	clock := newFakeClock()
	key, err := NewSigningKey(clock.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	keys := &memKeys{keys: []SigningKey{key}}
	cfg := JWTConfig{Keys: keys, Audience: "cluster-1", Now: clock.Now}
	issuer, err := NewIssuer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &jwtFixture{clock: clock, keys: keys, issuer: issuer, verifier: verifier, key: key}
}

func (f *jwtFixture) issue(t testing.TB, req IssueRequest) string {
	t.Helper()
	tok, _, err := f.issuer.Issue(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// wantErr fails unless err wraps want (nil: no error).
func wantErr(t *testing.T, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want %v", err, want)
	}
}

// cheapParams make test hashes fast; VerifySecret reads the parameters
// from the hash, so verification is fast too.
var cheapParams = argon2Params{memoryKiB: 64, time: 1, threads: 1, saltLen: 16, keyLen: 32}

func cheapHash(t testing.TB, secret string) string {
	t.Helper()
	h, err := hashSecret(secret, cheapParams)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
