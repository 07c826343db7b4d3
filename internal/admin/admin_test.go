package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/idempotency"
	"github.com/floe-catalog/floe/internal/raftnode"
)

type fakeCluster struct {
	mu    sync.Mutex
	calls []string
	err   error
	// hold, when set, is called inside every membership change before it
	// returns.
	hold func()
}

func (f *fakeCluster) record(call string) error {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	hold, err := f.hold, f.err
	f.mu.Unlock()
	if hold != nil {
		hold()
	}
	return err
}

func (f *fakeCluster) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeCluster) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeCluster) Status(context.Context) (raftnode.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return raftnode.Status{Self: "a", LeaderID: "a", Members: []raftnode.Member{{ID: "a", Suffrage: "Voter", Leader: true, Reachable: true}}}, f.err
}
func (f *fakeCluster) AddVoter(_ context.Context, id, addr string) error {
	return f.record("voter " + id + " " + addr)
}
func (f *fakeCluster) AddNonvoter(_ context.Context, id, addr string) error {
	return f.record("nonvoter " + id + " " + addr)
}
func (f *fakeCluster) Remove(_ context.Context, id string) error {
	return f.record("remove " + id)
}
func (f *fakeCluster) TransferLeadership(_ context.Context, id string) error {
	return f.record("transfer " + id)
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
	h := New(fc, nil, Config{}).Handler()

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
	assert.Equal(t, []string{"voter b 127.0.0.1:9", "nonvoter c 127.0.0.1:10", "remove c", "transfer "}, fc.Calls())

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
	assert.Len(t, fc.Calls(), 4)

	fc.setErr(fmt.Errorf("%w: no member", raftnode.ErrNoSuchMember))
	rec, body = do(t, h, "DELETE", "/management/v1/cluster/members/zz", "")
	assert.Equal(t, 404, rec.Code)
	assert.EqualValues(t, 404, body["error"].(map[string]any)["code"])
	fc.setErr(fmt.Errorf("%w: no leader", raftnode.ErrUnavailable))
	rec, _ = do(t, h, "POST", "/management/v1/cluster/leadership-transfer", `{"id":"b"}`)
	assert.Equal(t, 503, rec.Code)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	fc.setErr(fmt.Errorf("%w: enqueue timeout", raftnode.ErrNotAccepted))
	rec, _ = do(t, h, "POST", "/management/v1/cluster/leadership-transfer", `{"id":"b"}`)
	assert.Equal(t, 503, rec.Code, "nothing was applied")
	rec, _ = do(t, h, "PUT", "/management/v1/cluster", "")
	assert.Equal(t, 405, rec.Code)
	assert.Equal(t, "GET, HEAD", rec.Header().Get("Allow"), "a 405 names the methods there are")
}

func TestMembershipChangesHonourIdempotencyKey(t *testing.T) {
	fc := &fakeCluster{}
	h := New(fc, newPurgeStore(t), Config{}).Handler()
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
	assert.Equal(t, []string{"transfer b"}, fc.Calls(), "the retry did not transfer again")

	rec = keyed("POST", "/management/v1/cluster/leadership-transfer", `{"id":"c"}`, key)
	assert.Equal(t, 422, rec.Code, "same key, other body")
	rec = keyed("DELETE", "/management/v1/cluster/members/b", "", "nope")
	assert.Equal(t, 400, rec.Code)
	// Two keys: which one the client meant is unknown, also when the
	// first is the one already recorded.
	rec = httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/management/v1/cluster/leadership-transfer", strings.NewReader(`{"id":"c"}`))
	req.Header.Add("Idempotency-Key", key)
	req.Header.Add("Idempotency-Key", "0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8e")
	h.ServeHTTP(rec, req)
	assert.Equal(t, 400, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), "given 2 times")
	// An empty key: the client meant to send one.
	rec = httptest.NewRecorder()
	req = httptest.NewRequest("POST", "/management/v1/cluster/leadership-transfer", strings.NewReader(`{"id":"c"}`))
	req.Header.Set("Idempotency-Key", "")
	h.ServeHTTP(rec, req)
	assert.Equal(t, 400, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), "is empty")
	assert.Equal(t, []string{"transfer b"}, fc.Calls())
}

// fakeClock is an injected clock the test moves by hand.
type fakeClock struct{ ms atomic.Int64 }

func newFakeClock(ms int64) *fakeClock {
	c := &fakeClock{}
	c.ms.Store(ms)
	return c
}

func (c *fakeClock) Now() time.Time      { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) Add(d time.Duration) { c.ms.Add(d.Milliseconds()) }
func (c *fakeClock) UnixMilli() int64    { return c.ms.Load() }
func keyedRequest(method, path, body, key string) *http.Request {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	return req
}

// countingStore counts linearizable reads, so a test can tell that a
// request is polling.
type countingStore struct {
	*fsmStore
	reads atomic.Int64
}

func (s *countingStore) Read(ctx context.Context, fn func(*fsm.Reader) error) error {
	defer s.reads.Add(1)
	return s.fsmStore.Read(ctx, fn)
}

func TestConcurrentDuplicateMembershipChangesRunOnce(t *testing.T) {
	entered := make(chan struct{}, 16)
	release := make(chan struct{})
	fc := &fakeCluster{hold: func() {
		entered <- struct{}{}
		<-release
	}}
	st := &countingStore{fsmStore: newPurgeStore(t)}
	h := New(fc, st, Config{}).Handler()
	const key = "0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8d"

	const n = 6
	codes := make([]int, n)
	replayed := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, keyedRequest("POST", "/management/v1/cluster/voters", `{"id":"b","address":"127.0.0.1:9"}`, key))
			codes[i], replayed[i] = rec.Code, rec.Header().Get("Idempotent-Replayed")
		}()
	}
	// One request runs the change; let the others reach their wait for it
	// before it finishes.
	<-entered
	before := st.reads.Load()
	require.Eventually(t, func() bool { return st.reads.Load() >= before+2*n }, 10*time.Second, time.Millisecond)
	close(release)
	wg.Wait()

	assert.Equal(t, []string{"voter b 127.0.0.1:9"}, fc.Calls(), "the change ran once")
	assert.Empty(t, entered)
	var fresh int
	for i := range n {
		assert.Equal(t, 204, codes[i], "request %d", i)
		if replayed[i] != "true" {
			fresh++
		}
	}
	assert.Equal(t, 1, fresh, "every request but the one that ran the change is a replay")
}

// noRelease drops every fsm.ReleaseClaim, as when the node that claimed a
// key crashed before it could record or release anything.
type noRelease struct{ *fsmStore }

func (s noRelease) Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	if _, ok := cmd.(fsm.ReleaseClaim); ok {
		return fsm.Result{}, errors.New("node crashed")
	}
	return s.fsmStore.Propose(ctx, cmd)
}

// TestFailedChangeReleasesItsClaim: a keyed membership change that fails
// stores nothing and releases its claim, so the client's retry runs the
// change at once instead of waiting for the claim to expire.
func TestFailedChangeReleasesItsClaim(t *testing.T) {
	clock := newFakeClock(1_000_000)
	fc := &fakeCluster{}
	h := New(fc, newPurgeStore(t), Config{Now: clock.Now}).Handler()
	const key = "0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8d"
	const path = "/management/v1/cluster/members/b"

	fc.setErr(fmt.Errorf("%w: no leader", raftnode.ErrUnavailable))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, keyedRequest("DELETE", path, "", key))
	require.Equal(t, 503, rec.Code, rec.Body.String())
	fc.setErr(nil)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, keyedRequest("DELETE", path, "", key).WithContext(ctx))
	require.Equal(t, 204, rec.Code, rec.Body.String())
	assert.Empty(t, rec.Header().Get("Idempotent-Replayed"))
	assert.Equal(t, []string{"remove b", "remove b"}, fc.Calls())

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, keyedRequest("DELETE", path, "", key))
	require.Equal(t, 204, rec.Code, rec.Body.String())
	assert.Equal(t, "true", rec.Header().Get("Idempotent-Replayed"))
	assert.Equal(t, []string{"remove b", "remove b"}, fc.Calls(), "the replay runs nothing")
}

func TestDuplicateWaitsForTheClaimThenTakesOverWhenItExpires(t *testing.T) {
	clock := newFakeClock(1_000_000)
	fc := &fakeCluster{}
	st := noRelease{newPurgeStore(t)}
	h := New(fc, st, Config{Now: clock.Now}).Handler()
	const key = "0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8e"
	const path, body = "/management/v1/cluster/members/b", ""

	// The first request claims the key; its change fails and its node
	// "crashes" before releasing the claim, so nothing is recorded.
	fc.setErr(fmt.Errorf("%w: no leader", raftnode.ErrUnavailable))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, keyedRequest("DELETE", path, body, key))
	require.Equal(t, 503, rec.Code, rec.Body.String())
	fc.setErr(nil)

	// While the claim lasts a retry waits for an outcome, until its own
	// deadline: 503, and the change does not run again.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, keyedRequest("DELETE", path, body, key).WithContext(ctx))
	assert.Equal(t, 503, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), "still in progress")
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	assert.Equal(t, []string{"remove b"}, fc.Calls())

	// Another request with the key is refused while the claim lasts.
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, keyedRequest("DELETE", "/management/v1/cluster/members/c", body, key))
	assert.Equal(t, 422, rec.Code, rec.Body.String())

	// Once the claim expired, a retry takes it over and runs the change.
	clock.Add(idempotency.ClaimLifetime)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, keyedRequest("DELETE", path, body, key))
	require.Equal(t, 204, rec.Code, rec.Body.String())
	assert.Empty(t, rec.Header().Get("Idempotent-Replayed"))
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, keyedRequest("DELETE", path, body, key))
	require.Equal(t, 204, rec.Code, rec.Body.String())
	assert.Equal(t, "true", rec.Header().Get("Idempotent-Replayed"))
	assert.Equal(t, []string{"remove b", "remove b"}, fc.Calls())
}

func TestMembershipKeyRecordUsesConfiguredClockAndLifetime(t *testing.T) {
	clock := newFakeClock(5_000_000)
	fc := &fakeCluster{}
	st := newPurgeStore(t)
	const lifetime = 7 * time.Minute
	h := New(fc, st, Config{Now: clock.Now, IdempotencyLifetime: lifetime}).Handler()
	const key = "0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8f"

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, keyedRequest("POST", "/management/v1/cluster/non-voters", `{"id":"c","address":"127.0.0.1:10"}`, key))
	require.Equal(t, 204, rec.Code, rec.Body.String())

	var stored fsm.IdempotencyRecord
	var found bool
	require.NoError(t, st.Read(context.Background(), func(rd *fsm.Reader) error {
		stored, found = rd.IdempotencyRecord(key)
		return nil
	}))
	require.True(t, found)
	assert.Equal(t, clock.UnixMilli(), stored.CreatedMs)
	assert.Equal(t, clock.UnixMilli()+(lifetime+idempotency.Grace).Milliseconds(), stored.ExpiresMs)
	out, ok := stored.Outcome(fsm.Binding{Route: "c"})
	require.True(t, ok)
	assert.Equal(t, fsm.StatusOK, out.Status)

	// The key is honoured for the configured lifetime by the injected
	// clock, not longer.
	clock.Add(lifetime + idempotency.Grace - time.Millisecond)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, keyedRequest("POST", "/management/v1/cluster/non-voters", `{"id":"c","address":"127.0.0.1:10"}`, key))
	require.Equal(t, 204, rec.Code)
	assert.Equal(t, "true", rec.Header().Get("Idempotent-Replayed"))
	clock.Add(time.Millisecond)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, keyedRequest("POST", "/management/v1/cluster/non-voters", `{"id":"c","address":"127.0.0.1:10"}`, key))
	require.Equal(t, 204, rec.Code)
	assert.Empty(t, rec.Header().Get("Idempotent-Replayed"))
	assert.Equal(t, []string{"nonvoter c 127.0.0.1:10", "nonvoter c 127.0.0.1:10"}, fc.Calls())
}

// A malformed query string is a 400, not read as if the pair were absent;
// a body over the limit is a 413.
func TestMalformedQueryAndOversizedBody(t *testing.T) {
	fc := &fakeCluster{}
	h := New(fc, newPurgeStore(t), Config{}).Handler()
	rec, _ := do(t, h, "GET", "/management/v1/purge-jobs?state=%zz", "")
	assert.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
	rec, _ = do(t, h, "POST", "/management/v1/cluster/voters", `{"id":"b","address":"`+strings.Repeat("x", 2<<20)+`"}`)
	assert.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
	// Declared over the limit: refused before any of it is read (a body
	// that never comes is never waited for).
	req := httptest.NewRequest("POST", "/management/v1/cluster/voters", iotest.ErrReader(errors.New("not to be read")))
	req.ContentLength = 2 << 20
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusRequestEntityTooLarge, rec.Code, rec.Body.String())
	assert.Empty(t, fc.Calls())
}

// A body the connection cut is a 400 that names no socket.
func TestBodyCutIsA400NamingNoSocket(t *testing.T) {
	h := New(&fakeCluster{}, newPurgeStore(t), Config{}).Handler()
	for _, err := range []error{
		&net.OpError{Op: "read", Net: "tcp", Source: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8181}, Err: os.ErrDeadlineExceeded},
		&net.OpError{Op: "read", Net: "tcp", Source: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8181}, Err: syscall.ECONNRESET},
	} {
		req := httptest.NewRequest("POST", "/management/v1/cluster/voters", iotest.ErrReader(err))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		assert.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
		assert.NotContains(t, rec.Body.String(), "127.0.0.1")
	}
}

// deadlineStore remembers, for the outcome record of a keyed change (a
// RecordOutcome not under a claim key) and for a claim's release, the
// deadline of the context it was proposed under.
type deadlineStore struct {
	*fsmStore
	mu        sync.Mutex
	deadlines map[string]time.Time
}

func (s *deadlineStore) Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	kind := ""
	switch c := cmd.(type) {
	case fsm.RecordOutcome:
		if !strings.HasPrefix(c.Key, "membership-claim/") {
			kind = "record"
		}
	case fsm.ReleaseClaim:
		kind = "release"
	}
	if d, ok := ctx.Deadline(); ok && kind != "" {
		s.mu.Lock()
		s.deadlines[kind] = d
		s.mu.Unlock()
	}
	return s.fsmStore.Propose(ctx, cmd)
}

// TestSlowChangeStillGetsItsRecord: the time a keyed membership change's
// outcome (or release) has to be proposed starts when the change is done,
// however long the change took; a record whose time ran out while the
// change ran would let the client's retry run the change again.
func TestSlowChangeStillGetsItsRecord(t *testing.T) {
	for _, fail := range []bool{false, true} {
		st := &deadlineStore{fsmStore: newPurgeStore(t), deadlines: map[string]time.Time{}}
		var changeDone time.Time
		fc := &fakeCluster{hold: func() {
			time.Sleep(20 * time.Millisecond) // a change that takes a while
			changeDone = time.Now()
		}}
		want, kind := 204, "record"
		if fail {
			fc.setErr(fmt.Errorf("%w: no leader", raftnode.ErrUnavailable))
			want, kind = 503, "release"
		}
		h := New(fc, st, Config{}).Handler()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, keyedRequest("POST", "/management/v1/cluster/leadership-transfer", `{"id":"b"}`, "0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c81"))
		require.Equal(t, want, rec.Code, rec.Body.String())
		st.mu.Lock()
		d, ok := st.deadlines[kind]
		st.mu.Unlock()
		require.True(t, ok, "the %s was proposed", kind)
		// 5 s: the record's time (idempotency's recordTimeout).
		assert.False(t, d.Before(changeDone.Add(5*time.Second)), "the %s's time starts after the change, not before it", kind)
	}
}

// releaseFailsOnce fails the first ReleaseClaim proposal, as Raft refuses
// entries while a leadership transfer is in progress.
type releaseFailsOnce struct {
	*fsmStore
	failed atomic.Bool
}

func (s *releaseFailsOnce) Propose(ctx context.Context, c fsm.Command) (fsm.Result, error) {
	if k, ok := c.(fsm.ReleaseClaim); ok && k.Key != "" && !s.failed.Swap(true) {
		return fsm.Result{}, errors.New("leadership transfer in progress")
	}
	return s.fsmStore.Propose(ctx, c)
}

// A keyed change that fails releases its key's claim even when the first
// release is refused (the failure and the release may share a cause): the
// client's retry with the same key then runs the change at once, instead
// of waiting for the claim to expire.
func TestFailedKeyedChangeReleasesItsClaimDespiteARefusal(t *testing.T) {
	fc := &fakeCluster{}
	st := &releaseFailsOnce{fsmStore: newPurgeStore(t)}
	h := New(fc, st, Config{}).Handler()
	const key = "0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c99"
	fc.setErr(errors.New("leadership transfer timeout"))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, keyedRequest("POST", "/management/v1/cluster/leadership-transfer", `{"id":"b"}`, key))
	require.GreaterOrEqual(t, rec.Code, 500, rec.Body.String())
	require.True(t, st.failed.Load(), "the first release was refused")

	fc.setErr(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, keyedRequest("POST", "/management/v1/cluster/leadership-transfer", `{"id":"b"}`, key).WithContext(ctx))
	assert.Equal(t, 204, rec.Code, rec.Body.String())
	assert.Equal(t, []string{"transfer b", "transfer b"}, fc.Calls())
}
