package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/floe-catalog/floe/internal/harness"
)

// s3Server is the versitygw server of a run (harness.Versitygw: posix
// backend, a loopback port, one bucket) with the direct S3 access the
// workloads and checkers need. Its client talks to versitygw directly,
// never through the fault proxy: the harness's own S3 traffic (data files,
// listings) is not under test.
type s3Server struct {
	*harness.Versitygw
}

// startS3 starts versitygw under dir (its buckets in dir/s3, its output in
// dir/versitygw.log) and creates the bucket.
func startS3(ctx context.Context, dir string) (*s3Server, error) {
	bin, err := harness.FindVersitygw()
	if err != nil {
		return nil, fmt.Errorf("%w; install it with bash .ci/install-versitygw.sh", err)
	}
	gw, err := harness.StartVersitygw(ctx, harness.VersitygwConfig{
		Bin:  bin,
		Dir:  dir,
		Root: filepath.Join(dir, "s3"),
		Name: "jepsen",
		Tool: "jepsen-lite",
	})
	if err != nil {
		return nil, err
	}
	return &s3Server{Versitygw: gw}, nil
}

// fileIOProps are iceberg-go FileIO properties for direct access.
func (s *s3Server) fileIOProps() map[string]string {
	return map[string]string{
		"s3.endpoint":                 s.Endpoint,
		"s3.region":                   s.Region,
		"s3.access-key-id":            s.AccessKeyID,
		"s3.secret-access-key":        s.SecretAccessKey,
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
		out, err := s.Client().ListObjectsV2(ctx, &s3.ListObjectsV2Input{
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
	out, err := s.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(srcKey)})
	if err != nil {
		return err
	}
	b, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil {
		return err
	}
	_, err = s.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(dstKey), Body: bytes.NewReader(b)})
	return err
}

// exists reports whether the object at uri (s3://bucket/key of this
// server's bucket) exists.
func (s *s3Server) exists(ctx context.Context, uri string) (bool, error) {
	key, ok := strings.CutPrefix(uri, "s3://"+s.Bucket+"/")
	if !ok {
		return false, fmt.Errorf("%s is not in bucket %s", uri, s.Bucket)
	}
	_, err := s.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key)})
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
