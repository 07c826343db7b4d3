package auth

import (
	"crypto/ed25519"
	"testing"
	"time"
)

func TestNewSigningKey(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	k, err := NewSigningKey(now)
	if err != nil {
		t.Fatal(err)
	}
	if len(k.ID) != 16 || !isLowerHex(k.ID) {
		t.Errorf("ID %q", k.ID)
	}
	if !k.CreatedAt.Equal(now) || k.Retired() {
		t.Errorf("CreatedAt %v RetiredAt %v", k.CreatedAt, k.RetiredAt)
	}
	sig := ed25519.Sign(k.Private, []byte("m"))
	if !ed25519.Verify(k.Public, []byte("m"), sig) {
		t.Error("public key does not match private key")
	}
	k2, _ := NewSigningKey(now)
	if k2.ID == k.ID {
		t.Error("two keys share an ID")
	}
}

func TestActiveKey(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	key := func(id string, created time.Duration, retired bool) SigningKey {
		k := SigningKey{ID: id, CreatedAt: t0.Add(created)}
		if retired {
			k.RetiredAt = t0.Add(100 * time.Hour)
		}
		return k
	}
	for _, tc := range []struct {
		name   string
		keys   []SigningKey
		want   string
		wantOK bool
	}{
		{"empty", nil, "", false},
		{"all retired", []SigningKey{key("a", 0, true), key("b", time.Hour, true)}, "", false},
		{"one", []SigningKey{key("a", 0, false)}, "a", true},
		{"newest wins", []SigningKey{key("a", 0, false), key("b", 2*time.Hour, false), key("c", time.Hour, false)}, "b", true},
		{"newest retired", []SigningKey{key("a", 0, false), key("b", time.Hour, true)}, "a", true},
		{"tie by greater ID", []SigningKey{key("b", time.Hour, false), key("c", time.Hour, false), key("a", time.Hour, false)}, "c", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ActiveKey(tc.keys)
			if ok != tc.wantOK || got.ID != tc.want {
				t.Fatalf("ActiveKey = %q, %v; want %q, %v", got.ID, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestSigningKeyVerifies(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	window := time.Hour
	live := SigningKey{ID: "a", CreatedAt: t0}
	retired := SigningKey{ID: "b", CreatedAt: t0, RetiredAt: t0}
	for _, tc := range []struct {
		k    SigningKey
		at   time.Time
		want bool
	}{
		{live, t0.Add(1000 * time.Hour), true},
		{retired, t0, true},
		{retired, t0.Add(window - time.Second), true},
		{retired, t0.Add(window), false},
		{retired, t0.Add(2 * window), false},
	} {
		if got := tc.k.Verifies(tc.at, window); got != tc.want {
			t.Errorf("key %s at +%v: Verifies = %v", tc.k.ID, tc.at.Sub(t0), got)
		}
	}
}
