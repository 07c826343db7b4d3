package bench

import (
	"context"
	"fmt"
	"github.com/apache/iceberg-go"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/floe-catalog/floe/internal/harness"
	"github.com/floe-catalog/floe/internal/storage"
)

// S3Server is the versitygw server of item 5 (harness.StartVersitygw) with
// what the driver asks of it besides the process.
type S3Server struct {
	*harness.Versitygw
}

// StartS3 starts versitygw from bin with its data under dir and creates a
// bucket. On error nothing is left running.
func StartS3(ctx context.Context, bin, dir string) (*S3Server, error) {
	v, err := harness.StartVersitygw(ctx, harness.VersitygwConfig{Bin: bin, Dir: dir, Name: "floebench", Tool: "floebench"})
	if err != nil {
		return nil, err
	}
	return &S3Server{Versitygw: v}, nil
}

// ClientProps are the FileIO properties an Iceberg client needs to reach
// the server with its own credentials (floe hands out none by default).
func (s *S3Server) ClientProps() iceberg.Properties {
	return iceberg.Properties{
		"s3.endpoint": s.Endpoint, "s3.region": s.Region, "s3.path-style-access": "true",
		"s3.access-key-id": s.AccessKeyID, "s3.secret-access-key": s.SecretAccessKey,
	}
}

// Storage returns floe's storage layer configured for the server.
func (s *S3Server) Storage() (*storage.Mux, error) {
	return storage.New(storage.Config{
		S3Endpoint: s.Endpoint, S3Region: s.Region, S3AccessKeyID: s.AccessKeyID,
		S3SecretAccessKey: s.SecretAccessKey, S3PathStyle: true,
	})
}

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
