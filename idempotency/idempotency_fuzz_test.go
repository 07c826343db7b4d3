package idempotency

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseKey checks ParseKey against an independent statement of what it
// documents: it accepts exactly the 36-character hyphenated form
// (8-4-4-4-12 hex digits, either case) with the RFC 9562 variant bits (10xx:
// the first digit of the fourth group is 8, 9, a or b), returns the key
// lower-cased and the version from the first digit of the third group, and
// refuses everything else with ErrInvalidKey. It never panics.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{
		"0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8d", // version 7
		"0190B2C4-8D3E-7A1B-9C2D-3E4F5A6B7C8D", // upper case
		"9b2f5e1c-3a4d-4e5f-8a6b-7c8d9e0f1a2b", // version 4
		"6ba7b810-9dad-11d1-80b4-00c04fd430c8", // version 1
		"00000000-0000-0000-0000-000000000000", // nil UUID: not the RFC variant
		"ffffffff-ffff-ffff-ffff-ffffffffffff", // max UUID: not the RFC variant
		"0190b2c4-8d3e-7a1b-1c2d-3e4f5a6b7c8d", // NCS variant
		"0190b2c4-8d3e-7a1b-cc2d-3e4f5a6b7c8d", // Microsoft variant
		"0190b2c48d3e7a1b9c2d3e4f5a6b7c8d",     // no hyphens
		"{0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8d}",
		"urn:uuid:0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8d",
		"0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8g",
		"0190b2c4+8d3e-7a1b-9c2d-3e4f5a6b7c8d",
		"0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8d ",
		"0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8\x00",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		key, version, err := ParseKey(s)
		want := canonicalUUID(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("ParseKey(%q) failed without ErrInvalidKey: %v", s, err)
			}
			if want {
				t.Fatalf("ParseKey(%q) refused a canonical RFC 9562 UUID: %v", s, err)
			}
			return
		}
		if !want {
			t.Fatalf("ParseKey(%q) accepted a string that is not a canonical RFC 9562 UUID", s)
		}
		if key != strings.ToLower(s) {
			t.Fatalf("ParseKey(%q) returned key %q, want %q", s, key, strings.ToLower(s))
		}
		if want := hexValue(s[14]); version != want {
			t.Fatalf("ParseKey(%q) returned version %d, want %d", s, version, want)
		}
		again, v2, err := ParseKey(key)
		if err != nil || again != key || v2 != version {
			t.Fatalf("ParseKey(%q) = (%q, %d, %v), want it unchanged", key, again, v2, err)
		}
	})
}

// canonicalUUID reports whether s is 8-4-4-4-12 hex digits separated by
// hyphens with the RFC 9562 variant.
func canonicalUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if hexValue(s[i]) < 0 {
				return false
			}
		}
	}
	return hexValue(s[19])&0xc == 0x8
}

// hexValue is the value of hex digit c, or -1.
func hexValue(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
