package bench

import (
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
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/floe-catalog/floe/internal/storage"
)

// S3Server is a versitygw process (posix backend) on a loopback port with
// one bucket, started by the driver for item 5. It mirrors
// internal/testenv.S3, which needs a *testing.T.
type S3Server struct {
	Endpoint        string
	Region          string
	AccessKeyID     string
	SecretAccessKey string
	Bucket          string
	Root            string
	LogFile         string

	cmd  *exec.Cmd
	done chan struct{}
}

// findVersitygw looks where internal/testenv looks: $FLOE_VERSITYGW, then
// ${FLOE_TOOLS:-$HOME/.cache/floe-tools}/versitygw, then PATH.
func findVersitygw(explicit string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if bin := os.Getenv("FLOE_VERSITYGW"); bin != "" {
		return bin, nil
	}
	tools := os.Getenv("FLOE_TOOLS")
	if tools == "" {
		if home, err := os.UserHomeDir(); err == nil {
			tools = filepath.Join(home, ".cache", "floe-tools")
		}
	}
	if tools != "" {
		bin := filepath.Join(tools, "versitygw")
		if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return bin, nil
		}
	}
	if bin, err := exec.LookPath("versitygw"); err == nil {
		return bin, nil
	}
	return "", errors.New("versitygw not found ($FLOE_VERSITYGW, ${FLOE_TOOLS:-~/.cache/floe-tools}/versitygw, PATH); install it with .ci/install-versitygw.sh")
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// StartS3 starts versitygw from bin with its data under dir and creates a
// bucket.
func StartS3(ctx context.Context, bin, dir string) (*S3Server, error) {
	s := &S3Server{
		Region: "us-east-1", AccessKeyID: "floebench-" + randHex(4), SecretAccessKey: randHex(20),
		Bucket: "floebench-" + randHex(4), Root: filepath.Join(dir, "root"), LogFile: filepath.Join(dir, "versitygw.log"),
	}
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	s.Endpoint = "http://" + addr
	logf, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	const health = "/floe-health"
	cmd := exec.Command(bin, "--port", addr, "--access", s.AccessKeyID, "--secret", s.SecretAccessKey,
		"--region", s.Region, "--health", health, "posix", s.Root)
	// Variables versitygw reads as option defaults must not leak in.
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "VGW_") || strings.HasPrefix(name, "ROOT_") || name == "LOGFILE" || name == "WEBHOOK" {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	hc := &http.Client{Timeout: 2 * time.Second}
	err = poll(ctx, 30*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		select {
		case <-s.done:
			return false, errors.New("versitygw exited")
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+health, nil)
		if err != nil {
			return false, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("health: %s", resp.Status)
	})
	if err == nil {
		_, err = s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.Bucket)})
	}
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("versitygw on %s: %w (log %s)", addr, err, s.LogFile)
	}
	return s, nil
}

// Stop interrupts the server, then kills it after exitTimeout.
func (s *S3Server) Stop() {
	if s == nil || s.cmd == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(exitTimeout):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Client returns a path-style S3 client for the server.
func (s *S3Server) Client() *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint:               aws.String(s.Endpoint),
		Region:                     s.Region,
		Credentials:                credentials.NewStaticCredentialsProvider(s.AccessKeyID, s.SecretAccessKey, ""),
		UsePathStyle:               true,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// Storage returns floe's storage layer configured for the server.
func (s *S3Server) Storage() (*storage.Mux, error) {
	return storage.New(storage.Config{
		S3Endpoint: s.Endpoint, S3Region: s.Region, S3AccessKeyID: s.AccessKeyID,
		S3SecretAccessKey: s.SecretAccessKey, S3PathStyle: true,
	})
}

// NodeArgs are the floe flags for a warehouse in the server's bucket.
func (s *S3Server) NodeArgs() []string {
	return []string{"--s3-endpoint", s.Endpoint, "--s3-region", s.Region, "--s3-access-key-id", s.AccessKeyID,
		"--s3-secret-access-key", s.SecretAccessKey, "--s3-path-style"}
}

// Warehouse is s3://<bucket>/warehouse.
func (s *S3Server) Warehouse() string { return "s3://" + s.Bucket + "/warehouse" }

// Count returns the number of objects under prefix (a key prefix, no
// bucket), listing at most maxPages pages.
func (s *S3Server) Count(ctx context.Context, prefix string) (int, error) {
	const maxPages = 10_000
	cl := s.Client()
	n := 0
	var token *string
	for range maxPages {
		out, err := cl.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(s.Bucket), Prefix: aws.String(prefix), ContinuationToken: token})
		if err != nil {
			return n, err
		}
		n += len(out.Contents)
		if out.IsTruncated == nil || !*out.IsTruncated {
			return n, nil
		}
		token = out.NextContinuationToken
	}
	return n, fmt.Errorf("more than %d pages under %s", maxPages, prefix)
}

// deleteLoop deletes keys with DeleteObjects, 1000 keys per request, one
// request at a time: the raw baseline of purge throughput.
func (s *S3Server) deleteLoop(ctx context.Context, keys []string) error {
	cl := s.Client()
	for i := 0; i < len(keys); i += 1000 {
		batch := keys[i:min(i+1000, len(keys))]
		objs := make([]types.ObjectIdentifier, len(batch))
		for j, k := range batch {
			objs[j] = types.ObjectIdentifier{Key: aws.String(k)}
		}
		out, err := cl.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: aws.String(s.Bucket), Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return err
		}
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			return fmt.Errorf("DeleteObjects: %d errors, first %s: %s", len(out.Errors), aws.ToString(e.Key), aws.ToString(e.Message))
		}
	}
	return nil
}
