package main

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// With auth off, a browser's write to the node under a name it is not
// configured with is refused: a page of another site whose name resolves
// to the node (DNS rebinding) is same-origin to the browser, and created a
// namespace on a local node. API clients, which send no Origin, reach the
// node under any name; reads are not refused.
func TestBrowserWritesUnderAForeignHostNameAreRefused(t *testing.T) {
	s := &security{names: []string{"127.0.0.1", "floe.internal"}, log: slog.New(slog.DiscardHandler)}
	h := s.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for _, tc := range []struct {
		method, host string
		headers      map[string]string
		want         int
	}{
		{"POST", "evil.example:8181", map[string]string{"Origin": "http://evil.example:8181"}, http.StatusForbidden},
		{"DELETE", "evil.example:8181", map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusForbidden},
		{"POST", "evil.example:8181", nil, http.StatusNoContent},
		{"GET", "evil.example:8181", map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusNoContent},
		{"POST", "127.0.0.1:8181", map[string]string{"Origin": "http://127.0.0.1:8181"}, http.StatusNoContent},
		{"POST", "[::1]:8181", map[string]string{"Origin": "http://[::1]:8181"}, http.StatusNoContent},
		{"POST", "localhost:8181", map[string]string{"Origin": "http://localhost:8181"}, http.StatusNoContent},
		{"POST", "floe.internal:8181", map[string]string{"Origin": "http://floe.internal:8181"}, http.StatusNoContent},
		{"POST", "FLOE.internal.:8181", map[string]string{"Origin": "http://FLOE.internal.:8181"}, http.StatusNoContent},
	} {
		r := httptest.NewRequest(tc.method, "http://"+tc.host+"/v1/namespaces", strings.NewReader(`{"namespace":["x"]}`))
		for k, v := range tc.headers {
			r.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		assert.Equal(t, tc.want, rec.Code, "%s %s %v: %s", tc.method, tc.host, tc.headers, rec.Body)
	}
}
