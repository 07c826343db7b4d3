package catalog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/catalog"
	"github.com/floe-catalog/floe/internal/harness"
	"github.com/floe-catalog/floe/internal/raftnode"
	"github.com/floe-catalog/floe/internal/raftnode/raftfault"
	"github.com/floe-catalog/floe/internal/spectest"
	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/internal/testenv"

	_ "github.com/apache/iceberg-go/io/gocloud/s3" // S3 FileIO for the data round trip
)

// warehouse is where a test node keeps its tables.
type warehouse struct {
	name string
	uri  func(t *testing.T) (string, storage.Config)
}

// warehouses are the storage backends every end-to-end test runs against:
// the local filesystem and a real S3 server (versitygw).
func warehouses() []warehouse {
	return []warehouse{
		{name: "file", uri: func(t *testing.T) (string, storage.Config) {
			return "file://" + t.TempDir() + "/warehouse", storage.Config{}
		}},
		{name: "s3", uri: func(t *testing.T) (string, storage.Config) {
			s3 := testenv.S3(t)
			return s3.Warehouse(), s3.StorageConfig()
		}},
	}
}

// quietLogger keeps test output to failures; FLOE_TEST_LOG=1 shows the logs.
func quietLogger() *slog.Logger {
	if os.Getenv("FLOE_TEST_LOG") != "" {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// node is one floe node served over real loopback HTTP.
type node struct {
	t         *testing.T
	dir       string
	addr      string
	join      []string
	expect    int
	warehouse string
	scfg      storage.Config
	now       func() time.Time // catalog clock; nil: time.Now
	vendor    catalog.CredentialVendor
	authz     catalog.Authorizer
	// named are warehouses served beside the default one.
	named []catalog.Warehouse
	// noClientKeys: the client brings no storage credentials of its own.
	noClientKeys bool
	// logger is the catalog's logger; nil: quietLogger.
	logger *slog.Logger
	// purger and stopping are the catalog's Config.Purger and
	// Config.Stopping; nil: their defaults.
	purger   catalog.Purger
	stopping chan struct{}
	raft     *raftnode.Node
	net      *raftfault.Network // cuts raft off from the cluster (Isolate)
	srv      *catalog.Server
	metrics  *prometheus.Registry
	objects  *storage.Mux
	http     *httptest.Server
	URL      string
	client   *http.Client
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := harness.FreeAddr("127.0.0.1")
	require.NoError(t, err)
	return addr
}

// startNode starts a single-node cluster on wh.
func startNode(t *testing.T, wh warehouse) *node {
	t.Helper()
	uri, scfg := wh.uri(t)
	n := &node{t: t, dir: t.TempDir(), addr: freeAddr(t), warehouse: uri, scfg: scfg}
	n.start()
	t.Cleanup(n.stop)
	return n
}

// startCluster starts size nodes that form one cluster on a shared
// warehouse and waits until every node is ready.
func startCluster(t *testing.T, wh warehouse, size int) []*node {
	t.Helper()
	return startClusterWith(t, wh, size, nil)
}

// startClusterWith is startCluster with named warehouses beside the
// default one: named returns them given the default warehouse's URI.
func startClusterWith(t *testing.T, wh warehouse, size int, named func(uri string) []catalog.Warehouse) []*node {
	t.Helper()
	uri, scfg := wh.uri(t)
	addrs := make([]string, size)
	for i := range addrs {
		addrs[i] = freeAddr(t)
	}
	nodes := make([]*node, size)
	for i := range nodes {
		nodes[i] = &node{t: t, dir: t.TempDir(), addr: addrs[i], join: addrs, expect: size, warehouse: uri, scfg: scfg}
		if named != nil {
			nodes[i].named = named(uri)
		}
		nodes[i].start()
		t.Cleanup(nodes[i].stop)
	}
	for _, n := range nodes {
		require.Eventually(t, func() bool { return n.raft.Ready() == nil }, 30*time.Second, 20*time.Millisecond)
	}
	return nodes
}

// follower returns a node of the cluster that is not the leader.
func follower(t *testing.T, nodes []*node) *node {
	t.Helper()
	for _, n := range nodes {
		if !n.raft.IsLeader() {
			return n
		}
	}
	t.Fatal("no follower")
	return nil
}

func (n *node) start() {
	t := n.t
	t.Helper()
	faults := raftfault.New()
	rn, err := raftnode.Open(raftnode.Config{
		DataDir: n.dir, ClusterAddr: n.addr, Bootstrap: len(n.join) == 0, Join: n.join, BootstrapExpect: n.expect,
		Logger: quietLogger(), Faults: faults,
	})
	require.NoError(t, err)
	if len(n.join) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, rn.WaitLeader(ctx))
	}
	objects, err := storage.New(n.scfg)
	require.NoError(t, err)
	n.metrics = prometheus.NewRegistry()
	logger := n.logger
	if logger == nil {
		logger = quietLogger()
	}
	srv, err := catalog.New(catalog.Config{
		Warehouse: n.warehouse, Prefix: "floe", Registerer: n.metrics, MaxBodyBytes: 1 << 20, Logger: logger,
		Now: n.now, Vendor: n.vendor, Warehouses: n.named, Authorizer: n.authz,
		Purger: n.purger, Stopping: n.stopping,
	}, rn, objects)
	require.NoError(t, err)
	n.raft, n.net, n.objects, n.srv = rn, faults, objects, srv
	n.http = httptest.NewServer(srv.Handler())
	n.URL = n.http.URL
	n.client = &http.Client{Transport: spectest.Wrap(t, nil), Timeout: 30 * time.Second}
}

func (n *node) stop() {
	if n.http == nil {
		return
	}
	n.http.Close()
	n.srv.Close()
	require.NoError(n.t, n.raft.Shutdown())
	n.http = nil
}

func (n *node) restart() {
	n.stop()
	n.start()
}

// catalog returns an iceberg-go REST client for the node whose every
// response is validated against the Iceberg REST spec. Like a real engine,
// the client brings its own storage credentials: the catalog hands out
// none unless vending is configured.
func (n *node) catalog(t *testing.T, opts ...rest.Option) *rest.Catalog {
	t.Helper()
	opts = append([]rest.Option{rest.WithCustomTransport(spectest.Wrap(t, nil))}, opts...)
	if n.scfg.S3AccessKeyID != "" && !n.noClientKeys {
		opts = append(opts, rest.WithAdditionalProps(iceberg.Properties{
			"s3.access-key-id": n.scfg.S3AccessKeyID, "s3.secret-access-key": n.scfg.S3SecretAccessKey,
		}))
	}
	cat, err := rest.NewCatalog(context.Background(), "floe", n.URL, opts...)
	require.NoError(t, err)
	return cat
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m), "body: %s", r.body)
	return m
}

// errorType returns the Iceberg error model's type, failing if the body is
// not in the error model.
func (r response) errorType(t *testing.T) string {
	t.Helper()
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(r.body, &e), "body: %s", r.body)
	require.Equal(t, r.status, e.Error.Code, "body: %s", r.body)
	require.NotEmpty(t, e.Error.Message)
	return e.Error.Type
}

// do sends a request; the body is a string, a []byte or a value to encode.
func (n *node) do(t *testing.T, method, path string, body any, headers ...string) response {
	t.Helper()
	return n.doWith(t, n.client, method, path, body, headers...)
}

// doRaw is do without spec validation, for answers the spec does not list
// (413, 405).
func (n *node) doRaw(t *testing.T, method, path string, body any, headers ...string) response {
	t.Helper()
	return n.doWith(t, http.DefaultClient, method, path, body, headers...)
}

func (n *node) doWith(t *testing.T, c *http.Client, method, path string, body any, headers ...string) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, n.URL+path, rd)
	require.NoError(t, err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// state is everything a client can see, for "changes nothing" checks.
func (n *node) state(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	var walk func(parent string)
	walk = func(parent string) {
		path := "/v1/namespaces"
		if parent != "" {
			path += "?parent=" + parent
		}
		r := n.do(t, "GET", path, nil)
		require.Equal(t, 200, r.status)
		for _, ns := range r.json(t)["namespaces"].([]any) {
			levels := []string{}
			for _, l := range ns.([]any) {
				levels = append(levels, l.(string))
			}
			enc := strings.Join(levels, "%1F")
			nsr := n.do(t, "GET", "/v1/namespaces/"+enc, nil)
			b.Write(nsr.body)
			tr := n.do(t, "GET", "/v1/namespaces/"+enc+"/tables", nil)
			for _, id := range tr.json(t)["identifiers"].([]any) {
				name := id.(map[string]any)["name"].(string)
				lr := n.do(t, "GET", "/v1/namespaces/"+enc+"/tables/"+name, nil)
				b.WriteString(name + ":" + lr.json(t)["metadata-location"].(string) + "\n")
			}
			walk(enc)
		}
	}
	walk("")
	return b.String()
}

// gauge is the value of the node's metric name, which has no labels.
func (n *node) gauge(t *testing.T, name string) float64 {
	t.Helper()
	families, err := n.metrics.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
