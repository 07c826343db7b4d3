package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// s3Server is a versitygw process (posix backend) on a loopback port with
// one bucket. It is found as internal/testenv finds it:
// $FLOE_VERSITYGW, else ${FLOE_TOOLS:-$HOME/.cache/floe-tools}/versitygw,
// else versitygw on PATH; .ci/install-versitygw.sh installs it.
type s3Server struct {
	Endpoint  string
	Region    string
	AccessKey string
	SecretKey string
	Bucket    string
	Root      string
	LogFile   string

	cmd  *exec.Cmd
	done chan struct{}
}

func findVersitygw() (string, error) {
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
		if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
			return bin, nil
		}
	}
	if bin, err := exec.LookPath("versitygw"); err == nil {
		return bin, nil
	}
	return "", errors.New("versitygw not found ($FLOE_VERSITYGW, ${FLOE_TOOLS:-$HOME/.cache/floe-tools}/versitygw, PATH); install it with bash .ci/install-versitygw.sh")
}

// startS3 starts versitygw under dir and creates the bucket. Up to three
// tries: the free port may be taken before the server binds it.
func startS3(ctx context.Context, dir string) (*s3Server, error) {
	bin, err := findVersitygw()
	if err != nil {
		return nil, err
	}
	s := &s3Server{
		Region:    "us-east-1",
		AccessKey: "jepsen-" + randHex(4),
		SecretKey: randHex(20),
		Bucket:    "jepsen-" + randHex(4),
		Root:      filepath.Join(dir, "s3"),
		LogFile:   filepath.Join(dir, "versitygw.log"),
	}
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 {
		if lastErr = s.start(ctx, bin); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		return nil, fmt.Errorf("start versitygw: %w\n%s", lastErr, logTail(s.LogFile, 20))
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := s.client().CreateBucket(cctx, &s3.CreateBucketInput{Bucket: aws.String(s.Bucket)}); err != nil {
		s.stop()
		return nil, fmt.Errorf("create bucket: %w", err)
	}
	return s, nil
}

func (s *s3Server) start(ctx context.Context, bin string) error {
	port, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.Endpoint = "http://" + addr
	logf, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "--port", addr, "--access", s.AccessKey, "--secret", s.SecretKey,
		"--region", s.Region, "--health", "/jepsen-health", "posix", s.Root)
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "VGW_") || strings.HasPrefix(name, "ROOT_") || name == "LOGFILE" || name == "WEBHOOK" {
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	s.cmd, s.done = cmd, done
	hc := &http.Client{Timeout: 2 * time.Second}
	err = poll(ctx, 30*time.Second, func(ctx context.Context) error {
		select {
		case <-done:
			return errors.New("versitygw exited")
		default:
		}
		resp, err := hc.Get(s.Endpoint + "/jepsen-health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("health: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		s.stop()
	}
	return err
}

func (s *s3Server) stop() {
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
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// client talks to versitygw directly, never through the fault proxy: the
// harness's own S3 traffic (data files, listings) is not under test.
func (s *s3Server) client() *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint:               aws.String(s.Endpoint),
		Region:                     s.Region,
		Credentials:                credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		UsePathStyle:               true,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// fileIOProps are iceberg-go FileIO properties for direct access.
func (s *s3Server) fileIOProps() map[string]string {
	return map[string]string{
		"s3.endpoint":                 s.Endpoint,
		"s3.region":                   s.Region,
		"s3.access-key-id":            s.AccessKey,
		"s3.secret-access-key":        s.SecretKey,
		"s3.force-virtual-addressing": "false",
		"s3.path-style-access":        "true",
	}
}

// list returns every key under prefix in the bucket (paginated, bounded to
// 1000 pages).
func (s *s3Server) list(ctx context.Context, prefix string) (map[string]bool, error) {
	keys := map[string]bool{}
	var token *string
	for range 1000 {
		out, err := s.client().ListObjectsV2(ctx, &s3.ListObjectsV2Input{
			Bucket: aws.String(s.Bucket), Prefix: aws.String(prefix), ContinuationToken: token,
		})
		if err != nil {
			return nil, err
		}
		for _, o := range out.Contents {
			keys["s3://"+s.Bucket+"/"+aws.ToString(o.Key)] = true
		}
		if !aws.ToBool(out.IsTruncated) {
			return keys, nil
		}
		token = out.NextContinuationToken
	}
	return nil, errors.New("listing has more than 1000 pages")
}

// copy copies the object at src to dst (both s3://bucket/key of this
// server's bucket), straight through versitygw.
func (s *s3Server) copy(ctx context.Context, src, dst string) error {
	srcKey, ok1 := strings.CutPrefix(src, "s3://"+s.Bucket+"/")
	dstKey, ok2 := strings.CutPrefix(dst, "s3://"+s.Bucket+"/")
	if !ok1 || !ok2 {
		return fmt.Errorf("copy %s to %s: not both in bucket %s", src, dst, s.Bucket)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := s.client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(srcKey)})
	if err != nil {
		return err
	}
	b, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil {
		return err
	}
	_, err = s.client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(dstKey), Body: bytes.NewReader(b)})
	return err
}

// exists reports whether the object at uri (s3://bucket/key of this
// server's bucket) exists.
func (s *s3Server) exists(ctx context.Context, uri string) (bool, error) {
	key, ok := strings.CutPrefix(uri, "s3://"+s.Bucket+"/")
	if !ok {
		return false, fmt.Errorf("%s is not in bucket %s", uri, s.Bucket)
	}
	_, err := s.client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key)})
	if err == nil {
		return true, nil
	}
	var nf *types.NotFound
	var nsk *types.NoSuchKey
	if errors.As(err, &nf) || errors.As(err, &nsk) {
		return false, nil
	}
	return false, err
}

// s3Proxy is an HTTP reverse proxy in front of versitygw that the nodes use
// as their S3 endpoint. While faults are on, each request is delayed by up
// to maxLatency and fails with probability errRate with the 503 SlowDown
// error S3 sends when throttling (the AWS SDK retries it, so a node sees a
// failure only when several tries in a row fail).
//
// The Host header is passed through unchanged, so SigV4 signatures made for
// the proxy's address verify at versitygw.
type s3Proxy struct {
	srv *http.Server
	ln  net.Listener
	rp  *httputil.ReverseProxy

	mu         sync.Mutex
	errRate    float64
	maxLatency time.Duration
	rng        *mrand.Rand

	requests atomic.Int64
	injected atomic.Int64
	delayed  atomic.Int64
}

func startS3Proxy(target string, seed uint64) (*s3Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &s3Proxy{ln: ln, rng: mrand.New(mrand.NewPCG(seed, 0x53))}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host // keep the signed Host
		},
		FlushInterval: -1,
		ErrorLog:      nil,
	}
	p.rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		w.WriteHeader(http.StatusBadGateway)
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *s3Proxy) Endpoint() string { return "http://" + p.ln.Addr().String() }

// set turns faults on (errRate > 0 or maxLatency > 0) or off.
func (p *s3Proxy) set(errRate float64, maxLatency time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errRate, p.maxLatency = errRate, maxLatency
}

func (p *s3Proxy) draw() (fail bool, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.maxLatency > 0 {
		delay = time.Duration(p.rng.Int64N(int64(p.maxLatency)))
	}
	return p.errRate > 0 && p.rng.Float64() < p.errRate, delay
}

func (p *s3Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	fail, delay := p.draw()
	if delay > 0 {
		p.delayed.Add(1)
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	if fail {
		p.injected.Add(1)
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, math.MaxInt32))
		w.Header().Set("Content-Type", "application/xml")
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate. (injected by jepsen-lite)</Message></Error>`)
		return
	}
	p.rp.ServeHTTP(w, r)
}

func (p *s3Proxy) close() {
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		_ = p.srv.Close()
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
