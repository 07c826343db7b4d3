package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"unicode/utf8"
)

// auditLog writes one JSON line per mutation and per refused request:
// who (principal), what (operation and target), the outcome (HTTP status),
// where (node), and how to find it again (request id, Idempotency-Key).
type auditLog struct {
	mu     sync.Mutex
	logger *slog.Logger
	closer io.Closer
}

// openAuditLog opens dest: "stderr", or a file path appended to (created
// with mode 0600). It fails when the file cannot be opened.
func openAuditLog(dest, nodeID string) (*auditLog, error) {
	var w io.Writer
	var closer io.Closer
	switch dest {
	case "stderr":
		w = os.Stderr
	default:
		f, err := os.OpenFile(dest, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("audit log: %w", err)
		}
		w, closer = f, f
	}
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})
	return &auditLog{logger: slog.New(h).With("log", "audit", "node", nodeID), closer: closer}, nil
}

// checkAuditLog fails when dest (see openAuditLog) cannot be opened: run
// checks it before the node opens Raft, where openAuditLog, which needs the
// node's ID, comes too late to keep a node that will exit from joining.
func checkAuditLog(dest string) error {
	if dest == "" || dest == "stderr" {
		return nil
	}
	f, err := os.OpenFile(dest, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	return f.Close()
}

// outcomeDenied is the outcome of a request refused for lack of a
// privilege: a 403, or a 404 that hides what the caller may not see.
const outcomeDenied = "denied"

// outcomeOf names a status for the audit line.
func outcomeOf(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "unauthenticated"
	case status == http.StatusForbidden:
		return outcomeDenied
	case status >= 500:
		return "error"
	case status >= 400:
		return "refused"
	default:
		return "ok"
	}
}

func (a *auditLog) write(r *http.Request, principal, requestID, op, target string, status int, outcome string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.logger.Info("audit",
		"principal", auditBounded(principal),
		"operation", auditBounded(op),
		"target", auditBounded(target),
		"outcome", outcome,
		"status", status,
		"method", auditBounded(r.Method),
		"path", auditBounded(r.URL.Path),
		"request_id", requestID,
		"idempotency_key", idempotencyKeyOf(r),
		"remote", r.RemoteAddr,
	)
}

// maxAuditedField bounds each field of an audit line taken from a
// request: a path may be as long as --http-max-header-bytes (1 MiB), and
// an unauthenticated client refused in a loop wrote two copies of it per
// line. The longest names floe accepts (a 4096-byte namespace and a
// 255-byte name, escaped) fit.
const maxAuditedField = 8 << 10

// auditBounded is s cut to maxAuditedField bytes on a character boundary,
// its full length noted.
func auditBounded(s string) string {
	if len(s) <= maxAuditedField {
		return s
	}
	cut := maxAuditedField
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s))
}

// Close closes the audit file, if any.
func (a *auditLog) Close() error {
	if a == nil || a.closer == nil {
		return nil
	}
	return a.closer.Close()
}
