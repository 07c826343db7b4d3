package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/apache/iceberg-go/table"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/replica"
	"github.com/floe-catalog/floe/internal/storage"
)

// apiError is an error with its place in the Iceberg error model: the HTTP
// status and the exception type name clients switch on.
type apiError struct {
	status     int
	typ        string
	msg        string
	retryAfter string // seconds, for 503
	// contended marks a 409 caused by concurrent commits outrunning the
	// server's retries, not by the request itself: it is not stored under
	// an Idempotency-Key, so a retry with the key runs again.
	contended bool
	// decided marks a 400 decided against the current state of a table
	// or view (an update its metadata refuses, a version it lacks): it is
	// stored under an Idempotency-Key as a 404 or 409 is, so that a retry
	// with the key gets it again after the state has changed, and never
	// applies. A 400 the request alone decides (a malformed body) is not:
	// the key binds the body, so its retry fails the same way anyway.
	decided bool
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.typ, e.msg) }

// refusedByState is a 400 decided against the current state (apiError's
// decided).
func refusedByState(format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, typ: "BadRequestException", msg: fmt.Sprintf(format, args...), decided: true}
}

// refusedByBuilder is iceberg-go's refusal of an update or of the
// metadata it builds, as refusedByState, unless it is a refusal of
// timestamps out of order (clockDependent): iceberg-go stamps a version,
// and the snapshot-log entry of main moved to a snapshot the table
// already has, with this node's clock (time.Now), and refuses one that
// falls more than a minute before an entry another node's clock, or this
// one's before it stepped back, may have written. Such a 400 is a plain
// one, not stored under an Idempotency-Key: a retry may pass on another
// node or a minute later.
func refusedByBuilder(err error, format string, args ...any) error {
	if clockDependent(err) {
		return badRequest(format, args...)
	}
	return refusedByState(format, args...)
}

// clockPhrases open iceberg-go's (v0.7) refusals of timestamps out of
// order: a new snapshot's before the last snapshot-log entry or the
// table's last update (either may have been stamped by the clock in the
// same request), the version's update time before the last log entry,
// and a snapshot log whose new entry (stamped by the clock) is out of
// order. The metadata log's order alone is the stored state's.
var clockPhrases = []string{
	"invalid snapshot timestamp ",
	"invalid update timestamp ",
	"expected sorted snapshot log entries",
}

// clockDependent reports whether iceberg-go's refusal err is one of
// clockPhrases. The phrase must open the message, after iceberg-go's
// "invalid metadata: " wrapping: a name chosen by the caller (a ref's, a
// field's) elsewhere in a message never matches.
func clockDependent(err error) bool {
	msg := err.Error()
	for prefix := table.ErrInvalidMetadata.Error() + ": "; strings.HasPrefix(msg, prefix); {
		msg = strings.TrimPrefix(msg, prefix)
	}
	for _, p := range clockPhrases {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// decidedByState marks err, when it is a 400, as decided against the
// current state (apiError's decided); any other error is returned as it is.
func decidedByState(err error) error {
	var ae *apiError
	if errors.As(err, &ae) && ae.status == http.StatusBadRequest {
		c := *ae
		c.decided = true
		return &c
	}
	return err
}

func badRequest(format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, typ: "BadRequestException", msg: fmt.Sprintf(format, args...)}
}

// clipped is s for an error message that repeats a caller's input: at most
// 64 bytes of it (cut at a rune boundary), with how long it was, so that a
// large bad value is not sent back whole.
func clipped(s string) string {
	const max = 64
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
}

func notFoundNamespace(format string, args ...any) error {
	return &apiError{status: http.StatusNotFound, typ: "NoSuchNamespaceException", msg: fmt.Sprintf(format, args...)}
}

func notFoundTable(format string, args ...any) error {
	return &apiError{status: http.StatusNotFound, typ: "NoSuchTableException", msg: fmt.Sprintf(format, args...)}
}

func commitFailed(format string, args ...any) error {
	return &apiError{status: http.StatusConflict, typ: "CommitFailedException", msg: fmt.Sprintf(format, args...)}
}

func unprocessable(format string, args ...any) error {
	return &apiError{status: http.StatusUnprocessableEntity, typ: "UnprocessableEntityException", msg: fmt.Sprintf(format, args...)}
}

// commitStateUnknown is the answer when a commit may or may not have been
// applied: the client must reload before retrying, never rebase blindly.
// It is a 500, the spec's status for an unknown commit state: Java's HTTP
// client resends a 502, 503 or 504 by itself, and a resent commit that had
// taken effect fails its requirements, upon which the client rebases and
// applies its change a second time.
func commitStateUnknown(err error) error {
	return &apiError{status: http.StatusInternalServerError, typ: "CommitStateUnknownException",
		msg: fmt.Sprintf("commit state unknown: %v", err)}
}

// opKind tells toAPIError how to classify a failure the store could not
// decide: for a table commit an unknown outcome is CommitStateUnknown.
type opKind int

const (
	opOther opKind = iota
	opCommit
)

// toAPIError classifies any error a handler produced. Domain outcomes from the
// state machine map to 404/409; store failures map to 503 (nothing applied,
// retry) or, when the change may have been applied, to 500 (which no client
// resends by itself), never to 409 or 400.
func toAPIError(err error, kind opKind) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	msg := err.Error()
	switch {
	case errors.Is(err, fsm.ErrNoSuchNamespace):
		return &apiError{status: http.StatusNotFound, typ: "NoSuchNamespaceException", msg: msg}
	case errors.Is(err, fsm.ErrNoSuchTable):
		return &apiError{status: http.StatusNotFound, typ: "NoSuchTableException", msg: msg}
	case errors.Is(err, fsm.ErrAlreadyExists):
		return &apiError{status: http.StatusConflict, typ: "AlreadyExistsException", msg: msg}
	case errors.Is(err, fsm.ErrNamespaceNotEmpty):
		return &apiError{status: http.StatusConflict, typ: "NamespaceNotEmptyException", msg: msg}
	case errors.Is(err, fsm.ErrCommitFailed):
		return &apiError{status: http.StatusConflict, typ: "CommitFailedException", msg: msg}
	case errors.Is(err, fsm.ErrBeingPurged):
		if kind == opCommit {
			return &apiError{status: http.StatusConflict, typ: "CommitFailedException", msg: msg}
		}
		return &apiError{status: http.StatusConflict, typ: "AlreadyExistsException", msg: msg}
	case errors.Is(err, fsm.ErrLocationInUse):
		// A location belongs to one table: a create or register that would
		// share one already exists in effect; a commit moving a table onto
		// another's location fails as a commit.
		if kind == opCommit {
			return &apiError{status: http.StatusConflict, typ: "CommitFailedException", msg: msg}
		}
		return &apiError{status: http.StatusConflict, typ: "AlreadyExistsException", msg: msg}
	case errors.Is(err, fsm.ErrKeyReused):
		return &apiError{status: http.StatusUnprocessableEntity, typ: "UnprocessableEntityException", msg: msg}
	case errors.Is(err, fsm.ErrInvalidCommand):
		return &apiError{status: http.StatusBadRequest, typ: "BadRequestException", msg: msg}
	case errors.Is(err, fsm.ErrNoSuchJob):
		return &apiError{status: http.StatusNotFound, typ: "NotFoundException", msg: msg}
	case errors.Is(err, replica.ErrNotLeader), errors.Is(err, replica.ErrNoLeader), errors.Is(err, replica.ErrShutdown):
		// Nothing was proposed: the client may retry, here or elsewhere.
		return &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableException",
			msg: "no leader available: " + msg, retryAfter: "1"}
	case errors.Is(err, replica.ErrClockSkew):
		// Refused by the leader before anything was appended.
		return &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableException",
			msg: "nothing was applied: " + msg, retryAfter: "1"}
	case errors.Is(err, replica.ErrBehind):
		// A read this node could not serve: nothing was read or changed.
		return &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableException",
			msg: "this node is not keeping up with the cluster, another may answer: " + msg, retryAfter: "1"}
	case errors.Is(err, replica.ErrNotAccepted):
		// The leader's log was full: nothing was appended, so a resend
		// (which Java's client makes by itself on a 503) is safe.
		return &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableException",
			msg: "the leader is overloaded, nothing was applied: " + msg, retryAfter: "1"}
	case storageUnavailable(err):
		// Object storage stalled, cannot be reached or throttles. A resend (Java's
		// client makes one by itself on a 503) is safe: without an
		// Idempotency-Key every storage call of a change precedes its
		// proposal (the metadata file a commit writes, a file it reads)
		// and the answer is built from what was written, so nothing was
		// applied; the one handler that reads after proposing
		// (unregisterTable) answers such a failure 500 itself. With a
		// key, a change that was applied is answered by its record, and
		// only reading the answer's metadata file can have stalled.
		return &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableException",
			msg: msg, retryAfter: "5"}
	case errors.Is(err, errMetadataNotWritten):
		return &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableException",
			msg: msg, retryAfter: "5"}
	case errors.Is(err, errCorruptMetadata), errors.Is(err, errCorruptViewMetadata):
		// A metadata file of the catalog's that cannot be parsed, or
		// names another table. A commit reads its base before it proposes
		// anything: its outcome is not unknown, and resending will not
		// help until an operator mends the file.
		return &apiError{status: http.StatusInternalServerError, typ: "InternalServerError", msg: msg}
	case errors.Is(err, errBaseNotRead):
		// Any other failure to read a commit's base (a missing file, a
		// bucket gone): nothing was proposed.
		return &apiError{status: http.StatusInternalServerError, typ: "InternalServerError", msg: msg}
	case errors.Is(err, replica.ErrUnknownOutcome):
		if kind == opCommit {
			return commitStateUnknown(err).(*apiError)
		}
		return &apiError{status: http.StatusInternalServerError, typ: "InternalServerError",
			msg: "outcome unknown, reload before retrying: " + msg}
	}
	if kind == opCommit {
		return &apiError{status: http.StatusInternalServerError, typ: "CommitStateUnknownException", msg: msg}
	}
	return &apiError{status: http.StatusInternalServerError, typ: "InternalServerError", msg: msg}
}

// errBaseNotRead wraps a commit's failure to read the table's current
// metadata file, which comes before anything is written or proposed.
var errBaseNotRead = errors.New("the table's current metadata could not be read, nothing was applied")

// outcomeError turns a domain outcome of op (fresh from Apply, or stored
// under an Idempotency-Key) into op's answer. The first answer and every
// replay go through it, so they are the same answer.
func outcomeError(op string, res fsm.Result) error {
	err := res.Err()
	if err == nil {
		return nil
	}
	switch op {
	case "createNamespace":
		// The spec lists no 404 for createNamespace: a parent dropped
		// before the create applied is a 400, replayed as one.
		if res.Status == fsm.StatusNoSuchNamespace {
			return badRequest("%v", err)
		}
	case "dropTable", "unregisterTable":
		// The spec's answer for a table whose namespace is missing is
		// NoSuchTable.
		if res.Status == fsm.StatusNoSuchNamespace {
			return notFoundTable("table does not exist: %s", res.Message)
		}
	case "updateTable", "commitTransaction":
		switch res.Status {
		case fsm.StatusAlreadyExists:
			// Completing a staged create whose table exists by now: the
			// assert-create requirement failed.
			return commitFailed("requirement failed: %s", res.Message)
		case fsm.StatusCommitFailed, fsm.StatusLocationInUse, fsm.StatusBeingPurged:
			return commitFailed("%s", res.Message)
		}
	}
	return err
}

type errorBody struct {
	Error errorModel `json:"error"`
}

type errorModel struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeAPIError(w http.ResponseWriter, r *http.Request, ae *apiError) {
	if ae.retryAfter != "" {
		w.Header().Set("Retry-After", ae.retryAfter)
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(ae.status)
		return
	}
	writeJSON(w, ae.status, errorBody{Error: errorModel{Message: ae.msg, Type: ae.typ, Code: ae.status}})
}

// unreadableMetadataLocation is the answer to a register whose
// metadata-location could not be read: 503, which clients resend, when
// storage stalled, could not be reached, throttled or failed the request
// itself (nothing was applied;
// the file may well be there), else 400: the caller named a file that is
// not there, not readable or not metadata.
func unreadableMetadataLocation(loc string, err error) error {
	if storageUnavailable(err) {
		return fmt.Errorf("cannot read metadata-location %s: %w", loc, err)
	}
	return badRequest("cannot read metadata-location %s: %v", loc, err)
}

// storageUnavailable reports whether err is object storage stalling, out of
// reach, throttling or failing a request itself (5xx, a body cut short): a
// failure of the moment, answered 503.
func storageUnavailable(err error) bool {
	return errors.Is(err, storage.ErrTimeout) || errors.Is(err, storage.ErrUnreachable) ||
		errors.Is(err, storage.ErrThrottled) || errors.Is(err, storage.ErrServerFailed) ||
		// This process or the system is out of file descriptors (too
		// many connections, say): it passes.
		errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}
