package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/floe-catalog/floe/fsm"
)

// sseMessage is one Server-Sent Events block: an event, or a comment.
type sseMessage struct {
	ID      string
	Event   string
	Data    string
	Comment string
}

// readSSE parses a stream into messages on a channel, closed at the end.
func readSSE(body io.Reader) <-chan sseMessage {
	ch := make(chan sseMessage, 64)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(body)
		var m sseMessage
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				ch <- m
				m = sseMessage{}
			case strings.HasPrefix(line, ":"):
				m.Comment = strings.TrimSpace(line[1:])
			default:
				field, value, _ := strings.Cut(line, ":")
				value = strings.TrimPrefix(value, " ")
				switch field {
				case "id":
					m.ID = value
				case "event":
					m.Event = value
				case "data":
					m.Data = value
				}
			}
		}
	}()
	return ch
}

// feed is one open stream in a test.
type feed struct {
	t      *testing.T
	resp   *http.Response
	msgs   <-chan sseMessage
	cancel context.CancelFunc
}

func openFeed(t *testing.T, url string, header http.Header) *feed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	f := &feed{t: t, resp: resp, cancel: cancel}
	t.Cleanup(f.close)
	if resp.StatusCode == http.StatusOK {
		f.msgs = readSSE(resp.Body)
	}
	return f
}

func (f *feed) close() {
	f.cancel()
	f.resp.Body.Close()
}

// next returns the next message that is not a comment, unless skip is false.
func (f *feed) next(skipComments bool) sseMessage {
	f.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case m, ok := <-f.msgs:
			require.True(f.t, ok, "stream ended")
			if skipComments && m.Comment != "" && m.Data == "" {
				continue
			}
			return m
		case <-deadline:
			f.t.Fatal("no message within 5s")
		}
	}
}

func (f *feed) event() (fsm.Event, string) {
	f.t.Helper()
	m := f.next(true)
	require.Empty(f.t, m.Event, "a data event, got %+v", m)
	var e fsm.Event
	require.NoError(f.t, json.Unmarshal([]byte(m.Data), &e), m.Data)
	return e, m.ID
}

type feedServer struct {
	store *fsmStore
	url   string
	reg   *prometheus.Registry
	done  chan struct{}
}

func newFeedServer(t *testing.T, f *fsm.FSM, heartbeat time.Duration) *feedServer {
	t.Helper()
	fs := &feedServer{store: &fsmStore{f: f, i: f.AppliedIndex()}, reg: prometheus.NewRegistry(), done: make(chan struct{})}
	h := newServer(nil, nil, Config{}).Events(f, EventsConfig{Heartbeat: heartbeat, Registerer: fs.reg, Done: fs.done})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	fs.url = srv.URL + "/management/v1/events"
	return fs
}

func openFSM(t *testing.T) *fsm.FSM {
	t.Helper()
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

func ns(name string) fsm.CreateNamespace {
	return fsm.CreateNamespace{Namespace: []string{name}, AtMs: 1}
}

func TestFeedStreamsCommittedChangesAndFollows(t *testing.T) {
	s := newFeedServer(t, openFSM(t), time.Hour)
	s.store.must(t, ns("a"))
	s.store.must(t, ns("b"))
	// Entry 3: one commit of two tables, two events sharing index 3.
	s.store.must(t, fsm.CommitTables{AtMs: 2, Changes: []fsm.TableChange{
		{Kind: fsm.ChangeCreate, Ident: fsm.Ident{Namespace: []string{"a"}, Name: "x"}, MetadataLocation: "s3://b/x/m0.json", Location: "s3://b/x", UUID: "ux"},
		{Kind: fsm.ChangeCreate, Ident: fsm.Ident{Namespace: []string{"a"}, Name: "y"}, MetadataLocation: "s3://b/y/m0.json", Location: "s3://b/y", UUID: "uy"},
	}})

	f := openFeed(t, s.url, nil)
	require.Equal(t, http.StatusOK, f.resp.StatusCode)
	assert.Equal(t, "text/event-stream", f.resp.Header.Get("Content-Type"))
	e, id := f.event()
	assert.Equal(t, fsm.EventNamespaceCreated, e.Type)
	assert.Equal(t, []string{"a"}, e.Namespace)
	assert.Equal(t, "1", id)
	_, id = f.event()
	assert.Equal(t, "2", id)
	e, id = f.event()
	assert.Equal(t, "a.x", e.Ident.String())
	assert.Empty(t, id, "the id comes with the last event of an entry")
	e, id = f.event()
	assert.Equal(t, "a.y", e.Ident.String())
	assert.Equal(t, uint32(1), e.Seq)
	assert.Equal(t, "3", id)

	// Live: applied after the client caught up.
	s.store.must(t, ns("c"))
	e, id = f.event()
	assert.Equal(t, []string{"c"}, e.Namespace)
	assert.Equal(t, "4", id)
	assert.Equal(t, 1.0, metricValue(t, s.reg, "floe_change_feed_clients"))
	require.Eventually(t, func() bool { return metricValue(t, s.reg, "floe_change_feed_events_sent_total") == 5 },
		5*time.Second, 10*time.Millisecond, "events sent")

	f.close()
	require.Eventually(t, func() bool { return metricValue(t, s.reg, "floe_change_feed_clients") == 0 },
		5*time.Second, 10*time.Millisecond, "a client that went away is no longer counted")
}

func TestFeedResumesAfterLastEventIDOrAfter(t *testing.T) {
	s := newFeedServer(t, openFSM(t), time.Hour)
	for _, n := range []string{"a", "b", "c", "d"} {
		s.store.must(t, ns(n))
	}
	f := openFeed(t, s.url+"?after=2", nil)
	e, _ := f.event()
	assert.Equal(t, uint64(3), e.Index)

	// A reconnecting browser sends its original URL and Last-Event-ID:
	// the header wins.
	f = openFeed(t, s.url+"?after=1", http.Header{"Last-Event-Id": {"3"}})
	e, _ = f.event()
	assert.Equal(t, uint64(4), e.Index)

	// A cursor ahead of this replica is no error: the stream waits.
	f = openFeed(t, s.url+"?after=5", nil)
	require.Equal(t, http.StatusOK, f.resp.StatusCode)
	s.store.must(t, ns("e")) // 5: not after the cursor
	s.store.must(t, ns("f")) // 6
	e, _ = f.event()
	assert.Equal(t, uint64(6), e.Index)
}

func TestFeedPageSizeKeepsEntriesWhole(t *testing.T) {
	s := newFeedServer(t, openFSM(t), time.Hour)
	s.store.must(t, ns("a"))
	var changes []fsm.TableChange
	for _, n := range []string{"x", "y", "z"} {
		changes = append(changes, fsm.TableChange{Kind: fsm.ChangeCreate, Ident: fsm.Ident{Namespace: []string{"a"}, Name: n},
			MetadataLocation: "s3://b/" + n + "/m0.json", Location: "s3://b/" + n, UUID: n})
	}
	s.store.must(t, fsm.CommitTables{Changes: changes})
	s.store.must(t, ns("b"))
	f := openFeed(t, s.url+"?after=1&limit=1", nil)
	var ids []string
	for range 4 {
		_, id := f.event()
		ids = append(ids, id)
	}
	assert.Equal(t, []string{"", "", "2", "3"}, ids)
}

func TestFeedHeartbeats(t *testing.T) {
	s := newFeedServer(t, openFSM(t), 20*time.Millisecond)
	f := openFeed(t, s.url, nil)
	m := f.next(false)
	assert.Equal(t, "heartbeat", m.Comment)
}

func TestFeedEndsAtShutdown(t *testing.T) {
	s := newFeedServer(t, openFSM(t), time.Hour)
	f := openFeed(t, s.url, nil)
	close(s.done)
	select {
	case _, ok := <-f.msgs:
		assert.False(t, ok, "the stream ends")
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end")
	}
}

func TestFeedRefusesBadRequests(t *testing.T) {
	s := newFeedServer(t, openFSM(t), time.Hour)
	for _, q := range []string{"?after=x", "?after=-1", "?after=", "?limit=0", "?limit=1001", "?limit=a", "?after=1&after=2", "?limit=1&limit=2", "?afterr=100&limt=1", "?after=1&since=2"} {
		resp, err := http.Get(s.url + q)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", q, body)
		assert.Contains(t, string(body), "BadRequestException", q)
	}
	f := openFeed(t, s.url, http.Header{"Last-Event-Id": {"abc"}})
	assert.Equal(t, http.StatusBadRequest, f.resp.StatusCode)
	resp, err := http.Post(s.url, "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "GET", resp.Header.Get("Allow"))
}

// olderFSM returns a state machine whose file applied entries 1 and 2
// before the feed existed: its feed starts after index 2.
func olderFSM(t *testing.T) (*fsm.FSM, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fsm.db")
	f, err := fsm.Open(path, nil)
	require.NoError(t, err)
	st := &fsmStore{f: f}
	st.must(t, ns("a"))
	st.must(t, ns("b"))
	require.NoError(t, f.Close())
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		// The feed's buckets (fsm/events.go), as if never created.
		require.NoError(t, tx.DeleteBucket([]byte("events")))
		return tx.DeleteBucket([]byte("events_meta"))
	}))
	require.NoError(t, db.Close())
	f, err = fsm.Open(path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f, path
}

func TestFeedAnswersGoneForACursorOlderThanKept(t *testing.T) {
	f, _ := olderFSM(t)
	s := newFeedServer(t, f, time.Hour)
	s.store.must(t, ns("c")) // 3

	assertGone(t, s.url+"?after=1", "after 2")

	// With no cursor the stream starts at the oldest event kept.
	fd := openFeed(t, s.url, nil)
	e, _ := fd.event()
	assert.Equal(t, uint64(3), e.Index)
	fd = openFeed(t, s.url+"?after=2", nil)
	e, _ = fd.event()
	assert.Equal(t, uint64(3), e.Index)
}

func TestFeedSendsGoneWhenRetentionOvertakesTheStream(t *testing.T) {
	// A snapshot of a state whose feed starts after index 2.
	older, _ := olderFSM(t)
	snap, err := older.Snapshot()
	require.NoError(t, err)
	var sink memSink
	require.NoError(t, snap.Persist(&sink))
	snap.Release()

	f := openFSM(t)
	s := newFeedServer(t, f, time.Hour)
	s.store.must(t, ns("x")) // 1
	fd := openFeed(t, s.url, nil)
	e, _ := fd.event()
	assert.Equal(t, uint64(1), e.Index)

	// Installing the snapshot moves the horizon past the stream's cursor.
	require.NoError(t, f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))))
	m := fd.next(true)
	assert.Equal(t, "gone", m.Event)
	assert.Contains(t, m.Data, `"code":410`)
	select {
	case _, ok := <-fd.msgs:
		assert.False(t, ok, "the stream ends after gone")
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end")
	}
}

type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

// metricValue is the value of the registry's one gauge or counter called
// name.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestFeedAnswersGoneForACursorPastTheLog: with a barrier, a cursor past
// every committed entry (a history restored from an older backup, another
// cluster) is a 410; one this replica merely has not reached yet waits.
func TestFeedAnswersGoneForACursorPastTheLog(t *testing.T) {
	f := openFSM(t)
	store := &fsmStore{f: f}
	store.must(t, ns("a")) // 1
	store.must(t, ns("b")) // 2
	var barriers atomic.Int32
	h := newServer(nil, nil, Config{}).Events(f, EventsConfig{Heartbeat: time.Hour,
		Linearize: func(context.Context) error { barriers.Add(1); return nil }})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	url := srv.URL + "/management/v1/events"

	assertGone(t, url+"?after=9", "after 9")
	assert.Equal(t, int32(1), barriers.Load())

	// A cursor within the log streams, with no barrier taken.
	fd := openFeed(t, url+"?after=1", nil)
	e, _ := fd.event()
	assert.Equal(t, uint64(2), e.Index)
	assert.Equal(t, int32(1), barriers.Load())
}

// assertGone opens the feed at url and checks it is refused 410 Gone in the
// error model, with a message naming want.
func assertGone(t *testing.T, url, want string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	// The status first: a stream that was not refused would never end.
	require.Equal(t, http.StatusGone, resp.StatusCode)
	var body struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	assert.Equal(t, "GoneException", body.Error.Type)
	assert.Equal(t, http.StatusGone, body.Error.Code)
	assert.Contains(t, body.Error.Message, want)
}

// deadlineRecorder records the writes and write deadlines an sseWriter
// makes, in order.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	log []string
}

func (d *deadlineRecorder) Write(p []byte) (int, error) {
	d.log = append(d.log, "write")
	return d.ResponseRecorder.Write(p)
}

func (d *deadlineRecorder) SetWriteDeadline(time.Time) error {
	d.log = append(d.log, "deadline")
	return nil
}

// A page is written 64 KiB at a time, each piece under a deadline of its
// own: the bound is on progress, so a slow reader gets a large page (or a
// 1 MiB event) instead of failing at it on every reconnect.
func TestFeedBoundsEachPieceNotThePage(t *testing.T) {
	rec := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
	s := &sseWriter{w: rec, rc: http.NewResponseController(rec), timeout: time.Minute}
	s.buf = bytes.Repeat([]byte("x"), 3*sseChunk+1)
	require.NoError(t, s.flush())
	assert.Equal(t, []string{"deadline", "write", "deadline", "write", "deadline", "write", "deadline", "write", "deadline"}, rec.log)
	assert.Equal(t, 3*sseChunk+1, rec.Body.Len())
	assert.Empty(t, s.buf)
}

// A stream checks again, before it sends more, that its caller may still
// follow it: once its token expired or was deleted, or its admin grant was
// revoked, it ends with a denied event instead of sending every change on.
func TestFeedEndsWhenItsCallerIsNoLongerAllowed(t *testing.T) {
	f := openFSM(t)
	var revoked, unchecked atomic.Bool
	fs := &feedServer{store: &fsmStore{f: f, i: f.AppliedIndex()}, reg: prometheus.NewRegistry(), done: make(chan struct{})}
	h := newServer(nil, nil, Config{Reauthorize: func(*http.Request) error {
		switch {
		case unchecked.Load():
			return fmt.Errorf("%w: cannot read grants now: no leader", ErrUnavailable)
		case revoked.Load():
			return errors.New("ops no longer holds the admin privilege")
		}
		return nil
	}}).Events(f, EventsConfig{Heartbeat: time.Hour, Registerer: fs.reg, Done: fs.done})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	fs.store.must(t, ns("a"))
	fd := openFeed(t, srv.URL+"/management/v1/events", nil)
	e, _ := fd.event()
	assert.Equal(t, []string{"a"}, e.Namespace)
	time.Sleep(reauthorizeEvery) // the next page is checked
	fs.store.must(t, ns("b"))
	e, _ = fd.event()
	assert.Equal(t, []string{"b"}, e.Namespace, "still allowed")

	// A check that cannot be made now (no leader) is no refusal.
	unchecked.Store(true)
	time.Sleep(reauthorizeEvery)
	fs.store.must(t, ns("c"))
	e, _ = fd.event()
	assert.Equal(t, []string{"c"}, e.Namespace, "not known to be refused")
	unchecked.Store(false)

	revoked.Store(true)
	time.Sleep(reauthorizeEvery)
	fs.store.must(t, ns("secret"))
	m := fd.next(true)
	assert.Equal(t, "denied", m.Event)
	assert.Contains(t, m.Data, `"code":403`)
	assert.Contains(t, m.Data, "no longer holds the admin privilege")
	assert.NotContains(t, m.Data, "secret")
	select {
	case m, ok := <-fd.msgs:
		assert.False(t, ok, "the stream ends after denied, got %+v", m)
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end")
	}
}
