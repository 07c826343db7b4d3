// Package testenv starts external services for tests.
//
// S3 runs a real S3-compatible server, versitygw, on a loopback port for the
// duration of a test. Install it with .ci/install-versitygw.sh. When it is not
// installed the tests using it are skipped, unless FLOE_REQUIRE_S3=1 (set in
// CI), in which case they fail.
package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/floe-catalog/floe/internal/storage"
)

// Environment variables read by S3.
const (
	// EnvVersitygw is the path of the versitygw binary to use.
	EnvVersitygw = "FLOE_VERSITYGW"
	// EnvTools is the directory .ci/install-versitygw.sh installs into;
	// default $HOME/.cache/floe-tools.
	EnvTools = "FLOE_TOOLS"
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
func (s S3Server) LogTail() string { return tail(s.LogFile, 40) }

// Client returns an S3 client for the server, using path-style addressing
// and sending checksums only where the API requires them.
func (s S3Server) Client() *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint:               aws.String(s.Endpoint),
		Region:                     s.Region,
		Credentials:                credentials.NewStaticCredentialsProvider(s.AccessKeyID, s.SecretAccessKey, ""),
		UsePathStyle:               true,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

const (
	startTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
	startTries   = 3 // the free port may be taken before the server binds it
	healthPath   = "/floe-health"
)

// S3 starts versitygw with its posix backend on a fresh temporary directory,
// listening on a free 127.0.0.1 port, waits until it serves requests, creates
// a bucket with a unique name and returns the server. The server is stopped
// when the test finishes; if the test failed, the tail of the server's output
// is logged.
//
// The binary is $FLOE_VERSITYGW, else ${FLOE_TOOLS:-$HOME/.cache/floe-tools}/versitygw,
// else versitygw on PATH. If none exists the test is skipped, or fails when
// FLOE_REQUIRE_S3=1.
func S3(t testing.TB) S3Server {
	t.Helper()
	bin, err := findVersitygw()
	if err != nil {
		if os.Getenv(EnvRequireS3) == "1" {
			t.Fatalf("testenv: %v (%s=1; install it with .ci/install-versitygw.sh)", err, EnvRequireS3)
		}
		t.Skipf("testenv: %v; skipping S3 test (install it with .ci/install-versitygw.sh; set %s=1 to fail instead)", err, EnvRequireS3)
	}

	dir := t.TempDir()
	srv := S3Server{
		Region:          "us-east-1",
		AccessKeyID:     "floe-test-" + randHex(4),
		SecretAccessKey: randHex(20),
		Bucket:          "floe-test-" + randHex(6),
		Root:            filepath.Join(dir, "root"),
		LogFile:         filepath.Join(dir, "versitygw.log"),
	}
	if err := os.Mkdir(srv.Root, 0o755); err != nil {
		t.Fatalf("testenv: %v", err)
	}

	var p *process
	for try := 1; ; try++ {
		p, err = start(bin, &srv)
		if err == nil {
			break
		}
		if try == startTries || !strings.Contains(tail(srv.LogFile, 40), "address already in use") {
			t.Fatalf("testenv: start versitygw: %v\ncommand: %s\nserver output (tail of %s):\n%s",
				err, p.cmdline(), srv.LogFile, srv.LogTail())
		}
	}
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("testenv: stop versitygw: %v\nserver output:\n%s", err, srv.LogTail())
		}
		if t.Failed() {
			t.Logf("testenv: versitygw output (tail of %s):\n%s", srv.LogFile, srv.LogTail())
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if _, err := srv.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(srv.Bucket)}); err != nil {
		t.Fatalf("testenv: create bucket %s: %v\nserver output:\n%s", srv.Bucket, err, srv.LogTail())
	}
	return srv
}

func findVersitygw() (string, error) {
	if bin := os.Getenv(EnvVersitygw); bin != "" {
		if isExecutable(bin) {
			return bin, nil
		}
		return "", fmt.Errorf("%s=%s is not an executable file", EnvVersitygw, bin)
	}
	tools := os.Getenv(EnvTools)
	if tools == "" {
		if home, err := os.UserHomeDir(); err == nil {
			tools = filepath.Join(home, ".cache", "floe-tools")
		}
	}
	var tried []string
	if tools != "" {
		bin := filepath.Join(tools, "versitygw")
		if isExecutable(bin) {
			return bin, nil
		}
		tried = append(tried, bin)
	}
	if bin, err := exec.LookPath("versitygw"); err == nil {
		return bin, nil
	}
	tried = append(tried, "versitygw on PATH")
	return "", fmt.Errorf("versitygw not found (tried %s; or set %s)", strings.Join(tried, ", "), EnvVersitygw)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

type process struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result, valid after done
}

func (p *process) cmdline() string {
	if p == nil || p.cmd == nil {
		return ""
	}
	return strings.Join(p.cmd.Args, " ")
}

// start launches versitygw on a free port, filling in srv.Endpoint, and waits
// until its health endpoint answers. On failure the process is stopped and
// the returned process only describes the command.
func start(bin string, srv *S3Server) (*process, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", port)
	srv.Endpoint = "http://" + addr

	logf, err := os.OpenFile(srv.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// Global options come before the backend command.
	cmd := exec.Command(bin,
		"--port", addr,
		"--access", srv.AccessKeyID,
		"--secret", srv.SecretAccessKey,
		"--region", srv.Region,
		"--health", healthPath,
		"posix", srv.Root,
	)
	cmd.Env = serverEnv()
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	fmt.Fprintf(logf, "### %s\n", strings.Join(cmd.Args, " "))
	p := &process{cmd: cmd, log: logf, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return p, err
	}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()

	if err := p.waitHealthy(srv.Endpoint + healthPath); err != nil {
		_ = p.stop()
		return p, err
	}
	return p, nil
}

func (p *process) waitHealthy(url string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(startTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("versitygw exited before serving: %v", p.err)
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		lastErr = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("versitygw did not become healthy within %v: %v", startTimeout, lastErr)
}

// stop interrupts the server and kills it if it does not exit in time. An
// exit caused by the interrupt is not an error.
func (p *process) stop() error {
	select {
	case <-p.done:
		return nil // exited already; start reports why
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("versitygw did not exit within %v of SIGINT; killed", stopTimeout)
}

// serverEnv is the environment without the variables versitygw reads as
// option defaults, so that the caller's environment cannot change how the
// server runs.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "VGW_"), strings.HasPrefix(name, "ROOT_"),
			name == "LOGFILE", name == "WEBHOOK":
			continue
		}
		env = append(env, kv)
	}
	return env
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	return port, err
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

// tail returns the last n lines of the file at path (at most 16 KiB).
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "(no output)"
		}
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	if len(data) > 16<<10 {
		data = data[len(data)-16<<10:]
	}
	data = bytes.TrimRight(data, "\n")
	lines := bytes.Split(data, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
