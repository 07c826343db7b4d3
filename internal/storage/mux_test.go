package storage_test

import (
	"context"
	"maps"
	"testing"

	iceio "github.com/apache/iceberg-go/io"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/storage"
)

// isolateAWS keeps the host's AWS environment and config files out of a test.
func isolateAWS(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	for _, v := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"} {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_CONFIG_FILE", dir+"/config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", dir+"/credentials")
}

func TestNewValidatesConfig(t *testing.T) {
	isolateAWS(t)
	for name, cfg := range map[string]storage.Config{
		"batch too big":        {DeleteBatchSize: 1001},
		"negative batch":       {DeleteBatchSize: -1},
		"negative concurrency": {LocalDeleteConcurrency: -1},
		"access key only":      {S3AccessKeyID: "k"},
		"secret only":          {S3SecretAccessKey: "s"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := storage.New(cfg)
			assert.Error(t, err)
		})
	}
	for name, cfg := range map[string]storage.Config{
		"zero":      {},
		"max batch": {DeleteBatchSize: 1000, LocalDeleteConcurrency: 64},
		"min batch": {DeleteBatchSize: 1, LocalDeleteConcurrency: 1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := storage.New(cfg)
			assert.NoError(t, err)
		})
	}
}

func TestUnsupportedScheme(t *testing.T) {
	isolateAWS(t)
	ctx := context.Background()
	m, err := storage.New(storage.Config{})
	require.NoError(t, err)
	const uri = "gs://bucket/key"
	require.ErrorIs(t, m.Write(ctx, uri, nil), storage.ErrUnsupportedScheme)
	_, err = m.Read(ctx, uri)
	require.ErrorIs(t, err, storage.ErrUnsupportedScheme)
	_, err = m.Exists(ctx, uri)
	require.ErrorIs(t, err, storage.ErrUnsupportedScheme)
	require.ErrorIs(t, m.List(ctx, uri, func(string) error { return nil }), storage.ErrUnsupportedScheme)
	n, err := m.Delete(ctx, []string{uri})
	require.ErrorIs(t, err, storage.ErrUnsupportedScheme)
	assert.Zero(t, n)
}

func TestClientConfig(t *testing.T) {
	isolateAWS(t)

	m, err := storage.New(storage.Config{
		S3Endpoint:        "http://127.0.0.1:7070",
		S3Region:          "eu-west-3",
		S3AccessKeyID:     "AKID",
		S3SecretAccessKey: "SECRET",
		S3PathStyle:       true,
	})
	require.NoError(t, err)
	want := map[string]string{
		"s3.endpoint":                 "http://127.0.0.1:7070",
		"s3.region":                   "eu-west-3",
		"client.region":               "eu-west-3",
		"s3.access-key-id":            "AKID",
		"s3.secret-access-key":        "SECRET",
		"s3.force-virtual-addressing": "false",
		"s3.path-style-access":        "true",
	}
	for _, uri := range []string{"s3://bucket/wh/db/t", "s3a://other/x", "s3n://b", "s3://b/"} {
		assert.Equal(t, want, m.FileIOConfig(uri), uri)
		public := maps.Clone(want)
		delete(public, "s3.access-key-id")
		delete(public, "s3.secret-access-key")
		assert.Equal(t, public, m.ClientConfig(uri), "%s: a client never gets the node's keys", uri)
	}
	// The keys are the ones iceberg-go reads.
	for _, k := range []string{iceio.S3EndpointURL, iceio.S3Region, iceio.S3AccessKeyID, iceio.S3SecretAccessKey, iceio.S3ForceVirtualAddressing} {
		assert.Contains(t, want, k)
	}

	// Each call returns a fresh map.
	cc := m.ClientConfig("s3://bucket/x")
	cc["s3.region"] = "changed"
	assert.Equal(t, "eu-west-3", m.ClientConfig("s3://bucket/x")["s3.region"])

	// Local files and unusable URIs need no properties.
	for _, uri := range []string{"file:///tmp/wh", "/tmp/wh", "gs://b/x", "relative", "s3://b/../x"} {
		cc := m.ClientConfig(uri)
		assert.NotNil(t, cc, uri)
		assert.Empty(t, cc, uri)
		assert.Empty(t, m.FileIOConfig(uri), uri)
	}
}

func TestClientConfigDefaults(t *testing.T) {
	isolateAWS(t)
	m, err := storage.New(storage.Config{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"s3.region":                   "us-east-1",
		"client.region":               "us-east-1",
		"s3.force-virtual-addressing": "true",
		"s3.path-style-access":        "false",
	}, m.ClientConfig("s3://bucket/x"), "no endpoint and no keys: the client uses its own credentials")

	t.Setenv("AWS_REGION", "ap-south-1")
	m, err = storage.New(storage.Config{S3Endpoint: "https://s3.example.com"})
	require.NoError(t, err)
	cc := m.ClientConfig("s3://bucket/x")
	assert.Equal(t, "ap-south-1", cc["s3.region"], "region from the environment")
	assert.Equal(t, "https://s3.example.com", cc["s3.endpoint"])
	assert.Equal(t, "true", cc["s3.force-virtual-addressing"], "iceberg-go would default to path style with an endpoint")
}
