package spectest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"
)

// Transport is an http.RoundTripper that validates every response against
// the spec and reports violations with t.Errorf. Create it with Wrap,
// NewTransport or Validator.Transport.
type Transport struct {
	v    *Validator
	t    testing.TB
	base http.RoundTripper

	mu       sync.Mutex
	done     bool // the test has finished: report to stderr, not to t
	count    int
	failures int
	ops      map[string]int
}

// NewTransport returns a RoundTripper that sends requests through base
// (http.DefaultTransport if nil) and validates each response with the
// Validator from Load, reporting violations with t.Errorf. It fails the test
// immediately if the spec cannot be loaded. See Wrap for a variant that
// exposes the number of validated responses.
func NewTransport(t testing.TB, base http.RoundTripper) http.RoundTripper {
	t.Helper()
	return Wrap(t, base)
}

// Wrap is NewTransport returning the concrete *Transport, whose Count and
// Operations let a test assert that responses were actually validated.
func Wrap(t testing.TB, base http.RoundTripper) *Transport {
	t.Helper()
	v, err := Load()
	if err != nil {
		if Required() {
			t.Fatalf("spectest: %v", err)
		}
		// Without the spec the requests still run; only validation is off.
		t.Logf("spectest: responses not validated: %s", MissingHint)
		if base == nil {
			base = http.DefaultTransport
		}
		return &Transport{t: t, base: base, ops: map[string]int{}}
	}
	return v.Transport(t, base)
}

// Transport returns a validating transport around base (http.DefaultTransport
// if nil) that reports to t.
func (v *Validator) Transport(t testing.TB, base http.RoundTripper) *Transport {
	t.Helper()
	if base == nil {
		base = http.DefaultTransport
	}
	tr := &Transport{v: v, t: t, base: base, ops: map[string]int{}}
	// Background goroutines (e.g. iceberg-go's metrics reporter) may still
	// send requests once the test is over, when t must no longer be used.
	t.Cleanup(func() {
		tr.mu.Lock()
		tr.done = true
		tr.mu.Unlock()
	})
	return tr
}

// RoundTrip implements http.RoundTripper. The response body is read in full,
// validated, and handed back to the caller unchanged.
func (tr *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if tr.v == nil { // no spec: pass through (see Wrap)
		return tr.base.RoundTrip(req)
	}
	resp, err := tr.base.RoundTrip(req)
	if err != nil || resp == nil {
		return resp, err
	}
	var body []byte
	if resp.Body != nil && resp.Body != http.NoBody {
		var readErr error
		body, readErr = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if readErr != nil {
			// Hand the caller the same failure; there is nothing to validate.
			resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{readErr}))
			return resp, nil
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}

	op, checkErr := tr.v.check(req, resp, body)

	tr.mu.Lock()
	defer tr.mu.Unlock()
	if op != "" {
		tr.count++
		tr.ops[op]++
	}
	if checkErr != nil {
		tr.failures++
		msg := fmt.Sprintf("spectest: response violates the Iceberg REST spec: %s %s -> %d: %v",
			req.Method, req.URL.EscapedPath(), resp.StatusCode, checkErr)
		if tr.done {
			fmt.Fprintln(os.Stderr, msg+" (after the test finished)")
		} else {
			tr.t.Errorf("%s", msg)
		}
	}
	return resp, nil
}

// Count returns how many responses this transport matched to an operation
// of the spec and validated (whether they passed or not).
func (tr *Transport) Count() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.count
}

// Failures returns how many responses this transport reported as violations.
func (tr *Transport) Failures() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.failures
}

// Operations returns, per operationId, how many responses this transport
// validated.
func (tr *Transport) Operations() map[string]int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make(map[string]int, len(tr.ops))
	for k, n := range tr.ops {
		out[k] = n
	}
	return out
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
