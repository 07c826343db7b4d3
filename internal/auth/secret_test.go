package auth

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestHashSecretFormat(t *testing.T) {
	h, err := HashSecret("s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=12288,t=3,p=1$") {
		t.Fatalf("hash %q does not carry the expected parameters", h)
	}
	parts := strings.Split(h, "$")
	if len(parts) != 6 {
		t.Fatalf("hash %q: want 6 $-separated fields", h)
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil || len(salt) != 16 {
		t.Fatalf("salt %q: %v (len %d)", parts[4], err, len(salt))
	}
	key, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(key) != 32 {
		t.Fatalf("key %q: %v (len %d)", parts[5], err, len(key))
	}
	ok, err := VerifySecret(h, "s3cret")
	if err != nil || !ok {
		t.Fatalf("VerifySecret(right) = %v, %v", ok, err)
	}
	ok, err = VerifySecret(h, "s3cret ")
	if err != nil || ok {
		t.Fatalf("VerifySecret(wrong) = %v, %v", ok, err)
	}
	h2, _ := HashSecret("s3cret")
	if h2 == h {
		t.Fatal("two hashes of one secret are equal: salt not random")
	}
}

func TestVerifySecretCheapParams(t *testing.T) {
	h := cheapHash(t, "pw")
	for _, tc := range []struct {
		secret string
		want   bool
	}{{"pw", true}, {"pW", false}, {"", false}, {"pw\x00", false}} {
		got, err := VerifySecret(h, tc.secret)
		if err != nil || got != tc.want {
			t.Errorf("VerifySecret(%q) = %v, %v; want %v", tc.secret, got, err, tc.want)
		}
	}
}

func TestVerifySecretBadHash(t *testing.T) {
	good := cheapHash(t, "pw")
	parts := strings.Split(good, "$")
	salt, key := parts[4], parts[5]
	for name, h := range map[string]string{
		"empty":            "",
		"garbage":          "not a hash",
		"argon2i":          "$argon2i$v=19$m=64,t=1,p=1$" + salt + "$" + key,
		"bcrypt":           "$2a$10$abcdefghijklmnopqrstuu5TgJ0mqTOdL0xjQ6d1uYtwl0nNEn1Ku",
		"version 16":       "$argon2id$v=16$m=64,t=1,p=1$" + salt + "$" + key,
		"params order":     "$argon2id$v=19$t=1,m=64,p=1$" + salt + "$" + key,
		"params missing":   "$argon2id$v=19$m=64,t=1$" + salt + "$" + key,
		"params not int":   "$argon2id$v=19$m=x,t=1,p=1$" + salt + "$" + key,
		"memory too large": "$argon2id$v=19$m=4194304,t=1,p=1$" + salt + "$" + key,
		"memory too small": "$argon2id$v=19$m=4,t=1,p=1$" + salt + "$" + key,
		"time zero":        "$argon2id$v=19$m=64,t=0,p=1$" + salt + "$" + key,
		"time too large":   "$argon2id$v=19$m=64,t=1000,p=1$" + salt + "$" + key,
		"lanes zero":       "$argon2id$v=19$m=64,t=1,p=0$" + salt + "$" + key,
		"lanes too many":   "$argon2id$v=19$m=4096,t=1,p=255$" + salt + "$" + key,
		"salt not base64":  "$argon2id$v=19$m=64,t=1,p=1$!!!!$" + key,
		"salt too short":   "$argon2id$v=19$m=64,t=1,p=1$YWJj$" + key,
		"key too short":    "$argon2id$v=19$m=64,t=1,p=1$" + salt + "$YWJj",
		"padded key":       "$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + key + "=",
		"extra field":      good + "$x",
		"no leading $":     strings.TrimPrefix(good, "$"),
	} {
		t.Run(name, func(t *testing.T) {
			ok, err := VerifySecret(h, "pw")
			if ok {
				t.Fatal("bad hash verified")
			}
			wantErr(t, err, ErrBadHash)
		})
	}
}

func TestNewSecret(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		s := NewSecret()
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || len(b) != 32 || len(s) != 43 {
			t.Fatalf("NewSecret() = %q: %v, %d bytes", s, err, len(b))
		}
		if seen[s] {
			t.Fatal("NewSecret repeated itself")
		}
		seen[s] = true
	}
}

// BenchmarkVerifySecret measures one login's hash verification with the
// production parameters.
func BenchmarkVerifySecret(b *testing.B) {
	h, err := HashSecret("secret")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if ok, err := VerifySecret(h, "secret"); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
