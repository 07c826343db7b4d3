package interop_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/harness"
)

// The address, credentials and bucket iceberg-go v0.7.0's integration
// tests are written against (catalog/rest/rest_integration_test.go).
const (
	catalogAddr = "127.0.0.1:8181"
	s3Access    = "admin"
	s3Secret    = "password"
	s3Bucket    = "warehouse"
)

// suites are the integration tests run; the scan-planning ones need the
// Java fixture and skip themselves without it.
const suites = "^(TestRestIntegration|TestEndpointNegotiation|TestRestCatalogConformance)$"

// TestIcebergGoIntegrationSuite runs iceberg-go's catalog/rest integration
// tests, unmodified, against one floe node on versitygw.
func TestIcebergGoIntegrationSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: iceberg-go's integration suite is not run")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command: iceberg-go's integration suite is compiled from the module cache")
	}
	if _, err := harness.FindVersitygw(); err != nil {
		if os.Getenv("FLOE_REQUIRE_S3") == "1" {
			t.Fatal(err)
		}
		t.Skipf("versitygw not installed (bash .ci/install-versitygw.sh): %v", err)
	}
	// The suite's address is fixed; a node already listening there would
	// be tested instead of this one.
	l, err := net.Listen("tcp", catalogAddr)
	require.NoError(t, err, "iceberg-go's suite needs %s free", catalogAddr)
	require.NoError(t, l.Close())
	clusterAddr, err := harness.FreeAddr("127.0.0.1")
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	s3, err := harness.StartVersitygw(ctx, harness.VersitygwConfig{Dir: filepath.Join(dir, "s3"), Name: "interop", Tool: "interop",
		AccessKeyID: s3Access, SecretAccessKey: s3Secret, Bucket: s3Bucket})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s3.Stop() })

	bin := filepath.Join(dir, "floe")
	build := exec.CommandContext(ctx, goBin, "build", "-o", bin, "github.com/floe-catalog/floe/cmd/node")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	node := harness.NewProcess(harness.ProcessConfig{
		Name: "floe", Bin: bin, LogPath: filepath.Join(dir, "floe.log"), Tool: "interop",
		Args: []string{"--data-dir", filepath.Join(dir, "data"), "--http-addr", catalogAddr, "--cluster-addr", clusterAddr,
			"--warehouse", "s3://" + s3Bucket, "--s3-endpoint", s3.Endpoint, "--s3-region", s3.Region,
			"--s3-access-key-id", s3Access, "--s3-secret-access-key", s3Secret, "--s3-path-style"},
	})
	require.NoError(t, node.Start())
	t.Cleanup(func() {
		_ = node.Stop()
		if t.Failed() {
			t.Logf("floe log, last lines:\n%s", node.LogTail(40))
		}
	})
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + catalogAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 100*time.Millisecond, "floe not ready:\n%s", node.LogTail(20))

	cmd := exec.CommandContext(ctx, goBin, "test", "-tags", "integration", "-count=1", "-json",
		"-run", suites, "github.com/apache/iceberg-go/catalog/rest")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, runErr := cmd.Output()

	results := map[string]string{} // test → pass, fail or skip
	var failOutput strings.Builder
	output := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			Action, Test, Output string
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Test == "" {
			continue
		}
		switch ev.Action {
		case "pass", "fail", "skip":
			results[ev.Test] = ev.Action
		case "output":
			output[ev.Test] = append(output[ev.Test], ev.Output)
		}
	}
	counts := map[string]int{}
	var names []string
	for name, res := range results {
		counts[res]++
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		switch res := results[name]; {
		case res == "fail":
			fmt.Fprintf(&failOutput, "--- %s\n%s", name, strings.Join(output[name], ""))
		case res == "skip" && !strings.Contains(name, "ScanPlanning"):
			t.Errorf("%s skipped: only the scan-planning tests may skip\n%s", name, strings.Join(output[name], ""))
		}
	}
	t.Logf("iceberg-go v0.7.0 catalog/rest integration tests against floe: %d passed, %d failed, %d skipped (scan planning)",
		counts["pass"], counts["fail"], counts["skip"])
	if counts["fail"] > 0 {
		t.Fatalf("iceberg-go's integration tests failed:\n%s", failOutput.String())
	}
	require.NoError(t, runErr, "go test: %s", stderr.String())
	require.Positive(t, counts["pass"])
}
