package catalog

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"

	"github.com/floe-catalog/floe/internal/replica"
	"github.com/floe-catalog/floe/internal/storage"
)

// A store failure is a 503 only when nothing was applied: clients (Java's
// HTTP client first) resend a 502, 503 or 504 by themselves. A change that
// may have taken effect is a 500, which none resends.
func TestStoreFailuresAnswerRetryOnlyWhenNothingApplied(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		kind   opKind
		status int
		typ    string
	}{
		{"not leader", replica.ErrNotLeader, opCommit, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"no leader", fmt.Errorf("propose: %w", replica.ErrNoLeader), opOther, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"shutdown", replica.ErrShutdown, opOther, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"a follower whose log stands still", fmt.Errorf("read: %w", replica.ErrBehind), opOther, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"a keyed commit refused for the proposer's clock", fmt.Errorf("propose: %w", replica.ErrClockSkew), opCommit, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"not accepted by an overloaded leader, commit", fmt.Errorf("propose: %w: %w", replica.ErrNotAccepted, context.DeadlineExceeded), opCommit, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"unknown outcome, commit", fmt.Errorf("propose: %w", replica.ErrUnknownOutcome), opCommit, http.StatusInternalServerError, "CommitStateUnknownException"},
		{"unknown outcome, other", replica.ErrUnknownOutcome, opOther, http.StatusInternalServerError, "InternalServerError"},
		{"anything else, commit", errors.New("disk on fire"), opCommit, http.StatusInternalServerError, "CommitStateUnknownException"},
		{"a base metadata file that cannot be parsed, commit", fmt.Errorf("read: %w: metadata s3://b/m.json: bad JSON", errCorruptMetadata), opCommit, http.StatusInternalServerError, "InternalServerError"},
		{"a base metadata file that cannot be read, commit", fmt.Errorf("%w: %w", errBaseNotRead, errors.New("NoSuchBucket")), opCommit, http.StatusInternalServerError, "InternalServerError"},
		{"a base metadata file stalled, commit", fmt.Errorf("%w: %w", errBaseNotRead, storage.ErrTimeout), opCommit, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"out of file descriptors reading a base, commit", fmt.Errorf("%w: %w", errBaseNotRead, &os.PathError{Op: "open", Path: "/w/m.json", Err: syscall.EMFILE}), opCommit, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"out of file descriptors, read", fmt.Errorf("read metadata: %w", &os.PathError{Op: "open", Path: "/w/m.json", Err: syscall.ENFILE}), opOther, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"the table dropped while its base was read, commit", fmt.Errorf("%w: %w", errBaseNotRead, notFoundTable("table does not exist: ns.t")), opCommit, http.StatusNotFound, "NoSuchTableException"},
		{"object storage stalled before proposing, commit", &storage.ObjectError{Op: "write", URI: "s3://b/k", Err: fmt.Errorf("%w: %w", storage.ErrTimeout, context.DeadlineExceeded)}, opCommit, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"object storage stalled, read", fmt.Errorf("read metadata: %w", storage.ErrTimeout), opOther, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"object storage unreachable before proposing, commit", fmt.Errorf("write metadata: %w", storage.ErrUnreachable), opCommit, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"object storage throttling before proposing, commit", fmt.Errorf("read metadata: %w", storage.ErrThrottled), opCommit, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"a register's metadata-location, storage stalled", unreadableMetadataLocation("s3://b/m.json", &storage.ObjectError{Op: "read", URI: "s3://b/m.json", Err: fmt.Errorf("%w: %w", storage.ErrTimeout, context.DeadlineExceeded)}), opOther, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"a register's metadata-location, storage unreachable", unreadableMetadataLocation("s3://b/m.json", fmt.Errorf("read: %w", storage.ErrUnreachable)), opOther, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"a register's metadata-location, storage throttling", unreadableMetadataLocation("s3://b/m.json", fmt.Errorf("read: %w", storage.ErrThrottled)), opOther, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"object storage failed a read before proposing, commit", fmt.Errorf("read metadata: %w", storage.ErrServerFailed), opCommit, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"a register's metadata-location, storage failed the read", unreadableMetadataLocation("s3://b/m.json", fmt.Errorf("read: %w", storage.ErrServerFailed)), opOther, http.StatusServiceUnavailable, "ServiceUnavailableException"},
		{"a register's metadata-location, not there", unreadableMetadataLocation("s3://b/m.json", fmt.Errorf("read: %w", storage.ErrNotFound)), opOther, http.StatusBadRequest, "BadRequestException"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ae := toAPIError(tc.err, tc.kind)
			assert.Equal(t, tc.status, ae.status)
			assert.Equal(t, tc.typ, ae.typ)
			assert.Equal(t, tc.status == http.StatusServiceUnavailable, ae.retryAfter != "", "Retry-After only when a retry is safe")
		})
	}
}

// A bad value repeated in an error message is clipped: a 10 KB page
// token does not come back whole.
func TestClippedRepeatsAtMost64Bytes(t *testing.T) {
	assert.Equal(t, `"short"`, clipped("short"))
	long := strings.Repeat("é", 5000) // 2 bytes each
	got := clipped(long)
	assert.Equal(t, `"`+strings.Repeat("é", 32)+`"… (10000 bytes)`, got)
	odd := "x" + long // the 64th byte is inside a rune
	assert.True(t, utf8.ValidString(clipped(odd)))
	assert.Contains(t, clipped(odd), "(10001 bytes)")
}

// Only iceberg-go's refusals of timestamps out of order are taken for
// clock-dependent, never a message that holds the word in a name.
func TestClockDependent(t *testing.T) {
	for msg, want := range map[string]bool{
		"invalid snapshot timestamp 5: before last snapshot timestamp 90000":                    true,
		"invalid snapshot timestamp 5: before last updated timestamp 90000":                     true,
		"invalid metadata: invalid update timestamp 5: before last snapshot log entry at 90000": true,
		"invalid metadata: invalid metadata: expected sorted snapshot log entries":              true,
		"invalid metadata: expected sorted metadata log entries":                                false,
		"can't set snapshot ref timestamp-fix to unknown snapshot 99":                           false,
		"snapshot ref not found: invalid update timestamp ":                                     false,
		"invalid source type timestamp for transform truncate[4]":                               false,
	} {
		assert.Equal(t, want, clockDependent(errors.New(msg)), msg)
	}
}

// A named warehouse's mark goes from the state machine's renderings of
// its namespaces only: a level the client named "sales:q", or prose that
// happens to hold the name, keeps its text.
func TestWarehousePlain(t *testing.T) {
	w := &warehouse{name: "sales"}
	for in, want := range map[string]string{
		"namespace sales:q contains namespaces":             "namespace q contains namespaces",
		"namespace sales:sales:q contains namespaces":       "namespace sales:q contains namespaces",
		"parent namespace does not exist: sales:sales:nope": "parent namespace does not exist: sales:nope",
		"table already exists: sales:a.b":                   "table already exists: a.b",
		`namespace "sales:a" is not empty`:                  `namespace "a" is not empty`,
		"malformed request body: sales: unexpected":         "malformed request body: sales: unexpected",
		"location file:///w/sales:y overlaps (sales:a.t)":   "location file:///w/sales:y overlaps (a.t)",
		"sales:": "sales:",
	} {
		assert.Equal(t, want, w.plain(in), in)
	}
	assert.Equal(t, "sales:q", (&warehouse{}).plain("sales:q"))
}
