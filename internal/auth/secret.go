package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
)

// argon2Params are the argon2id cost parameters of a hash.
type argon2Params struct {
	memoryKiB uint32
	time      uint32
	threads   uint8
	saltLen   int
	keyLen    int
}

// secretParams are the parameters HashSecret uses: one of OWASP's
// equivalent argon2id settings (12 MiB, 3 passes, 1 lane). On one core of
// the 2-core reference machine a verification takes about 35–45 ms. One
// lane, because concurrent logins already use every core; see DESIGN.md.
var secretParams = argon2Params{memoryKiB: 12 * 1024, time: 3, threads: 1, saltLen: 16, keyLen: 32}

// Bounds on the parameters VerifySecret accepts, so that a corrupt or
// hostile hash cannot make one verification allocate gigabytes or run for
// minutes.
const (
	maxMemoryKiB = 256 * 1024
	maxTime      = 16
	maxThreads   = 16
	minSaltLen   = 8
	maxSaltLen   = 64
	minKeyLen    = 16
	maxKeyLen    = 64
)

// phcB64 is the PHC string format's base64: standard alphabet, no padding.
var phcB64 = base64.RawStdEncoding

// HashSecret returns the argon2id hash of secret in PHC string format:
//
//	$argon2id$v=19$m=12288,t=3,p=1$<salt>$<hash>
//
// with a fresh 16-byte random salt. It fails only if the system's random
// source fails.
func HashSecret(secret string) (string, error) {
	return hashSecret(secret, secretParams)
}

func hashSecret(secret string, p argon2Params) (string, error) {
	salt := make([]byte, p.saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("hash secret: %w", err)
	}
	key := argon2.IDKey([]byte(secret), salt, p.time, p.memoryKiB, p.threads, uint32(p.keyLen))
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, p.memoryKiB, p.time, p.threads, phcB64.EncodeToString(salt), phcB64.EncodeToString(key)), nil
}

// VerifySecret reports whether secret matches hash, a PHC argon2id string as
// produced by HashSecret (its own parameters are used, so hashes made with
// older parameters keep verifying). The comparison is constant-time. An
// unparseable hash, or one whose parameters are out of bounds, returns
// false and an error wrapping ErrBadHash; a wrong secret returns false and
// no error.
func VerifySecret(hash, secret string) (bool, error) {
	p, salt, want, err := parsePHC(hash)
	if err != nil {
		return false, err
	}
	got := argon2.IDKey([]byte(secret), salt, p.time, p.memoryKiB, p.threads, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}

// parsePHC parses "$argon2id$v=19$m=M,t=T,p=P$salt$hash".
func parsePHC(s string) (p argon2Params, salt, key []byte, err error) {
	bad := func(why string) (argon2Params, []byte, []byte, error) {
		return argon2Params{}, nil, nil, fmt.Errorf("%w: %s", ErrBadHash, why)
	}
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" {
		return bad("want $argon2id$v=19$m=...,t=...,p=...$salt$hash")
	}
	if parts[1] != "argon2id" {
		return bad("algorithm is not argon2id")
	}
	if parts[2] != "v=19" {
		return bad("version is not 19")
	}
	m, t, threads, ok := parseArgon2Params(parts[3])
	if !ok {
		return bad("parameters are not m=<KiB>,t=<passes>,p=<lanes>")
	}
	if m > maxMemoryKiB || t < 1 || t > maxTime || threads < 1 || threads > maxThreads || m < 8*threads {
		return bad("parameters out of bounds")
	}
	salt, err = phcB64.DecodeString(parts[4])
	if err != nil || len(salt) < minSaltLen || len(salt) > maxSaltLen {
		return bad("salt is not 8 to 64 bytes of unpadded base64")
	}
	key, err = phcB64.DecodeString(parts[5])
	if err != nil || len(key) < minKeyLen || len(key) > maxKeyLen {
		return bad("hash is not 16 to 64 bytes of unpadded base64")
	}
	return argon2Params{memoryKiB: m, time: t, threads: uint8(threads), saltLen: len(salt), keyLen: len(key)}, salt, key, nil
}

// parseArgon2Params parses "m=M,t=T,p=P" in that order.
func parseArgon2Params(s string) (m, t, p uint32, ok bool) {
	fields := strings.Split(s, ",")
	if len(fields) != 3 {
		return 0, 0, 0, false
	}
	var vals [3]uint32
	for i, name := range []string{"m=", "t=", "p="} {
		v, found := strings.CutPrefix(fields[i], name)
		if !found {
			return 0, 0, 0, false
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return 0, 0, 0, false
		}
		vals[i] = uint32(n)
	}
	return vals[0], vals[1], vals[2], true
}

// NewSecret returns 32 random bytes, base64url-encoded without padding (43
// characters). It panics if the system's random source fails, as
// crypto/rand.Read does not fail on supported platforms.
func NewSecret() string {
	return base64.RawURLEncoding.EncodeToString(randomBytes(32))
}

// randomBytes returns n bytes from crypto/rand, which never returns an
// error on supported platforms (it crashes the program instead).
func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
