// Package idempotency implements the Iceberg REST spec's Idempotency-Key
// for the catalog and the operator API: key validation, the binding that
// ties a key to one request, the lifetime a key is honoured for, and the
// keyed-request flow both servers run (Keys: look up, replay or refuse, run
// with every proposal wrapped in fsm.Keyed, record deterministic failures;
// Once for changes that are not state machine commands). The records
// themselves live in the replicated state machine (fsm), written by the same
// log entry as the mutation they belong to; see DESIGN.md.
package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/sosodev/duration"

	"github.com/floe-catalog/floe/fsm"
)

// Header is the request header that carries the key.
const Header = "Idempotency-Key"

// DefaultLifetime is how long a key is honoured after first use unless
// configured otherwise.
const DefaultLifetime = 30 * time.Minute

// Grace is added to the advertised lifetime before a record is pruned, so a
// client retrying right at the end of the lifetime (with some clock skew)
// still gets its replay.
const Grace = 5 * time.Minute

// ErrInvalidKey is returned by ParseKey for anything but an RFC 9562 UUID in
// its 36-character hyphenated form.
var ErrInvalidKey = errors.New("invalid Idempotency-Key")

// ParseKey validates a key and returns it in canonical (lower-case) form and
// its UUID version. Any version is accepted; the spec expects version 7.
func ParseKey(s string) (key string, version int, err error) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		shown := s
		if len(shown) > 64 {
			// Not echoed whole: the header may be as long as the server
			// allows headers to be.
			shown = shown[:64] + "…"
		}
		return "", 0, fmt.Errorf("%w: %q (%d bytes) is not a UUID in its 36-character form (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", ErrInvalidKey, shown, len(s))
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %q: %v", ErrInvalidKey, s, err)
	}
	if id.Variant() != uuid.RFC4122 {
		return "", 0, fmt.Errorf("%w: %q is not an RFC 9562 UUID (variant %s)", ErrInvalidKey, s, id.Variant())
	}
	return id.String(), int(id.Version()), nil
}

// NewBinding builds the binding of a request: the operation, the route's
// identifiers (joined by the unit separator), the principal and the SHA-256
// of the body.
func NewBinding(op string, route []string, principal string, body []byte) fsm.Binding {
	sum := sha256.Sum256(body)
	return fsm.Binding{Operation: op, Route: strings.Join(route, "\x1f"), Principal: principal, BodyDigest: hex.EncodeToString(sum[:])}
}

// ParseLifetime parses an ISO-8601 duration such as PT30M. It must be
// positive.
func ParseLifetime(s string) (time.Duration, error) {
	d, err := duration.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("idempotency lifetime %q: want an ISO-8601 duration such as PT30M: %w", s, err)
	}
	if d.Years != 0 || d.Months != 0 || d.Negative {
		// A year or a month has no fixed length; give it in days.
		return 0, fmt.Errorf("idempotency lifetime %q: give it in days, hours, minutes and seconds (such as P30D or PT30M), not years or months", s)
	}
	td := d.ToTimeDuration()
	if td < MinLifetime || td > MaxLifetime {
		return 0, fmt.Errorf("idempotency lifetime %q: want %s to %s", s, FormatLifetime(MinLifetime), FormatLifetime(MaxLifetime))
	}
	return td, nil
}

// MinLifetime and MaxLifetime bound a lifetime: below a second a key would
// not outlive a client's first retry (and the records would be pruned
// several times a second); above ten years a record's expiry, its start
// plus the lifetime and Grace, nears the largest time.Duration, and past
// it would be in the past at once.
const (
	MinLifetime = time.Second
	MaxLifetime = 10 * 365 * 24 * time.Hour
)

// FormatLifetime renders a lifetime as the ISO-8601 duration advertised in
// /v1/config, in days, hours, minutes and seconds only (P7DT12H, PT30M):
// the subset java.time.Duration.parse reads, which Java's REST client
// parses the field with. A week, month or year form ("P1W", what the
// duration library writes for seven days) failed the whole config answer
// there, and every Java engine with it.
func FormatLifetime(d time.Duration) string {
	if d <= 0 {
		return "PT0S"
	}
	days := d / (24 * time.Hour)
	d -= days * 24 * time.Hour
	hours := d / time.Hour
	d -= hours * time.Hour
	minutes := d / time.Minute
	d -= minutes * time.Minute
	var b strings.Builder
	b.WriteString("P")
	if days > 0 {
		fmt.Fprintf(&b, "%dD", days)
	}
	if hours > 0 || minutes > 0 || d > 0 {
		b.WriteString("T")
		if hours > 0 {
			fmt.Fprintf(&b, "%dH", hours)
		}
		if minutes > 0 {
			fmt.Fprintf(&b, "%dM", minutes)
		}
		if d > 0 {
			// Whole seconds and nanoseconds as integers: a float's
			// rounding (1.14 s is 1.1400000000000001) would write more
			// than the 9 fraction digits Java reads.
			secs, nanos := d/time.Second, d%time.Second
			fmt.Fprintf(&b, "%d", secs)
			if nanos > 0 {
				b.WriteString("." + strings.TrimRight(fmt.Sprintf("%09d", nanos), "0"))
			}
			b.WriteString("S")
		}
	}
	return b.String()
}
