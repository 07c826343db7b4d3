package spectest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// canned is a hand-made response of the fake server.
type canned struct {
	status int
	body   string
	ctype  string // default application/json when body is set
}

// fakeServer serves canned responses keyed by "METHOD escaped-path".
func fakeServer(t *testing.T, routes map[string]canned) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := routes[r.Method+" "+r.URL.EscapedPath()]
		if !ok {
			http.Error(w, "no canned response for "+r.Method+" "+r.URL.EscapedPath(), http.StatusTeapot)
			return
		}
		if c.body != "" || c.ctype != "" {
			ct := c.ctype
			if ct == "" {
				ct = "application/json"
			}
			w.Header().Set("Content-Type", ct)
		}
		w.WriteHeader(c.status)
		_, _ = io.WriteString(w, c.body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func loadValidator(t *testing.T) *Validator {
	t.Helper()
	v, err := Load()
	require.NoError(t, err)
	require.NotNil(t, v)
	return v
}

// do sends method+path to srv with a plain client and checks the response.
func do(t *testing.T, v *Validator, srv *httptest.Server, method, path, reqBody string) error {
	t.Helper()
	var rb io.Reader
	if reqBody != "" {
		rb = strings.NewReader(reqBody)
	}
	req, err := http.NewRequest(method, srv.URL+path, rb)
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NotEqual(t, http.StatusTeapot, resp.StatusCode, "fake server: %s", body)
	return v.Check(req, resp, body)
}

const (
	configOK = `{"defaults":{"clients":"4"},"overrides":{"warehouse":"s3://bucket/wh"},` +
		`"endpoints":["GET /v1/{prefix}/namespaces","GET /v1/{prefix}/namespaces/{namespace}"]}`
	loadNamespaceOK = `{"namespace":["a"],"properties":{"owner":"floe"}}`
	noSuchNamespace = `{"error":{"message":"Namespace does not exist: a","type":"NoSuchNamespaceException","code":404}}`
)

func TestSpecPath(t *testing.T) {
	p, err := SpecPath()
	require.NoError(t, err)
	assert.True(t, filepath.IsAbs(p))
	assert.Equal(t, "rest-catalog-open-api.yaml", filepath.Base(p))
	assert.FileExists(t, p)

	t.Run("env override", func(t *testing.T) {
		t.Setenv(SpecEnv, p)
		got, err := SpecPath()
		require.NoError(t, err)
		assert.Equal(t, p, got)
	})
	t.Run("env override to a missing file", func(t *testing.T) {
		t.Setenv(SpecEnv, filepath.Join(t.TempDir(), "nope.yaml"))
		_, err := SpecPath()
		require.Error(t, err)
		assert.Contains(t, err.Error(), SpecEnv)
	})
	t.Run("not found outside the repository", func(t *testing.T) {
		t.Setenv(SpecEnv, "")
		t.Setenv("FLOE_TOOLS", t.TempDir())
		t.Chdir(t.TempDir())
		_, err := SpecPath()
		require.Error(t, err)
	})
	t.Run("the cache make spec fills", func(t *testing.T) {
		t.Setenv(SpecEnv, "")
		tools := t.TempDir()
		t.Setenv("FLOE_TOOLS", tools)
		t.Chdir(t.TempDir())
		cached := CachedSpecPath()
		require.True(t, strings.HasPrefix(cached, tools))
		require.NoError(t, os.MkdirAll(filepath.Dir(cached), 0o755))
		raw, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(cached, raw, 0o644))
		got, err := SpecPath()
		require.NoError(t, err, "the pinned spec is %s; ../shared/spec has another revision?", PinnedRevision)
		assert.Equal(t, cached, got)

		// A file that is not the pinned revision is refused.
		require.NoError(t, os.WriteFile(cached, append(raw, '\n'), 0o644))
		_, err = SpecPath()
		require.ErrorContains(t, err, "make spec")
	})
}

func TestLoad(t *testing.T) {
	v := loadValidator(t)
	again, err := Load()
	require.NoError(t, err)
	assert.Same(t, v, again, "Load must cache the validator")
	assert.NotEmpty(t, v.Relaxations(), "the current spec needs relaxations; if not, update the package doc")
	for _, r := range v.Relaxations() {
		t.Log("relaxed:", r)
	}
	// The etag header survives the rewrite as a header object.
	require.NotNil(t, v.doc.Components.Headers["etag"])
	assert.NotNil(t, v.doc.Components.Headers["etag"].Value.Schema)
}

func TestCheckValidResponses(t *testing.T) {
	v := loadValidator(t)
	srv := fakeServer(t, map[string]canned{
		"GET /v1/config":                       {status: 200, body: configOK},
		"GET /v1/namespaces/a":                 {status: 200, body: loadNamespaceOK},
		"GET /v1/pfx/namespaces/a":             {status: 200, body: loadNamespaceOK},
		"GET /v1/namespaces/missing":           {status: 404, body: noSuchNamespace},
		"GET /v1/pfx/namespaces/missing":       {status: 404, body: noSuchNamespace},
		"DELETE /v1/namespaces/a/tables/t":     {status: 204},
		"DELETE /v1/pfx/namespaces/a/tables/t": {status: 204},
		"HEAD /v1/namespaces/a":                {status: 204},
		"HEAD /v1/namespaces/missing":          {status: 404},
		"GET /v1/namespaces/a%1Fb":             {status: 200, body: `{"namespace":["a","b"],"properties":{}}`},
		"POST /v1/namespaces":                  {status: 200, body: `{"namespace":["a"],"properties":{}}`},
		"POST /v1/tables/rename":               {status: 204},
		"POST /v1/transactions/commit":         {status: 204},
		"GET /v1/namespaces/a/tables":          {status: 200, body: `{"identifiers":[{"namespace":["a"],"name":"t"}]}`},
		"GET /healthz":                         {status: 200, body: `ok`, ctype: "text/plain"},
	})
	cases := []struct {
		name, method, path, reqBody string
		op                          string // expected operationId; "" if ignored
	}{
		{"config", "GET", "/v1/config", "", "getConfig"},
		{"plain load namespace", "GET", "/v1/namespaces/a", "", "loadNamespaceMetadata"},
		{"prefixed load namespace", "GET", "/v1/pfx/namespaces/a", "", "loadNamespaceMetadata"},
		{"multi-level namespace", "GET", "/v1/namespaces/a%1Fb", "", "loadNamespaceMetadata"},
		{"plain 404 error model", "GET", "/v1/namespaces/missing", "", "loadNamespaceMetadata"},
		{"prefixed 404 error model", "GET", "/v1/pfx/namespaces/missing", "", "loadNamespaceMetadata"},
		{"plain drop table 204", "DELETE", "/v1/namespaces/a/tables/t", "", "dropTable"},
		{"prefixed drop table 204", "DELETE", "/v1/pfx/namespaces/a/tables/t", "", "dropTable"},
		{"namespace exists", "HEAD", "/v1/namespaces/a", "", "namespaceExists"},
		{"namespace does not exist", "HEAD", "/v1/namespaces/missing", "", "namespaceExists"},
		{"create namespace", "POST", "/v1/namespaces", `{"namespace":["a"]}`, "createNamespace"},
		{"rename table", "POST", "/v1/tables/rename", `{}`, "renameTable"},
		{"commit transaction", "POST", "/v1/transactions/commit", `{}`, "commitTransaction"},
		{"list tables", "GET", "/v1/namespaces/a/tables", "", "listTables"},
		{"non-v1 path ignored", "GET", "/healthz", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := v.Operations()[tc.op]
			require.NoError(t, do(t, v, srv, tc.method, tc.path, tc.reqBody))
			if tc.op != "" {
				assert.Greater(t, v.Operations()[tc.op], before, "response was not validated as %s", tc.op)
			}
		})
	}
}

func TestCheckStatusCoveredByRange(t *testing.T) {
	v := loadValidator(t)
	req := httptest.NewRequest(http.MethodGet, "/v1/namespaces/a", nil)
	// loadNamespaceMetadata does not list 500 or 502; its 5XX response does.
	for _, status := range []int{500, 502} {
		body := fmt.Sprintf(`{"error":{"message":"boom","type":"RuntimeException","code":%d}}`, status)
		assert.NoError(t, v.Check(req, jsonResponse(status, body), []byte(body)), "status %d", status)
	}
	// The 5XX response still validates the body.
	bad := `{"message":"boom"}`
	err := v.Check(req, jsonResponse(500, bad), []byte(bad))
	require.Error(t, err)
}

func TestCheckInvalidResponses(t *testing.T) {
	v := loadValidator(t)
	srv := fakeServer(t, map[string]canned{
		// CreateNamespaceResponse requires "namespace".
		"POST /v1/namespaces":     {status: 200, body: `{"properties":{"owner":"floe"}}`},
		"POST /v1/pfx/namespaces": {status: 200, body: `{"properties":{"owner":"floe"}}`},
		// ErrorModel requires "code".
		"GET /v1/namespaces/nocode": {status: 404, body: `{"error":{"message":"gone","type":"NoSuchNamespaceException"}}`},
		// Wrong type: namespace must be an array of strings.
		"GET /v1/namespaces/a": {status: 200, body: `{"namespace":"a"}`},
		// IcebergErrorResponse has additionalProperties: false.
		"GET /v1/namespaces/extra": {status: 404, body: `{"error":{"message":"m","type":"T","code":404},"x":1}`},
		// ConfigResponse requires defaults and overrides.
		"GET /v1/config": {status: 200, body: `{"defaults":{}}`},
		// Not JSON at all.
		"GET /v1/namespaces/text": {status: 200, body: `namespace a`, ctype: "text/plain"},
		// 409 is not documented for loadNamespaceMetadata and there is no 4XX/default.
		"GET /v1/namespaces/conflict": {status: 409, body: `{"error":{"message":"m","type":"T","code":409}}`},
		// namespaceExists documents 204, not 200.
		"HEAD /v1/namespaces/a": {status: 200},
		// 200 with an empty body where the spec requires content.
		"GET /v1/namespaces/empty": {status: 200},
		// Undocumented routes.
		"GET /v1/namespaces/a/bogus":     {status: 200, body: `{}`},
		"GET /v1/pfx/bogus":              {status: 200, body: `{}`},
		"PATCH /v1/namespaces/a":         {status: 200, body: `{}`},
		"GET /v1/pfx/namespaces/a/x/y/z": {status: 200, body: `{}`},
	})
	cases := []struct {
		name, method, path, reqBody string
		want                        error  // errors.Is target, or nil
		contains                    string // substring of the error, or ""
	}{
		{"create namespace without namespace (plain)", "POST", "/v1/namespaces", `{"namespace":["a"]}`, nil, "namespace"},
		{"create namespace without namespace (prefixed)", "POST", "/v1/pfx/namespaces", `{"namespace":["a"]}`, nil, "namespace"},
		{"error model without code", "GET", "/v1/namespaces/nocode", "", nil, "code"},
		{"namespace of the wrong type", "GET", "/v1/namespaces/a", "", nil, "namespace"},
		{"extra property in error response", "GET", "/v1/namespaces/extra", "", nil, ""},
		{"config without overrides", "GET", "/v1/config", "", nil, "overrides"},
		{"non-JSON body", "GET", "/v1/namespaces/text", "", nil, "Content-Type"},
		{"undocumented status", "GET", "/v1/namespaces/conflict", "", ErrUndocumentedStatus, "409"},
		{"undocumented HEAD status", "HEAD", "/v1/namespaces/a", "", ErrUndocumentedStatus, "200"},
		{"missing body", "GET", "/v1/namespaces/empty", "", nil, ""},
		{"undocumented sub-resource", "GET", "/v1/namespaces/a/bogus", "", ErrUndocumentedRoute, "undocumented route"},
		{"undocumented prefixed path", "GET", "/v1/pfx/bogus", "", ErrUndocumentedRoute, "undocumented route"},
		{"undocumented method", "PATCH", "/v1/namespaces/a", "", ErrUndocumentedRoute, "method not allowed"},
		{"too deep", "GET", "/v1/pfx/namespaces/a/x/y/z", "", ErrUndocumentedRoute, "undocumented route"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := do(t, v, srv, tc.method, tc.path, tc.reqBody)
			require.Error(t, err)
			t.Log(err)
			if tc.want != nil {
				assert.ErrorIs(t, err, tc.want)
			} else {
				assert.False(t, errors.Is(err, ErrUndocumentedRoute) || errors.Is(err, ErrUndocumentedStatus),
					"want a body validation error, got %v", err)
			}
			if tc.contains != "" {
				assert.Contains(t, err.Error(), tc.contains)
			}
		})
	}
}

func TestCheckNoContent(t *testing.T) {
	v := loadValidator(t)
	req := httptest.NewRequest(http.MethodDelete, "/v1/namespaces/a/tables/t", nil)

	assert.NoError(t, v.Check(req, &http.Response{StatusCode: 204, Request: req}, nil))
	// A body where the spec defines none (not sendable by net/http for 204,
	// but a hand-rolled server could).
	err := v.Check(req, &http.Response{StatusCode: 204, Request: req}, []byte(`{"dropped":true}`))
	assert.ErrorIs(t, err, ErrUnexpectedBody)
	// dropTable does not document 304.
	err = v.Check(req, &http.Response{StatusCode: 304, Request: req}, nil)
	assert.ErrorIs(t, err, ErrUndocumentedStatus)

	// loadTable documents 304 Not Modified, without content.
	load := httptest.NewRequest(http.MethodGet, "/v1/namespaces/a/tables/t", nil)
	assert.NoError(t, v.Check(load, &http.Response{StatusCode: 304, Request: load}, nil))

	// req may be nil when resp.Request is set; config is not prefixed.
	cfg := httptest.NewRequest(http.MethodGet, "/v1/config?warehouse=wh", nil)
	assert.NoError(t, v.Check(nil, jsonResponseFor(cfg, 200, configOK), []byte(configOK)))
	assert.Error(t, v.Check(nil, &http.Response{StatusCode: 200}, nil))
}

func TestCandidatePaths(t *testing.T) {
	assert.Equal(t, []string{"/v1/config"}, candidatePaths("/v1/config"))
	assert.Equal(t, []string{"/v1/oauth/tokens"}, candidatePaths("/v1/oauth/tokens"))
	assert.Equal(t, []string{"/v1/p/namespaces"}, candidatePaths("/v1/p/namespaces"))
	assert.Equal(t, []string{"/v1/" + PlaceholderPrefix + "/namespaces/a", "/v1/namespaces/a"},
		candidatePaths("/v1/namespaces/a"))
	assert.Equal(t, []string{"/v1/" + PlaceholderPrefix + "/tables/rename", "/v1/tables/rename"},
		candidatePaths("/v1/tables/rename"))
	assert.Equal(t, []string{"/v1/" + PlaceholderPrefix + "/transactions/commit", "/v1/transactions/commit"},
		candidatePaths("/v1/transactions/commit"))
}

func TestCheckPrefixNamedLikePlainRoot(t *testing.T) {
	v := loadValidator(t)
	// A real prefix called "tables": not a plain route, so it falls back to
	// the path as is.
	req := httptest.NewRequest(http.MethodGet, "/v1/tables/namespaces/a", nil)
	assert.NoError(t, v.Check(req, jsonResponseFor(req, 200, loadNamespaceOK), []byte(loadNamespaceOK)))
}

// recorder is a testing.TB that records Errorf calls instead of failing.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errs...)
}

func TestTransport(t *testing.T) {
	badCreate := `{"properties":{"owner":"floe"}}`
	srv := fakeServer(t, map[string]canned{
		"GET /v1/config":           {status: 200, body: configOK},
		"GET /v1/namespaces/a":     {status: 200, body: loadNamespaceOK},
		"GET /v1/pfx/namespaces/a": {status: 200, body: loadNamespaceOK},
		"POST /v1/namespaces":      {status: 200, body: badCreate},
		"GET /v1/nowhere":          {status: 200, body: `{}`},
		"GET /healthz":             {status: 200, body: "ok", ctype: "text/plain"},
	})

	rec := &recorder{TB: t}
	tr := Wrap(rec, srv.Client().Transport)
	client := &http.Client{Transport: tr}

	get := func(path string) string {
		resp, err := client.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}

	assert.Equal(t, configOK, get("/v1/config"))
	assert.Equal(t, loadNamespaceOK, get("/v1/namespaces/a"))
	assert.Equal(t, loadNamespaceOK, get("/v1/pfx/namespaces/a"))
	assert.Equal(t, "ok", get("/healthz"))
	assert.Empty(t, rec.errors(), "valid responses must not be reported")
	assert.Equal(t, 3, tr.Count())
	assert.Equal(t, 0, tr.Failures())
	assert.Equal(t, map[string]int{"getConfig": 1, "loadNamespaceMetadata": 2}, tr.Operations())

	// An invalid body is reported, and the caller still gets it intact.
	resp, err := client.Post(srv.URL+"/v1/namespaces", "application/json", strings.NewReader(`{"namespace":["a"]}`))
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, badCreate, string(b))
	assert.Equal(t, 200, resp.StatusCode)

	// An undocumented route is reported too.
	assert.Equal(t, "{}", get("/v1/nowhere"))

	errs := rec.errors()
	require.Len(t, errs, 2)
	assert.Contains(t, errs[0], "POST /v1/namespaces -> 200")
	assert.Contains(t, errs[0], "createNamespace")
	assert.Contains(t, errs[0], "namespace")
	assert.Contains(t, errs[1], "GET /v1/nowhere -> 200")
	assert.Contains(t, errs[1], "undocumented route")
	assert.Equal(t, 4, tr.Count())
	assert.Equal(t, 2, tr.Failures())

	// NewTransport is the same thing behind the RoundTripper interface.
	_, ok := NewTransport(rec, nil).(*Transport)
	assert.True(t, ok)
}

func TestTransportPassesErrorsThrough(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	rec := &recorder{TB: t}
	client := &http.Client{Transport: Wrap(rec, nil)}
	_, err := client.Get(url + "/v1/config")
	require.Error(t, err)
	assert.Empty(t, rec.errors())
}

func TestLoadFileErrors(t *testing.T) {
	_, err := LoadFile(filepath.Join(t.TempDir(), "missing.yaml"))
	require.Error(t, err)

	p := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(p, []byte("openapi: 3.1.1\npaths: [\n"), 0o644))
	_, err = LoadFile(p)
	require.Error(t, err)
}

func jsonResponse(status int, body string) *http.Response {
	return &http.Response{
		StatusCode: status,
		Header:     http.Header{"Content-Type": []string{"application/json"}},
		Body:       io.NopCloser(strings.NewReader(body)),
	}
}

func jsonResponseFor(req *http.Request, status int, body string) *http.Response {
	resp := jsonResponse(status, body)
	resp.Request = req
	return resp
}
