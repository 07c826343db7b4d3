package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// S3 objects through aws-sdk-go-v2.
type s3Storage struct {
	client      *s3.Client
	batchSize   int
	clientProps map[string]string // see Mux.FileIOConfig
	awsCfg      aws.Config
	timeout     time.Duration // Config.S3RequestTimeout
}

func newS3Storage(cfg Config) (*s3Storage, error) {
	if (cfg.S3AccessKeyID == "") != (cfg.S3SecretAccessKey == "") {
		return nil, errors.New("storage: set both S3AccessKeyID and S3SecretAccessKey, or neither")
	}
	var opts []func(*config.LoadOptions) error
	if cfg.S3Region != "" {
		opts = append(opts, config.WithRegion(cfg.S3Region))
	}
	if cfg.S3AccessKeyID != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.S3AccessKeyID, cfg.S3SecretAccessKey, "")))
	}
	// LoadDefaultConfig reads the environment and shared config files only;
	// it does not make network calls.
	awsCfg, err := config.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("storage: load AWS config: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = defaultS3Region
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.S3Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.S3Endpoint)
		}
		o.UsePathStyle = cfg.S3PathStyle
		// Send and verify checksums only where the S3 API requires them.
		// Since early 2025 the SDK otherwise adds CRC32 checksums (and
		// x-amz-checksum/trailer headers) to PutObject and expects them on
		// GetObject, which many S3-compatible servers reject or omit.
		// DeleteObjects always carries a checksum, as the API requires one.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		// Without this the SDK logs a warning for every GetObject whose
		// response carries no checksum; this package does not log.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	timeout := cfg.S3RequestTimeout
	if timeout <= 0 {
		timeout = defaultS3RequestTimeout
	}
	return &s3Storage{
		client:      client,
		batchSize:   cfg.DeleteBatchSize,
		clientProps: s3ClientProps(cfg, awsCfg.Region),
		awsCfg:      awsCfg,
		timeout:     timeout,
	}, nil
}

// errStalled is the cause a call's context is cancelled with when the
// call outlived s.timeout.
var errStalled = errors.New("stalled")

// bounded is ctx with s.timeout as the deadline of one call.
func (s *s3Storage) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, s.timeout, errStalled)
}

// timedOut marks err with ErrTimeout when cctx ended because the call
// outlived s.timeout, not because the caller gave up, and with
// ErrUnreachable when the server could not be reached at all.
func (s *s3Storage) timedOut(cctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(context.Cause(cctx), errStalled):
		return fmt.Errorf("%w (no progress for %s): %w", ErrTimeout, s.timeout, err)
	case unreachable(err):
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	case throttled(err):
		return fmt.Errorf("%w: %w", ErrThrottled, err)
	case serverFailed(err):
		return fmt.Errorf("%w: %w", ErrServerFailed, err)
	}
	return err
}

// serverFailed reports whether err is the server failing the call itself
// after the SDK's own retries: a 5xx answer (InternalError, 500, 502, 504;
// not 501 NotImplemented, which a retry does not change), or a response
// body cut short.
func serverFailed(err error) bool {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		code := re.HTTPStatusCode()
		return code >= 500 && code != http.StatusNotImplemented
	}
	return false
}

// throttled reports whether err is the server's refusal to take more
// requests now (SlowDown, 503), which the SDK's own retries did not
// outlast.
func throttled(err error) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode() {
	case "SlowDown", "ServiceUnavailable", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests", "RequestThrottled":
		return true
	}
	return false
}

// unreachable reports whether err says no connection to the server could
// be made or kept: refused, reset, no route. A name that does not resolve
// is left out: more often a mistyped endpoint than a passing fault.
func unreachable(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

func requireKey(l location) error {
	if l.key == "" || l.key[len(l.key)-1] == '/' {
		return fmt.Errorf("%w: no object key", ErrInvalidURI)
	}
	return nil
}

func (s *s3Storage) write(ctx context.Context, uri string, l location, data []byte) error {
	if err := requireKey(l); err != nil {
		return objErr("write", uri, err)
	}
	cctx, cancel := s.bounded(ctx)
	defer cancel()
	_, err := s.client.PutObject(cctx, &s3.PutObjectInput{
		Bucket:        aws.String(l.bucket),
		Key:           aws.String(l.key),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
	})
	if err != nil {
		return objErr("write", uri, s.timedOut(cctx, err))
	}
	return nil
}

func (s *s3Storage) read(ctx context.Context, uri string, l location) ([]byte, error) {
	body, err := s.get(ctx, "read", uri, l)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	data, err := io.ReadAll(io.LimitReader(body, MaxReadBytes+1))
	if err != nil {
		return nil, err // an ObjectError already (watchedBody.Read)
	}
	if len(data) > MaxReadBytes {
		return nil, objErr("read", uri, fmt.Errorf("%w: over %d bytes", ErrTooLarge, MaxReadBytes))
	}
	return data, nil
}

// open is read without reading: the body is the caller's to read and close.
func (s *s3Storage) open(ctx context.Context, uri string, l location) (io.ReadCloser, error) {
	return s.get(ctx, "open", uri, l)
}

// get sends a GetObject that must answer within s.timeout, and returns its
// body, each Read of which must deliver within s.timeout too: a stalled
// server fails the read with ErrTimeout, while a caller that reads slowly
// (a purge streaming a large manifest) is never cut off.
func (s *s3Storage) get(ctx context.Context, op, uri string, l location) (io.ReadCloser, error) {
	if err := requireKey(l); err != nil {
		return nil, objErr(op, uri, err)
	}
	cctx, cancel := context.WithCancelCause(ctx)
	timer := time.AfterFunc(s.timeout, func() { cancel(errStalled) })
	out, err := s.client.GetObject(cctx, &s3.GetObjectInput{Bucket: aws.String(l.bucket), Key: aws.String(l.key)})
	timer.Stop()
	if err != nil {
		err = s.timedOut(cctx, err)
		cancel(nil)
		if isNoSuchKey(err) {
			err = fmt.Errorf("%w (%w)", ErrNotFound, err)
		}
		return nil, objErr(op, uri, err)
	}
	return &watchedBody{s: s, op: op, uri: uri, body: out.Body, ctx: cctx, cancel: cancel, timer: timer}, nil
}

// watchedBody is a GetObject body whose every Read must return within
// s.timeout, else the request is cancelled.
type watchedBody struct {
	s       *s3Storage
	op, uri string
	body    io.ReadCloser
	ctx     context.Context
	cancel  context.CancelCauseFunc
	mu      sync.Mutex // Reset and Stop of timer
	timer   *time.Timer
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	b.timer.Reset(b.s.timeout)
	b.mu.Unlock()
	n, err := b.body.Read(p)
	b.mu.Lock()
	b.timer.Stop()
	b.mu.Unlock()
	if err != nil && err != io.EOF {
		err = objErr(b.op, b.uri, b.s.timedOut(b.ctx, err))
	}
	return n, err
}

func (b *watchedBody) Close() error {
	b.mu.Lock()
	b.timer.Stop()
	b.mu.Unlock()
	err := b.body.Close()
	b.cancel(nil)
	return err
}

func (s *s3Storage) exists(ctx context.Context, uri string, l location) (bool, error) {
	if err := requireKey(l); err != nil {
		return false, objErr("exists", uri, err)
	}
	cctx, cancel := s.bounded(ctx)
	defer cancel()
	_, err := s.client.HeadObject(cctx, &s3.HeadObjectInput{
		Bucket: aws.String(l.bucket),
		Key:    aws.String(l.key),
	})
	err = s.timedOut(cctx, err)
	switch {
	case err == nil:
		return true, nil
	case isNoSuchKey(err):
		return false, nil
	default:
		return false, objErr("exists", uri, err)
	}
}

// isNoSuchKey reports whether err says the object does not exist. A missing
// bucket is not a missing object: it is reported as a failure. HEAD responses
// have no body, so for HeadObject any 404 counts as a missing key.
func isNoSuchKey(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return true
		case "NoSuchBucket":
			return false
		}
	}
	var re *awshttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound && api == nil
}

// delete groups the keys by bucket and removes them with DeleteObjects in
// batches of s.batchSize, in quiet mode so that the response lists only the
// failures. Duplicate keys are sent once and share their result. A key that
// an XML document cannot carry unchanged (see xmlSafe) is deleted on its
// own with DeleteObject, which names it in the request's path: in a
// DeleteObjects body the SDK would silently write U+FFFD in its place and
// so name, and delete, another object.
func (s *s3Storage) delete(ctx context.Context, uris []string, locs []location) []error {
	errs := make([]error, len(uris))
	type bucketKeys struct {
		keys []string         // unique, in first-seen order
		idx  map[string][]int // key -> indexes into uris
		lone []string         // unique keys that are not xmlSafe
	}
	var buckets []string
	byBucket := map[string]*bucketKeys{}
	for i, l := range locs {
		// A key ending in '/' is an object like any other to S3 (a
		// "directory marker"): deleted, not refused, unlike a write of
		// one. Only the bucket itself is no object.
		if l.key == "" {
			errs[i] = objErr("delete", uris[i], fmt.Errorf("%w: no object key", ErrInvalidURI))
			continue
		}
		bk := byBucket[l.bucket]
		if bk == nil {
			bk = &bucketKeys{idx: map[string][]int{}}
			byBucket[l.bucket] = bk
			buckets = append(buckets, l.bucket)
		}
		if _, seen := bk.idx[l.key]; !seen {
			if xmlSafe(l.key) {
				bk.keys = append(bk.keys, l.key)
			} else {
				bk.lone = append(bk.lone, l.key)
			}
		}
		bk.idx[l.key] = append(bk.idx[l.key], i)
	}
	for _, bucket := range buckets {
		bk := byBucket[bucket]
		// One request each, loneDeletes at a time: a batch of them must
		// finish within the purge fence's window as a DeleteObjects would.
		var wg sync.WaitGroup
		sem := make(chan struct{}, loneDeletes)
		for _, key := range bk.lone {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if err := s.deleteOne(ctx, bucket, key); err != nil {
					for _, i := range bk.idx[key] { // each index belongs to one key
						errs[i] = objErr("delete", uris[i], err)
					}
				}
			})
		}
		wg.Wait()
		for start := 0; start < len(bk.keys); start += s.batchSize {
			batch := bk.keys[start:min(start+s.batchSize, len(bk.keys))]
			for key, err := range s.deleteBatch(ctx, bucket, batch) {
				for _, i := range bk.idx[key] {
					errs[i] = objErr("delete", uris[i], err)
				}
			}
		}
	}
	return errs
}

// loneDeletes bounds the DeleteObject calls one delete has in flight for
// keys XML cannot carry.
const loneDeletes = 32

// xmlSafe reports whether key is valid UTF-8 made only of characters an
// XML 1.0 document can hold, so that it reaches the server unchanged in a
// DeleteObjects body.
func xmlSafe(key string) bool {
	return utf8.ValidString(key) && !strings.ContainsFunc(key, NotXMLChar)
}

// NotXMLChar reports whether r is outside XML 1.0's Char production. S3's
// XML requests and listings cannot carry such a character in an object's
// key: aws-sdk-go-v2 writes U+FFFD in its place, naming another object.
func NotXMLChar(r rune) bool {
	return !(r == 0x09 || r == 0x0A || r == 0x0D ||
		r >= 0x20 && r <= 0xD7FF ||
		r >= 0xE000 && r <= 0xFFFD ||
		r >= 0x10000 && r <= 0x10FFFF)
}

// deleteOne deletes key from bucket with DeleteObject; a key already gone
// is no failure.
func (s *s3Storage) deleteOne(ctx context.Context, bucket, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cctx, cancel := s.bounded(ctx)
	defer cancel()
	_, err := s.client.DeleteObject(cctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err = s.timedOut(cctx, err); err != nil && !isNoSuchKey(err) {
		return err
	}
	return nil
}

// deleteBatch deletes keys from bucket with one DeleteObjects request and
// returns the error for each key that may still exist.
func (s *s3Storage) deleteBatch(ctx context.Context, bucket string, keys []string) map[string]error {
	failAll := func(err error) map[string]error {
		m := make(map[string]error, len(keys))
		for _, k := range keys {
			m[k] = err
		}
		return m
	}
	if err := ctx.Err(); err != nil {
		return failAll(err)
	}
	objs := make([]types.ObjectIdentifier, len(keys))
	for i, k := range keys {
		objs[i] = types.ObjectIdentifier{Key: aws.String(k)}
	}
	cctx, cancel := s.bounded(ctx)
	defer cancel()
	out, err := s.client.DeleteObjects(cctx, &s3.DeleteObjectsInput{
		Bucket: aws.String(bucket),
		Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(true)},
	})
	if err != nil {
		return failAll(s.timedOut(cctx, err))
	}
	failed := map[string]error{}
	inBatch := make(map[string]bool, len(keys))
	for _, k := range keys {
		inBatch[k] = true
	}
	var unknown []string
	for _, e := range out.Errors {
		code, key := aws.ToString(e.Code), aws.ToString(e.Key)
		if code == "NoSuchKey" {
			continue // already gone
		}
		if !inBatch[key] {
			unknown = append(unknown, key)
			continue
		}
		failed[key] = fmt.Errorf("%s: %s", code, aws.ToString(e.Message))
	}
	if len(unknown) > 0 {
		// The server reported failures for keys we did not send (for example
		// encoded differently). We cannot tell which of ours they are, so we
		// claim none of this batch as deleted.
		err := fmt.Errorf("DeleteObjects reported errors for unrequested keys %q", unknown)
		for _, k := range keys {
			if failed[k] == nil {
				failed[k] = err
			}
		}
	}
	return failed
}

func (s *s3Storage) list(ctx context.Context, prefix string, l location, fn func(uri string) error) error {
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(l.bucket),
		Prefix: aws.String(l.key),
	})
	for p.HasMorePages() {
		cctx, cancel := s.bounded(ctx)
		page, err := p.NextPage(cctx)
		err = s.timedOut(cctx, err)
		cancel()
		if err != nil {
			return objErr("list", prefix, err)
		}
		for _, obj := range page.Contents {
			key := aws.ToString(obj.Key)
			// A key the listing's XML could not carry comes back with
			// U+FFFD in place of what it held (see xmlSafe), naming
			// another object, or none: refuse the listing rather than
			// pass such a key on. (A key that truly holds U+FFFD is
			// refused too; S3's url encoding-type, which would carry
			// it, is decoded differently by S3-compatible servers.)
			if !strings.HasPrefix(key, l.key) || strings.ContainsRune(key, utf8.RuneError) {
				return objErr("list", prefix, fmt.Errorf("the server listed the key %q, which may not be the object's key: a character in it may have been replaced by U+FFFD", key))
			}
			if err := fn(l.uriFor(key)); err != nil {
				return err
			}
		}
	}
	return nil
}
