package ui

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/admin"
	"github.com/floe-catalog/floe/internal/raftnode"
)

// fsmStore is a one-replica store: every command is applied at once to a
// real state machine. down makes linearizable reads and proposals fail, as
// without a leader.
type fsmStore struct {
	mu   sync.Mutex
	f    *fsm.FSM
	i    uint64
	down bool
}

var errNoLeader = errors.New("raftnode: no leader")

func (s *fsmStore) Propose(_ context.Context, c fsm.Command) (fsm.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return fsm.Result{}, errNoLeader
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
		return errNoLeader
	}
	return s.f.View(fn)
}

func (s *fsmStore) StaleRead(fn func(*fsm.Reader) error) error { return s.f.View(fn) }

func (s *fsmStore) must(t *testing.T, c fsm.Command) {
	t.Helper()
	res, err := s.Propose(context.Background(), c)
	require.NoError(t, err)
	require.NoError(t, res.Err())
}

func (s *fsmStore) job(t *testing.T, id string) fsm.PurgeJob {
	t.Helper()
	var j fsm.PurgeJob
	require.NoError(t, s.f.View(func(rd *fsm.Reader) error {
		var ok bool
		j, ok = rd.PurgeJob(id)
		require.True(t, ok, "job %s", id)
		return nil
	}))
	return j
}

// fakeCluster answers Status and Ready with fixed values.
type fakeCluster struct {
	status raftnode.Status
	ready  error
}

func (c *fakeCluster) Status(context.Context) (raftnode.Status, error) { return c.status, nil }
func (c *fakeCluster) Ready() error                                    { return c.ready }

// memObjects are metadata files in memory.
type memObjects map[string][]byte

func (m memObjects) Read(_ context.Context, uri string) ([]byte, error) {
	b, ok := m[uri]
	if !ok {
		return nil, fmt.Errorf("storage: read %s: not found", uri)
	}
	return b, nil
}

// fakeAuthz reads the principal from X-Test-Principal and gives it what
// grants says: "admin", or "read" on the listed namespaces (first level).
type fakeAuthz struct {
	admins  []string
	readers map[string][]string
}

// Principal is "anonymous" without a principal, as the node's is.
func (a fakeAuthz) Principal(r *http.Request) string {
	if p := r.Header.Get("X-Test-Principal"); p != "" {
		return p
	}
	return "anonymous"
}

func (a fakeAuthz) Allowed(r *http.Request, priv string, ns []string) (bool, error) {
	p := a.Principal(r)
	if slices.Contains(a.admins, p) {
		return true, nil
	}
	return priv == privRead && len(ns) > 0 && slices.Contains(a.readers[p], ns[0]), nil
}

func (a fakeAuthz) Visible(r *http.Request, ns []string) (bool, error) {
	ok, _ := a.Allowed(r, privRead, ns)
	return ok || a.Principal(r) == "peeker", nil
}

const tableMetadata = `{
  "format-version": 2,
  "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
  "location": "s3://bucket/db/events",
  "last-sequence-number": 2,
  "last-updated-ms": 1602638573590,
  "last-column-id": 3,
  "current-schema-id": 0,
  "schemas": [{"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "required": true, "type": "long"},
    {"id": 2, "name": "payload", "required": false, "type": "string", "doc": "<b>raw</b>"},
    {"id": 3, "name": "ts", "required": false, "type": "timestamptz"}]}],
  "default-spec-id": 0,
  "partition-specs": [{"spec-id": 0, "fields": []}],
  "last-partition-id": 999,
  "default-sort-order-id": 0,
  "sort-orders": [{"order-id": 0, "fields": []}],
  "properties": {"owner": "<script>alert('owner')</script>", "write.format.default": "parquet"},
  "current-snapshot-id": 3055729675574597004,
  "snapshots": [
    {"snapshot-id": 3051729675574597004, "timestamp-ms": 1515100955770, "sequence-number": 1,
     "summary": {"operation": "append", "added-data-files": "4"}, "manifest-list": "s3://bucket/db/events/metadata/snap-1.avro"},
    {"snapshot-id": 3055729675574597004, "parent-snapshot-id": 3051729675574597004, "timestamp-ms": 1555100955770,
     "sequence-number": 2, "summary": {"operation": "overwrite", "deleted-data-files": "1"}, "manifest-list": "s3://bucket/db/events/metadata/snap-2.avro"}
  ],
  "snapshot-log": [], "metadata-log": []
}`

const viewMetadata = `{
  "format-version": 1,
  "view-uuid": "fa6506c3-7681-40c8-86dc-e36561f83385",
  "location": "s3://bucket/db/recent",
  "current-version-id": 1,
  "properties": {"comment": "last day"},
  "schemas": [{"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "required": false, "type": "long"}]}],
  "versions": [{"version-id": 1, "schema-id": 0, "timestamp-ms": 1573518431292,
    "summary": {"engine-name": "Spark"},
    "representations": [{"type": "sql", "sql": "SELECT id FROM events WHERE ts > now() - INTERVAL 1 DAY AND note <> '</pre><script>x</script>'", "dialect": "spark"}],
    "default-namespace": ["db"]}],
  "version-log": [{"version-id": 1, "timestamp-ms": 1573518431292}]
}`

// fixture is a status page over a real state machine holding namespace
// db (table events, view recent, dropped table gone with a FAILED purge
// job) and namespace other (table secret).
type fixture struct {
	store   *fsmStore
	cluster *fakeCluster
	objects memObjects
	srv     *Server
	h       http.Handler
}

func newFixture(t *testing.T, mutate func(*Config)) *fixture {
	t.Helper()
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	st := &fsmStore{f: f}
	st.must(t, fsm.CreateNamespace{Namespace: []string{"db"}, Properties: map[string]string{"comment": "main"}})
	st.must(t, fsm.CreateNamespace{Namespace: []string{"other"}})
	create := func(ns, name, loc, meta string) {
		st.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: fsm.Ident{Namespace: []string{ns}, Name: name},
			MetadataLocation: meta, Location: loc, UUID: name + "-uuid"}}})
	}
	create("db", "events", "s3://bucket/db/events", "s3://bucket/db/events/metadata/00001.metadata.json")
	create("other", "secret", "s3://bucket/other/secret", "s3://bucket/other/secret/metadata/00001.metadata.json")
	create("db", "gone", "s3://bucket/db/gone", "s3://bucket/db/gone/metadata/00001.metadata.json")
	st.must(t, fsm.CreateView{Ident: fsm.Ident{Namespace: []string{"db"}, Name: "recent"}, UUID: "v-uuid",
		Location: "s3://bucket/db/recent", MetadataLocation: "s3://bucket/db/recent/metadata/00001.metadata.json", AtMs: 1})
	st.must(t, fsm.DropTable{Ident: fsm.Ident{Namespace: []string{"db"}, Name: "gone"}, Purge: true, AtMs: 2,
		Job: &fsm.PurgeJobSpec{ID: "job-1", Warehouse: "s3://bucket", DroppedBy: "etl"}})
	st.must(t, fsm.AssignPurgeLease{JobID: "job-1", Node: "node2"})
	st.must(t, fsm.FinishPurgeJob{JobID: "job-1", Token: st.i, Outcome: fsm.OutcomeFailed, Error: "unreadable table metadata: <eof>"})

	ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"status":"ready"}`)
	}))
	t.Cleanup(ready.Close)
	behind := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"status":"not ready","reason":"catching up"}`)
	}))
	t.Cleanup(behind.Close)
	cl := &fakeCluster{status: raftnode.Status{
		Self: "node1", LeaderID: "node2", LeaderAddr: "127.0.0.1:8282", Term: 7, CommitIndex: 42, AppliedIndex: 41,
		Members: []raftnode.Member{
			{ID: "node1", ClusterAddr: "127.0.0.1:8182", HTTPAddr: "127.0.0.1:8181", Suffrage: "Voter", Reachable: true, State: "follower", Term: 7, CommitIndex: 42, AppliedIndex: 41, LastContact: "3ms"},
			{ID: "node2", ClusterAddr: "127.0.0.1:8282", HTTPAddr: strings.TrimPrefix(ready.URL, "http://"), Suffrage: "Voter", Leader: true, Reachable: true, State: "leader", Term: 7, CommitIndex: 42, AppliedIndex: 42, LastContact: "0s"},
			{ID: "node3", ClusterAddr: "127.0.0.1:8382", HTTPAddr: strings.TrimPrefix(behind.URL, "http://"), Suffrage: "Nonvoter", Reachable: true, State: "follower", Term: 7, CommitIndex: 30, AppliedIndex: 29},
			{ID: "node4", ClusterAddr: "127.0.0.1:8482", Suffrage: "Voter", Error: "dial tcp: connection refused"},
		},
	}}
	objects := memObjects{
		"s3://bucket/db/events/metadata/00001.metadata.json": []byte(tableMetadata),
		"s3://bucket/db/recent/metadata/00001.metadata.json": []byte(viewMetadata),
	}
	cfg := Config{
		Warehouse: "s3://bucket", Prefix: "main", Store: st, Cluster: cl, Objects: objects,
		PurgeJobs: admin.NewPurgeJobs(st, func() time.Time { return time.UnixMilli(5000) }, slog.New(slog.DiscardHandler)),
		Logger:    slog.New(slog.DiscardHandler),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := New(cfg)
	require.NoError(t, err)
	return &fixture{store: st, cluster: cl, objects: objects, srv: srv, h: srv.Handler()}
}

// get serves a GET and returns the status and body.
func (f *fixture) get(t *testing.T, target string, headers ...string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// post serves a form POST with the given cookies and returns the recorder.
func (f *fixture) post(t *testing.T, target string, form url.Values, cookies []*http.Cookie, headers ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range cookies {
		req.AddCookie(c)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec
}

// formOf loads the purge page and returns the CSRF cookie and the hidden
// fields of the form whose action ends in suffix.
func (f *fixture) formOf(t *testing.T, suffix string, headers ...string) (*http.Cookie, string, url.Values) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/ui/purge-jobs", nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var csrf *http.Cookie
	for _, c := range rec.Result().Cookies() {
		if c.Name == csrfCookie {
			csrf = c
		}
	}
	require.NotNil(t, csrf, "the page sets a CSRF cookie")
	forms := regexp.MustCompile(`(?s)<form class="inline" method="post" action="([^"]+)">(.*?)</form>`).FindAllStringSubmatch(rec.Body.String(), -1)
	for _, m := range forms {
		if !strings.HasSuffix(m[1], suffix) {
			continue
		}
		vals := url.Values{}
		for _, in := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`).FindAllStringSubmatch(m[2], -1) {
			vals.Set(in[1], in[2])
		}
		return csrf, m[1], vals
	}
	t.Fatalf("no form ending in %s on the purge page:\n%s", suffix, rec.Body.String())
	return nil, "", nil
}

func TestPagesRender(t *testing.T) {
	f := newFixture(t, nil)

	code, body := f.get(t, "/ui")
	require.Equal(t, http.StatusOK, code, body)
	for _, want := range []string{"node1", "(this node)", "node2", "leader", "Nonvoter", "127.0.0.1:8382",
		"<dd>7</dd>", "<dd>42</dd>", "<dd>41</dd>", "not ready: catching up", "unreachable", "dial tcp: connection refused",
		"1 failed", "s3://bucket", "main"} {
		hasAll(t, body, want)
	}
	// This node answers its own health without a request.
	f.cluster.ready = errors.New("no leader")
	_, body = f.get(t, "/ui/")
	assert.Contains(t, body, "not ready: no leader")

	code, body = f.get(t, "/ui/catalog")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `href="/ui/namespace?ns=db"`)
	assert.Contains(t, body, `href="/ui/namespace?ns=other"`)

	code, body = f.get(t, "/ui/namespace?ns=db")
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `href="/ui/table?name=events&amp;ns=db"`)
	assert.Contains(t, body, `href="/ui/view?name=recent&amp;ns=db"`)
	assert.Contains(t, body, "comment")
	assert.NotContains(t, body, "gone", "a dropped table is not listed")

	code, body = f.get(t, "/ui/table?ns=db&name=events")
	require.Equal(t, http.StatusOK, code, body)
	for _, want := range []string{"s3://bucket/db/events/metadata/00001.metadata.json", "s3://bucket/db/events", "events-uuid",
		"payload", "timestamptz", "required", "3055729675574597004", "3051729675574597004", "overwrite", "append",
		"added-data-files=4", "2019-04-12 20:29:15 UTC", "write.format.default", "parquet"} {
		hasAll(t, body, want)
	}
	newer, older := strings.Index(body, `id="snapshot-3055729675574597004"`), strings.Index(body, `id="snapshot-3051729675574597004"`)
	assert.True(t, newer > 0 && newer < older, "snapshots newest first")

	code, body = f.get(t, "/ui/view?ns=db&name=recent")
	require.Equal(t, http.StatusOK, code, body)
	for _, want := range []string{"SELECT id FROM events WHERE ts &gt; now()", "spark", "engine-name", "Spark", "last day", "s3://bucket/db/recent"} {
		hasAll(t, body, want)
	}

	code, body = f.get(t, "/ui/purge-jobs")
	require.Equal(t, http.StatusOK, code, body)
	for _, want := range []string{"job-1", "db.gone", "FAILED", "unreadable table metadata: &lt;eof&gt;", "by etl",
		"0 files deleted", "phase data", `action="/ui/purge-jobs/job-1/retry"`, `action="/ui/purge-jobs/job-1/release"`} {
		hasAll(t, body, want)
	}
	code, body = f.get(t, "/ui/purge-jobs?state=running")
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "no purge jobs in state RUNNING")
	code, _ = f.get(t, "/ui/purge-jobs?state=bogus")
	assert.Equal(t, http.StatusBadRequest, code)
	// A page cursor is a job's id, or a UUID (a job pruned since).
	code, _ = f.get(t, "/ui/purge-jobs?jobs-after=zzz&jobs-page=2")
	assert.Equal(t, http.StatusBadRequest, code)
	code, body = f.get(t, "/ui/purge-jobs?jobs-after=job-1&jobs-page=2")
	assert.Equal(t, http.StatusOK, code, body)
	code, body = f.get(t, "/ui/purge-jobs?jobs-after=00000000-0000-7000-8000-000000000000&jobs-page=2")
	assert.Equal(t, http.StatusOK, code, body)

	for target, want := range map[string]int{
		"/ui/table?ns=db&name=nope":   http.StatusNotFound,
		"/ui/view?ns=db&name=events":  http.StatusNotFound,
		"/ui/namespace?ns=nope":       http.StatusNotFound,
		"/ui/namespace":               http.StatusBadRequest,
		"/ui/namespace?ns=a..b":       http.StatusBadRequest,
		"/ui/table?ns=db":             http.StatusBadRequest,
		"/ui/no-such-page":            http.StatusNotFound,
		"/ui/table?ns=other&name=nil": http.StatusNotFound,
	} {
		code, body := f.get(t, target)
		assert.Equal(t, want, code, target)
		assert.Contains(t, body, `id="error-message"`, target)
	}
}

func TestEveryAnswerCarriesSecurityHeaders(t *testing.T) {
	f := newFixture(t, nil)
	for _, target := range []string{"/ui", "/ui/catalog", "/ui/nope"} {
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		csp := rec.Header().Get("Content-Security-Policy")
		assert.Contains(t, csp, "default-src 'none'", target)
		assert.NotContains(t, csp, "script-src", target)
		assert.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
		assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
		assert.Equal(t, "text/html; charset=utf-8", rec.Header().Get("Content-Type"))
		assert.NotContains(t, rec.Body.String(), "<script", target)
	}
}

func TestTableWithUnreadableMetadataStillRenders(t *testing.T) {
	f := newFixture(t, nil)
	f.objects["s3://bucket/db/events/metadata/00001.metadata.json"] = []byte("{not json")
	code, body := f.get(t, "/ui/table?ns=db&name=events")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "unreadable metadata file s3://bucket/db/events/metadata/00001.metadata.json")
	assert.Contains(t, body, "events-uuid", "what the state machine holds is shown")
	delete(f.objects, "s3://bucket/db/events/metadata/00001.metadata.json")
	code, body = f.get(t, "/ui/table?ns=db&name=events")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "cannot read metadata file")
}

func TestHostileNamesAreEscaped(t *testing.T) {
	f := newFixture(t, nil)
	hostile := `<script>alert("ns")</script>`
	table := `"><img src=x onerror=alert(1)>`
	f.store.must(t, fsm.CreateNamespace{Namespace: []string{hostile}, Properties: map[string]string{"<k>": `</td><script>alert(2)</script>`}})
	f.store.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: fsm.Ident{Namespace: []string{hostile}, Name: table},
		MetadataLocation: "s3://bucket/h/t/metadata/1.metadata.json", Location: "s3://bucket/h/t", UUID: "h"}}})
	f.objects["s3://bucket/h/t/metadata/1.metadata.json"] = []byte(tableMetadata)

	pages := []string{
		"/ui/catalog",
		"/ui/namespace?" + url.Values{"ns": {hostile}}.Encode(),
		"/ui/table?" + url.Values{"ns": {hostile}, "name": {table}}.Encode(),
		"/ui/view?ns=db&name=recent",
		"/ui/table?ns=db&name=events",
		"/ui/namespace?ns=" + url.QueryEscape(`<b>missing</b>`),
	}
	for _, target := range pages {
		code, body := f.get(t, target)
		require.Contains(t, []int{http.StatusOK, http.StatusNotFound}, code, target)
		assert.NotContains(t, body, "<script", target)
		assert.NotContains(t, body, "<img", target)
		assert.NotContains(t, body, "<b>", target)
	}
	_, body := f.get(t, "/ui/catalog")
	assert.Contains(t, body, "&lt;script&gt;alert(&#34;ns&#34;)&lt;/script&gt;")
	_, body = f.get(t, pages[2])
	assert.Contains(t, body, "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;")
	assert.Contains(t, body, "&lt;script&gt;alert(&#39;owner&#39;)&lt;/script&gt;")
	_, body = f.get(t, "/ui/namespace?ns=<b>missing</b>")
	assert.Contains(t, body, "&lt;b&gt;missing&lt;/b&gt;")
}

func TestBidiControlsAreNotRendered(t *testing.T) {
	f := newFixture(t, nil)
	name := "\u202Eevil\u2066txt"
	f.store.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: fsm.Ident{Namespace: []string{"db"}, Name: name},
		MetadataLocation: "s3://bucket/b/t/metadata/1.metadata.json", Location: "s3://bucket/b/t", UUID: "b"}}})
	f.objects["s3://bucket/b/t/metadata/1.metadata.json"] = []byte(tableMetadata)
	for _, target := range []string{"/ui/namespace?ns=db", "/ui/table?" + url.Values{"ns": {"db"}, "name": {name}}.Encode()} {
		code, body := f.get(t, target)
		require.Equal(t, http.StatusOK, code, target)
		assert.False(t, strings.ContainsAny(body, "\u202E\u2066"), "a bidi control on %s", target)
		hasAll(t, body, "\uFFFDevil\uFFFDtxt")
	}
}

func TestHugePageNumbersArePageOne(t *testing.T) {
	f := newFixture(t, nil)
	for _, p := range []string{"9223372036854775807", "368934881474191033", "1048577"} {
		code, body := f.get(t, "/ui/table?ns=db&name=events&snapshots-page="+p)
		require.Equal(t, http.StatusOK, code, p)
		hasAll(t, body, `id="snapshot-3055729675574597004"`) // the first page's rows
		code, body = f.get(t, "/ui/catalog?namespaces-page="+p)
		require.Equal(t, http.StatusOK, code, p)
		assert.False(t, strings.Contains(body, "-page=-"), "a negative page link for %s", p)
	}
}

func TestPagination(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.PageSize = 2 })
	for _, n := range []string{"n1", "n2", "n3"} {
		f.store.must(t, fsm.CreateNamespace{Namespace: []string{n}})
	}
	for i := range 5 {
		name := fmt.Sprintf("t%d", i)
		f.store.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: fsm.Ident{Namespace: []string{"n1"}, Name: name},
			MetadataLocation: "s3://bucket/n1/" + name + "/m.json", Location: "s3://bucket/n1/" + name, UUID: name}}})
	}
	// The top-level namespaces are db, n1, n2, n3, other: three pages of two.
	var seen []string
	target := "/ui/catalog"
	for page := 1; target != ""; page++ {
		code, body := f.get(t, target)
		require.Equal(t, http.StatusOK, code, body)
		assert.Contains(t, body, fmt.Sprintf("Page %d", page))
		for _, m := range regexp.MustCompile(`href="/ui/namespace\?ns=([^"]+)"`).FindAllStringSubmatch(body, -1) {
			seen = append(seen, m[1])
		}
		if page > 1 {
			assert.Contains(t, body, `href="/ui/catalog">« First page`)
		}
		target = nextLink(body)
		require.LessOrEqual(t, page, 3)
	}
	assert.Equal(t, []string{"db", "n1", "n2", "n3", "other"}, seen)

	seen = nil
	target = "/ui/namespace?ns=n1"
	for page := 1; target != ""; page++ {
		code, body := f.get(t, target)
		require.Equal(t, http.StatusOK, code, body)
		for _, m := range regexp.MustCompile(`href="/ui/table\?name=([^&]+)&amp;ns=n1"`).FindAllStringSubmatch(body, -1) {
			seen = append(seen, m[1])
		}
		target = nextLink(body)
		require.LessOrEqual(t, page, 3)
	}
	assert.Equal(t, []string{"t0", "t1", "t2", "t3", "t4"}, seen)

	// Snapshots page too: two snapshots, page size 2, then one per page.
	_, body := f.get(t, "/ui/table?ns=db&name=events")
	assert.Empty(t, nextLink(body))
}

// hasAll reports each of wants missing from body, without printing the
// whole page.
func hasAll(t *testing.T, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("the page lacks %q", w)
		}
	}
}

func nextLink(body string) string {
	m := regexp.MustCompile(`<a href="([^"]+)" rel="next">`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return strings.ReplaceAll(m[1], "&amp;", "&")
}

func TestPurgeActionsNeedCSRF(t *testing.T) {
	f := newFixture(t, nil)
	csrf, action, form := f.formOf(t, "/release")
	require.Equal(t, "/ui/purge-jobs/job-1/release", action)
	assert.True(t, csrf.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, csrf.SameSite)
	assert.Equal(t, "/ui", csrf.Path)

	// No cookie, no field, a field from another browser: refused, nothing changes.
	noField := url.Values{formTokenField: {form.Get(formTokenField)}}
	other := url.Values{formTokenField: {form.Get(formTokenField)}, csrfField: {strings.Repeat("A", 43)}}
	for name, c := range map[string]struct {
		form    url.Values
		cookies []*http.Cookie
	}{
		"no cookie":      {form, nil},
		"no field":       {noField, []*http.Cookie{csrf}},
		"other browser":  {other, []*http.Cookie{csrf}},
		"forged cookies": {other, []*http.Cookie{{Name: csrfCookie, Value: "x"}}},
	} {
		rec := f.post(t, action, c.form, c.cookies)
		assert.Equal(t, http.StatusForbidden, rec.Code, name)
		assert.Contains(t, rec.Body.String(), "security token", name)
	}
	assert.False(t, f.store.job(t, "job-1").Released)

	rec := f.post(t, action, form, []*http.Cookie{csrf})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	assert.Equal(t, "/ui/purge-jobs?done=release&job=job-1", rec.Header().Get("Location"))
	j := f.store.job(t, "job-1")
	assert.True(t, j.Released)
	assert.Equal(t, "anonymous", j.ReleasedBy)

	_, body := f.get(t, "/ui/purge-jobs?done=release&job=job-1")
	assert.Contains(t, body, "Purge job job-1 released")
	assert.Contains(t, body, "released</span>")
	assert.NotContains(t, body, `action="/ui/purge-jobs/job-1/release"`, "a released job has no actions")
	// A note about a job that does not exist is someone else's words.
	_, body = f.get(t, "/ui/purge-jobs?done=release&job="+url.QueryEscape("NOTICE: your session expired, visit evil.example"))
	assert.NotContains(t, body, "NOTICE")
	// An id no job can have is refused before it is logged or repeated.
	rec = f.post(t, "/ui/purge-jobs/"+strings.Repeat("A", 200000)+"/retry", form, []*http.Cookie{csrf})
	assert.Equal(t, http.StatusNotFound, rec.Code)
	assert.Less(t, rec.Body.Len(), 20000)
}

func TestDoubleSubmitAppliesOnce(t *testing.T) {
	f := newFixture(t, nil)
	csrf, action, form := f.formOf(t, "/retry")
	before := f.store.i
	for range 2 {
		rec := f.post(t, action, form, []*http.Cookie{csrf})
		require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	}
	assert.Equal(t, before+1, f.store.i, "the second submit is answered from the key's record")
	assert.Equal(t, fsm.JobPending, f.store.job(t, "job-1").State)

	// A new form (a new token) is a new request: the job is no longer FAILED.
	form.Set(formTokenField, newFormToken())
	rec := f.post(t, action, form, []*http.Cookie{csrf})
	assert.Equal(t, http.StatusConflict, rec.Code)
	assert.Contains(t, rec.Body.String(), "retry refused")

	form.Set(formTokenField, "not-a-uuid")
	rec = f.post(t, action, form, []*http.Cookie{csrf})
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	form.Set(formTokenField, newFormToken())
	rec = f.post(t, "/ui/purge-jobs/job-1/explode", form, []*http.Cookie{csrf})
	assert.Equal(t, http.StatusNotFound, rec.Code)
	rec = f.post(t, "/ui/purge-jobs/job-nope/retry", form, []*http.Cookie{csrf})
	assert.Equal(t, http.StatusNotFound, rec.Code)
}

func TestAuthorization(t *testing.T) {
	authz := fakeAuthz{admins: []string{"ops"}, readers: map[string][]string{"ana": {"db"}}}
	f := newFixture(t, func(c *Config) {
		c.Authorizer = authz
		c.VerifyToken = func(context.Context, string) (string, error) { return "", errors.New("unused") }
	})
	as := func(p string) []string { return []string{"X-Test-Principal", p} }

	// The cluster and the purge queue need admin.
	code, body := f.get(t, "/ui", as("ana")...)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "need the admin privilege")
	assert.NotContains(t, body, "node2")
	code, body = f.get(t, "/ui", as("ops")...)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "node2")
	assert.Contains(t, body, "signed in as <strong>ops</strong>")
	code, _ = f.get(t, "/ui/purge-jobs", as("ana")...)
	assert.Equal(t, http.StatusForbidden, code)

	// Reading needs read; the listing shows only what the principal may see.
	_, body = f.get(t, "/ui/catalog", as("ana")...)
	assert.Contains(t, body, "ns=db")
	assert.NotContains(t, body, "ns=other")
	code, _ = f.get(t, "/ui/table?ns=db&name=events", as("ana")...)
	assert.Equal(t, http.StatusOK, code)
	code, body = f.get(t, "/ui/table?ns=other&name=secret", as("ana")...)
	assert.Equal(t, http.StatusNotFound, code, "a namespace it may not see is not disclosed")
	assert.NotContains(t, body, "secret-uuid")
	code, _ = f.get(t, "/ui/namespace?ns=other", as("ana")...)
	assert.Equal(t, http.StatusNotFound, code)
	code, _ = f.get(t, "/ui/table?ns=other&name=secret", as("peeker")...)
	assert.Equal(t, http.StatusForbidden, code, "seen but not readable")
	code, body = f.get(t, "/ui/namespace?ns=other", as("peeker")...)
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "need the read privilege")
	assert.NotContains(t, body, "secret")

	// Actions need admin, on top of the CSRF check.
	csrf, action, form := f.formOf(t, "/release", as("ops")...)
	rec := f.post(t, action, form, []*http.Cookie{csrf}, as("ana")...)
	assert.Equal(t, http.StatusForbidden, rec.Code)
	assert.Contains(t, rec.Body.String(), "admin privilege")
	assert.False(t, f.store.job(t, "job-1").Released)
	rec = f.post(t, action, form, []*http.Cookie{csrf}, as("ops")...)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	assert.True(t, f.store.job(t, "job-1").Released)
}

func TestLogin(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.Authorizer = fakeAuthz{admins: []string{"root"}}
		c.VerifyToken = func(_ context.Context, token string) (string, error) {
			switch token {
			case "good-token":
				return "root", nil
			case "no-leader":
				return "", fmt.Errorf("%w: no leader", ErrUnavailable)
			}
			return "", errors.New("invalid token")
		}
	})
	req := httptest.NewRequest(http.MethodGet, "/ui/login?next=/ui/purge-jobs", nil)
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
	body := rec.Body.String()
	assert.Contains(t, body, `name="next" value="/ui/purge-jobs"`)
	assert.Contains(t, body, `type="password"`)
	assert.NotContains(t, body, "signed in as", "nobody is signed in on the login form")
	csrf := rec.Result().Cookies()[0]
	require.Equal(t, csrfCookie, csrf.Name)
	assert.Contains(t, body, `name="csrf" value="`+csrf.Value+`"`)

	login := func(form url.Values, tlsOn bool) *httptest.ResponseRecorder {
		form.Set(csrfField, csrf.Value)
		req := httptest.NewRequest(http.MethodPost, "/ui/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(csrf)
		if tlsOn {
			req.TLS = &tls.ConnectionState{}
		}
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, req)
		return rec
	}
	rec = login(url.Values{"token": {"wrong"}, "next": {"/ui/purge-jobs"}}, false)
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	assert.Contains(t, rec.Body.String(), "That token was refused")
	assert.Empty(t, sessionOf(rec))
	rec = login(url.Values{"token": {"no-leader"}, "next": {"/ui/purge-jobs"}}, false)
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Contains(t, rec.Body.String(), "could not be checked now")
	assert.Empty(t, sessionOf(rec))
	rec = login(url.Values{"token": {"bad token;"}}, false)
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	rec = login(url.Values{"token": {strings.Repeat("x", maxCookieToken+1)}}, false)
	assert.Equal(t, http.StatusBadRequest, rec.Code)

	rec = login(url.Values{"token": {"Bearer good-token"}, "next": {"/ui/purge-jobs"}}, false)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	assert.Equal(t, "/ui/purge-jobs", rec.Header().Get("Location"))
	s := sessionOf(rec)
	require.NotNil(t, s)
	assert.Equal(t, "good-token", s.Value)
	assert.True(t, s.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, s.SameSite)
	assert.False(t, s.Secure, "plain HTTP")
	assert.Equal(t, "/ui", s.Path)

	rec = login(url.Values{"token": {"good-token"}, "next": {"//evil.example/ui"}}, true)
	require.Equal(t, http.StatusSeeOther, rec.Code)
	assert.Equal(t, "/ui", rec.Header().Get("Location"), "never to another site")
	assert.True(t, sessionOf(rec).Secure, "Secure over TLS")

	// The login form needs the CSRF field like every form.
	req = httptest.NewRequest(http.MethodPost, "/ui/login", strings.NewReader("token=good-token"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec = httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusForbidden, rec.Code)

	// Signing out clears the cookie.
	req = httptest.NewRequest(http.MethodPost, "/ui/logout", strings.NewReader(url.Values{csrfField: {csrf.Value}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(csrf)
	rec = httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusSeeOther, rec.Code)
	assert.Equal(t, "/ui/login", rec.Header().Get("Location"))
	require.NotNil(t, sessionOf(rec))
	assert.Negative(t, sessionOf(rec).MaxAge)
}

func TestNoLoginWithAuthenticationOff(t *testing.T) {
	f := newFixture(t, nil)
	code, body := f.get(t, "/ui")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "authentication off")
	assert.NotContains(t, body, "Sign out")
	req := httptest.NewRequest(http.MethodGet, "/ui/login", nil)
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusSeeOther, rec.Code)
	assert.Equal(t, "/ui", rec.Header().Get("Location"))
}

func sessionOf(rec *httptest.ResponseRecorder) *http.Cookie {
	for _, c := range rec.Result().Cookies() {
		if c.Name == sessionCookie {
			return c
		}
	}
	return nil
}

func TestSessionCookieHooks(t *testing.T) {
	// The cookie becomes the bearer header, unless the request has one.
	req := httptest.NewRequest(http.MethodGet, "/ui/catalog", nil)
	req.AddCookie(&http.Cookie{Name: sessionCookie, Value: "tok"})
	got, fromCookie := WithSessionToken(req)
	assert.True(t, fromCookie)
	assert.Equal(t, "Bearer tok", got.Header.Get("Authorization"))
	assert.Empty(t, req.Header.Get("Authorization"), "the caller's request is not changed")
	req.Header.Set("Authorization", "Bearer own")
	got, fromCookie = WithSessionToken(req)
	assert.False(t, fromCookie)
	assert.Equal(t, "Bearer own", got.Header.Get("Authorization"))
	_, fromCookie = WithSessionToken(httptest.NewRequest(http.MethodGet, "/ui", nil))
	assert.False(t, fromCookie)

	// A browser goes to the login form, its stale cookie cleared.
	rec := httptest.NewRecorder()
	Unauthenticated(rec, httptest.NewRequest(http.MethodGet, "/ui/table?ns=db&name=t", nil), true)
	assert.Equal(t, http.StatusSeeOther, rec.Code)
	assert.Equal(t, "/ui/login?next=%2Fui%2Ftable%3Fns%3Ddb%26name%3Dt", rec.Header().Get("Location"))
	require.NotNil(t, sessionOf(rec))
	assert.Negative(t, sessionOf(rec).MaxAge)
	// A client with its own header gets 401.
	rec = httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/ui", nil)
	r.Header.Set("Authorization", "Bearer nope")
	Unauthenticated(rec, r, false)
	assert.Equal(t, http.StatusUnauthorized, rec.Code)

	assert.True(t, IsPath("/ui"))
	assert.True(t, IsPath("/ui/catalog"))
	assert.False(t, IsPath("/uix"))
	assert.True(t, IsOpenPath("/ui/login"))
	assert.False(t, IsOpenPath("/ui/logout"))
	for next, want := range map[string]string{
		"/ui/purge-jobs?state=FAILED": "/ui/purge-jobs?state=FAILED",
		"//evil.example":              "/ui",
		"https://evil.example/ui":     "/ui",
		"/ui/..//evil":                "/ui",
		"/ui/../v1/namespaces":        "/ui",
		`/ui\evil`:                    "/ui",
		"/v1/namespaces":              "/ui",
		"":                            "/ui",
	} {
		assert.Equal(t, want, safeNext(next), next)
	}
}

func TestStaleReadWithoutLeader(t *testing.T) {
	f := newFixture(t, nil)
	f.store.down = true
	code, body := f.get(t, "/ui/namespace?ns=db")
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "No linearizable read was possible")
	assert.Contains(t, body, "events")
}

func TestNewChecksItsConfig(t *testing.T) {
	_, err := New(Config{})
	assert.Error(t, err)
	f := newFixture(t, nil)
	cfg := f.srv.cfg
	cfg.Authorizer = fakeAuthz{}
	_, err = New(cfg)
	assert.ErrorContains(t, err, "go together")
	cfg = f.srv.cfg
	cfg.Warehouses = []Warehouse{{Name: "lake"}, {Name: "lake"}}
	_, err = New(cfg)
	assert.ErrorContains(t, err, "defined twice")
	cfg.Warehouses = []Warehouse{{Name: ""}}
	_, err = New(cfg)
	assert.ErrorContains(t, err, "empty")
}

// newWarehouseFixture adds the named warehouse lake to the fixture, with
// its own metadata files, holding the same names as the default warehouse
// (namespace db, table events) and its own: namespaces db.inner and only,
// view lakeview, and a dropped table gone with a FAILED purge job.
func newWarehouseFixture(t *testing.T, mutate func(*Config)) (*fixture, memObjects) {
	t.Helper()
	lake := memObjects{
		"s3://lake/db/events/metadata/00001.metadata.json":   []byte(strings.ReplaceAll(tableMetadata, `"parquet"`, `"orc"`)),
		"s3://lake/db/lakeview/metadata/00001.metadata.json": []byte(strings.ReplaceAll(viewMetadata, "last day", "lake view")),
	}
	f := newFixture(t, func(c *Config) {
		c.Warehouses = []Warehouse{{Name: "lake", Location: "s3://lake", Objects: lake}, {Name: "empty", Location: "s3://empty"}}
		if mutate != nil {
			mutate(c)
		}
	})
	in := func(levels ...string) []string { return fsm.InWarehouse("lake", levels) }
	for _, ns := range [][]string{in("db"), in("db", "inner"), in("only")} {
		f.store.must(t, fsm.CreateNamespace{Namespace: ns, Properties: map[string]string{"comment": "lake " + nsName(external(ns))}})
	}
	for _, name := range []string{"events", "gone"} {
		f.store.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: fsm.Ident{Namespace: in("db"), Name: name},
			MetadataLocation: "s3://lake/db/" + name + "/metadata/00001.metadata.json", Location: "s3://lake/db/" + name, UUID: "lake-" + name + "-uuid"}}})
	}
	f.store.must(t, fsm.CreateView{Ident: fsm.Ident{Namespace: in("db"), Name: "lakeview"}, UUID: "lake-view-uuid",
		Location: "s3://lake/db/lakeview", MetadataLocation: "s3://lake/db/lakeview/metadata/00001.metadata.json", AtMs: 1})
	f.store.must(t, fsm.DropTable{Ident: fsm.Ident{Namespace: in("db"), Name: "gone"}, Purge: true, AtMs: 3,
		Job: &fsm.PurgeJobSpec{ID: "job-lake", Warehouse: "s3://lake", DroppedBy: "etl"}})
	return f, lake
}

// namespaceLinks are the ns and wh parameters of the page's namespace
// links, as "ns" or "ns@wh".
func namespaceLinks(body string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`href="/ui/namespace\?([^"]+)"`).FindAllStringSubmatch(body, -1) {
		q, err := url.ParseQuery(strings.ReplaceAll(m[1], "&amp;", "&"))
		if err != nil {
			continue
		}
		l := q.Get("ns")
		if wh := q.Get("wh"); wh != "" {
			l += "@" + wh
		}
		out = append(out, l)
	}
	return out
}

func TestNamedWarehouses(t *testing.T) {
	f, _ := newWarehouseFixture(t, nil)
	var pages []string // every page fetched, checked for the reserved level at the end
	get := func(target string, want int) string {
		t.Helper()
		code, body := f.get(t, target)
		require.Equal(t, want, code, "%s: %s", target, body)
		pages = append(pages, target+"\n"+body)
		return body
	}

	// The default warehouse's catalog page lists its own namespaces and
	// links every warehouse.
	body := get("/ui/catalog", http.StatusOK)
	assert.Equal(t, []string{"db", "other"}, namespaceLinks(body))
	hasAll(t, body, `id="warehouses"`, `href="/ui/catalog?wh=lake"`, `href="/ui/catalog?wh=empty"`, "s3://lake", "s3://empty")

	// The named warehouse's page lists its own, every link carrying it.
	body = get("/ui/catalog?wh=lake", http.StatusOK)
	assert.Equal(t, []string{"db@lake", "only@lake"}, namespaceLinks(body))
	hasAll(t, body, "Warehouse <span class=\"mono\">lake</span>", `<a href="/ui/catalog">catalog</a>`,
		`href="/ui/catalog?wh=lake">warehouse lake</a>`, "s3://lake", `href="/ui/catalog?wh=empty"`)
	body = get("/ui/catalog?wh=empty", http.StatusOK)
	assert.Empty(t, namespaceLinks(body))
	assert.Contains(t, body, "no namespaces")

	// Same namespace name, different contents.
	body = get("/ui/namespace?ns=db&wh=lake", http.StatusOK)
	hasAll(t, body, `href="/ui/table?name=events&amp;ns=db&amp;wh=lake"`, `href="/ui/view?name=lakeview&amp;ns=db&amp;wh=lake"`,
		"lake db", "in warehouse <span class=\"mono\">lake</span>", `href="/ui/catalog?wh=lake">warehouse lake</a>`,
		`href="/ui/namespace?ns=db&amp;wh=lake">db</a>`)
	assert.Equal(t, []string{"db@lake", "db.inner@lake"}, namespaceLinks(body), "crumb, then the child")
	assert.NotContains(t, body, "recent", "the default warehouse's view")
	assert.NotContains(t, body, `ns=db"`, "no link leaves the warehouse")
	body = get("/ui/namespace?ns=db", http.StatusOK)
	hasAll(t, body, `href="/ui/table?name=events&amp;ns=db"`, `href="/ui/view?name=recent&amp;ns=db"`, "main")
	assert.NotContains(t, body, "lakeview")
	assert.NotContains(t, body, "wh=")
	assert.NotContains(t, body, "in warehouse")
	body = get("/ui/namespace?ns=db.inner&wh=lake", http.StatusOK)
	hasAll(t, body, `href="/ui/namespace?ns=db&amp;wh=lake">db</a>`, `href="/ui/namespace?ns=db.inner&amp;wh=lake">inner</a>`)

	// Tables and views read the state and the metadata files of their
	// own warehouse.
	body = get("/ui/table?ns=db&name=events&wh=lake", http.StatusOK)
	hasAll(t, body, "lake-events-uuid", "s3://lake/db/events/metadata/00001.metadata.json", "orc", "3055729675574597004",
		`href="/ui/catalog?wh=lake">warehouse lake</a>`, `href="/ui/namespace?ns=db&amp;wh=lake">db</a>`)
	assert.NotContains(t, body, "parquet")
	body = get("/ui/table?ns=db&name=events", http.StatusOK)
	hasAll(t, body, "events-uuid", "parquet")
	assert.NotContains(t, body, "lake")
	body = get("/ui/view?ns=db&name=lakeview&wh=lake", http.StatusOK)
	hasAll(t, body, "lake-view-uuid", "lake view", `href="/ui/catalog?wh=lake">warehouse lake</a>`)

	// Each name exists in its own warehouse only; an unknown warehouse is
	// a 404 page on every catalog page.
	for _, target := range []string{
		"/ui/namespace?ns=only",
		"/ui/namespace?ns=other&wh=lake",
		"/ui/table?ns=other&name=secret&wh=lake",
		"/ui/table?ns=db&name=events&wh=empty",
		"/ui/view?ns=db&name=recent&wh=lake",
		"/ui/view?ns=db&name=lakeview",
		"/ui/catalog?wh=nope",
		"/ui/namespace?ns=db&wh=nope",
		"/ui/table?ns=db&name=events&wh=nope",
		"/ui/view?ns=db&name=lakeview&wh=nope",
	} {
		body := get(target, http.StatusNotFound)
		assert.Contains(t, body, `id="error-message"`, target)
	}
	body = get("/ui/catalog?wh=nope", http.StatusNotFound)
	assert.Contains(t, body, "There is no warehouse &#34;nope&#34;.")
	body = get("/ui/table?ns=db&name=nope&wh=lake", http.StatusNotFound)
	assert.Contains(t, body, "Table db.nope does not exist in warehouse lake.")
	// The reserved level cannot be named to reach a warehouse without wh.
	get("/ui/namespace?"+url.Values{"ns": {fsm.WarehouseRoot("lake") + ".db"}}.Encode(), http.StatusBadRequest)

	// The purge queue and the cluster page name the warehouse.
	body = get("/ui/purge-jobs", http.StatusOK)
	hasAll(t, body, "job-lake", "db.gone<div class=\"muted\">warehouse lake</div>", "s3://lake/db/gone")
	body = get("/ui", http.StatusOK)
	hasAll(t, body, `<a href="/ui/catalog?wh=lake">lake</a>`, `<a href="/ui/catalog?wh=empty">empty</a>`)

	for _, page := range pages {
		assert.NotContains(t, page, "\x1e", "the reserved level is never rendered")
	}
}

func TestNamedWarehousePagination(t *testing.T) {
	f, _ := newWarehouseFixture(t, func(c *Config) { c.PageSize = 1 })
	for _, n := range []string{"n1", "n2"} {
		f.store.must(t, fsm.CreateNamespace{Namespace: fsm.InWarehouse("lake", []string{n})})
	}
	f.store.must(t, fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: fsm.Ident{Namespace: fsm.InWarehouse("lake", []string{"db"}), Name: "more"},
		MetadataLocation: "s3://lake/db/more/metadata/00001.metadata.json", Location: "s3://lake/db/more", UUID: "lake-more-uuid"}}})
	var seen []string
	target := "/ui/catalog?wh=lake"
	for page := 1; target != ""; page++ {
		code, body := f.get(t, target)
		require.Equal(t, http.StatusOK, code, body)
		seen = append(seen, namespaceLinks(body)...)
		if page > 1 {
			assert.Contains(t, body, `href="/ui/catalog?wh=lake">« First page`)
		}
		target = nextLink(body)
		if target != "" {
			assert.Contains(t, target, "wh=lake")
		}
		require.LessOrEqual(t, page, 4)
	}
	assert.Equal(t, []string{"db@lake", "n1@lake", "n2@lake", "only@lake"}, seen)

	// The namespace page's listings keep the warehouse too.
	code, body := f.get(t, "/ui/namespace?ns=db&wh=lake")
	require.Equal(t, http.StatusOK, code, body)
	next := nextLink(body)
	require.NotEmpty(t, next, "two tables, one per page")
	assert.Contains(t, next, "wh=lake")
	code, body = f.get(t, next)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `href="/ui/table?name=more&amp;ns=db&amp;wh=lake"`)
	assert.Contains(t, body, `href="/ui/catalog?wh=lake">warehouse lake</a>`)
}

func TestNamedWarehouseAuthorization(t *testing.T) {
	// Grants are checked on stored levels: ana reads the default
	// warehouse's db, lena the whole warehouse lake (its reserved root).
	authz := fakeAuthz{readers: map[string][]string{"ana": {"db"}, "lena": {fsm.WarehouseRoot("lake")}}}
	f, _ := newWarehouseFixture(t, func(c *Config) {
		c.Authorizer = authz
		c.VerifyToken = func(context.Context, string) (string, error) { return "", errors.New("unused") }
	})
	as := func(p string) []string { return []string{"X-Test-Principal", p} }

	_, body := f.get(t, "/ui/catalog?wh=lake", as("ana")...)
	assert.Empty(t, namespaceLinks(body), "ana sees nothing in lake")
	code, _ := f.get(t, "/ui/table?ns=db&name=events&wh=lake", as("ana")...)
	assert.Equal(t, http.StatusNotFound, code)
	code, _ = f.get(t, "/ui/table?ns=db&name=events", as("ana")...)
	assert.Equal(t, http.StatusOK, code)

	_, body = f.get(t, "/ui/catalog?wh=lake", as("lena")...)
	assert.Equal(t, []string{"db@lake", "only@lake"}, namespaceLinks(body))
	_, body = f.get(t, "/ui/catalog", as("lena")...)
	assert.Empty(t, namespaceLinks(body), "lena sees nothing in the default warehouse")
	code, body = f.get(t, "/ui/table?ns=db&name=events&wh=lake", as("lena")...)
	assert.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "lake-events-uuid")
	code, _ = f.get(t, "/ui/table?ns=db&name=events", as("lena")...)
	assert.Equal(t, http.StatusNotFound, code)

	// Seen but not readable: the message names the warehouse, not the
	// reserved level.
	code, body = f.get(t, "/ui/table?ns=db&name=events&wh=lake", as("peeker")...)
	assert.Equal(t, http.StatusForbidden, code)
	assert.Contains(t, body, "may not read namespace db in warehouse lake")
	assert.NotContains(t, body, "\x1e")
}

// A gzipped metadata file is shown as the catalog reads it; a corrupt
// gzip stream is reported unreadable, the page still rendered.
func TestTableWithGzippedMetadata(t *testing.T) {
	f := newFixture(t, nil)
	const loc = "s3://bucket/db/events/metadata/00001.metadata.json"
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, err := zw.Write(f.objects[loc])
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	plainCode, plain := f.get(t, "/ui/table?ns=db&name=events")
	require.Equal(t, http.StatusOK, plainCode)
	f.objects[loc] = zipped.Bytes()
	code, body := f.get(t, "/ui/table?ns=db&name=events")
	require.Equal(t, http.StatusOK, code)
	assert.NotContains(t, body, "unreadable metadata file")
	assert.Equal(t, strings.Count(plain, "<tr"), strings.Count(body, "<tr"), "the same rows as from the plain file")
	f.objects[loc] = append([]byte{0x1f, 0x8b}, "not gzip"...)
	code, body = f.get(t, "/ui/table?ns=db&name=events")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "unreadable metadata file "+loc)
}

// A page of namespaces the principal may not see does not end the listing:
// the pages read on to those it may see, as listNamespaces does, and no
// next link leads to an empty page.
func TestListingsReadPastHiddenNamespaces(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.PageSize = 2
		c.Authorizer = fakeAuthz{readers: map[string][]string{"zed": {"zz1", "zz2", "zz3", "par"}}}
		c.VerifyToken = func(context.Context, string) (string, error) { return "", errors.New("unused") }
	})
	as := []string{"X-Test-Principal", "zed"}
	for i := range 7 {
		f.store.must(t, fsm.CreateNamespace{Namespace: []string{fmt.Sprintf("aa%d", i)}})
	}
	for _, n := range []string{"zz1", "zz2", "zz3", "par"} {
		f.store.must(t, fsm.CreateNamespace{Namespace: []string{n}})
	}
	walk := func(start, re string) (seen []string) {
		target := start
		for page := 1; target != ""; page++ {
			code, body := f.get(t, target, as...)
			require.Equal(t, http.StatusOK, code, body)
			for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(body, -1) {
				seen = append(seen, m[1])
			}
			target = nextLink(body)
			require.LessOrEqual(t, page, 4)
		}
		return seen
	}
	assert.Equal(t, []string{"par", "zz1", "zz2", "zz3"}, walk("/ui/catalog", `href="/ui/namespace\?ns=([^"]+)"`))

	// Children: the grant is on par, so all of par's children are visible
	// to zed; another principal's grant on one child only.
	for i := range 5 {
		f.store.must(t, fsm.CreateNamespace{Namespace: []string{"par", fmt.Sprintf("c%d", i)}})
	}
	assert.Equal(t, []string{"c0", "c1", "c2", "c3", "c4"}, walk("/ui/namespace?ns=par", `href="/ui/namespace\?ns=par(?:\.|%1F)([^"]+)"`))
}

// orderLog records, in order, the grant checks and the data reads of a
// request.
type orderLog struct {
	mu  sync.Mutex
	log []string
}

func (o *orderLog) add(what string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.log = append(o.log, what)
}

func (o *orderLog) first(what string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Index(o.log, what)
}

type orderedStore struct {
	Store
	o *orderLog
}

func (s orderedStore) Read(ctx context.Context, fn func(*fsm.Reader) error) error {
	s.o.add("read")
	return s.Store.Read(ctx, fn)
}

func (s orderedStore) StaleRead(fn func(*fsm.Reader) error) error {
	s.o.add("read")
	return s.Store.StaleRead(fn)
}

type orderedAuthz struct {
	fakeAuthz
	o *orderLog
}

func (a orderedAuthz) Allowed(r *http.Request, priv string, ns []string) (bool, error) {
	a.o.add("check")
	return a.fakeAuthz.Allowed(r, priv, ns)
}

func (a orderedAuthz) Visible(r *http.Request, ns []string) (bool, error) {
	a.o.add("check")
	return a.fakeAuthz.Visible(r, ns)
}

// Every page checks its reader's grants before it reads any data: the
// node reads the grants once per request, and a grants read that falls
// back to this node's replica (no leader) makes the page's reads use the
// replica too (MarkStale), which a page that had read its data first
// could not honour.
func TestPagesCheckBeforeTheyRead(t *testing.T) {
	o := &orderLog{}
	f := newFixture(t, func(c *Config) {
		c.Store = orderedStore{c.Store, o}
		c.Authorizer = orderedAuthz{fakeAuthz{admins: []string{"ops"}, readers: map[string][]string{"ana": {"db"}}}, o}
		c.VerifyToken = func(context.Context, string) (string, error) { return "", errors.New("unused") }
	})
	for _, target := range []string{"/ui", "/ui/catalog", "/ui/namespace?ns=db", "/ui/table?ns=db&name=events",
		"/ui/view?ns=db&name=recent", "/ui/purge-jobs"} {
		for _, p := range []string{"ana", "ops"} {
			o.mu.Lock()
			o.log = nil
			o.mu.Unlock()
			code, _ := f.get(t, target, "X-Test-Principal", p)
			require.Contains(t, []int{http.StatusOK, http.StatusForbidden}, code, "%s as %s", target, p)
			check, read := o.first("check"), o.first("read")
			require.NotEqual(t, -1, check, "%s as %s checked no grants", target, p)
			assert.True(t, read == -1 || check < read, "%s as %s read data before it checked grants: %v", target, p, o.log)
		}
	}
}

// A SUCCEEDED job keeps an earlier attempt's error in the state machine:
// the page says whose it is.
func TestSucceededJobErrorIsAnEarlierAttempts(t *testing.T) {
	f := newFixture(t, nil)
	row := f.srv.jobRow(fsm.PurgeJob{ID: "j", State: fsm.JobSucceeded, LastError: "timeout"})
	assert.Equal(t, "(an earlier attempt) timeout", row.LastError)
	row = f.srv.jobRow(fsm.PurgeJob{ID: "j", State: fsm.JobFailed, LastError: "timeout"})
	assert.Equal(t, "timeout", row.LastError)
}
