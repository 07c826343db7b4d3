package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// S3 objects through aws-sdk-go-v2.
type s3Storage struct {
	client      *s3.Client
	batchSize   int
	clientProps map[string]string // see Mux.FileIOConfig
	awsCfg      aws.Config
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
	return &s3Storage{
		client:      client,
		batchSize:   cfg.DeleteBatchSize,
		clientProps: s3ClientProps(cfg, awsCfg.Region),
		awsCfg:      awsCfg,
	}, nil
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
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(l.bucket),
		Key:           aws.String(l.key),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
	})
	if err != nil {
		return objErr("write", uri, err)
	}
	return nil
}

func (s *s3Storage) read(ctx context.Context, uri string, l location) ([]byte, error) {
	if err := requireKey(l); err != nil {
		return nil, objErr("read", uri, err)
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(l.bucket),
		Key:    aws.String(l.key),
	})
	if err != nil {
		if isNoSuchKey(err) {
			err = fmt.Errorf("%w (%w)", ErrNotFound, err)
		}
		return nil, objErr("read", uri, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, objErr("read", uri, err)
	}
	return data, nil
}

// open is read without reading: the body is the caller's to read and close.
func (s *s3Storage) open(ctx context.Context, uri string, l location) (io.ReadCloser, error) {
	if err := requireKey(l); err != nil {
		return nil, objErr("open", uri, err)
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(l.bucket), Key: aws.String(l.key)})
	if err != nil {
		if isNoSuchKey(err) {
			err = fmt.Errorf("%w (%w)", ErrNotFound, err)
		}
		return nil, objErr("open", uri, err)
	}
	return out.Body, nil
}

func (s *s3Storage) exists(ctx context.Context, uri string, l location) (bool, error) {
	if err := requireKey(l); err != nil {
		return false, objErr("exists", uri, err)
	}
	_, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(l.bucket),
		Key:    aws.String(l.key),
	})
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
// failures. Duplicate keys are sent once and share their result.
func (s *s3Storage) delete(ctx context.Context, uris []string, locs []location) []error {
	errs := make([]error, len(uris))
	type bucketKeys struct {
		keys []string         // unique, in first-seen order
		idx  map[string][]int // key -> indexes into uris
	}
	var buckets []string
	byBucket := map[string]*bucketKeys{}
	for i, l := range locs {
		if err := requireKey(l); err != nil {
			errs[i] = objErr("delete", uris[i], err)
			continue
		}
		bk := byBucket[l.bucket]
		if bk == nil {
			bk = &bucketKeys{idx: map[string][]int{}}
			byBucket[l.bucket] = bk
			buckets = append(buckets, l.bucket)
		}
		if _, seen := bk.idx[l.key]; !seen {
			bk.keys = append(bk.keys, l.key)
		}
		bk.idx[l.key] = append(bk.idx[l.key], i)
	}
	for _, bucket := range buckets {
		bk := byBucket[bucket]
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
	out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
		Bucket: aws.String(bucket),
		Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(true)},
	})
	if err != nil {
		return failAll(err)
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
		page, err := p.NextPage(ctx)
		if err != nil {
			return objErr("list", prefix, err)
		}
		for _, obj := range page.Contents {
			if err := fn(l.uriFor(aws.ToString(obj.Key))); err != nil {
				return err
			}
		}
	}
	return nil
}
