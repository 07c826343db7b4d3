package spectest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// PlaceholderPrefix is the {prefix} segment inserted into plain floe routes
// (/v1/namespaces/...) before they are matched against the spec, which only
// defines prefixed routes (/v1/{prefix}/namespaces/...).
const PlaceholderPrefix = "spectest-prefix"

var (
	// ErrUndocumentedRoute is returned (wrapped) by Check for a request whose
	// method and path the spec does not define.
	ErrUndocumentedRoute = errors.New("undocumented route")
	// ErrUndocumentedStatus is returned (wrapped) by Check for a response
	// status that the operation covers neither exactly, nor by a range
	// (such as 5XX), nor by a default response.
	ErrUndocumentedStatus = errors.New("undocumented response status")
	// ErrUnexpectedBody is returned (wrapped) by Check for a non-empty body in
	// a response that the spec defines without content (such as a 204).
	ErrUnexpectedBody = errors.New("unexpected response body")
)

// plainRoots are the first path segments after /v1/ of floe's routes
// without a prefix.
var plainRoots = []string{"namespaces", "tables", "transactions", "views"}

// Validator checks HTTP responses against the Iceberg REST OpenAPI spec.
// It is safe for concurrent use.
type Validator struct {
	path    string
	doc     *openapi3.T
	router  routers.Router
	relaxed []string

	count atomic.Int64

	mu  sync.Mutex
	ops map[string]int
}

// Path returns the absolute path of the loaded spec.
func (v *Validator) Path() string { return v.path }

// Relaxations describes what had to be relaxed to load the spec (empty if
// nothing was).
func (v *Validator) Relaxations() []string { return slices.Clone(v.relaxed) }

// Count returns how many responses this Validator matched to an operation
// of the spec and validated (whether they passed or not) since it was
// loaded. Ignored responses (paths outside /v1/) and undocumented routes
// are not counted. The Validator returned by Load is shared by all tests of
// a package; use Transport.Count for a per-test figure.
func (v *Validator) Count() int { return int(v.count.Load()) }

// Operation is one operation of the spec.
type Operation struct {
	Method string // GET, POST, ...
	Path   string // the spec's path template, e.g. /v1/{prefix}/namespaces
	ID     string // operationId
	// Responses are the response keys the operation lists: "200", "5XX",
	// "default".
	Responses []string
}

// Lists reports whether the operation lists status among its responses,
// itself or as its class ("5XX") or by a default.
func (o Operation) Lists(status int) bool {
	return slices.Contains(o.Responses, strconv.Itoa(status)) ||
		slices.Contains(o.Responses, fmt.Sprintf("%dXX", status/100)) ||
		slices.Contains(o.Responses, "default")
}

// SpecOperations lists every operation the spec defines, sorted by path and
// method.
func (v *Validator) SpecOperations() []Operation {
	var out []Operation
	for path, item := range v.doc.Paths.Map() {
		for method, op := range item.Operations() {
			var codes []string
			if op.Responses != nil {
				for code := range op.Responses.Map() {
					codes = append(codes, code)
				}
			}
			slices.Sort(codes)
			out = append(out, Operation{Method: method, Path: path, ID: op.OperationID, Responses: codes})
		}
	}
	slices.SortFunc(out, func(a, b Operation) int {
		if a.Path != b.Path {
			return strings.Compare(a.Path, b.Path)
		}
		return strings.Compare(a.Method, b.Method)
	})
	return out
}

// Operations returns, per operationId, how many responses were validated.
func (v *Validator) Operations() map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]int, len(v.ops))
	for k, n := range v.ops {
		out[k] = n
	}
	return out
}

// Check validates resp, whose body is body (resp.Body is not read), as a
// response to req. req may be nil if resp.Request is set.
//
// Requests whose path does not start with /v1/ are ignored (nil). Otherwise
// the operation is looked up by method and path (plain floe routes are
// mapped to the spec's prefixed form, see PlaceholderPrefix), the status must
// be documented for it, and the body must match the schema of that response.
// HEAD responses are only checked for their status.
func (v *Validator) Check(req *http.Request, resp *http.Response, body []byte) error {
	_, err := v.check(req, resp, body)
	return err
}

// check is Check that also returns the operationId of the validated
// operation ("" when the response was not validated).
func (v *Validator) check(req *http.Request, resp *http.Response, body []byte) (string, error) {
	if resp == nil {
		return "", errors.New("spectest: nil response")
	}
	if req == nil {
		req = resp.Request
	}
	if req == nil || req.URL == nil {
		return "", errors.New("spectest: response without request")
	}
	path := req.URL.EscapedPath()
	if !strings.HasPrefix(path, "/v1/") {
		return "", nil
	}

	route, params, routed, err := v.findRoute(req, path)
	if err != nil {
		return "", err
	}
	op := route.Operation.OperationID
	if op == "" {
		op = req.Method + " " + route.Path
	}
	v.count.Add(1)
	v.mu.Lock()
	if v.ops == nil {
		v.ops = map[string]int{}
	}
	v.ops[op]++
	v.mu.Unlock()

	if err := validate(routed, route, params, resp, body); err != nil {
		return op, fmt.Errorf("operation %s (%s %s), status %d: %w", op, req.Method, route.Path, resp.StatusCode, err)
	}
	return op, nil
}

// findRoute finds the spec operation of req, whose escaped path is path. It
// returns the request the route was found for (with the possibly rewritten
// path).
func (v *Validator) findRoute(req *http.Request, path string) (*routers.Route, map[string]string, *http.Request, error) {
	var firstErr error
	for _, candidate := range candidatePaths(path) {
		unescaped, err := url.PathUnescape(candidate)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%w: %s %s: bad path: %v", ErrUndocumentedRoute, req.Method, path, err)
		}
		routed := req.Clone(context.WithoutCancel(req.Context()))
		routed.URL.Path = unescaped
		routed.URL.RawPath = candidate
		route, params, err := v.router.FindRoute(routed)
		if err == nil {
			return route, params, routed, nil
		}
		if firstErr == nil || errors.Is(err, routers.ErrMethodNotAllowed) {
			firstErr = err
		}
	}
	return nil, nil, nil, fmt.Errorf("%w: %s %s (%s in %s)", ErrUndocumentedRoute, req.Method, path, routeErr(firstErr), v.path)
}

// candidatePaths returns the escaped paths to match against the spec, in
// order of preference. A plain floe route is tried with a placeholder prefix
// first; as a fallback it is tried as is, in case its first segment is a
// real prefix that happens to be called like a plain route.
func candidatePaths(path string) []string {
	rest := strings.TrimPrefix(path, "/v1/")
	first, _, _ := strings.Cut(rest, "/")
	if slices.Contains(plainRoots, first) {
		return []string{"/v1/" + PlaceholderPrefix + "/" + rest, path}
	}
	return []string{path}
}

// validate checks the status and body of resp against route.
func validate(req *http.Request, route *routers.Route, params map[string]string, resp *http.Response, body []byte) error {
	status := resp.StatusCode
	responses := route.Operation.Responses
	var ref *openapi3.ResponseRef
	if responses != nil {
		if ref = responses.Status(status); ref == nil {
			ref = responses.Default()
		}
	}
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("%w: %d (documented: %s)", ErrUndocumentedStatus, status, documentedStatuses(responses))
	}

	// HEAD responses never carry a body (openapi3filter skips them too).
	if req.Method == http.MethodHead {
		return nil
	}
	if len(ref.Value.Content) == 0 {
		if len(bytes.TrimSpace(body)) > 0 {
			return fmt.Errorf("%w: the spec defines no content for status %d, got %d bytes", ErrUnexpectedBody, status, len(body))
		}
		return nil
	}

	opts := &openapi3filter.Options{
		// Request validation is not the point here, and auth is skipped.
		ExcludeRequestBody:        true,
		ExcludeRequestQueryParams: true,
		AuthenticationFunc:        openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus:     true,
		MultiError:                true,
	}
	opts.WithCustomSchemaErrorFunc(schemaErrorMessage)
	header := resp.Header
	if header == nil {
		header = http.Header{}
	}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request:    req,
			PathParams: params,
			Route:      route,
			Options:    opts,
		},
		Status:  status,
		Header:  header,
		Options: opts,
	}
	input.SetBodyBytes(body)
	return openapi3filter.ValidateResponse(context.Background(), input)
}

// schemaErrorMessage keeps schema errors short: the path of the offending
// value and the reason, without kin-openapi's dump of the (often huge)
// schema and value.
func schemaErrorMessage(err *openapi3.SchemaError) string {
	if err.Origin != nil {
		return "" // the default message is the origin's
	}
	reason := err.Reason
	if reason == "" {
		reason = fmt.Sprintf("doesn't match schema %q", err.SchemaField)
	}
	if p := err.JSONPointer(); len(p) > 0 && !strings.Contains(reason, "'/") {
		return fmt.Sprintf("at %q: %s", "/"+strings.Join(p, "/"), reason)
	}
	return reason
}

func documentedStatuses(responses *openapi3.Responses) string {
	if responses == nil || responses.Len() == 0 {
		return "none"
	}
	keys := make([]string, 0, responses.Len())
	for k := range responses.Map() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}
