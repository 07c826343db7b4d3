// Package testenv starts external services for tests, on top of
// internal/harness, which owns the processes.
//
// S3 runs a real S3-compatible server, versitygw, on a loopback port for the
// duration of a test. Install it with .ci/install-versitygw.sh. When it is not
// installed the tests using it are skipped, unless FLOE_REQUIRE_S3=1 (set in
// CI), in which case they fail.
package testenv

import (
	"context"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/floe-catalog/floe/internal/harness"
	"github.com/floe-catalog/floe/internal/storage"
)

// Environment variables read by S3.
const (
	// EnvVersitygw is the path of the versitygw binary to use.
	EnvVersitygw = harness.EnvVersitygw
	// EnvTools is the directory .ci/install-versitygw.sh installs into;
	// default $HOME/.cache/floe-tools.
	EnvTools = harness.EnvTools
	// EnvRequireS3, when "1", turns a missing versitygw binary into a test
	// failure instead of a skip.
	EnvRequireS3 = "FLOE_REQUIRE_S3"
)

// S3Server describes a running versitygw server with one empty bucket. The
// credentials are the server's root account.
type S3Server struct {
	Endpoint        string // http://127.0.0.1:<port>
	Region          string // us-east-1
	AccessKeyID     string
	SecretAccessKey string
	Bucket          string // created empty, unique per call
	// Root is the posix directory holding the buckets; objects are files
	// under Root/<bucket>/.
	Root string
	// LogFile captures the server's stdout and stderr.
	LogFile string
}

// Warehouse returns s3://<bucket>/warehouse.
func (s S3Server) Warehouse() string { return "s3://" + s.Bucket + "/warehouse" }

// StorageConfig is the storage configuration that reaches this server.
func (s S3Server) StorageConfig() storage.Config {
	return storage.Config{
		S3Endpoint: s.Endpoint, S3Region: s.Region, S3AccessKeyID: s.AccessKeyID,
		S3SecretAccessKey: s.SecretAccessKey, S3PathStyle: true,
	}
}

// LogTail returns the last lines of the server's output.
func (s S3Server) LogTail() string {
	if t := harness.LogTail(s.LogFile, 40); t != "" {
		return t
	}
	return "(no output)"
}

// Client returns an S3 client for the server, using path-style addressing
// and sending checksums only where the API requires them.
func (s S3Server) Client() *s3.Client {
	return harness.S3Client(s.Endpoint, s.Region, s.AccessKeyID, s.SecretAccessKey)
}

// S3 starts versitygw with its posix backend on a fresh temporary directory,
// listening on a free 127.0.0.1 port, waits until it serves requests, creates
// a bucket with a unique name and returns the server (harness.StartVersitygw).
// The server is stopped when the test finishes; if the test failed, the tail
// of the server's output is logged.
//
// The binary is $FLOE_VERSITYGW, else ${FLOE_TOOLS:-$HOME/.cache/floe-tools}/versitygw,
// else versitygw on PATH. If none exists the test is skipped, or fails when
// FLOE_REQUIRE_S3=1.
func S3(t testing.TB) S3Server {
	t.Helper()
	bin, err := harness.FindVersitygw()
	if err != nil {
		if os.Getenv(EnvRequireS3) == "1" {
			t.Fatalf("testenv: %v (%s=1; install it with .ci/install-versitygw.sh)", err, EnvRequireS3)
		}
		t.Skipf("testenv: %v; skipping S3 test (install it with .ci/install-versitygw.sh; set %s=1 to fail instead)", err, EnvRequireS3)
	}

	v, err := harness.StartVersitygw(context.Background(), harness.VersitygwConfig{
		Bin: bin, Dir: t.TempDir(), Name: "floe-test", Tool: "testenv",
	})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	srv := S3Server{
		Endpoint:        v.Endpoint,
		Region:          v.Region,
		AccessKeyID:     v.AccessKeyID,
		SecretAccessKey: v.SecretAccessKey,
		Bucket:          v.Bucket,
		Root:            v.Root,
		LogFile:         v.LogFile,
	}
	t.Cleanup(func() {
		if err := v.Stop(); err != nil {
			t.Errorf("testenv: stop versitygw: %v\nserver output:\n%s", err, srv.LogTail())
		}
		if t.Failed() {
			t.Logf("testenv: versitygw output (tail of %s):\n%s", srv.LogFile, srv.LogTail())
		}
	})
	return srv
}
