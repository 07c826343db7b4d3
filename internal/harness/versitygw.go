package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Environment variables FindVersitygw reads.
const (
	// EnvVersitygw is the path of the versitygw binary to use.
	EnvVersitygw = "FLOE_VERSITYGW"
	// EnvTools is the directory .ci/install-versitygw.sh installs into;
	// default $HOME/.cache/floe-tools.
	EnvTools = "FLOE_TOOLS"
)

// Bounds on starting versitygw.
const (
	versitygwStartTimeout = 30 * time.Second // until it answers, and to create the bucket
	versitygwStartTries   = 3                // the free port may be taken before it binds
	versitygwHealthPath   = "/floe-health"
)

// FindVersitygw returns the versitygw binary: $FLOE_VERSITYGW, which must
// then be an executable file, else ${FLOE_TOOLS:-$HOME/.cache/floe-tools}/versitygw,
// else versitygw on PATH. The error says where it looked; install the
// binary with .ci/install-versitygw.sh.
func FindVersitygw() (string, error) {
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

// VersitygwConfig describes a versitygw server for StartVersitygw.
type VersitygwConfig struct {
	// Bin is the versitygw binary; "": FindVersitygw.
	Bin string
	// Dir holds the server's log, Dir/versitygw.log, and, unless Root is
	// set, its posix root directory Dir/root.
	Dir string
	// Root is the posix backend's directory; default Dir/root. It is
	// created; objects are files under Root/<bucket>/.
	Root string
	// Name prefixes the access key ID and the bucket name ("floebench",
	// "floe-test"); default "floe".
	Name string
	// Tool names the starter in the log's marker line (see Process.Start).
	Tool string
	// AccessKeyID, SecretAccessKey and Bucket fix the root account and the
	// bucket, for clients whose settings are fixed (a third-party test
	// suite); each "" means random.
	AccessKeyID, SecretAccessKey, Bucket string
}

// Versitygw is a running versitygw server (posix backend) on a free
// 127.0.0.1 port with one empty bucket. The credentials are the server's
// root account, random per server.
type Versitygw struct {
	Endpoint        string // http://127.0.0.1:<port>
	Region          string // us-east-1
	AccessKeyID     string
	SecretAccessKey string
	Bucket          string // created empty, random per server
	Root            string // the posix directory holding the buckets
	LogFile         string // the server's stdout and stderr

	proc *Process
}

// StartVersitygw starts versitygw, waits until its health endpoint answers
// (at most 30s), and creates the bucket. Up to three tries, each on a new
// free port, when the port was taken before the server bound it. Its
// environment lacks the variables versitygw reads as option defaults
// (VGW_*, ROOT_*, LOGFILE, WEBHOOK), so the caller's environment cannot
// change how it runs. On error nothing is left running, and the error
// holds the command line and the tail of the server's output.
func StartVersitygw(ctx context.Context, cfg VersitygwConfig) (*Versitygw, error) {
	bin := cfg.Bin
	if bin == "" {
		var err error
		if bin, err = FindVersitygw(); err != nil {
			return nil, err
		}
	}
	if cfg.Name == "" {
		cfg.Name = "floe"
	}
	s := &Versitygw{
		Region:          "us-east-1",
		AccessKeyID:     cfg.Name + "-" + randHex(4),
		SecretAccessKey: randHex(20),
		Bucket:          cfg.Name + "-" + randHex(6),
		Root:            cfg.Root,
		LogFile:         filepath.Join(cfg.Dir, "versitygw.log"),
	}
	if cfg.AccessKeyID != "" {
		s.AccessKeyID = cfg.AccessKeyID
	}
	if cfg.SecretAccessKey != "" {
		s.SecretAccessKey = cfg.SecretAccessKey
	}
	if cfg.Bucket != "" {
		s.Bucket = cfg.Bucket
	}
	if s.Root == "" {
		s.Root = filepath.Join(cfg.Dir, "root")
	}
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		return nil, err
	}
	var err error
	for try := 1; ; try++ {
		from := LogSize(s.LogFile)
		if err = s.start(ctx, bin, cfg.Tool); err == nil {
			break
		}
		if s.proc == nil {
			return nil, fmt.Errorf("start versitygw: %w", err)
		}
		if try == versitygwStartTries || !LogContains(s.LogFile, from, "address already in use") {
			return nil, fmt.Errorf("start versitygw: %w\ncommand: %s\noutput (tail of %s):\n%s",
				err, s.proc.CommandLine(), s.LogFile, s.LogTail(20))
		}
	}
	cctx, cancel := context.WithTimeout(ctx, versitygwStartTimeout)
	defer cancel()
	if _, err := s.Client().CreateBucket(cctx, &s3.CreateBucketInput{Bucket: aws.String(s.Bucket)}); err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("versitygw: create bucket %s: %w\noutput (tail of %s):\n%s", s.Bucket, err, s.LogFile, s.LogTail(20))
	}
	return s, nil
}

// start runs one try: a free port, the process, the wait for its health
// endpoint. On error the process is stopped.
func (s *Versitygw) start(ctx context.Context, bin, tool string) error {
	s.proc = nil
	addr, err := FreeAddr("127.0.0.1")
	if err != nil {
		return err
	}
	s.Endpoint = "http://" + addr
	// Global options come before the backend command.
	s.proc = NewProcess(ProcessConfig{
		Name: "versitygw",
		Bin:  bin,
		Args: []string{"--port", addr, "--access", s.AccessKeyID, "--secret", s.SecretAccessKey,
			"--region", s.Region, "--health", versitygwHealthPath, "posix", s.Root},
		Env:        EnvWithout("VGW_", "ROOT_", "LOGFILE=", "WEBHOOK="),
		LogPath:    s.LogFile,
		Tool:       tool,
		StopSignal: syscall.SIGINT,
	})
	if err := s.proc.Start(); err != nil {
		return err
	}
	hc := NewHTTPClient(1, 2*time.Second)
	defer hc.CloseIdleConnections()
	if err := s.proc.WaitHTTP(ctx, hc, s.Endpoint+versitygwHealthPath, versitygwStartTimeout); err != nil {
		_ = s.proc.Stop()
		return err
	}
	return nil
}

// Stop interrupts the server (SIGINT) and kills it if it has not exited
// within ExitTimeout; the error says it had to be killed. Safe on a nil
// server and after an earlier Stop.
func (s *Versitygw) Stop() error {
	if s == nil || s.proc == nil {
		return nil
	}
	return s.proc.Stop()
}

// Process is the server's process, for tools that inject faults into it
// (Pause, Kill, then Process.Start runs the same command line, on the same
// port and root, again).
func (s *Versitygw) Process() *Process { return s.proc }

// CommandLine is the server's command line.
func (s *Versitygw) CommandLine() string { return s.proc.CommandLine() }

// LogTail returns up to the last n lines of the server's output.
func (s *Versitygw) LogTail(n int) string { return LogTail(s.LogFile, n) }

// Client returns an S3 client for the server (see S3Client).
func (s *Versitygw) Client() *s3.Client {
	return S3Client(s.Endpoint, s.Region, s.AccessKeyID, s.SecretAccessKey)
}

// S3Client returns an S3 client for endpoint with static credentials,
// path-style addressing, and checksums only where the API requires them
// (versitygw, like many S3-compatible servers, rejects some others).
func S3Client(endpoint, region, accessKeyID, secretAccessKey string) *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint:               aws.String(endpoint),
		Region:                     region,
		Credentials:                credentials.NewStaticCredentialsProvider(accessKeyID, secretAccessKey, ""),
		UsePathStyle:               true,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// Warehouse is s3://<bucket>/warehouse.
func (s *Versitygw) Warehouse() string { return "s3://" + s.Bucket + "/warehouse" }

// NodeArgs are the floe flags that make a node use this server.
func (s *Versitygw) NodeArgs() []string { return s.NodeArgsVia(s.Endpoint) }

// NodeArgsVia is NodeArgs with another S3 endpoint, for a tool that puts a
// proxy in front of the server: requests signed for the proxy's address
// verify at the server as long as the proxy passes the Host header on.
func (s *Versitygw) NodeArgsVia(endpoint string) []string {
	return []string{"--s3-endpoint", endpoint, "--s3-region", s.Region, "--s3-access-key-id", s.AccessKeyID,
		"--s3-secret-access-key", s.SecretAccessKey, "--s3-path-style"}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}
