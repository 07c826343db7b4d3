package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestS3(t *testing.T) {
	ctx := context.Background()
	srv := S3(t)

	assert.True(t, strings.HasPrefix(srv.Endpoint, "http://127.0.0.1:"), srv.Endpoint)
	assert.Equal(t, "us-east-1", srv.Region)
	assert.NotEmpty(t, srv.AccessKeyID)
	assert.NotEmpty(t, srv.SecretAccessKey)
	assert.Equal(t, "s3://"+srv.Bucket+"/warehouse", srv.Warehouse())

	c := srv.Client()
	_, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(srv.Bucket)})
	require.NoError(t, err)
	list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket)})
	require.NoError(t, err)
	assert.Empty(t, list.Contents, "the bucket starts empty")

	_, err = c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(srv.Bucket),
		Key:    aws.String("warehouse/a/b.json"),
		Body:   bytes.NewReader([]byte("hello")),
	})
	require.NoError(t, err)
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String("warehouse/a/b.json")})
	require.NoError(t, err)
	body, err := io.ReadAll(out.Body)
	require.NoError(t, err)
	require.NoError(t, out.Body.Close())
	assert.Equal(t, "hello", string(body))

	// The posix backend stores objects as files under Root/<bucket>.
	data, err := os.ReadFile(filepath.Join(srv.Root, srv.Bucket, "warehouse", "a", "b.json"))
	require.NoError(t, err)
	assert.Equal(t, "hello", string(data))

	// The server's output is captured.
	assert.Contains(t, srv.LogTail(), "--port "+strings.TrimPrefix(srv.Endpoint, "http://"))

	// Wrong credentials are refused.
	bad := srv
	bad.SecretAccessKey = "wrong"
	_, err = bad.Client().HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(srv.Bucket)})
	require.Error(t, err)
}

func TestS3Independent(t *testing.T) {
	a, b := S3(t), S3(t)
	assert.NotEqual(t, a.Endpoint, b.Endpoint)
	assert.NotEqual(t, a.Bucket, b.Bucket)
	assert.NotEqual(t, a.Root, b.Root)
}

func TestS3StopsOnCleanup(t *testing.T) {
	var addr string
	t.Run("server", func(t *testing.T) {
		srv := S3(t)
		addr = strings.TrimPrefix(srv.Endpoint, "http://")
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		c.Close()
	})
	require.NotEmpty(t, addr)
	_, err := net.DialTimeout("tcp", addr, time.Second)
	assert.Error(t, err, "server still listening after cleanup")
}

// fakeTB records Skip and Fatal instead of ending the real test.
type fakeTB struct {
	testing.TB // nil: calling anything not overridden panics
	real       *testing.T
	skipped    string
	fatal      string
	cleanups   []func()
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) TempDir() string       { return f.real.TempDir() }
func (f *fakeTB) Cleanup(fn func())     { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Failed() bool          { return f.fatal != "" }
func (f *fakeTB) Logf(string, ...any)   {}
func (f *fakeTB) Errorf(string, ...any) {}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runS3 calls S3 with a fakeTB and reports what it did.
func runS3(t *testing.T) *fakeTB {
	f := &fakeTB{real: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		S3(f)
	}()
	<-done
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	return f
}

func TestS3MissingBinary(t *testing.T) {
	t.Setenv(EnvVersitygw, filepath.Join(t.TempDir(), "no-such-versitygw"))

	t.Setenv(EnvRequireS3, "")
	f := runS3(t)
	assert.Contains(t, f.skipped, "no-such-versitygw")
	assert.Contains(t, f.skipped, "install-versitygw.sh")
	assert.Empty(t, f.fatal)

	t.Setenv(EnvRequireS3, "1")
	f = runS3(t)
	assert.Empty(t, f.skipped)
	assert.Contains(t, f.fatal, "no-such-versitygw")
	assert.Contains(t, f.fatal, EnvRequireS3+"=1")
}

func TestS3StartFailureShowsOutput(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "versitygw")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\necho 'boom: bad flag' >&2\nexit 3\n"), 0o755))
	t.Setenv(EnvVersitygw, bin)
	f := runS3(t)
	assert.Contains(t, f.fatal, "exited before serving")
	assert.Contains(t, f.fatal, "boom: bad flag")
	assert.Contains(t, f.fatal, "posix")
}
