package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/harness"
	"github.com/floe-catalog/floe/internal/testenv"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// floeBinary builds the floe binary once per test run.
func floeBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "floe-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "floe")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, binErr)
	return binPath
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := harness.FreeAddr("127.0.0.1")
	require.NoError(t, err)
	return addr
}

// cleanEnv is the test's environment without FLOE_* variables, so that only
// the flags a test passes configure the binary.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLOE_") {
			env = append(env, kv)
		}
	}
	return env
}

// TestBinaryStartsServesAndStopsOnSIGTERM runs the real binary with only the
// three flags a second node on a shared machine needs, as an operator would.
func TestBinaryStartsServesAndStopsOnSIGTERM(t *testing.T) {
	bin := floeBinary(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	httpAddr, clusterAddr := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin, "--data-dir", dataDir, "--http-addr", httpAddr, "--cluster-addr", clusterAddr)
	cmd.Env = cleanEnv()
	var output testenv.LogBuffer
	cmd.Stdout, cmd.Stderr = &output, &output
	require.NoError(t, cmd.Start())
	exited := make(chan struct{}) // closed once Wait returned; then waitErr is set
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	defer func() {
		if t.Failed() {
			t.Logf("floe output:\n%s", output.String())
		}
	}()

	base := "http://" + httpAddr
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) (int, string) {
		resp, err := client.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	// Ready once the single-node cluster has elected itself.
	require.Eventually(t, func() bool {
		select {
		case <-exited:
			return true // fail below with the output
		default:
		}
		code, _ := get("/readyz")
		return code == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "floe never became ready")
	select {
	case <-exited:
		t.Fatalf("floe exited early: %v", waitErr)
	default:
	}

	code, body := get("/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"status":"ok"}`, body)
	code, body = get("/readyz")
	assert.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"status":"ready"}`, body)

	code, body = get("/metrics")
	assert.Equal(t, http.StatusOK, code)
	for _, want := range []string{`floe_raft_state{state="leader"} 1`, "floe_raft_commit_index", "go_goroutines", "process_cpu_seconds_total"} {
		assert.Contains(t, body, want)
	}

	// The catalog is wired to the node: a namespace created through the
	// API can be read back.
	code, body = get("/v1/config")
	assert.Equal(t, http.StatusOK, code, body)
	resp, err := client.Post(base+"/v1/namespaces", "application/json", strings.NewReader(`{"namespace":["demo"]}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	code, body = get("/v1/namespaces/demo")
	assert.Equal(t, http.StatusOK, code, body)

	// A client configured with a credential asks the token endpoint first;
	// with authentication off it gets a token and carries on.
	ctx := context.Background()
	cat, err := rest.NewCatalog(ctx, "floe", base, rest.WithCredential("anyone:anything"))
	require.NoError(t, err)
	props, err := cat.LoadNamespaceProperties(ctx, table.Identifier{"demo"})
	require.NoError(t, err)
	assert.NotNil(t, props)
	// Any other method at the token endpoint is a 405 in the OAuth model.
	resp, err = client.Get(base + "/v1/oauth/tokens")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "%s", b)
	assert.Contains(t, string(b), `"error":"invalid_request"`)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
		require.NoError(t, waitErr, "floe should exit 0 after SIGTERM")
	case <-time.After(10 * time.Second):
		t.Fatal("floe did not exit within 10s of SIGTERM")
	}
	logs := output.String()
	assert.Contains(t, logs, "starting floe")
	assert.Contains(t, logs, "floe stopped")
	assert.FileExists(t, filepath.Join(dataDir, "fsm.db"))
	assert.FileExists(t, filepath.Join(dataDir, "raft.db"))
	assert.DirExists(t, filepath.Join(dataDir, "snapshots"))
}

func TestBinaryBadFlagExits2(t *testing.T) {
	bin := floeBinary(t)
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{args: []string{"--log-format=xml"}, want: `--log-format "xml": want text or json`},
		{args: []string{"--no-such-flag"}, want: "flag provided but not defined: -no-such-flag"},
		{env: []string{"FLOE_MAX_BODY_BYTES=lots"}, want: `invalid value "lots" for FLOE_MAX_BODY_BYTES`},
		{args: []string{"--vend-credentials=always"}, want: `--vend-credentials must be off, sts or static-keys, got "always"`},
		{args: []string{"--vend-credentials=sts"}, want: "--vend-credentials=sts needs --vend-role-arn"},
		{env: []string{"FLOE_VEND_DURATION=1m"}, want: "--vend-duration must be between 15m0s and 12h0m0s, got 1m0s"},
	} {
		t.Run(strings.Join(append(tc.args, tc.env...), " "), func(t *testing.T) {
			cmd := exec.Command(bin, append(tc.args, "--data-dir", t.TempDir())...)
			cmd.Env = append(cleanEnv(), tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, 2, ee.ExitCode())
			assert.Contains(t, stderr.String(), tc.want)
			assert.Contains(t, stderr.String(), "--help")
			assert.Empty(t, stdout.String())
		})
	}
}

func TestBinaryHelp(t *testing.T) {
	cmd := exec.Command(floeBinary(t), "--help")
	cmd.Env = cleanEnv()
	out, err := cmd.Output()
	require.NoError(t, err, "--help exits 0")
	for _, name := range []string{"node-id", "data-dir", "http-addr", "cluster-addr", "warehouse", "s3-endpoint", "s3-region",
		"s3-access-key-id", "s3-secret-access-key", "s3-path-style", "log-level", "log-format", "prefix", "max-body-bytes", "allowed-locations", "rejoin-as-nonvoter",
		"vend-credentials", "vend-sts-endpoint", "vend-role-arn", "vend-external-id", "vend-duration"} {
		assert.Contains(t, string(out), "--"+name)
		assert.Contains(t, string(out), envName(name))
	}
}

func TestParseConfigDefaults(t *testing.T) {
	c, err := parseConfig(nil, nil, io.Discard)
	require.NoError(t, err)
	wd, err := os.Getwd()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(wd, "floe-data"), c.DataDir)
	assert.Equal(t, "127.0.0.1:8181", c.HTTPAddr)
	assert.Equal(t, "127.0.0.1:8182", c.ClusterAddr)
	wd, err = filepath.EvalSymlinks(wd)
	require.NoError(t, err)
	assert.Equal(t, "file://"+filepath.Join(wd, "floe-data", "warehouse"), c.Warehouse)
	assert.Equal(t, []string{c.Warehouse}, c.allowedLocations(), "the warehouse alone by default")

	c, err = parseConfig([]string{"--warehouse=s3://b/w", "--allowed-locations= s3://b/w , s3://other/t"}, nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"s3://b/w", "s3://other/t"}, c.allowedLocations())
	assert.Equal(t, "floe", c.Prefix)
	assert.Equal(t, int64(8<<20), c.MaxBodyBytes)
	assert.Equal(t, int64(128<<20), c.MetadataCacheBytes)
	assert.Equal(t, "info", c.LogLevel)
	assert.Equal(t, "text", c.LogFormat)
	assert.False(t, c.S3PathStyle)
	assert.Empty(t, c.NodeID)
}

func TestParseConfigFlagBeatsEnvBeatsDefault(t *testing.T) {
	env := []string{
		"FLOE_DATA_DIR=/srv/env-data",
		"FLOE_HTTP_ADDR=127.0.0.1:9000",
		"FLOE_S3_PATH_STYLE=true",
		"FLOE_WAREHOUSE=s3://bucket/wh",
		"FLOE_S3_ACCESS_KEY_ID=AK",
		"FLOE_S3_SECRET_ACCESS_KEY=SK",
		"FLOE_MAX_BODY_BYTES=1024",
		"OTHER=ignored",
	}
	c, err := parseConfig([]string{"--data-dir", "/srv/flag-data", "--max-body-bytes=2048"}, env, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "/srv/flag-data", c.DataDir, "flag wins over env")
	assert.Equal(t, int64(2048), c.MaxBodyBytes, "flag wins over env")
	assert.Equal(t, "127.0.0.1:9000", c.HTTPAddr, "env wins over default")
	assert.True(t, c.S3PathStyle)
	assert.Equal(t, "s3://bucket/wh", c.Warehouse)
	assert.Equal(t, "127.0.0.1:8182", c.ClusterAddr, "default")
}

func TestParseConfigRejects(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{args: []string{"--log-level=loud"}, want: "--log-level"},
		{args: []string{"--log-format=xml"}, want: "--log-format"},
		{args: []string{"--max-body-bytes=0"}, want: "must be positive"},
		{args: []string{"--metadata-cache-bytes=-1"}, want: "--metadata-cache-bytes -1: must be 0 (no cache) or positive"},
		{args: []string{"--max-body-bytes=x"}, want: "invalid value"},
		{args: []string{"--http-addr=8181"}, want: "--http-addr"},
		{args: []string{"--cluster-addr=nope"}, want: "--cluster-addr"},
		{args: []string{"--warehouse=gs://b/p"}, want: "--warehouse"},
		{args: []string{"--warehouse=/abs/path"}, want: "want file:// or s3://"},
		{args: []string{"--warehouse=file://relative"}, want: "--warehouse"},
		{args: []string{"--allowed-locations=s3://b/w,gs://x/y"}, want: "--allowed-locations"},
		{args: []string{"--allowed-locations=/abs/path"}, want: "want file:// or s3://"},
		{args: []string{"--s3-access-key-id=AK"}, want: "set together"},
		{args: []string{"--prefix=a/b"}, want: "--prefix"},
		{args: []string{"--prefix=.."}, want: "--prefix \"..\": \"..\" is rewritten"},
		{args: []string{"--prefix=a\x01b"}, want: "--prefix \"a\\x01b\": contains a control character"},
		{args: []string{"--prefix=namespaces"}, want: "--prefix \"namespaces\""},
		{args: []string{"--data-dir="}, want: "--data-dir"},
		{args: []string{"extra"}, want: `unknown command "extra"`},
		{args: []string{"--json", "status"}, want: "a command's flags go after it: floe status --json"},
		{args: []string{"--data-dir=d", "extra"}, want: `unexpected argument "extra"`},
		{env: []string{"FLOE_S3_PATH_STYLE=maybe"}, want: `invalid value "maybe" for FLOE_S3_PATH_STYLE`},
		{env: []string{"FLOE_LOG_FORMAT=xml"}, want: "--log-format"},
		{args: []string{"--purge-delete-batch-size=0"}, want: "--purge-delete-batch-size"},
		{args: []string{"--purge-delete-batch-size=1001"}, want: "--purge-delete-batch-size"},
		{args: []string{"--purge-delete-threads=100000000"}, want: "--purge-delete-threads 100000000: want at most 1024"},
		{args: []string{"--purge-worker-threads=257"}, want: "--purge-worker-threads 257: want at most 256"},
		{args: []string{"--purge-worker-threads=0"}, want: "at least 1"},
		{args: []string{"--purge-delete-threads=-1"}, want: "at least 1"},
		{args: []string{"--purge-max-attempts=0"}, want: "at least 1"},
		{args: []string{"--purge-heartbeat-timeout=10ms"}, want: "--purge-heartbeat-timeout"},
		{args: []string{"--raft-heartbeat-timeout=10ms"}, want: "--raft-heartbeat-timeout"},
		{args: []string{"--raft-heartbeat-timeout=2m"}, want: "--raft-heartbeat-timeout"},
		{args: []string{"--purge-retention=0s"}, want: "--purge-retention"},
		{args: []string{"--auth=on", "--auth-root-token=" + testRootToken, "--cluster-addr=0.0.0.0:8182", "--cluster-advertise=10.1.2.3:8182"}, want: "and no mutual TLS"},
		{args: []string{"--auth=on", "--auth-root-token=" + testRootToken, "--cluster-addr=10.1.2.3:8182"}, want: "--cluster-insecure"},
		{args: []string{"--purge-retention=20s", "--purge-heartbeat-timeout=10s"}, want: "at least 3 × --purge-heartbeat-timeout"},
		{args: []string{"--idempotency-lifetime=30m"}, want: "--idempotency-lifetime"},
		{args: []string{"--idempotency-lifetime=PT0S"}, want: "--idempotency-lifetime"},
		{env: []string{"FLOE_IDEMPOTENCY=maybe"}, want: `invalid value "maybe" for FLOE_IDEMPOTENCY`},
		{env: []string{"FLOE_PURGE_RETENTION=forever"}, want: "FLOE_PURGE_RETENTION"},
		{args: []string{"--join=nohostport"}, want: "--join"},
		{args: []string{"--bootstrap-expect=-1"}, want: "--bootstrap-expect"},
		{args: []string{"--bootstrap-expect=3"}, want: "needs --join"},
		{args: []string{"--rejoin-as-nonvoter"}, want: "--rejoin-as-nonvoter needs --join"},
		{env: []string{"FLOE_REJOIN_AS_NONVOTER=maybe"}, want: `invalid value "maybe" for FLOE_REJOIN_AS_NONVOTER`},
		{args: []string{"--tls-cert=c.pem"}, want: "set together"},
		{args: []string{"--cluster-addr=0.0.0.0:8182"}, want: "--cluster-advertise"},
		{args: []string{"--cluster-advertise=nope"}, want: "--cluster-advertise"},
		{args: []string{"--cluster-advertise=node1:08182"}, want: "write it as 8182"},
		{args: []string{"--cluster-advertise=node1:0"}, want: "--cluster-advertise"},
		{args: []string{"--snapshot-threshold=0"}, want: "must be positive"},
	} {
		t.Run(strings.Join(append(tc.args, tc.env...), " "), func(t *testing.T) {
			_, err := parseConfig(tc.args, tc.env, io.Discard)
			var ue usageError
			require.ErrorAs(t, err, &ue)
			assert.ErrorContains(t, err, tc.want)
			assert.Equal(t, 2, exitCode(err, io.Discard))
		})
	}
}

func TestHelpExitsZero(t *testing.T) {
	var out bytes.Buffer
	_, err := parseConfig([]string{"-h"}, nil, &out)
	require.ErrorIs(t, err, flag.ErrHelp)
	assert.Equal(t, 0, exitCode(err, io.Discard))
	assert.Contains(t, out.String(), "--data-dir string")
	assert.Contains(t, out.String(), "env FLOE_DATA_DIR; default ./floe-data")
}

func TestStartupLogNeverShowsSecret(t *testing.T) {
	c, err := parseConfig([]string{"--warehouse=s3://b/w", "--s3-access-key-id=AKID", "--s3-secret-access-key=TOPSECRET"}, nil, io.Discard)
	require.NoError(t, err)
	for _, format := range []string{"text", "json"} {
		c.LogFormat = format
		var buf bytes.Buffer
		newLogger(c, &buf).Info("starting floe", c.logAttrs()...)
		assert.NotContains(t, buf.String(), "TOPSECRET")
		assert.Contains(t, buf.String(), "AKID")
	}
}

type fakeReadiness struct{ err error }

func (f fakeReadiness) Ready() error { return f.err }

func TestReadyzReportsReason(t *testing.T) {
	reg := prometheus.NewRegistry()
	catalog := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	srv := &http.Server{Handler: routes(catalog, http.NotFoundHandler(), nil, fakeReadiness{errors.New("raftnode: no leader")}, reg), ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })

	resp, err := http.Get("http://" + ln.Addr().String() + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	var body map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	assert.Equal(t, map[string]string{"status": "not ready", "reason": "raftnode: no leader"}, body)

	resp2, err := http.Get("http://" + ln.Addr().String() + "/v1/anything")
	require.NoError(t, err)
	resp2.Body.Close()
	assert.Equal(t, http.StatusTeapot, resp2.StatusCode, "/v1/ goes to the catalog")
}

// TestRunInProcess runs run itself (under the race detector when the tests
// are) through startup, readiness and a context-driven shutdown.
func TestRunInProcess(t *testing.T) {
	httpAddr, clusterAddr, dataDir := freeAddr(t), freeAddr(t), t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testenv.LogBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--data-dir", dataDir, "--http-addr", httpAddr, "--cluster-addr", clusterAddr, "--log-format=json"},
			nil, io.Discard, &logs)
	}()
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "not ready; logs:\n%s", &logs)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	assert.Contains(t, logs.String(), `"msg":"floe stopped"`)
}

// inProcess is a node run in the test's process (runInProcess).
type inProcess struct {
	base    string // http://<its HTTP address>
	dataDir string
	logs    *testenv.LogBuffer
}

// runInProcess runs run with args (a data directory and loopback
// addresses added) until the test ends, and returns the node once it is
// ready. At cleanup it cancels run, which must return without an error;
// the node's logs are shown when the test failed.
func runInProcess(t *testing.T, args ...string) inProcess {
	t.Helper()
	httpAddr, clusterAddr := freeAddr(t), freeAddr(t)
	n := inProcess{base: "http://" + httpAddr, dataDir: t.TempDir(), logs: &testenv.LogBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	logs := n.logs
	done := make(chan error, 1)
	args = append([]string{"--data-dir", n.dataDir, "--http-addr", httpAddr, "--cluster-addr", clusterAddr, "--log-format=json"}, args...)
	go func() { done <- run(ctx, args, nil, io.Discard, logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Error("run did not return after its context ended")
		}
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
	require.Eventually(t, func() bool {
		resp, err := http.Get(n.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "not ready")
	return n
}

// --metadata-cache-bytes reaches the catalog: with 0, a loaded table's
// metadata is not kept (the cache's byte gauge stays 0); by default it is.
func TestMetadataCacheBytesFlag(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		cached bool
	}{{nil, true}, {[]string{"--metadata-cache-bytes=0"}, false}} {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			base := runInProcess(t, tc.args...).base
			for _, req := range []struct{ path, body string }{
				{"/v1/floe/namespaces", `{"namespace":["n"]}`},
				{"/v1/floe/namespaces/n/tables", `{"name":"t","schema":{"type":"struct","fields":[{"id":1,"name":"a","type":"long","required":false}]}}`},
			} {
				resp, err := http.Post(base+req.path, "application/json", strings.NewReader(req.body))
				require.NoError(t, err)
				resp.Body.Close()
				require.Equal(t, http.StatusOK, resp.StatusCode, req.path)
			}
			resp, err := http.Get(base + "/v1/floe/namespaces/n/tables/t")
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			resp, err = http.Get(base + "/metrics")
			require.NoError(t, err)
			metrics, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			m := regexp.MustCompile(`(?m)^floe_catalog_metadata_cache_bytes (\S+)$`).FindSubmatch(metrics)
			require.NotNil(t, m, "no cache gauge in /metrics")
			if tc.cached {
				assert.NotEqual(t, "0", string(m[1]), "default: the loaded metadata is cached")
			} else {
				assert.Equal(t, "0", string(m[1]), "--metadata-cache-bytes=0: nothing is cached")
			}
		})
	}
}

// A path with a dot or empty segment is refused in the Iceberg error model, never
// redirected (a redirect keeps a DELETE's method and lands on the parent);
// escaped dots are names and pass.
func TestDotSegmentsAreRefusedNotRedirected(t *testing.T) {
	var reached []string
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached = append(reached, r.URL.EscapedPath())
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(refuseDotSegments(collapseLeadingSlashes(routes(inner, http.NotFoundHandler(), nil, fakeReadiness{}, prometheus.NewRegistry()))))
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/v1/namespaces/x9/tables/..", "/v1/namespaces/x9/tables/t1/..", "/v1/./config", "/v1/namespaces/../namespaces/x",
		// Empty segments: cleaned, they name another object.
		"/v1/namespaces/x9//tables/t1", "/v1/namespaces//tables", "/v1//namespaces/x9", "/management/v1/purge-jobs//x",
		// The operator API's router reads the decoded path.
		"/management/v1/purge-jobs/..%2F..%2Fv1%2Fcluster", "/management/v1/purge-jobs/%2e%2e/%2e%2e/cluster/leadership-transfer"} {
		req, err := http.NewRequest(http.MethodDelete, srv.URL+path, nil)
		require.NoError(t, err)
		req.URL.Opaque = path // keep the dots: Go's client would clean them
		resp, err := client.Do(req)
		require.NoError(t, err)
		var body struct {
			Error struct {
				Type string `json:"type"`
				Code int    `json:"code"`
			} `json:"error"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body), path)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, path)
		assert.Equal(t, "BadRequestException", body.Error.Type, path)
	}
	assert.Empty(t, reached, "nothing reached the catalog")
	// A leading "//" (collapsed only later) does not hide the operator
	// API's prefix. Sent raw: Go's client would read "//x" as a host.
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	_, err = fmt.Fprintf(conn, "DELETE //management/v1/purge-jobs/%%2e%%2e/%%2e%%2e/cluster/members/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	raw, err := io.ReadAll(conn)
	conn.Close()
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(raw), "HTTP/1.1 400 "), "%s", raw)
	req, err := http.NewRequest(http.MethodDelete, srv.URL+"/v1/namespaces/x9/tables/%2E%2E", nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.Equal(t, []string{"/v1/namespaces/x9/tables/%2E%2E"}, reached)
}

// Credentials written into a URL never reach a log line or an error.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://key:secret@127.0.0.1:9000": "http://key:xxxxx@127.0.0.1:9000",
		"s3://user:pass@bucket/warehouse":  "s3://user:xxxxx@bucket/warehouse",
		"http://127.0.0.1:9000":            "http://127.0.0.1:9000",
		"http://justakey@127.0.0.1:9000":   "http://justakey@127.0.0.1:9000",
		"file:///var/lib/floe/warehouse":   "file:///var/lib/floe/warehouse",
		"":                                 "",
		"not a url %zz":                    "not a url %zz",
		// Unparseable because of a "/" in the secret: masked up to the "@".
		"http://key:sec/ret@127.0.0.1:9000": "http://xxxxx@127.0.0.1:9000",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
	c := config{S3Endpoint: "http://key:hunter2@127.0.0.1:9000", Warehouse: "s3://k:hunter2@b/w"}
	if attrs := fmt.Sprint(c.logAttrs()...); strings.Contains(attrs, "hunter2") {
		t.Errorf("startup log attributes hold the secret: %s", attrs)
	}
	// The refusal of a location holding a secret quotes neither the URI
	// nor the bucket name the secret ran into.
	for _, args := range [][]string{
		{"--warehouse", "s3://AK:hunter2@bkt/wc"},
		{"--allowed-locations", "s3://AK:hunter2@bkt/wc"},
		{"--warehouses", "w3=s3://AK:hunter2@bkt/w3"},
	} {
		_, err := parseConfig(append(args, "--data-dir", t.TempDir()), nil, io.Discard)
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: %v", args, err)
		}
	}
}

// A --node-id no member could be managed by is a usage error at start.
func TestNodeIDIsChecked(t *testing.T) {
	for _, id := range []string{"a b", "a/b", "..", "x\x1b[2J"} {
		c := config{NodeID: id, DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", ClusterAddr: "127.0.0.1:0"}
		err := c.validate()
		require.Error(t, err, id)
		assert.Contains(t, err.Error(), "--node-id", id)
	}
}

// TestManagementSubtreesDoNotRedirect: the path of a subtree of the
// operator API is no route; it is answered by the handler of unknown paths,
// never redirected to the subtree.
func TestManagementSubtreesDoNotRedirect(t *testing.T) {
	named := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Header().Set("X-Served-By", name) })
	}
	h := managementRoutes(named("cluster"), named("purge-jobs"), named("auth"), named("events"), named("backup"))
	for _, path := range []string{"/management/v1/auth", "/management/v1/locations", "/management/v1/nosuch", "/management/v1"} {
		for _, method := range []string{"GET", "POST", "DELETE"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
			assert.Equal(t, http.StatusOK, rec.Code, "%s %s: %s", method, path, rec.Header().Get("Location"))
			assert.Equal(t, "cluster", rec.Header().Get("X-Served-By"), "%s %s", method, path)
		}
	}
	for path, want := range map[string]string{"/management/v1/auth/clients": "auth", "/management/v1/locations/x": "purge-jobs",
		"/management/v1/purge-jobs": "purge-jobs", "/management/v1/events": "events", "/management/v1/backup": "backup"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		assert.Equal(t, want, rec.Header().Get("X-Served-By"), path)
	}
}

// TestPathsOutsideTheAPIsAnswerInTheErrorModel: a client given a wrong
// base URI gets a 404 it can parse, never ServeMux's plain text or a
// redirect; the probes take GET and HEAD only, with a 405 naming them.
func TestPathsOutsideTheAPIsAnswerInTheErrorModel(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	srv := httptest.NewServer(routes(inner, inner, nil, fakeReadiness{}, prometheus.NewRegistry()))
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/", 404, ""}, {"GET", "/api/catalog/v1/config", 404, ""}, {"GET", "/v2/config", 404, ""},
		{"POST", "/v1", 404, ""}, {"GET", "/management", 404, ""}, {"GET", "/healthz/", 404, ""},
		{"PUT", "/healthz", 405, "GET, HEAD"}, {"POST", "/metrics", 405, "GET, HEAD"}, {"DELETE", "/readyz", 405, "GET, HEAD"},
	} {
		req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		var body struct {
			Error struct {
				Message string `json:"message"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body), "%s %s", tc.method, tc.path)
		resp.Body.Close()
		assert.Equal(t, tc.status, resp.StatusCode, "%s %s", tc.method, tc.path)
		assert.Equal(t, tc.status, body.Error.Code, "%s %s", tc.method, tc.path)
		assert.Equal(t, tc.allow, resp.Header.Get("Allow"), "%s %s", tc.method, tc.path)
	}
	for _, method := range []string{"GET", "HEAD"} {
		req, err := http.NewRequest(method, srv.URL+"/healthz", nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, method)
	}
}
