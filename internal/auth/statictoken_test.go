package auth

import (
	"strings"
	"testing"
)

func TestStaticTokenRoundTrip(t *testing.T) {
	sawUnderscore := false
	for range 200 {
		id, token := NewStaticToken()
		if len(id) != 16 || !isLowerHex(id) {
			t.Fatalf("id %q is not 16 lower-case hex digits", id)
		}
		if !strings.HasPrefix(token, "floe_"+id+"_") {
			t.Fatalf("token %q does not start with floe_<id>_", token)
		}
		gotID, secret, ok := ParseStaticToken(token)
		if !ok || gotID != id || token != "floe_"+id+"_"+secret {
			t.Fatalf("ParseStaticToken(%q) = %q, %q, %v", token, gotID, secret, ok)
		}
		sawUnderscore = sawUnderscore || strings.Contains(secret, "_")
		h := HashToken(secret)
		if !VerifyToken(h, secret) {
			t.Fatal("VerifyToken rejects its own hash")
		}
		if VerifyToken(h, secret[:len(secret)-1]+"A") && !strings.HasSuffix(secret, "A") {
			t.Fatal("VerifyToken accepts another secret")
		}
	}
	if !sawUnderscore {
		t.Log("no secret contained '_' in 200 tries; the parse-by-position case was not exercised")
	}
}

func TestParseStaticTokenSecretWithUnderscores(t *testing.T) {
	// A secret that starts and ends with '_' still parses by position.
	secret := "_" + strings.Repeat("A", 41) + "w"
	token := "floe_0123456789abcdef_" + secret
	id, got, ok := ParseStaticToken(token)
	if !ok || id != "0123456789abcdef" || got != secret {
		t.Fatalf("ParseStaticToken = %q, %q, %v", id, got, ok)
	}
}

func TestParseStaticTokenRejects(t *testing.T) {
	_, good := NewStaticToken()
	for name, token := range map[string]string{
		"empty":            "",
		"no prefix":        strings.TrimPrefix(good, "floe_"),
		"other prefix":     "flow_" + good[5:],
		"upper-case id":    "floe_0123456789ABCDEF_" + good[22:],
		"non-hex id":       "floe_0123456789abcdeg_" + good[22:],
		"short":            good[:len(good)-1],
		"long":             good + "A",
		"no separator":     good[:21] + "x" + good[22:],
		"secret not b64":   good[:22] + strings.Repeat("!", 43),
		"secret not canon": "floe_0123456789abcdef_" + strings.Repeat("A", 42) + "B",
		"a JWT":            "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2ln",
	} {
		if _, _, ok := ParseStaticToken(token); ok {
			t.Errorf("%s: ParseStaticToken(%q) accepted", name, token)
		}
	}
}

func TestHashToken(t *testing.T) {
	// SHA-256("abc").
	const want = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	if got := HashToken("abc"); got != want {
		t.Fatalf("HashToken = %s", got)
	}
	for name, h := range map[string]string{
		"empty":     "",
		"not hex":   strings.Repeat("z", 64),
		"short":     want[:62],
		"other":     HashToken("abd"),
		"upper hex": strings.ToUpper(want),
	} {
		got := VerifyToken(h, "abc")
		if wantOK := name == "upper hex"; got != wantOK {
			t.Errorf("%s: VerifyToken = %v, want %v", name, got, wantOK)
		}
	}
}
