package catalog_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/testenv"
)

// A request whose client went away before its answer is not a server
// failure: the answer reaches no one and is logged at INFO, not as a
// failed request at ERROR (an operator's alert would fire at every
// impatient client).
func TestRequestWhoseClientLeftIsNotLoggedAsFailure(t *testing.T) {
	logs := &testenv.LogBuffer{}
	uri, scfg := warehouses()[0].uri(t)
	n := &node{t: t, dir: t.TempDir(), addr: freeAddr(t), warehouse: uri, scfg: scfg,
		logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	n.start()
	t.Cleanup(n.stop)
	require.Equal(t, http.StatusOK, n.do(t, http.MethodPost, "/v1/floe/namespaces", `{"namespace":["gone"]}`).status)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/floe/namespaces", bytes.NewBufferString(`{"namespace":["gone2"]}`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	n.srv.Handler().ServeHTTP(rec, req)
	require.GreaterOrEqual(t, rec.Code, 500, "a request whose context ended before it was proposed: %s", rec.Body)

	out := logs.String()
	assert.NotContains(t, out, "level=ERROR", "logs: %s", out)
	assert.Contains(t, out, "request ended without its client")
}
