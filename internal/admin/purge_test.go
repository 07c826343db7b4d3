package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/idempotency"
	"github.com/floe-catalog/floe/internal/raftnode"
)

// fsmStore is a one-replica store: every command is applied at once to a
// real state machine.
type fsmStore struct {
	mu   sync.Mutex // Apply runs one entry at a time, as under Raft
	f    *fsm.FSM
	i    uint64
	down bool
	// lost: a proposal is applied but its answer is lost (ErrUnknownOutcome).
	lost bool
}

func (s *fsmStore) Propose(_ context.Context, c fsm.Command) (fsm.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return fsm.Result{}, errors.New("raftnode: no leader")
	}
	if s.lost {
		defer func() { s.lost = false }()
		b, err := fsm.Encode(c)
		if err != nil {
			return fsm.Result{}, err
		}
		s.i++
		s.f.Apply(&raft.Log{Index: s.i, Term: 1, Type: raft.LogCommand, Data: b})
		return fsm.Result{}, fmt.Errorf("%w: leader failed", raftnode.ErrUnknownOutcome)
	}
	b, err := fsm.Encode(c)
	if err != nil {
		return fsm.Result{}, err
	}
	s.i++
	return s.f.Apply(&raft.Log{Index: s.i, Term: 1, Type: raft.LogCommand, Data: b}).(fsm.Result), nil
}

func (s *fsmStore) Read(_ context.Context, fn func(*fsm.Reader) error) error {
	if s.down {
		return errors.New("raftnode: no leader")
	}
	return s.f.View(fn)
}

func (s *fsmStore) must(t *testing.T, c fsm.Command) {
	t.Helper()
	res, err := s.Propose(context.Background(), c)
	require.NoError(t, err)
	require.NoError(t, res.Err())
}

func newPurgeStore(t *testing.T) *fsmStore {
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	s := &fsmStore{f: f}
	s.must(t, fsm.CreateNamespace{Namespace: []string{"db"}})
	s.must(t, fsm.CreateNamespace{Namespace: []string{"db", "sub"}})
	for i, name := range []string{"a", "b", "c"} {
		ns := []string{"db"}
		if name == "c" {
			ns = []string{"db", "sub"}
		}
		id := fsm.Ident{Namespace: ns, Name: name}
		s.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: id,
			MetadataLocation: "s3://b/" + name + "/m.json", Location: "s3://b/" + name, UUID: name}}})
		s.must(t, fsm.DropTable{Ident: id, Purge: true, AtMs: int64(i), Job: &fsm.PurgeJobSpec{
			ID: fmt.Sprintf("job-%d", i), Warehouse: "s3://b", DroppedBy: "anonymous",
			FileIO: map[string]string{"s3.region": "us-east-1", "s3.secret-access-key": "TOPSECRET", "s3.access-key-id": "AKID"}}})
	}
	return s
}

func TestPurgeJobsAPI(t *testing.T) {
	st := newPurgeStore(t)
	h := NewPurgeJobs(st, func() time.Time { return time.UnixMilli(1000) }, nil)

	// job-0 fails for good; job-1 runs.
	st.must(t, fsm.AssignPurgeLease{JobID: "job-0", Node: "n1"})
	st.must(t, fsm.FinishPurgeJob{JobID: "job-0", Token: st.i, Outcome: fsm.OutcomeFailed, Error: "corrupt metadata"})
	st.must(t, fsm.AssignPurgeLease{JobID: "job-1", Node: "n1"})

	rec, body := do(t, h, "GET", "/management/v1/purge-jobs", "")
	require.Equal(t, 200, rec.Code, rec.Body.String())
	jobs := body["jobs"].([]any)
	require.Len(t, jobs, 3)
	first := jobs[0].(map[string]any)
	assert.Equal(t, "job-0", first["id"])
	assert.Equal(t, "FAILED", first["state"])
	assert.Equal(t, "corrupt metadata", first["last-error"])
	assert.Equal(t, "a", first["table"])
	assert.NotContains(t, rec.Body.String(), "TOPSECRET", "secrets are never shown")
	assert.NotContains(t, rec.Body.String(), "AKID")
	assert.Nil(t, body["next-page-token"])

	// Filters and pagination.
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"?state=running", []string{"job-1"}},
		{"?state=FAILED", []string{"job-0"}},
		{"?state=PENDING", []string{"job-2"}},
		{"?namespace=db&table=b", []string{"job-1"}},
		{"?namespace=db.sub", []string{"job-2"}},
		{"?namespace=db%1Fsub", []string{"job-2"}},
		{"?table=a", []string{"job-0"}},
		{"?warehouse=s3://b", []string{"job-0", "job-1", "job-2"}},
		{"?warehouse=s3://other", nil},
		{"?page-token=job-0", []string{"job-1", "job-2"}},
		// The id of a job pruned since: a UUID, and where it sorts.
		{"?page-token=00000000-0000-7000-8000-000000000000", []string{"job-0", "job-1", "job-2"}},
	} {
		rec, body = do(t, h, "GET", "/management/v1/purge-jobs"+c.query, "")
		require.Equal(t, 200, rec.Code, c.query)
		var ids []string
		for _, j := range body["jobs"].([]any) {
			ids = append(ids, j.(map[string]any)["id"].(string))
		}
		assert.Equal(t, c.want, ids, c.query)
	}
	rec, body = do(t, h, "GET", "/management/v1/purge-jobs?page-size=2", "")
	require.Equal(t, 200, rec.Code)
	assert.Len(t, body["jobs"], 2)
	assert.Equal(t, "job-1", body["next-page-token"])

	for _, q := range []string{"?state=DONE", "?page-size=0", "?page-size=x", "?page-size=1001", "?namespace=.",
		"?state=FAILED&state=PENDING", "?table=a&table=b", "?page-token=", "?page-token=zzz", "?page-token=job-9",
		// A misspelt filter or the catalog API's camelCase is not ignored.
		"?stat=FAILED", "?pageSize=1", "?pageToken=job-0",
		// warehouse-name qualifies namespace; alone it filtered nothing.
		"?warehouse-name=sales", "?warehouse-name=sales&table=a"} {
		rec, body = do(t, h, "GET", "/management/v1/purge-jobs"+q, "")
		assert.Equal(t, 400, rec.Code, q)
		assert.Equal(t, "BadRequestException", body["error"].(map[string]any)["type"], q)
	}

	// One job.
	rec, body = do(t, h, "GET", "/management/v1/purge-jobs/job-1", "")
	require.Equal(t, 200, rec.Code)
	assert.Equal(t, "RUNNING", body["state"])
	assert.Equal(t, "n1", body["lease"].(map[string]any)["node"])
	rec, body = do(t, h, "GET", "/management/v1/purge-jobs/nope", "")
	assert.Equal(t, 404, rec.Code)
	// The path is decoded once: %2541 names the id "%41", not "A".
	rec, b := do(t, h, "GET", "/management/v1/purge-jobs/%2541", "")
	assert.Equal(t, 404, rec.Code)
	assert.Contains(t, b["error"].(map[string]any)["message"], "%41")
	assert.Equal(t, float64(404), body["error"].(map[string]any)["code"])

	// Retry and release only FAILED jobs.
	rec, body = do(t, h, "POST", "/management/v1/purge-jobs/job-1/retry", "")
	assert.Equal(t, 409, rec.Code)
	assert.Contains(t, body["error"].(map[string]any)["message"], "RUNNING")
	rec, _ = do(t, h, "POST", "/management/v1/purge-jobs/job-1/release", "")
	assert.Equal(t, 409, rec.Code)
	rec, _ = do(t, h, "POST", "/management/v1/purge-jobs/nope/retry", "")
	assert.Equal(t, 404, rec.Code)

	rec, body = do(t, h, "POST", "/management/v1/purge-jobs/job-0/retry", "")
	require.Equal(t, 200, rec.Code, rec.Body.String())
	assert.Equal(t, "PENDING", body["state"])
	assert.Equal(t, float64(0), body["attempts"])

	st.must(t, fsm.AssignPurgeLease{JobID: "job-0", Node: "n1"})
	st.must(t, fsm.FinishPurgeJob{JobID: "job-0", Token: st.i, Outcome: fsm.OutcomeFailed, Error: "still corrupt"})
	rec, body = do(t, h, "POST", "/management/v1/purge-jobs/job-0/release", "")
	require.Equal(t, 200, rec.Code, rec.Body.String())
	assert.Equal(t, "FAILED", body["state"])
	assert.Equal(t, true, body["released"])
	assert.Equal(t, "anonymous", body["released-by"])
	require.NoError(t, st.f.View(func(r *fsm.Reader) error {
		_, blocked := r.PurgeTombstone(fsm.Ident{Namespace: []string{"db"}, Name: "a"})
		assert.False(t, blocked, "release drops the tombstone")
		return nil
	}))
	rec, _ = do(t, h, "POST", "/management/v1/purge-jobs/job-0/release", "")
	assert.Equal(t, 409, rec.Code, "released once")
	rec, _ = do(t, h, "POST", "/management/v1/purge-jobs/job-0/retry", "")
	assert.Equal(t, 409, rec.Code, "a released job is not retried")

	// No leader: 503, nothing changed.
	st.down = true
	rec, body = do(t, h, "POST", "/management/v1/purge-jobs/job-0/retry", "")
	assert.Equal(t, 503, rec.Code)
	assert.Equal(t, "ServiceUnavailableException", body["error"].(map[string]any)["type"])
	rec, _ = do(t, h, "GET", "/management/v1/purge-jobs", "")
	assert.Equal(t, 503, rec.Code)
	st.down = false

	// Applied but the answer lost: a 500, never a 503 a client would
	// resend by itself.
	st.must(t, fsm.AssignPurgeLease{JobID: "job-2", Node: "n1"})
	st.must(t, fsm.FinishPurgeJob{JobID: "job-2", Token: st.i, Outcome: fsm.OutcomeFailed, Error: "corrupt metadata"})
	st.lost = true
	rec, body = do(t, h, "POST", "/management/v1/purge-jobs/job-2/retry", "")
	assert.Equal(t, 500, rec.Code, rec.Body.String())
	assert.Equal(t, "InternalServerError", body["error"].(map[string]any)["type"])
	assert.Contains(t, body["error"].(map[string]any)["message"], "outcome unknown")

	rec, _ = do(t, h, "DELETE", "/management/v1/purge-jobs/job-0", "")
	assert.Equal(t, 405, rec.Code)
	assert.Equal(t, "GET, HEAD", rec.Header().Get("Allow"))
}

// failedJob returns a store holding one FAILED purge job, job-0, and the
// purge-job API over it.
func failedJob(t *testing.T) (*fsmStore, http.Handler) {
	st := newPurgeStore(t)
	h := NewPurgeJobs(st, func() time.Time { return time.UnixMilli(1000) }, nil)
	st.must(t, fsm.AssignPurgeLease{JobID: "job-0", Node: "n1"})
	st.must(t, fsm.FinishPurgeJob{JobID: "job-0", Token: st.i, Outcome: fsm.OutcomeFailed, Error: "corrupt metadata"})
	return st, h
}

func TestPurgeJobMutationsHonourIdempotencyKey(t *testing.T) {
	st, h := failedJob(t)
	keyed := func(path, key string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", path, strings.NewReader(""))
		req.Header.Set("Idempotency-Key", key)
		h.ServeHTTP(rec, req)
		return rec
	}
	const key = "0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8d"
	rec := keyed("/management/v1/purge-jobs/job-0/retry", key)
	require.Equal(t, 200, rec.Code, rec.Body.String())

	// The job fails again; the operator's retried request (same key) must
	// not retry it a second time.
	st.must(t, fsm.AssignPurgeLease{JobID: "job-0", Node: "n1"})
	st.must(t, fsm.FinishPurgeJob{JobID: "job-0", Token: st.i, Outcome: fsm.OutcomeFailed, Error: "still corrupt"})
	rec = keyed("/management/v1/purge-jobs/job-0/retry", key)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	assert.Equal(t, "true", rec.Header().Get("Idempotent-Replayed"))
	assert.Contains(t, rec.Body.String(), `"FAILED"`, "replayed, not retried again")

	rec = keyed("/management/v1/purge-jobs/job-0/release", key)
	assert.Equal(t, 422, rec.Code, "same key, other operation")
	rec = keyed("/management/v1/purge-jobs/job-0/release", "not-a-key")
	assert.Equal(t, 400, rec.Code)
}

// Retry and release take no fields: a body that sets any, or is not JSON,
// is a 400 that changes nothing; none, or an empty object, is fine.
func TestPurgeJobMutationsRefuseBodyFields(t *testing.T) {
	st, h := failedJob(t)
	post := func(path, body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", path, strings.NewReader(body)))
		return rec
	}
	for _, body := range []string{`{"x":1}`, `garbage`, `{} {}`, `[]`} {
		rec := post("/management/v1/purge-jobs/job-0/retry", body)
		assert.Equal(t, 400, rec.Code, "%s: %s", body, rec.Body.String())
		rec = post("/management/v1/purge-jobs/job-0/release", body)
		assert.Equal(t, 400, rec.Code, "%s: %s", body, rec.Body.String())
	}
	require.NoError(t, st.f.View(func(r *fsm.Reader) error {
		j, ok := r.PurgeJob("job-0")
		require.True(t, ok)
		assert.Equal(t, fsm.JobFailed, j.State, "nothing changed")
		assert.False(t, j.Released)
		return nil
	}))
	rec := post("/management/v1/purge-jobs/job-0/retry", " {} ")
	assert.Equal(t, 200, rec.Code, rec.Body.String())
}

func TestPurgeJobKeysUseConfiguredLifetime(t *testing.T) {
	st := newPurgeStore(t)
	const lifetime = 3 * time.Minute
	h := New(nil, nil, Config{Now: func() time.Time { return time.UnixMilli(2000) }, IdempotencyLifetime: lifetime}).PurgeJobs(st)
	st.must(t, fsm.AssignPurgeLease{JobID: "job-0", Node: "n1"})
	st.must(t, fsm.FinishPurgeJob{JobID: "job-0", Token: st.i, Outcome: fsm.OutcomeFailed, Error: "corrupt metadata"})
	const key = "0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c90"
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/management/v1/purge-jobs/job-0/retry", strings.NewReader(""))
	req.Header.Set("Idempotency-Key", key)
	h.ServeHTTP(rec, req)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	require.NoError(t, st.f.View(func(r *fsm.Reader) error {
		stored, ok := r.IdempotencyRecord(key)
		require.True(t, ok)
		assert.Equal(t, int64(2000), stored.CreatedMs)
		assert.Equal(t, 2000+(lifetime+idempotency.Grace).Milliseconds(), stored.ExpiresMs)
		return nil
	}))
}
