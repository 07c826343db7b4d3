package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

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
// bucket). A prefix ending in "/" on a server whose directory is known is
// counted on disk (countFiles); any other is listed with ListObjectsV2.
func (s *S3Server) Count(ctx context.Context, prefix string) (int, error) {
	if s.Root != "" && strings.HasSuffix(prefix, "/") {
		return s.countFiles(ctx, prefix)
	}
	return s.list(ctx, prefix)
}

// countFiles counts the regular files under Root/bucket/prefix, the files
// the posix backend keeps objects in: the objects under that prefix. It
// exists because versitygw re-reads a whole directory for every
// ListObjectsV2 page, so listing 500K objects of one directory takes
// minutes (quadratic in the directory's size), where one walk of it takes
// about a second. Names starting with ".sgw" (the backend's own work
// directories) are skipped; a prefix with no directory holds no object.
func (s *S3Server) countFiles(ctx context.Context, prefix string) (int, error) {
	root := filepath.Join(s.Root, s.Bucket, filepath.FromSlash(strings.TrimSuffix(prefix, "/")))
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path == root {
				return fs.SkipAll
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".sgw") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n, err
}

// list counts the objects under prefix with ListObjectsV2, at most
// maxPages pages.
func (s *S3Server) list(ctx context.Context, prefix string) (int, error) {
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

// putObjects writes a placeholder object at each uri with PutObject
// through floe's storage layer, putWorkers at a time: how item 5 builds its
// tables.
func (s *S3Server) putObjects(ctx context.Context, uris []string) error {
	objects, err := s.Storage()
	if err != nil {
		return err
	}
	return parallel(ctx, len(uris), putWorkers, func(ctx context.Context, i int) error {
		return objects.Write(ctx, uris[i], []byte(dataFileContent))
	})
}

// bulkWorkers write placeholder files into the server's directory.
const bulkWorkers = 4

// bulkWriteObjects writes a placeholder object at each uri (s3://bucket/key
// of this server) by creating the file the posix backend keeps it in,
// Root/bucket/key, without going through S3: about ten times faster than
// PutObject on a shared 2-CPU machine, and the server lists and deletes
// such files like objects it wrote itself (the purge deletes them with
// DeleteObjects as usual). Falls back to putObjects when the server's
// directory is unknown.
func (s *S3Server) bulkWriteObjects(ctx context.Context, uris []string) error {
	if s.Root == "" {
		return s.putObjects(ctx, uris)
	}
	var mu sync.Mutex
	dirs := map[string]bool{}
	return parallel(ctx, len(uris), bulkWorkers, func(ctx context.Context, i int) error {
		rest, ok := strings.CutPrefix(uris[i], "s3://"+s.Bucket+"/")
		if !ok || rest == "" {
			return fmt.Errorf("%s is not an object of bucket %s", uris[i], s.Bucket)
		}
		path := filepath.Join(s.Root, s.Bucket, filepath.FromSlash(rest))
		dir := filepath.Dir(path)
		mu.Lock()
		made := dirs[dir]
		mu.Unlock()
		if !made {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			mu.Lock()
			dirs[dir] = true
			mu.Unlock()
		}
		return os.WriteFile(path, []byte(dataFileContent), 0o644)
	})
}
