package catalog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/catalog"
	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/spectest"
	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/internal/testenv"
	"github.com/floe-catalog/floe/internal/vending"
	"github.com/floe-catalog/floe/internal/vending/ststest"
)

// s3Node starts a single node on a fresh versitygw bucket, configured by
// setup before it starts.
func s3Node(t *testing.T, setup func(n *node)) *node {
	t.Helper()
	s3 := testenv.S3(t)
	n := &node{t: t, dir: t.TempDir(), addr: freeAddr(t), warehouse: s3.Warehouse(), scfg: s3.StorageConfig()}
	if setup != nil {
		setup(n)
	}
	n.start()
	t.Cleanup(n.stop)
	return n
}

// recorder keeps every response body a client received.
type recorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen [][]byte
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	r.seen = append(r.seen, append([]byte(req.Method+" "+req.URL.Path+" "), body...))
	r.mu.Unlock()
	return resp, nil
}

func TestNoStorageSecretInAnyResponseUnlessVended(t *testing.T) {
	n := s3Node(t, nil)
	ctx := context.Background()
	rec := &recorder{next: spectest.Wrap(t, nil)}
	// iceberg-go asks for vended credentials on every request; with vending
	// off it must get none.
	cat, err := rest.NewCatalog(ctx, "floe", n.URL, rest.WithCustomTransport(rec))
	require.NoError(t, err)
	require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"db"}, nil))
	tbl, err := cat.CreateTable(ctx, table.Identifier{"db", "t"}, rowSchema)
	require.NoError(t, err)
	_, err = cat.LoadTable(ctx, table.Identifier{"db", "t"})
	require.NoError(t, err)
	_, err = cat.RegisterTable(ctx, table.Identifier{"db", "again"}, tbl.MetadataLocation())
	require.Error(t, err, "the location is owned; the answer is still checked below")
	for _, path := range []string{"/v1/config", "/v1/floe/namespaces/db/tables/t", "/v1/floe/namespaces/db/tables/t?snapshots=refs",
		"/v1/floe/namespaces/db/tables/t/credentials"} {
		r := n.do(t, "GET", path, nil, "X-Iceberg-Access-Delegation", "vended-credentials")
		require.Equal(t, http.StatusOK, r.status, "%s: %s", path, r.body)
		rec.seen = append(rec.seen, r.body)
	}
	r := n.do(t, "POST", "/v1/floe/namespaces/db/tables", map[string]any{
		"name": "staged", "schema": json.RawMessage(`{"type":"struct","fields":[]}`), "stage-create": true,
	}, "X-Iceberg-Access-Delegation", "vended-credentials")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	rec.seen = append(rec.seen, r.body)

	require.NotEmpty(t, rec.seen)
	for _, body := range rec.seen {
		assert.NotContains(t, string(body), n.scfg.S3SecretAccessKey)
		assert.NotContains(t, string(body), n.scfg.S3AccessKeyID)
	}
	load := n.do(t, "GET", "/v1/floe/namespaces/db/tables/t", nil, "X-Iceberg-Access-Delegation", "vended-credentials").json(t)
	cfg, _ := load["config"].(map[string]any)
	assert.Equal(t, n.scfg.S3Endpoint, cfg["s3.endpoint"], "the non-secret settings are still given")
	assert.Nil(t, load["storage-credentials"])
	creds := n.do(t, "GET", "/v1/floe/namespaces/db/tables/t/credentials", nil).json(t)
	assert.Equal(t, []any{}, creds["storage-credentials"], "nothing to vend")
}

func stsVendor(t *testing.T, n *node, sts *ststest.Server) *vending.Vendor {
	t.Helper()
	objects, err := storage.New(n.scfg)
	require.NoError(t, err)
	v, err := vending.New(vending.Config{
		Mode: vending.ModeSTS, AWS: objects.AWSConfig(), STSEndpoint: sts.URL,
		RoleARN: "arn:aws:iam::123456789012:role/tables", Registerer: prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	return v
}

func TestVendedCredentialsAreScopedAndOnlyWhenAsked(t *testing.T) {
	sts := ststest.Start()
	defer sts.Close()
	n := s3Node(t, func(n *node) { n.vendor = stsVendor(t, n, sts) })
	ctx := context.Background()
	cat := n.catalog(t)
	require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"db"}, nil))
	require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"db", "sub"}, nil))
	tbl, err := cat.CreateTable(ctx, table.Identifier{"db", "sub", "t"}, rowSchema)
	require.NoError(t, err)
	loc := tbl.Location()
	calls := len(sts.Calls())
	require.Positive(t, calls, "iceberg-go asks for vended credentials")

	path := "/v1/floe/namespaces/db%1Fsub/tables/t"
	plain := n.do(t, "GET", path, nil)
	require.Equal(t, http.StatusOK, plain.status)
	assert.NotContains(t, string(plain.body), "s3.session-token", "not asked: not given")
	assert.Nil(t, plain.json(t)["storage-credentials"])
	assert.Empty(t, plain.header.Get("Cache-Control"))
	assert.NotEmpty(t, plain.header.Get("ETag"))

	for _, h := range []string{"vended-credentials", "remote-signing, Vended-Credentials"} {
		r := n.do(t, "GET", path, nil, "X-Iceberg-Access-Delegation", h)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		assert.Equal(t, "no-store", r.header.Get("Cache-Control"))
		assert.Empty(t, r.header.Get("ETag"), "an answer with credentials is never revalidated")
		var res struct {
			Config             map[string]string `json:"config"`
			StorageCredentials []struct {
				Prefix string            `json:"prefix"`
				Config map[string]string `json:"config"`
			} `json:"storage-credentials"`
		}
		require.NoError(t, json.Unmarshal(r.body, &res))
		require.Len(t, res.StorageCredentials, 1, h)
		c := res.StorageCredentials[0]
		assert.Equal(t, loc, c.Prefix)
		assert.True(t, strings.HasPrefix(c.Config[vending.PropAccessKeyID], "ASIAFLOETEST"))
		assert.NotEmpty(t, c.Config[vending.PropSessionToken])
		assert.NotEmpty(t, c.Config[vending.PropSessionTokenExpires])
		assert.Equal(t, c.Config[vending.PropSessionToken], res.Config[vending.PropSessionToken], "older clients read config")
		assert.Equal(t, "v1/floe/namespaces/db%1Fsub/tables/t/credentials", res.Config["client.refresh-credentials-endpoint"])
		assert.NotContains(t, string(r.body), n.scfg.S3SecretAccessKey, "never the node's own keys")
	}

	// The policy the node asked STS for names only this table's location.
	last := sts.Calls()[len(sts.Calls())-1]
	prefix := strings.TrimPrefix(loc, "s3://"+strings.SplitN(strings.TrimPrefix(loc, "s3://"), "/", 2)[0]+"/")
	assert.Contains(t, last.Policy, prefix+"/*")
	assert.True(t, last.Signed)

	// A table created with credentials asked for: its answer carries
	// them and no tag.
	created := n.do(t, "POST", "/v1/floe/namespaces/db%1Fsub/tables", map[string]any{"name": "vended", "schema": map[string]any{
		"type": "struct", "fields": []any{map[string]any{"id": 1, "name": "id", "type": "long", "required": true}}}},
		"X-Iceberg-Access-Delegation", "vended-credentials")
	require.Equal(t, http.StatusOK, created.status, "%s", created.body)
	assert.NotNil(t, created.json(t)["storage-credentials"])
	assert.Empty(t, created.header.Get("ETag"), "an answer with credentials is never revalidated")

	// loadCredentials, as the clients' refresh calls it.
	creds := n.do(t, "GET", "/v1/floe/namespaces/db%1Fsub/tables/t/credentials", nil)
	require.Equal(t, http.StatusOK, creds.status, "%s", creds.body)
	assert.Equal(t, "no-store", creds.header.Get("Cache-Control"))
	var lc struct {
		StorageCredentials []struct {
			Prefix string            `json:"prefix"`
			Config map[string]string `json:"config"`
		} `json:"storage-credentials"`
	}
	require.NoError(t, json.Unmarshal(creds.body, &lc))
	require.Len(t, lc.StorageCredentials, 1)
	assert.Equal(t, loc, lc.StorageCredentials[0].Prefix)
	assert.NotEmpty(t, lc.StorageCredentials[0].Config[vending.PropSessionToken])
	missing := n.do(t, "GET", "/v1/floe/namespaces/db%1Fsub/tables/nope/credentials", nil)
	require.Equal(t, http.StatusNotFound, missing.status)
	assert.Equal(t, "NoSuchTableException", missing.errorType(t))

	// A client asking for credentials never gets a 304 without them.
	etag := plain.header.Get("ETag")
	require.NotEmpty(t, etag)
	assert.Equal(t, http.StatusNotModified, n.do(t, "GET", path, nil, "If-None-Match", etag).status)
	assert.Equal(t, http.StatusOK, n.do(t, "GET", path, nil, "If-None-Match", etag, "X-Iceberg-Access-Delegation", "vended-credentials").status)
}

// A moved table's vended credentials reach the location it left, whose
// files its older snapshots reference: one credential (the clients'
// refresh takes exactly one), prefixed with the current location, whose
// session policy names both; loadCredentials the same.
func TestMovedTablesCredentialsReachTheLocationItLeft(t *testing.T) {
	sts := ststest.Start()
	defer sts.Close()
	n := s3Node(t, func(n *node) { n.vendor = stsVendor(t, n, sts) })
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"db"}}).status)
	r := n.do(t, "POST", "/v1/floe/namespaces/db/tables", withName("t"))
	require.Equal(t, 200, r.status, "%s", r.body)
	old := r.json(t)["metadata"].(map[string]any)["location"].(string)
	r = n.do(t, "POST", "/v1/floe/namespaces/db/tables/t", map[string]any{
		"requirements": []any{},
		"updates":      []any{map[string]any{"action": "set-location", "location": old + "-moved"}},
	})
	require.Equal(t, 200, r.status, "%s", r.body)
	rel := func(loc string) string { // the key prefix within the bucket
		return strings.SplitN(strings.TrimPrefix(loc, "s3://"), "/", 2)[1]
	}
	for _, path := range []string{"/v1/floe/namespaces/db/tables/t", "/v1/floe/namespaces/db/tables/t/credentials"} {
		r = n.do(t, "GET", path, nil, "X-Iceberg-Access-Delegation", "vended-credentials")
		require.Equal(t, 200, r.status, "%s", r.body)
		creds := r.json(t)["storage-credentials"].([]any)
		require.Len(t, creds, 1, path)
		assert.Equal(t, old+"-moved", creds[0].(map[string]any)["prefix"])
		policy := sts.Calls()[len(sts.Calls())-1].Policy
		assert.Contains(t, policy, rel(old)+"-moved/*", path)
		assert.Contains(t, policy, rel(old)+"/*", "%s: the location the table left", path)
	}
}

func TestVendingFailureIsServiceUnavailable(t *testing.T) {
	sts := ststest.Start()
	defer sts.Close()
	n := s3Node(t, func(n *node) { n.vendor = stsVendor(t, n, sts) })
	require.Equal(t, http.StatusOK, n.do(t, "POST", "/v1/floe/namespaces", map[string]any{"namespace": []string{"db"}}).status)
	create := n.do(t, "POST", "/v1/floe/namespaces/db/tables", map[string]any{
		"name": "t", "schema": json.RawMessage(`{"type":"struct","fields":[]}`)})
	require.Equal(t, http.StatusOK, create.status, "%s", create.body)
	sts.Deny(true)
	// A fresh vendor has nothing cached.
	n.vendor = stsVendor(t, n, sts)
	n.restart()
	for _, path := range []string{"/v1/floe/namespaces/db/tables/t", "/v1/floe/namespaces/db/tables/t/credentials"} {
		var r response
		if strings.HasSuffix(path, "credentials") {
			r = n.do(t, "GET", path, nil)
		} else {
			r = n.do(t, "GET", path, nil, "X-Iceberg-Access-Delegation", "vended-credentials")
		}
		require.Equal(t, http.StatusServiceUnavailable, r.status, "%s: %s", path, r.body)
		assert.Equal(t, "ServiceUnavailableException", r.errorType(t))
		assert.NotContains(t, string(r.body), n.scfg.S3SecretAccessKey)
		assert.NotContains(t, string(r.body), "arn:", "STS's answer names the role and account: the node's log has it, not the client")
	}
	assert.Equal(t, http.StatusOK, n.do(t, "GET", "/v1/floe/namespaces/db/tables/t", nil).status, "not asked: served")

	// A create or register whose answer would carry credentials fails
	// before it takes effect, so the 503 can be retried (Java's HTTP client
	// resends a 503 by itself) and the retry is not refused as a conflict.
	vended := []string{"X-Iceberg-Access-Delegation", "vended-credentials"}
	loaded := n.do(t, "GET", "/v1/floe/namespaces/db/tables/t", nil).json(t)
	require.Equal(t, http.StatusOK, n.do(t, "POST", "/v1/floe/namespaces/db/tables/t/unregister", nil).status)
	requests := []struct {
		name, path string
		body       map[string]any
	}{
		{"create", "/v1/floe/namespaces/db/tables", map[string]any{"name": "t2", "schema": json.RawMessage(`{"type":"struct","fields":[]}`)}},
		{"register", "/v1/floe/namespaces/db/register", map[string]any{"name": "t", "metadata-location": loaded["metadata-location"]}},
	}
	for _, req := range requests {
		r := n.do(t, "POST", req.path, req.body, vended...)
		require.Equal(t, http.StatusServiceUnavailable, r.status, "%s: %s", req.name, r.body)
	}
	for _, name := range []string{"t", "t2"} {
		assert.Equal(t, http.StatusNotFound, n.do(t, "GET", "/v1/floe/namespaces/db/tables/"+name, nil).status, "%s was created by a request answered 503", name)
	}
	sts.Deny(false)
	for _, req := range requests {
		r := n.do(t, "POST", req.path, req.body, vended...)
		require.Equal(t, http.StatusOK, r.status, "%s retried: %s", req.name, r.body)
		assert.NotEmpty(t, r.json(t)["storage-credentials"], "%s retried", req.name)
	}
}

// With static keys vended, an engine that has no credentials of its own
// writes and reads the table's files with what the catalog handed it.
func TestStaticKeysLetAClientWithoutKeysReadAndWrite(t *testing.T) {
	n := s3Node(t, func(n *node) {
		n.vendor = staticKeysVendor(t, n)
		n.noClientKeys = true
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cat := n.catalog(t)
	require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"db"}, nil))
	tbl, err := cat.CreateTable(ctx, table.Identifier{"db", "t"}, rowSchema)
	require.NoError(t, err)
	uri := tbl.Location() + "/data/f.parquet"
	writeParquet(t, tbl, uri, 1, 2, 3)
	ok, err := n.objects.Exists(ctx, uri)
	require.NoError(t, err)
	assert.True(t, ok)
}

// headerAuthz grants by the X-Test-Principal header: "admin" everything,
// anyone else read on every namespace and nothing more.
type headerAuthz struct{}

func (headerAuthz) Principal(r *http.Request) string { return r.Header.Get("X-Test-Principal") }
func (headerAuthz) Allowed(r *http.Request, priv string, _ []string) (bool, error) {
	return r.Header.Get("X-Test-Principal") == "admin" || priv == "read", nil
}
func (headerAuthz) Visible(*http.Request, []string) (bool, error) { return true, nil }

// With authorization on, the node's own keys (static-keys) are vended only
// to a principal who may write the whole catalog: they reach every table,
// read-write, so a reader of one table would get far more than it may do.
func TestStaticKeysOnlyForWholeCatalogWriters(t *testing.T) {
	n := s3Node(t, func(n *node) { n.vendor, n.authz = staticKeysVendor(t, n), headerAuthz{} })
	admin := []string{"X-Test-Principal", "admin"}
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"db"}}, admin...).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/db/tables", withName("t"), admin...).status)

	for _, c := range []struct {
		principal string
		vended    bool
	}{{"admin", true}, {"reader", false}} {
		hdr := []string{"X-Test-Principal", c.principal, "X-Iceberg-Access-Delegation", "vended-credentials"}
		r := n.do(t, "GET", "/v1/floe/namespaces/db/tables/t", nil, hdr...)
		require.Equal(t, 200, r.status, "%s", r.body)
		assert.Equal(t, c.vended, r.json(t)["storage-credentials"] != nil, c.principal)
		assert.Equal(t, c.vended, strings.Contains(string(r.body), vending.PropSecretAccessKey), c.principal)
		r = n.do(t, "GET", "/v1/floe/namespaces/db/tables/t/credentials", nil, hdr...)
		require.Equal(t, 200, r.status, "%s", r.body)
		assert.Equal(t, c.vended, len(r.json(t)["storage-credentials"].([]any)) > 0, c.principal)
	}
}

// staticKeysVendor vends n's own storage keys (static-keys).
func staticKeysVendor(t *testing.T, n *node) *vending.Vendor {
	t.Helper()
	objects, err := storage.New(n.scfg)
	require.NoError(t, err)
	v, err := vending.New(vending.Config{Mode: vending.ModeStaticKeys, AWS: objects.AWSConfig()})
	require.NoError(t, err)
	return v
}

// With authorization on, a refusal by a purge job's tombstone names the
// job, not the table it purges, and the job's state: a FAILED job holds
// the name until an operator acts, and "retry when it has succeeded"
// would send the client waiting for nothing.
func TestTombstoneRefusalNamesTheJobState(t *testing.T) {
	t.Run("with an authorizer", func(t *testing.T) { tombstoneRefusalNamesTheJobState(t, headerAuthz{}) })
	t.Run("without", func(t *testing.T) { tombstoneRefusalNamesTheJobState(t, nil) })
}

func tombstoneRefusalNamesTheJobState(t *testing.T, authz catalog.Authorizer) {
	ctx := context.Background()
	uri, scfg := warehouses()[0].uri(t)
	n := &node{t: t, dir: t.TempDir(), addr: freeAddr(t), warehouse: uri, scfg: scfg, authz: authz}
	n.start()
	t.Cleanup(n.stop)
	admin := []string{"X-Test-Principal", "admin"}
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"db"}}, admin...).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/db/tables", withName("t"), admin...).status)
	r := n.do(t, "DELETE", "/v1/namespaces/db/tables/t?purgeRequested=true", nil, append(admin, "X-Gravitino-Async-Purge", "true")...)
	require.Equal(t, 204, r.status, "%s", r.body)

	r = n.do(t, "POST", "/v1/namespaces/db/tables", withName("t"), admin...)
	require.Equal(t, 409, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "(PENDING); retry when the job has succeeded")

	var job fsm.PurgeJob
	require.NoError(t, n.raft.FSM().View(func(rd *fsm.Reader) error {
		jobs, _ := rd.PurgeJobs(fsm.PurgeJobFilter{State: fsm.JobPending}, 10)
		require.Len(t, jobs, 1)
		job = jobs[0]
		return nil
	}))
	res, err := n.raft.Propose(ctx, fsm.AssignPurgeLease{JobID: job.ID, Node: "n1"})
	require.NoError(t, err)
	require.NoError(t, res.Err())
	require.NoError(t, n.raft.FSM().View(func(rd *fsm.Reader) error {
		job, _ = rd.PurgeJob(job.ID)
		return nil
	}))
	res, err = n.raft.Propose(ctx, fsm.FinishPurgeJob{JobID: job.ID, Token: job.Lease.Token, Outcome: fsm.OutcomeFailed, Error: "denied"})
	require.NoError(t, err)
	require.NoError(t, res.Err())
	r = n.do(t, "POST", "/v1/namespaces/db/tables", withName("t"), admin...)
	require.Equal(t, 409, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "purge job "+job.ID+" (FAILED); it holds the table's name and location until an operator retries (floe purge retry) or releases (floe purge release) the job")
	if authz != nil {
		assert.NotContains(t, string(r.body), "db.t")
	}
	// The same under an Idempotency-Key, and when the refusal is replayed
	// from its record: the record keeps the state machine's words.
	key := newKey(t)
	for i := range 2 {
		r = n.do(t, "POST", "/v1/namespaces/db/tables", withName("t"), append(admin, "Idempotency-Key", key)...)
		require.Equal(t, 409, r.status, "%s", r.body)
		assert.Contains(t, string(r.body), "(FAILED); it holds the table's name and location until an operator retries (floe purge retry) or releases (floe purge release) the job", "attempt %d", i)
		assert.NotContains(t, string(r.body), "retry when the job has succeeded", "attempt %d", i)
		if authz != nil {
			assert.NotContains(t, string(r.body), "db.t", "attempt %d", i)
		}
	}
	// A location held by a table: masked in the replay too.
	if authz != nil {
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/db/tables", withName("owner"), admin...).status)
		owned := withName("other")
		owned["location"] = n.warehouse + "/db/owner/inside"
		key = newKey(t)
		for i := range 2 {
			r = n.do(t, "POST", "/v1/namespaces/db/tables", owned, append(admin, "Idempotency-Key", key)...)
			require.Equal(t, 409, r.status, "%s", r.body)
			assert.NotContains(t, string(r.body), "db.owner", "attempt %d names the owner", i)
		}
	}
}
