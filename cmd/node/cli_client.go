package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Retries of the admin commands' requests: a request that gets no answer or
// a 503 is sent up to cliAttempts times, cliBackoff apart at first, the
// pause doubling up to cliMaxBackoff (about 6 s in all: long enough for a
// leader election).
var (
	cliAttempts   = 6
	cliBackoff    = 250 * time.Millisecond
	cliMaxBackoff = 2 * time.Second
)

// maxAnswerBytes bounds an answer the admin commands read.
const maxAnswerBytes = 64 << 20

// apiClient sends requests to one node's HTTP API.
type apiClient struct {
	base  string // scheme://host[:port][/path], without a trailing slash
	token string
	http  *http.Client
}

// newAPIClient checks node (a URL; "host:port" means http://host:port) and
// reads caFile, the PEM bundle that verifies an https node ("": the
// system's roots).
func newAPIClient(node, token, caFile string) (*apiClient, error) {
	// A token read from a file with Windows line ends holds a CR: no
	// request could carry it, so no retry would help.
	if i := strings.IndexFunc(token, func(r rune) bool { return r != '\t' && (r < 0x20 || r == 0x7f) }); i >= 0 {
		return nil, fmt.Errorf("the token (--token or FLOE_TOKEN) holds a control character (byte %d, %q); a token is one line of printable text", i, token[i])
	}
	if !strings.Contains(node, "://") {
		node = "http://" + node
	}
	u, err := url.Parse(node)
	if err != nil {
		if strings.Contains(node, "@") {
			// url's error quotes the input, password and all.
			return nil, errors.New("--node: not a URL (and one with user information, which floe does not take)")
		}
		return nil, fmt.Errorf("--node %q: %v", node, err)
	}
	shown := u.Redacted() // never echo a password given in the URL
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("--node %q: want an http:// or https:// URL", shown)
	}
	if u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("--node %q: want scheme://host:port", shown)
	}
	if p := u.Port(); p != "" {
		// A port no connection can use is a typo, not an unreachable node
		// to retry.
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("--node %q: port %s is not between 1 and 65535", shown, p)
		}
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca %s: no PEM certificate in it", caFile)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &apiClient{
		base:  strings.TrimSuffix(u.String(), "/"),
		token: token,
		// A node never redirects; following one would send the token
		// (and turn a POST into a GET) somewhere the operator never named.
		http: &http.Client{Transport: transport, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
	}, nil
}

// apiError is a request that failed: an answer other than 2xx, or none.
type apiError struct {
	status  int    // the answer's status; 0: no answer
	typ     string // the Iceberg error type, when the answer had one
	message string // the server's message, or what went wrong
	// attempts is how many times the request was sent.
	attempts int
}

func (e *apiError) Error() string {
	var b strings.Builder
	b.WriteString(e.message)
	if e.status != 0 {
		fmt.Fprintf(&b, " (%d", e.status)
		if e.typ != "" {
			b.WriteString(" " + e.typ)
		}
		b.WriteString(")")
	}
	if e.attempts > 1 {
		fmt.Fprintf(&b, "; gave up after %d attempts", e.attempts)
	}
	return b.String()
}

// exitCode is the process exit code for the failure.
func (e *apiError) exitCode() int {
	switch {
	case e.status == 0, e.status == http.StatusServiceUnavailable:
		return exitUnavailable
	case e.status == http.StatusUnauthorized, e.status == http.StatusForbidden:
		return exitUnauthorized
	case e.status == http.StatusBadRequest:
		return exitUsage
	default:
		return exitFailed
	}
}

// unavailable reports whether the failure is one a retry may cure: no
// answer, or 503.
func (e *apiError) unavailable() bool {
	return e.status == 0 || e.status == http.StatusServiceUnavailable
}

// retryable reports whether the request is to be sent again: when a
// retry may cure the failure (unavailable), and, for a mutation carrying
// an Idempotency-Key, also after a 500, which the server answers when the
// change may have taken effect: sent again with the same key, it takes
// effect at most once and the answer says how it ended.
func (e *apiError) retryable(keyed bool) bool {
	return e.unavailable() || (keyed && e.status == http.StatusInternalServerError)
}

// isUnavailable reports whether err is an apiError a retry may cure.
func isUnavailable(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.unavailable()
}

// errorOf builds the apiError of a non-2xx answer from its body, the
// Iceberg error model when it is one.
func errorOf(status int, body []byte) *apiError {
	var model struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	e := &apiError{status: status}
	if json.Unmarshal(body, &model) == nil && model.Error.Message != "" {
		e.message, e.typ = model.Error.Message, model.Error.Type
		return e
	}
	e.message = http.StatusText(status)
	if text := strings.TrimSpace(string(body)); text != "" {
		if len(text) > 200 {
			text = text[:200] + "..."
		}
		e.message += ": " + text
	}
	return e
}

// get sends a GET to path (escaped, with its query) and returns the 2xx
// answer's body.
func (c *apiClient) get(ctx context.Context, path string) ([]byte, error) {
	return c.call(ctx, http.MethodGet, path, nil)
}

// change sends a mutation with a JSON body (nil: none) and a fresh
// Idempotency-Key, the same on every attempt, and returns the 2xx answer's
// body.
func (c *apiClient) change(ctx context.Context, method, path string, body any) ([]byte, error) {
	return c.call(ctx, method, path, body)
}

// call sends the request, again while the node cannot be reached or
// answers 503 (a mutation: or 500, see retryable), up to cliAttempts
// times. A mutation (any method but GET) carries an Idempotency-Key, a
// UUIDv7 made once for all its attempts.
func (c *apiClient) call(ctx context.Context, method, path string, body any) ([]byte, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return nil, err
		}
	}
	key := ""
	if method != http.MethodGet {
		u, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		key = u.String()
	}
	wait := cliBackoff
	for attempt := 1; ; attempt++ {
		answer, err := c.send(ctx, method, c.base+path, payload, key)
		if err == nil {
			return answer, nil
		}
		var ae *apiError
		if !errors.As(err, &ae) {
			return nil, err
		}
		ae.attempts = attempt
		if !ae.retryable(key != "") || attempt >= cliAttempts || ctx.Err() != nil {
			return nil, ae
		}
		select {
		case <-ctx.Done():
			return nil, ae
		case <-time.After(wait):
		}
		wait = min(2*wait, cliMaxBackoff)
	}
}

// send sends the request once.
func (c *apiClient) send(ctx context.Context, method, target string, payload []byte, key string) ([]byte, error) {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "floe-cli")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, noAnswer(ctx, method, target, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, noAnswer(ctx, method, target, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, errorOf(resp.StatusCode, answer)
	}
	return answer, nil
}

// noAnswer is the apiError of a request that got no (whole) answer. A
// certificate the client does not trust is not retried: it will not change.
func noAnswer(ctx context.Context, method, target string, err error) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return context.Canceled
	}
	what := "no answer to " + method + " " + target
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &apiError{message: what + " before --timeout passed"}
	}
	var cve *tls.CertificateVerificationError
	if errors.As(err, &cve) {
		return &cliFailure{code: exitUnavailable, msg: what + ": " + shortError(err) + " (--ca names the CA to trust)"}
	}
	return &apiError{message: what + ": " + shortError(err)}
}

// readyz asks the node at base for /readyz, once, without a token (the
// probes are open): "ready", "not ready: REASON", or "down: ERROR".
func (c *apiClient) readyz(ctx context.Context, base string) string {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return "down: " + err.Error()
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "down: " + shortError(err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Reason string `json:"reason"`
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	_ = json.Unmarshal(body, &out)
	switch {
	case resp.StatusCode == http.StatusOK:
		return "ready"
	case out.Reason != "":
		return "not ready: " + out.Reason
	default:
		return fmt.Sprintf("not ready: %d", resp.StatusCode)
	}
}

// shortError drops a url.Error's method and URL.
func shortError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}
