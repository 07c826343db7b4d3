package harness

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
	got, err := FindVersitygw()
	require.NoError(t, err)
	assert.Equal(t, onPath, got)

	// Then the tools directory.
	t.Setenv(EnvVersitygw, "")
	got, err = FindVersitygw()
	require.NoError(t, err)
	assert.Equal(t, inTools, got)

	// Then $HOME/.cache/floe-tools.
	t.Setenv(EnvTools, "")
	homeTools := filepath.Join(home, ".cache", "floe-tools")
	require.NoError(t, os.MkdirAll(homeTools, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(homeTools, "versitygw"), []byte("#!/bin/sh\n"), 0o755))
	got, err = FindVersitygw()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(homeTools, "versitygw"), got)

	// Then PATH.
	require.NoError(t, os.Remove(filepath.Join(homeTools, "versitygw")))
	got, err = FindVersitygw()
	require.NoError(t, err)
	assert.Equal(t, onPath, got)

	// Not executable, or nowhere.
	require.NoError(t, os.Chmod(onPath, 0o644))
	_, err = FindVersitygw()
	assert.ErrorContains(t, err, "versitygw not found")
	t.Setenv(EnvVersitygw, onPath)
	_, err = FindVersitygw()
	assert.ErrorContains(t, err, "not an executable")
}

// startVersitygw starts a server for a test, or skips the test when there
// is no versitygw binary (fails instead when FLOE_REQUIRE_S3=1).
func startVersitygw(t *testing.T) *Versitygw {
	t.Helper()
	bin, err := FindVersitygw()
	if err != nil {
		if os.Getenv("FLOE_REQUIRE_S3") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	s, err := StartVersitygw(context.Background(), VersitygwConfig{Bin: bin, Dir: t.TempDir(), Name: "harness-test", Tool: "harness-test"})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Stop()) })
	return s
}

func TestVersitygw(t *testing.T) {
	ctx := context.Background()
	s := startVersitygw(t)
	assert.True(t, strings.HasPrefix(s.Endpoint, "http://127.0.0.1:"), s.Endpoint)
	assert.True(t, strings.HasPrefix(s.Bucket, "harness-test-"), s.Bucket)
	assert.Equal(t, "s3://"+s.Bucket+"/warehouse", s.Warehouse())
	assert.Contains(t, s.NodeArgs(), s.Endpoint)
	assert.Contains(t, s.NodeArgsVia("http://proxy"), "http://proxy")

	put := func(key, body string) {
		_, err := s.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key), Body: bytes.NewReader([]byte(body))})
		require.NoError(t, err)
	}
	put("a/b", "hello")
	data, err := os.ReadFile(filepath.Join(s.Root, s.Bucket, "a", "b"))
	require.NoError(t, err)
	assert.Equal(t, "hello", string(data))

	// The log starts with the marker and the command line.
	assert.Contains(t, s.LogTail(1000), "=== harness-test: start #1 at ")
	assert.Contains(t, s.LogTail(1000), "--port "+strings.TrimPrefix(s.Endpoint, "http://"))

	// Killed and started again: the same port, root and credentials.
	p := s.Process()
	require.NoError(t, p.Kill())
	assert.False(t, p.Running())
	assert.Empty(t, p.TakeCrashes(), "a kill is not a crash")
	require.NoError(t, p.Start())
	hc := NewHTTPClient(1, 2*time.Second)
	require.NoError(t, p.WaitHTTP(ctx, hc, s.Endpoint+versitygwHealthPath, 30*time.Second))
	out, err := s.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("a/b")})
	require.NoError(t, err)
	body, err := io.ReadAll(out.Body)
	require.NoError(t, err)
	require.NoError(t, out.Body.Close())
	assert.Equal(t, "hello", string(body))
	assert.Contains(t, s.LogTail(1000), "start #2")
}

func TestVersitygwStartFailure(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "versitygw")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\necho 'boom: bad flag' >&2\nexit 3\n"), 0o755))
	dir := t.TempDir()
	_, err := StartVersitygw(context.Background(), VersitygwConfig{Bin: bin, Dir: dir})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exited before serving")
	assert.Contains(t, err.Error(), "boom: bad flag")
	assert.Contains(t, err.Error(), "posix "+filepath.Join(dir, "root"))
}
