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

func TestFindVersitygw(t *testing.T) {
	dir := t.TempDir()
	tools := filepath.Join(dir, "tools")
	require.NoError(t, os.Mkdir(tools, 0o755))
	inTools := filepath.Join(tools, "versitygw")
	require.NoError(t, os.WriteFile(inTools, []byte("#!/bin/sh\n"), 0o755))
	pathDir := filepath.Join(dir, "path")
	require.NoError(t, os.Mkdir(pathDir, 0o755))
	onPath := filepath.Join(pathDir, "versitygw")
	require.NoError(t, os.WriteFile(onPath, []byte("#!/bin/sh\n"), 0o755))
	home := filepath.Join(dir, "home")
	t.Setenv("HOME", home)
	t.Setenv("PATH", pathDir)

	// Explicit binary first.
	t.Setenv(EnvVersitygw, onPath)
	t.Setenv(EnvTools, tools)
	got, err := findVersitygw()
	require.NoError(t, err)
	assert.Equal(t, onPath, got)

	// Then the tools directory.
	t.Setenv(EnvVersitygw, "")
	got, err = findVersitygw()
	require.NoError(t, err)
	assert.Equal(t, inTools, got)

	// Then $HOME/.cache/floe-tools.
	t.Setenv(EnvTools, "")
	homeTools := filepath.Join(home, ".cache", "floe-tools")
	require.NoError(t, os.MkdirAll(homeTools, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(homeTools, "versitygw"), []byte("#!/bin/sh\n"), 0o755))
	got, err = findVersitygw()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(homeTools, "versitygw"), got)

	// Then PATH.
	require.NoError(t, os.Remove(filepath.Join(homeTools, "versitygw")))
	got, err = findVersitygw()
	require.NoError(t, err)
	assert.Equal(t, onPath, got)

	// Not executable, or nowhere.
	require.NoError(t, os.Chmod(onPath, 0o644))
	_, err = findVersitygw()
	assert.ErrorContains(t, err, "versitygw not found")
	t.Setenv(EnvVersitygw, onPath)
	_, err = findVersitygw()
	assert.ErrorContains(t, err, "not an executable")
}

func TestTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	assert.Equal(t, "(no output)", tail(p, 3))
	var b strings.Builder
	for i := range 10 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	assert.Equal(t, "line 7\nline 8\nline 9", tail(p, 3))
	assert.Equal(t, strings.TrimSuffix(b.String(), "\n"), tail(p, 100))
}
