package storage_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/storage"
)

// fakeS3 is gofakes3 behind a handler that records requests and injects
// DeleteObjects failures for keys containing "denied" (AccessDenied),
// "nosuchkey" (a NoSuchKey error, which means deleted) or "mangled" (an error
// for a key that was not requested), and fails whole DeleteObjects requests
// for bucket "broken".
type fakeS3 struct {
	backend *s3mem.Backend
	faker   http.Handler

	mu           sync.Mutex
	deleteSizes  []int    // keys per DeleteObjects request
	deleteBucket []string // bucket per DeleteObjects request
	putHeaders   []http.Header
	delHeaders   []http.Header
}

type deleteRequest struct {
	Quiet   bool `xml:"Quiet"`
	Objects []struct {
		Key string `xml:"Key"`
	} `xml:"Object"`
}

type deleteError struct {
	Key     string `xml:"Key"`
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

type deleteResult struct {
	XMLName xml.Name      `xml:"http://s3.amazonaws.com/doc/2006-03-01/ DeleteResult"`
	Errors  []deleteError `xml:"Error"`
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	bucket, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if r.Method == http.MethodPut && r.URL.Query().Get("x-id") == "PutObject" {
		f.mu.Lock()
		f.putHeaders = append(f.putHeaders, r.Header.Clone())
		f.mu.Unlock()
	}
	if r.Method != http.MethodPost || !r.URL.Query().Has("delete") {
		f.faker.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req deleteRequest
	if err := xml.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.deleteSizes = append(f.deleteSizes, len(req.Objects))
	f.deleteBucket = append(f.deleteBucket, bucket)
	f.delHeaders = append(f.delHeaders, r.Header.Clone())
	f.mu.Unlock()
	if !req.Quiet {
		http.Error(w, "expected quiet mode", http.StatusBadRequest)
		return
	}
	if bucket == "broken" {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>no way</Message></Error>`)
		return
	}

	var res deleteResult
	var ok []string
	for _, o := range req.Objects {
		switch {
		case strings.Contains(o.Key, "denied"):
			res.Errors = append(res.Errors, deleteError{o.Key, "AccessDenied", "Access Denied"})
		case strings.Contains(o.Key, "nosuchkey"):
			res.Errors = append(res.Errors, deleteError{o.Key, "NoSuchKey", "The specified key does not exist."})
		case strings.Contains(o.Key, "mangled"):
			res.Errors = append(res.Errors, deleteError{o.Key + "%2F", "InternalError", "oops"})
		default:
			ok = append(ok, o.Key)
		}
	}
	if len(res.Errors) == 0 {
		r.Body = io.NopCloser(bytes.NewReader(body))
		f.faker.ServeHTTP(w, r)
		return
	}
	if len(ok) > 0 {
		if _, err := f.backend.DeleteMulti(bucket, ok...); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "application/xml")
	_ = xml.NewEncoder(w).Encode(res)
}

// newFakeS3 serves buckets "bucket", "other" and "broken" from memory and
// returns a Mux for them.
func newFakeS3(t *testing.T, batch int, opts ...func(*storage.Config)) (*storage.Mux, *fakeS3) {
	t.Helper()
	backend := s3mem.New()
	for _, b := range []string{"bucket", "other", "broken"} {
		require.NoError(t, backend.CreateBucket(b))
	}
	f := &fakeS3{backend: backend, faker: gofakes3.New(backend).Server()}
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	cfg := storage.Config{
		S3Endpoint:        ts.URL,
		S3Region:          "us-east-1",
		S3AccessKeyID:     "key",
		S3SecretAccessKey: "secret",
		S3PathStyle:       true,
		DeleteBatchSize:   batch,
	}
	for _, o := range opts {
		o(&cfg)
	}
	m, err := storage.New(cfg)
	require.NoError(t, err)
	return m, f
}

func TestS3Contract(t *testing.T) {
	m, _ := newFakeS3(t, 0)
	t.Run("s3", func(t *testing.T) { testContract(t, m, "s3://bucket/wh") })
	t.Run("s3a", func(t *testing.T) { testContract(t, m, "s3a://bucket/wh-a") })
	t.Run("SmallBatches", func(t *testing.T) {
		m, _ := newFakeS3(t, 3)
		testContract(t, m, "s3://bucket/wh")
	})
}

func TestS3Checksums(t *testing.T) {
	ctx := context.Background()
	m, f := newFakeS3(t, 0)
	require.NoError(t, m.Write(ctx, "s3://bucket/x", []byte("x")))
	_, err := m.Delete(ctx, []string{"s3://bucket/x"})
	require.NoError(t, err)

	// PutObject carries no flexible checksum (RequestChecksumCalculation
	// WhenRequired); DeleteObjects carries one because the API requires it.
	require.Len(t, f.putHeaders, 1)
	for name := range f.putHeaders[0] {
		assert.False(t, strings.HasPrefix(strings.ToLower(name), "x-amz-checksum-"), name)
		assert.NotEqual(t, "x-amz-sdk-checksum-algorithm", strings.ToLower(name))
	}
	require.Len(t, f.delHeaders, 1)
	hasChecksum := f.delHeaders[0].Get("Content-MD5") != ""
	for name := range f.delHeaders[0] {
		if strings.HasPrefix(strings.ToLower(name), "x-amz-checksum-") {
			hasChecksum = true
		}
	}
	assert.True(t, hasChecksum, "DeleteObjects without a checksum: %v", f.delHeaders[0])
}

func TestS3DeleteBatching(t *testing.T) {
	ctx := context.Background()
	m, f := newFakeS3(t, 10)
	var uris []string
	for i := range 25 {
		uris = append(uris, fmt.Sprintf("s3://bucket/t/%02d", i))
	}
	for i := range 12 {
		uris = append(uris, fmt.Sprintf("s3a://other/t/%02d", i))
	}
	writeAll(t, m, uris)
	// Interleave the buckets and repeat some keys.
	req := []string{uris[30], uris[0], uris[31], uris[1], uris[0], "s3n://other/t/00"}
	req = append(req, uris...)

	n, err := m.Delete(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, len(req), n)
	// Buckets in order of first appearance, keys deduplicated.
	assert.Equal(t, []int{10, 2, 10, 10, 5}, f.deleteSizes)
	assert.Equal(t, []string{"other", "other", "bucket", "bucket", "bucket"}, f.deleteBucket)
	assert.Empty(t, listAll(t, m, "s3://bucket/"))
	assert.Empty(t, listAll(t, m, "s3://other/"))
}

func TestS3DeletePerKeyErrors(t *testing.T) {
	ctx := context.Background()
	m, _ := newFakeS3(t, 4)
	ok := []string{"s3://bucket/t/a", "s3://bucket/t/b", "s3://bucket/t/c"}
	denied := []string{"s3://bucket/t/denied-1", "s3a://bucket/t/denied-2"}
	writeAll(t, m, append(append([]string{}, ok...), denied...))

	req := append(append([]string{}, ok...), denied...)
	req = append(req, "s3://bucket/t/nosuchkey", denied[0])
	n, err := m.Delete(ctx, req)
	require.Error(t, err)
	assert.Equal(t, len(ok)+1, n, "ok keys and the NoSuchKey key count as deleted")
	joined := err.(interface{ Unwrap() []error }).Unwrap()
	require.Len(t, joined, 3, "denied-1 twice, denied-2 once")
	for i, want := range []string{denied[0], denied[1], denied[0]} {
		var oe *storage.ObjectError
		require.ErrorAs(t, joined[i], &oe)
		assert.Equal(t, want, oe.URI)
		assert.Equal(t, "delete", oe.Op)
		assert.ErrorContains(t, oe, "AccessDenied")
	}
	assert.Equal(t, []string{"s3://bucket/t/denied-1", "s3://bucket/t/denied-2"}, listAll(t, m, "s3://bucket/t/"))
}

func TestS3DeleteUnrecognisedErrorFailsBatch(t *testing.T) {
	ctx := context.Background()
	m, _ := newFakeS3(t, 2)
	uris := []string{"s3://bucket/a", "s3://bucket/mangled", "s3://bucket/c"}
	writeAll(t, m, uris)
	n, err := m.Delete(ctx, uris)
	// The first batch (a, mangled) cannot be attributed, the second (c) is fine.
	assert.Equal(t, 1, n)
	require.Error(t, err)
	assert.ErrorContains(t, err, "s3://bucket/a:")
	assert.ErrorContains(t, err, "s3://bucket/mangled:")
	assert.NotContains(t, err.Error(), "s3://bucket/c:")
}

func TestS3DeleteRequestFailure(t *testing.T) {
	ctx := context.Background()
	m, f := newFakeS3(t, 0)
	writeAll(t, m, []string{"s3://bucket/keep-going"})
	n, err := m.Delete(ctx, []string{"s3://broken/x", "s3://bucket/keep-going", "s3://broken/y"})
	assert.Equal(t, 1, n)
	require.Error(t, err)
	assert.ErrorContains(t, err, "s3://broken/x")
	assert.ErrorContains(t, err, "s3://broken/y")
	assert.ErrorContains(t, err, "AccessDenied")
	assert.Len(t, f.deleteSizes, 2, "one request per bucket, no retry of a 403")
}

func TestS3ObjectKeyRequired(t *testing.T) {
	ctx := context.Background()
	m, _ := newFakeS3(t, 0)
	for _, uri := range []string{"s3://bucket", "s3://bucket/", "s3://bucket/dir/"} {
		require.ErrorIs(t, m.Write(ctx, uri, []byte("x")), storage.ErrInvalidURI, uri)
		_, err := m.Read(ctx, uri)
		require.ErrorIs(t, err, storage.ErrInvalidURI, uri)
		_, err = m.Exists(ctx, uri)
		require.ErrorIs(t, err, storage.ErrInvalidURI, uri)
		n, err := m.Delete(ctx, []string{uri})
		if uri == "s3://bucket/dir/" {
			// A key ending in '/' is an object to S3 (a directory
			// marker): a delete of it is sent.
			require.NoError(t, err, uri)
			assert.Equal(t, 1, n)
			continue
		}
		require.ErrorIs(t, err, storage.ErrInvalidURI, uri)
		assert.Zero(t, n)
	}
	// The bucket root is a valid List prefix.
	writeAll(t, m, []string{"s3://bucket/x"})
	assert.Equal(t, []string{"s3://bucket/x"}, listAll(t, m, "s3://bucket"))
}

func TestS3ListPagination(t *testing.T) {
	m, _ := newFakeS3(t, 0)
	var uris []string
	for i := range 2100 { // more than one 1000-key page
		uris = append(uris, fmt.Sprintf("s3://bucket/p/%05d", i))
	}
	writeAll(t, m, uris)
	assert.Equal(t, uris, listAll(t, m, "s3://bucket/p/"))
}

func TestS3MissingBucket(t *testing.T) {
	ctx := context.Background()
	m, _ := newFakeS3(t, 0)
	_, err := m.Read(ctx, "s3://nobucket/x")
	require.Error(t, err)
	assert.NotErrorIs(t, err, storage.ErrNotFound, "a missing bucket is a failure, not a missing object")
	assert.Error(t, m.Write(ctx, "s3://nobucket/x", []byte("x")))
	assert.Error(t, m.List(ctx, "s3://nobucket/", func(string) error { return nil }))
}

// stalledS3 answers nothing until released: every request blocks, except
// a GET of "slow-body", which gets its headers and the first bytes of its
// body, then stalls.
func stalledS3(t *testing.T, timeout time.Duration) *storage.Mux {
	t.Helper()
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/slow-body") {
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("first bytes"))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); ts.Close() })
	m, err := storage.New(storage.Config{
		S3Endpoint: ts.URL, S3Region: "us-east-1", S3AccessKeyID: "key", S3SecretAccessKey: "secret",
		S3PathStyle: true, S3RequestTimeout: timeout,
	})
	require.NoError(t, err)
	return m
}

// A stalled S3 server fails each call with ErrTimeout instead of holding
// it (and the catalog request or purge batch behind it) forever.
func TestS3StalledServerTimesOut(t *testing.T) {
	ctx := context.Background()
	m := stalledS3(t, 300*time.Millisecond)
	calls := map[string]func() error{
		"write":                   func() error { return m.Write(ctx, "s3://bucket/x", []byte("x")) },
		"read":                    func() error { _, err := m.Read(ctx, "s3://bucket/x"); return err },
		"open":                    func() error { _, err := m.Open(ctx, "s3://bucket/x"); return err },
		"exists":                  func() error { _, err := m.Exists(ctx, "s3://bucket/x"); return err },
		"list":                    func() error { return m.List(ctx, "s3://bucket/", func(string) error { return nil }) },
		"delete":                  func() error { _, err := m.Delete(ctx, []string{"s3://bucket/x"}); return err },
		"read a body that stalls": func() error { _, err := m.Read(ctx, "s3://bucket/slow-body"); return err },
		"stream a body that stalls": func() error {
			body, err := m.Open(ctx, "s3://bucket/slow-body")
			if err != nil {
				return fmt.Errorf("open should answer once the headers came: %w", err)
			}
			defer body.Close()
			_, err = io.ReadAll(body)
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- call() }()
			select {
			case err := <-done:
				require.Error(t, err)
				assert.ErrorIs(t, err, storage.ErrTimeout)
			case <-time.After(time.Minute):
				t.Fatal("the call is still waiting for the stalled server")
			}
		})
	}
}

// A caller that gives up is not a timeout, and a reader that pauses
// between reads of a body is not cut off.
func TestS3TimeoutIsTheServersNotTheCallers(t *testing.T) {
	m, _ := newFakeS3(t, 0, func(c *storage.Config) { c.S3RequestTimeout = 200 * time.Millisecond })
	ctx := context.Background()
	big := bytes.Repeat([]byte("x"), 64<<10)
	require.NoError(t, m.Write(ctx, "s3://bucket/big", big))

	body, err := m.Open(ctx, "s3://bucket/big")
	require.NoError(t, err)
	first := make([]byte, 10)
	_, err = io.ReadFull(body, first)
	require.NoError(t, err)
	time.Sleep(600 * time.Millisecond) // the reader pauses, longer than the timeout
	rest, err := io.ReadAll(body)
	require.NoError(t, err, "a pause between reads is the reader's, not a stall")
	require.NoError(t, body.Close())
	assert.Equal(t, big, append(first, rest...))

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = m.Read(cctx, "s3://bucket/big")
	require.Error(t, err)
	assert.NotErrorIs(t, err, storage.ErrTimeout)

	stalled := stalledS3(t, 10*time.Second)
	cctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err = stalled.Write(cctx, "s3://bucket/x", []byte("x"))
	require.Error(t, err)
	assert.NotErrorIs(t, err, storage.ErrTimeout, "the caller's deadline, not the server's")
}

// A server nobody listens at: the call fails with ErrUnreachable (after the
// SDK's own retries), which the catalog answers 503 like a stall.
func TestS3UnreachableServer(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	url := ts.URL
	ts.Close()
	m, err := storage.New(storage.Config{
		S3Endpoint: url, S3Region: "us-east-1", S3AccessKeyID: "key", S3SecretAccessKey: "secret", S3PathStyle: true,
	})
	require.NoError(t, err)
	err = m.Write(context.Background(), "s3://bucket/x", []byte("x"))
	require.Error(t, err)
	assert.ErrorIs(t, err, storage.ErrUnreachable)
	assert.NotErrorIs(t, err, storage.ErrTimeout)
	_, err = m.Read(context.Background(), "s3://bucket/x")
	assert.ErrorIs(t, err, storage.ErrUnreachable)
}

// A server that keeps refusing requests as too many (SlowDown, 503) fails
// the call with ErrThrottled once the SDK's retries are spent, which the
// catalog answers 503 (nothing was done) rather than 500; another error
// answer is not throttling.
func TestS3ThrottledServer(t *testing.T) {
	var codeV atomic.Value
	codeV.Store("SlowDown")
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := codeV.Load().(string)
		w.Header().Set("Content-Type", "application/xml")
		status := http.StatusServiceUnavailable
		if code == "AccessDenied" {
			status = http.StatusForbidden
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>slow down</Message></Error>`, code)
	}))
	t.Cleanup(ts.Close)
	m, err := storage.New(storage.Config{
		S3Endpoint: ts.URL, S3Region: "us-east-1", S3AccessKeyID: "key", S3SecretAccessKey: "secret", S3PathStyle: true,
	})
	require.NoError(t, err)
	err = m.Write(context.Background(), "s3://bucket/x", []byte("x"))
	assert.ErrorIs(t, err, storage.ErrThrottled)
	_, err = m.Read(context.Background(), "s3://bucket/x")
	assert.ErrorIs(t, err, storage.ErrThrottled)
	codeV.Store("AccessDenied")
	_, err = m.Read(context.Background(), "s3://bucket/x")
	require.Error(t, err)
	assert.NotErrorIs(t, err, storage.ErrThrottled)
}

// A server that fails requests itself (InternalError 500, a body cut
// short) fails the call with ErrServerFailed once the SDK's retries are
// spent, which the catalog answers 503 (nothing was done); a 501 or a 4xx
// is not such a failure.
func TestS3ServerFailure(t *testing.T) {
	var mode atomic.Value
	mode.Store("500")
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch m := mode.Load().(string); m {
		case "short":
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("only some"))
		default:
			status := map[string]int{"500": 500, "501": 501, "403": 403}[m]
			code := map[string]string{"500": "InternalError", "501": "NotImplemented", "403": "AccessDenied"}[m]
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(status)
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>m</Message></Error>`, code)
		}
	}))
	t.Cleanup(ts.Close)
	m, err := storage.New(storage.Config{
		S3Endpoint: ts.URL, S3Region: "us-east-1", S3AccessKeyID: "key", S3SecretAccessKey: "secret", S3PathStyle: true,
	})
	require.NoError(t, err)
	err = m.Write(context.Background(), "s3://bucket/x", []byte("x"))
	assert.ErrorIs(t, err, storage.ErrServerFailed)
	_, err = m.Read(context.Background(), "s3://bucket/x")
	assert.ErrorIs(t, err, storage.ErrServerFailed)
	mode.Store("short")
	_, err = m.Read(context.Background(), "s3://bucket/x")
	assert.ErrorIs(t, err, storage.ErrServerFailed)
	for _, m2 := range []string{"501", "403"} {
		mode.Store(m2)
		_, err = m.Read(context.Background(), "s3://bucket/x")
		require.Error(t, err, m2)
		assert.NotErrorIs(t, err, storage.ErrServerFailed, m2)
	}
}
