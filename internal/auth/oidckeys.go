package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// maxJWKSBytes bounds an issuer's key set document; real ones are a few KiB.
const maxJWKSBytes = 1 << 20

// verifiableAlgs are the signature algorithms a token may name: the
// asymmetric ones. go-oidc has already held the token to the configured
// subset; this keeps a MAC keyed with public data out regardless.
var verifiableAlgs = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512,
	jose.PS256, jose.PS384, jose.PS512, jose.EdDSA,
}

// errKidSpaced refuses a token no cached key verifies, when the keys were
// fetched less than minForcedRefresh ago.
var errKidSpaced = errors.New("no known signing key verifies the token; not fetching the issuer's keys again so soon")

// issuerKeys is an OIDC issuer's signing keys (its JWKS) as go-oidc's
// KeySet. A token is checked against the cached keys of its kid (all keys
// when it names none). Only when none verifies, or the keys are older
// than maxKeyAge, are the keys fetched again, and at most once per
// minForcedRefresh, so forged tokens, whatever kid they
// name, cost the issuer at most ten fetches a second. A token arriving while
// a fetch runs waits for that fetch instead.
//
// It stands in for go-oidc's RemoteKeySet, which falls short as a gate in
// two ways: it fetches again for every token whose signature fails, even
// with a kid it holds, and a fetch that starts just as another ends is
// answered with the ended fetch's keys, so the first token of a key rotated
// in that moment is refused.
type issuerKeys struct {
	url    string
	client *http.Client
	now    func() time.Time
	log    *slog.Logger

	mu        sync.Mutex
	keys      []jose.JSONWebKey // of the last successful fetch
	gen       uint64            // counts successful fetches
	lastFetch time.Time         // start of the last fetch
	fetched   time.Time         // end of the last successful fetch
	fetchErr  error             // of the last fetch that ended; nil: it succeeded
	agedRetry time.Time         // no refresh for age before this (one failed)
	inflight  *keyFetch         // nil unless a fetch runs
}

// Keys are trusted for maxKeyAge after the fetch that got them: a token
// verified past that first has the keys fetched again, so that a key the
// issuer withdrew (a leaked one) stops verifying within maxKeyAge on every
// node, even while the issuer's current key keeps every other token
// verifying and so never causes a fetch. The token waits at most
// agedRefreshWait; when the issuer cannot be reached the cached keys
// still serve, and the next refresh for age waits agedRetryAfter (an
// unreachable issuer must not slow every request). Variables for tests.
var (
	maxKeyAge       = 5 * time.Minute
	agedRefreshWait = 2 * time.Second
	agedRetryAfter  = 30 * time.Second
)

// keyFetch is one fetch of the key set, shared by every token that waits
// for it. keys and err are set before done is closed.
type keyFetch struct {
	done chan struct{}
	keys []jose.JSONWebKey
	gen  uint64 // the generation of keys
	err  error
}

func newIssuerKeys(url string, client *http.Client, now func() time.Time, log *slog.Logger) *issuerKeys {
	return &issuerKeys{url: url, client: client, now: now, log: log}
}

// VerifySignature implements oidc.KeySet: it returns the payload of jwt
// when one of the issuer's keys verifies its signature. Errors: a
// malformed token, no key verifying it, the spacing (errKidSpaced), a
// failed fetch, or ctx ending while a fetch runs (the fetch goes on for
// the others).
func (k *issuerKeys) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	jws, err := jose.ParseSigned(jwt, verifiableAlgs)
	if err != nil {
		return nil, fmt.Errorf("malformed jwt: %v", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("jwt must carry exactly one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	k.mu.Lock()
	cached, gen := k.keys, k.gen
	now := k.now()
	aged := len(cached) > 0 && now.Sub(k.fetched) >= maxKeyAge && !now.Before(k.agedRetry)
	k.mu.Unlock()
	if aged {
		rctx, cancel := context.WithTimeout(ctx, agedRefreshWait)
		fresh, freshGen, err := k.refresh(rctx, gen)
		cancel()
		if err == nil {
			cached, gen = fresh, freshGen
		} else if ctx.Err() == nil {
			k.mu.Lock()
			k.agedRetry = now.Add(agedRetryAfter)
			k.mu.Unlock()
		}
	}
	if payload, ok := verifyWith(jws, kid, cached); ok {
		return payload, nil
	}
	fresh, _, err := k.refresh(ctx, gen)
	if err != nil {
		k.mu.Lock()
		failed := k.fetchErr != nil
		k.mu.Unlock()
		if failed && ctx.Err() == nil {
			// The keys the token needs could not be fetched, now or by
			// the fetch the spacing waits on: not the token's fault.
			markKeysUnreachable(ctx)
		}
		return nil, err
	}
	if payload, ok := verifyWith(jws, kid, fresh); ok {
		return payload, nil
	}
	return nil, errors.New("no signing key of the issuer verifies the token")
}

// keysUnreachableKey carries, through go-oidc (which keeps only the text
// of a KeySet's error), whether the keys a token needed could not be
// fetched: OIDCVerifier.Verify then answers ErrUnavailable, not
// ErrInvalidToken, so that clients keep valid credentials.
type keysUnreachableKey struct{}

// withKeysUnreachable returns ctx carrying a flag markKeysUnreachable sets.
func withKeysUnreachable(ctx context.Context) (context.Context, *atomic.Bool) {
	flag := &atomic.Bool{}
	return context.WithValue(ctx, keysUnreachableKey{}, flag), flag
}

func markKeysUnreachable(ctx context.Context) {
	if flag, ok := ctx.Value(keysUnreachableKey{}).(*atomic.Bool); ok {
		flag.Store(true)
	}
}

// verifyWith tries the keys of kid (every key when kid is empty).
func verifyWith(jws *jose.JSONWebSignature, kid string, keys []jose.JSONWebKey) ([]byte, bool) {
	for i := range keys {
		if kid != "" && keys[i].KeyID != kid {
			continue
		}
		if payload, err := jws.Verify(&keys[i]); err == nil {
			return payload, true
		}
	}
	return nil, false
}

// refresh returns keys newer than those of generation seen, and their
// generation: the cached ones when a fetch has ended since, else those of
// the fetch running or of one it starts; errKidSpaced when the last one
// started less than minForcedRefresh ago.
func (k *issuerKeys) refresh(ctx context.Context, seen uint64) ([]jose.JSONWebKey, uint64, error) {
	k.mu.Lock()
	if k.gen != seen {
		keys, gen := k.keys, k.gen
		k.mu.Unlock()
		return keys, gen, nil
	}
	f := k.inflight
	if f == nil {
		now := k.now()
		if !k.lastFetch.IsZero() && now.Sub(k.lastFetch) < minForcedRefresh {
			k.mu.Unlock()
			return nil, 0, errKidSpaced
		}
		k.lastFetch = now
		f = &keyFetch{done: make(chan struct{})}
		k.inflight = f
		go k.fetch(f)
	}
	k.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	case <-f.done:
		return f.keys, f.gen, f.err
	}
}

// fetch runs f, detached from the token that started it, and publishes its
// keys. The slot is freed before f's waiters wake, so a token that arrives
// after them never joins an ended fetch.
func (k *issuerKeys) fetch(f *keyFetch) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultOIDCTimeout)
	defer cancel()
	keys, err := k.get(ctx)
	err = scrubbed(err, k.url)
	k.mu.Lock()
	if err == nil {
		k.keys = keys
		k.gen++
		k.fetched = k.now()
		f.gen = k.gen
	}
	k.fetchErr = err
	k.inflight = nil
	k.mu.Unlock()
	if err != nil {
		k.log.Warn("OIDC signing keys could not be fetched", "jwks_uri", redactedURL(k.url), "err", err)
	} else {
		k.log.Info("OIDC signing keys fetched", "jwks_uri", redactedURL(k.url), "keys", len(keys))
	}
	f.keys, f.err = keys, err
	close(f.done)
}

func (k *issuerKeys) get(ctx context.Context) ([]jose.JSONWebKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch signing keys: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Cache-Control", "no-cache")
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch signing keys: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fetch signing keys: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch signing keys: %s", resp.Status)
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("fetch signing keys: document larger than %d bytes", maxJWKSBytes)
	}
	return parseJWKS(body)
}

// parseJWKS returns the public signature keys of a JWKS document. Keys
// for encryption, for an algorithm floe does not verify with, of a type it
// does not know, or that do not parse are passed over, so one odd key
// does not lock out the tokens of the others. So are symmetric keys and
// private keys: a private key published at the public jwks_uri signs for
// anyone who reads it.
func parseJWKS(body []byte) ([]jose.JSONWebKey, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("signing keys: not a JWKS document: %v", err)
	}
	var out []jose.JSONWebKey
	for _, raw := range doc.Keys {
		var jwk jose.JSONWebKey
		if err := json.Unmarshal(raw, &jwk); err != nil {
			continue
		}
		if (jwk.Use != "" && jwk.Use != "sig") || (jwk.Algorithm != "" && !verifiable(jwk.Algorithm)) || !jwk.IsPublic() {
			continue
		}
		switch jwk.Key.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
			out = append(out, jwk)
		}
	}
	return out, nil
}

func verifiable(alg string) bool {
	return slices.Contains(verifiableAlgs, jose.SignatureAlgorithm(alg))
}

// asymmetricAlgs keeps the algorithms go-oidc verifies (all asymmetric) of
// a discovery document's list, so an issuer advertising HS256 cannot make
// floe accept MACs keyed with public data. Empty result: go-oidc's default,
// RS256.
func asymmetricAlgs(algs []string) []string {
	var out []string
	for _, a := range algs {
		if verifiable(a) {
			out = append(out, a)
		}
	}
	return out
}
