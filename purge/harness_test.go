package purge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	icecatalog "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/catalog"
	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/admin"
	"github.com/floe-catalog/floe/internal/harness"
	"github.com/floe-catalog/floe/internal/raftnode"
	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/internal/testenv"
	"github.com/floe-catalog/floe/purge"

	_ "github.com/apache/iceberg-go/io/gocloud/s3" // S3 FileIO for the test client
)

// warehouse is a storage backend the purge tests run against.
type warehouse struct {
	name string
	uri  func(t *testing.T) (string, storage.Config)
}

func fileWarehouse() warehouse {
	return warehouse{name: "file", uri: func(t *testing.T) (string, storage.Config) {
		return "file://" + t.TempDir() + "/warehouse", storage.Config{}
	}}
}

func s3Warehouse() warehouse {
	return warehouse{name: "s3", uri: func(t *testing.T) (string, storage.Config) {
		s3 := testenv.S3(t)
		return s3.Warehouse(), s3.StorageConfig()
	}}
}

func quietLogger() *slog.Logger {
	if os.Getenv("FLOE_TEST_LOG") != "" {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// hooked is a node's storage as its purge workers see it: every bulk
// delete first goes through the test's hook, which may block or fail it.
type hooked struct {
	*storage.Mux
	mu       sync.Mutex
	hook     func(ctx context.Context, uris []string) error
	readHook func(uri string)
	deleted  atomic.Int64
}

func (h *hooked) set(f func(ctx context.Context, uris []string) error) {
	h.mu.Lock()
	h.hook = f
	h.mu.Unlock()
}

// setRead installs f, called with each URI the purge reads (it may panic).
func (h *hooked) setRead(f func(uri string)) {
	h.mu.Lock()
	h.readHook = f
	h.mu.Unlock()
}

func (h *hooked) reading(uri string) {
	h.mu.Lock()
	f := h.readHook
	h.mu.Unlock()
	if f != nil {
		f(uri)
	}
}

func (h *hooked) Read(ctx context.Context, uri string) ([]byte, error) {
	h.reading(uri)
	return h.Mux.Read(ctx, uri)
}

func (h *hooked) Open(ctx context.Context, uri string) (io.ReadCloser, error) {
	h.reading(uri)
	return h.Mux.Open(ctx, uri)
}

func (h *hooked) Delete(ctx context.Context, uris []string) (int, error) {
	h.mu.Lock()
	f := h.hook
	h.mu.Unlock()
	if f != nil {
		if err := f(ctx, uris); err != nil {
			return 0, err
		}
	}
	n, err := h.Mux.Delete(ctx, uris)
	h.deleted.Add(int64(n))
	return n, err
}

// tnode is one floe node: Raft, the catalog and the operator API over
// loopback HTTP, and the purge service.
type tnode struct {
	raft    *raftnode.Node
	svc     *purge.Service
	objects *storage.Mux
	store   *hooked
	reg     *prometheus.Registry
	http    *httptest.Server
	URL     string
	dead    bool
	dataDir string
}

type cluster struct {
	t         *testing.T
	warehouse string
	scfg      storage.Config
	nodes     []*tnode
	batch     int
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := harness.FreeAddr("127.0.0.1")
	require.NoError(t, err)
	return addr
}

// newCluster starts size nodes on one warehouse and waits until all are
// ready. Purge timings are short: heartbeat timeout 1s, max attempts 3.
func newCluster(t *testing.T, wh warehouse, size, batch int, opts ...func(*purge.Config)) *cluster {
	t.Helper()
	uri, scfg := wh.uri(t)
	c := &cluster{t: t, warehouse: uri, batch: batch, scfg: scfg}
	addrs := make([]string, size)
	for i := range addrs {
		addrs[i] = freeAddr(t)
	}
	for i := range size {
		cfg := raftnode.Config{DataDir: t.TempDir(), ClusterAddr: addrs[i], Logger: quietLogger()}
		dataDir := cfg.DataDir
		if size == 1 {
			cfg.Bootstrap = true
		} else {
			cfg.Join, cfg.BootstrapExpect = addrs, size
		}
		rn, err := raftnode.Open(cfg)
		require.NoError(t, err)
		mux, err := storage.New(scfg)
		require.NoError(t, err)
		n := &tnode{raft: rn, objects: mux, store: &hooked{Mux: mux}, reg: prometheus.NewRegistry(), dataDir: dataDir}
		pcfg := purge.Config{
			NodeID: rn.ID(), Store: rn,
			Storage:       func(string, map[string]string) (purge.Objects, error) { return n.store, nil },
			WorkerThreads: 2, DeleteThreads: 2, DeleteBatchSize: batch,
			HeartbeatTimeout: time.Second, MaxAttempts: 3, RetryBackoff: 50 * time.Millisecond, MaxRetryBackoff: 200 * time.Millisecond,
			CheckpointInterval: 50 * time.Millisecond, PollInterval: 50 * time.Millisecond, StopTimeout: 2 * time.Second,
			Logger: quietLogger(), Registerer: n.reg,
		}
		for _, o := range opts {
			o(&pcfg)
		}
		n.svc, err = purge.New(pcfg)
		require.NoError(t, err)
		rn.OnLeadership(n.svc.Lead)
		rn.FSM().OnPurgeWork(n.svc.Wake) // as cmd/node wires it
		n.svc.Start()
		srv, err := catalog.New(catalog.Config{Warehouse: uri, Registerer: prometheus.NewRegistry(), Logger: quietLogger(), Purger: n.svc}, rn, mux)
		require.NoError(t, err)
		hm := http.NewServeMux()
		hm.Handle("/v1/", srv.Handler())
		hm.Handle("/management/", admin.NewPurgeJobs(rn, nil, quietLogger()))
		n.http = httptest.NewServer(hm)
		n.URL = n.http.URL
		c.nodes = append(c.nodes, n)
		t.Cleanup(n.kill)
	}
	for _, n := range c.nodes {
		require.Eventually(t, func() bool { return n.raft.Ready() == nil }, 30*time.Second, 20*time.Millisecond)
	}
	return c
}

// kill stops the node abruptly: HTTP, purge workers (mid-batch) and Raft.
func (n *tnode) kill() {
	if n.dead {
		return
	}
	n.dead = true
	n.http.Close()
	n.svc.Stop()
	_ = n.raft.Shutdown()
}

func (c *cluster) live() []*tnode {
	var out []*tnode
	for _, n := range c.nodes {
		if !n.dead {
			out = append(out, n)
		}
	}
	return out
}

func (c *cluster) follower() *tnode {
	for _, n := range c.live() {
		if !n.raft.IsLeader() {
			return n
		}
	}
	return c.live()[0]
}

func (c *cluster) byID(id string) *tnode {
	for _, n := range c.nodes {
		if n.raft.ID() == id {
			return n
		}
	}
	c.t.Fatalf("no node %s", id)
	return nil
}

// setHook installs f on every node's purge storage.
func (c *cluster) setHook(f func(ctx context.Context, uris []string) error) {
	for _, n := range c.nodes {
		n.store.set(f)
	}
}

// gate returns a hook that blocks every delete until open is closed, and a
// channel that receives once per blocked call.
func gate() (hook func(ctx context.Context, uris []string) error, entered chan struct{}, open chan struct{}) {
	entered, open = make(chan struct{}, 1024), make(chan struct{})
	return func(ctx context.Context, _ []string) error {
		entered <- struct{}{}
		select {
		case <-open:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, entered, open
}

// jobFor returns the newest purge job of a table.
func (c *cluster) jobFor(ns, name string) (fsm.PurgeJob, bool) {
	c.t.Helper()
	var (
		j  fsm.PurgeJob
		ok bool
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(c.t, c.live()[0].raft.Read(ctx, func(r *fsm.Reader) error {
		jobs, _ := r.PurgeJobs(fsm.PurgeJobFilter{Namespace: []string{ns}, Table: name}, 0)
		if len(jobs) > 0 {
			j, ok = jobs[len(jobs)-1], true
		}
		return nil
	}))
	return j, ok
}

func (c *cluster) mustJob(ns, name string) fsm.PurgeJob {
	c.t.Helper()
	j, ok := c.jobFor(ns, name)
	require.True(c.t, ok, "no purge job for %s.%s", ns, name)
	return j
}

// waitJob waits until the table's job satisfies cond.
func (c *cluster) waitJob(ns, name string, timeout time.Duration, cond func(fsm.PurgeJob) bool) fsm.PurgeJob {
	c.t.Helper()
	var last fsm.PurgeJob
	require.Eventually(c.t, func() bool {
		j, ok := c.jobFor(ns, name)
		last = j
		return ok && cond(j)
	}, timeout, 20*time.Millisecond, "purge job of %s.%s never got there; last: %+v", ns, name, &last)
	return last
}

func isState(s fsm.JobState) func(fsm.PurgeJob) bool {
	return func(j fsm.PurgeJob) bool { return j.State == s }
}

// list returns every object under prefix/.
func (c *cluster) list(prefix string) []string {
	c.t.Helper()
	var out []string
	require.NoError(c.t, c.live()[0].objects.List(context.Background(), strings.TrimSuffix(prefix, "/")+"/", func(uri string) error {
		out = append(out, uri)
		return nil
	}))
	return out
}

// assertNoDir checks, in a file:// warehouse, that the directory at loc
// is gone: a purge removes the empty directories its deletes leave.
func (c *cluster) assertNoDir(loc string) {
	c.t.Helper()
	path, ok := strings.CutPrefix(loc, "file://")
	if !ok {
		return
	}
	_, err := os.Lstat(path)
	assert.ErrorIs(c.t, err, fs.ErrNotExist, "the purged table's directory %s is removed", path)
	_, err = os.Stat(filepath.Dir(path))
	assert.NoError(c.t, err, "the namespace's directory stays")
}

type resp struct {
	status int
	body   string
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.body), &m), r.body)
	return m
}

func (r resp) errorMessage(t *testing.T) string {
	t.Helper()
	e, ok := r.json(t)["error"].(map[string]any)
	require.True(t, ok, "not in the error model: %s", r.body)
	require.Equal(t, float64(r.status), e["code"])
	return e["message"].(string)
}

func (n *tnode) do(t *testing.T, method, path, body string, headers ...string) resp {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, n.URL+path, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return resp{status: res.StatusCode, body: string(raw)}
}

const schemaJSON = `{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true}]}`

func createTableBody(name, location string) string {
	b := `{"name":"` + name + `","schema":` + schemaJSON
	if location != "" {
		b += `,"location":"` + location + `"`
	}
	return b + `}`
}

var rowSchema = iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})

// table is a test table and every file it consists of.
type testTable struct {
	tbl   *table.Table
	data  []string // data files inside the location
	files []string // every object under the location after the last commit
}

// clientOptions configure an iceberg-go client with the warehouse's own
// storage credentials, as an engine brings them: the catalog hands out none.
func (c *cluster) clientOptions() []rest.Option {
	if c.scfg.S3AccessKeyID == "" {
		return nil
	}
	return []rest.Option{rest.WithAdditionalProps(iceberg.Properties{
		"s3.access-key-id": c.scfg.S3AccessKeyID, "s3.secret-access-key": c.scfg.S3SecretAccessKey,
	})}
}

// makeTable creates ns.name through node n with the iceberg-go REST client
// and commits snapshots appends of filesPer data files each (placeholder
// objects the purge deletes but never reads); extra data files (which may
// lie anywhere) join the last snapshot.
func (c *cluster) makeTable(n *tnode, ns, name string, props iceberg.Properties, snapshots, filesPer int, extra ...string) testTable {
	t := c.t
	t.Helper()
	ctx := context.Background()
	cat, err := rest.NewCatalog(ctx, "floe", n.URL, c.clientOptions()...)
	require.NoError(t, err)
	if err := cat.CreateNamespace(ctx, table.Identifier{ns}, nil); err != nil && !errors.Is(err, icecatalog.ErrNamespaceAlreadyExists) {
		require.NoError(t, err)
	}
	tbl, err := cat.CreateTable(ctx, table.Identifier{ns, name}, rowSchema, icecatalog.WithProperties(props))
	require.NoError(t, err)
	var tt testTable
	for s := range snapshots {
		var dfs []iceberg.DataFile
		for i := range filesPer {
			uri := fmt.Sprintf("%s/data/s%d-%04d.parquet", tbl.Location(), s, i)
			require.NoError(t, n.objects.Write(ctx, uri, []byte("placeholder")))
			tt.data = append(tt.data, uri)
			dfs = append(dfs, dataFile(t, tbl, uri))
		}
		if s == snapshots-1 {
			for _, uri := range extra {
				dfs = append(dfs, dataFile(t, tbl, uri))
			}
		}
		tx := tbl.NewTransaction()
		require.NoError(t, tx.AddDataFiles(ctx, dfs, nil))
		tbl, err = tx.Commit(ctx)
		require.NoError(t, err)
	}
	tt.tbl = tbl
	tt.files = c.list(tbl.Location())
	require.Greater(t, len(tt.files), snapshots*filesPer, "data files plus metadata")
	return tt
}

func dataFile(t *testing.T, tbl *table.Table, uri string) iceberg.DataFile {
	b, err := iceberg.NewDataFileBuilder(*iceberg.UnpartitionedSpec, iceberg.EntryContentData, uri, iceberg.ParquetFile, nil, nil, nil, 1, 11)
	require.NoError(t, err)
	return b.Build()
}

// exist reports which of uris still exist.
func (c *cluster) exist(uris []string) []string {
	c.t.Helper()
	var out []string
	for _, u := range uris {
		ok, err := c.live()[0].objects.Exists(context.Background(), u)
		require.NoError(c.t, err)
		if ok {
			out = append(out, u)
		}
	}
	return out
}

func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}
