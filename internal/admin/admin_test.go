package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type fakeCluster struct {
	calls []string
	err   error
}

func (f *fakeCluster) Status(context.Context) (Status, error) {
	return Status{Self: "a", LeaderID: "a", Members: []Member{{ID: "a", Suffrage: "Voter", Leader: true, Reachable: true}}}, f.err
}
func (f *fakeCluster) AddVoter(_ context.Context, id, addr string) error {
	f.calls = append(f.calls, "voter "+id+" "+addr)
	return f.err
}
func (f *fakeCluster) AddNonvoter(_ context.Context, id, addr string) error {
	f.calls = append(f.calls, "nonvoter "+id+" "+addr)
	return f.err
}
func (f *fakeCluster) Remove(_ context.Context, id string) error {
	f.calls = append(f.calls, "remove "+id)
	return f.err
}
func (f *fakeCluster) TransferLeadership(_ context.Context, id string) error {
	f.calls = append(f.calls, "transfer "+id)
	return f.err
}

func do(t *testing.T, h http.Handler, method, path, body string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	var m map[string]any
	if rec.Body.Len() > 0 {
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &m), rec.Body.String())
	}
	return rec, m
}

func TestOperatorAPI(t *testing.T) {
	fc := &fakeCluster{}
	h := New(fc, nil, nil).Handler()

	rec, body := do(t, h, "GET", "/management/v1/cluster", "")
	assert.Equal(t, 200, rec.Code)
	assert.Equal(t, "a", body["leader-id"])

	rec, _ = do(t, h, "POST", "/management/v1/cluster/voters", `{"id":"b","address":"127.0.0.1:9"}`)
	assert.Equal(t, 204, rec.Code)
	rec, _ = do(t, h, "POST", "/management/v1/cluster/non-voters", `{"id":"c","address":"127.0.0.1:10"}`)
	assert.Equal(t, 204, rec.Code)
	rec, _ = do(t, h, "DELETE", "/management/v1/cluster/members/c", "")
	assert.Equal(t, 204, rec.Code)
	rec, _ = do(t, h, "POST", "/management/v1/cluster/leadership-transfer", "")
	assert.Equal(t, 204, rec.Code)
	assert.Equal(t, []string{"voter b 127.0.0.1:9", "nonvoter c 127.0.0.1:10", "remove c", "transfer "}, fc.calls)

	// Bad input never reaches the cluster.
	for _, c := range []struct{ path, body string }{
		{"/management/v1/cluster/voters", `{"id":"b"}`},
		{"/management/v1/cluster/voters", `{"id":`},
		{"/management/v1/cluster/non-voters", ``},
		{"/management/v1/cluster/leadership-transfer", `[1]`},
	} {
		rec, body = do(t, h, "POST", c.path, c.body)
		assert.Equal(t, 400, rec.Code, c)
		assert.Equal(t, "BadRequestException", body["error"].(map[string]any)["type"])
	}
	assert.Len(t, fc.calls, 4)

	fc.err = fmt.Errorf("%w: no member", ErrNotFound)
	rec, body = do(t, h, "DELETE", "/management/v1/cluster/members/zz", "")
	assert.Equal(t, 404, rec.Code)
	assert.EqualValues(t, 404, body["error"].(map[string]any)["code"])
	fc.err = fmt.Errorf("%w: no leader", ErrUnavailable)
	rec, _ = do(t, h, "POST", "/management/v1/cluster/leadership-transfer", `{"id":"b"}`)
	assert.Equal(t, 503, rec.Code)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	rec, _ = do(t, h, "PUT", "/management/v1/cluster", "")
	assert.Equal(t, 405, rec.Code)
}

func TestMembershipChangesHonourIdempotencyKey(t *testing.T) {
	fc := &fakeCluster{}
	h := New(fc, newPurgeStore(t), nil).Handler()
	keyed := func(method, path, body, key string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		h.ServeHTTP(rec, req)
		return rec
	}
	const key = "0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8d"
	rec := keyed("POST", "/management/v1/cluster/leadership-transfer", `{"id":"b"}`, key)
	require.Equal(t, 204, rec.Code, rec.Body.String())
	rec = keyed("POST", "/management/v1/cluster/leadership-transfer", `{"id":"b"}`, key)
	require.Equal(t, 204, rec.Code)
	assert.Equal(t, "true", rec.Header().Get("Idempotent-Replayed"))
	assert.Equal(t, []string{"transfer b"}, fc.calls, "the retry did not transfer again")

	rec = keyed("POST", "/management/v1/cluster/leadership-transfer", `{"id":"c"}`, key)
	assert.Equal(t, 422, rec.Code, "same key, other body")
	rec = keyed("DELETE", "/management/v1/cluster/members/b", "", "nope")
	assert.Equal(t, 400, rec.Code)
	assert.Equal(t, []string{"transfer b"}, fc.calls)
}
