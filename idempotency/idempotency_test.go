package idempotency

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseKey(t *testing.T) {
	key, v, err := ParseKey("0190B2C4-8D3E-7A1B-9C2D-3E4F5A6B7C8D")
	require.NoError(t, err)
	assert.Equal(t, "0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8d", key)
	assert.Equal(t, 7, v)
	_, v, err = ParseKey("9b2f5e1c-3a4d-4e5f-8a6b-7c8d9e0f1a2b")
	require.NoError(t, err)
	assert.Equal(t, 4, v)
	for _, bad := range []string{"", "abc", "0190b2c48d3e7a1b9c2d3e4f5a6b7c8d", "{0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8d}",
		"urn:uuid:0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8d", "0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8g", "0190b2c4-8d3e-7a1b-1c2d-3e4f5a6b7c8d"} {
		_, _, err := ParseKey(bad)
		assert.ErrorIs(t, err, ErrInvalidKey, bad)
	}
}

func TestBinding(t *testing.T) {
	a := NewBinding("createTable", []string{"ns"}, "alice", []byte(`{"name":"t"}`))
	assert.Equal(t, a, NewBinding("createTable", []string{"ns"}, "alice", []byte(`{"name":"t"}`)))
	b := NewBinding("createTable", []string{"ns"}, "alice", []byte(`{"name":"u"}`))
	assert.NotEqual(t, a, b)
}

func TestLifetime(t *testing.T) {
	d, err := ParseLifetime("PT30M")
	require.NoError(t, err)
	assert.Equal(t, 30*time.Minute, d)
	d, err = ParseLifetime("P1DT2H")
	require.NoError(t, err)
	assert.Equal(t, 26*time.Hour, d)
	d, err = ParseLifetime("PT1S")
	require.NoError(t, err)
	assert.Equal(t, time.Second, d)
	// Under a second, or so long that an expiry overflows.
	for _, bad := range []string{"30m", "", "PT0S", "P", "PT0.000000001S", "PT0.5S", "PT2562047H45M", "P11Y"} {
		_, err := ParseLifetime(bad)
		assert.Error(t, err, bad)
	}
	assert.Equal(t, "PT30M", FormatLifetime(30*time.Minute))
	// Years and months have no fixed length.
	for _, bad := range []string{"P1Y", "P1M", "P1MT1H"} {
		_, err := ParseLifetime(bad)
		assert.ErrorContains(t, err, "not years or months", bad)
	}
}

// The advertised lifetime stays within what java.time.Duration.parse
// reads (PnDTnHnMn.nS), which Java's REST client parses it with: no
// weeks, months or years, which the duration library wrote for a week.
func TestFormatLifetimeIsJavaDuration(t *testing.T) {
	// At most 9 fraction digits: Java reads no more.
	java := regexp.MustCompile(`^P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d{1,9})?S)?)?$`)
	for in, want := range map[time.Duration]string{
		30 * time.Minute:                   "PT30M",
		24 * time.Hour:                     "P1D",
		7 * 24 * time.Hour:                 "P7D",
		10*24*time.Hour + 90*time.Minute:   "P10DT1H30M",
		365 * 24 * time.Hour:               "P365D",
		time.Second + 500*time.Millisecond: "PT1.5S",
		MaxLifetime:                        "P3650D",
		26*time.Hour + 61*time.Second:      "P1DT2H1M1S",
		1140 * time.Millisecond:            "PT1.14S",
		7940 * time.Millisecond:            "PT7.94S",
		time.Minute + time.Nanosecond:      "PT1M0.000000001S",
	} {
		got := FormatLifetime(in)
		assert.Equal(t, want, got, in.String())
		assert.Regexp(t, java, got)
		back, err := ParseLifetime(got)
		require.NoError(t, err, got)
		assert.Equal(t, in, back, got)
	}
	// Every lifetime of whole hundredths of a second up to a minute.
	for cs := 100; cs < 6000; cs++ {
		d := time.Duration(cs) * 10 * time.Millisecond
		got := FormatLifetime(d)
		if !java.MatchString(got) {
			t.Fatalf("%v is written %s, which Java does not read", d, got)
		}
	}
	_, err := ParseLifetime("P1W")
	require.NoError(t, err, "a week is a fixed length: accepted, advertised in days")
}

// A long malformed key is not echoed whole in the error.
func TestParseKeyDoesNotEchoALongKey(t *testing.T) {
	_, _, err := ParseKey(strings.Repeat("k", 5000))
	require.ErrorIs(t, err, ErrInvalidKey)
	assert.Less(t, len(err.Error()), 300)
	assert.Contains(t, err.Error(), "5000 bytes")
}
