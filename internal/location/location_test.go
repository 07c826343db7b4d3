package location_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/location"
)

func TestParseURI(t *testing.T) {
	tests := []struct {
		uri                 string
		scheme, bucket, key string
	}{
		{"s3://bucket/key", "s3", "bucket", "key"},
		{"s3://bucket/a/b/c.json", "s3", "bucket", "a/b/c.json"},
		{"s3a://bucket/a/b", "s3", "bucket", "a/b"},
		{"s3n://bucket/a/b", "s3", "bucket", "a/b"},
		{"S3://bucket/a", "s3", "bucket", "a"},
		{"S3A://bucket/a", "s3", "bucket", "a"},
		{"s3://bucket", "s3", "bucket", ""},
		{"s3://bucket/", "s3", "bucket", ""},
		{"s3://bucket/dir/", "s3", "bucket", "dir/"},
		{"s3://my.bucket-1_x/k", "s3", "my.bucket-1_x", "k"},
		{"s3://b/a//b", "s3", "b", "a//b"},
		{"s3://b/.hidden/..x/x..", "s3", "b", ".hidden/..x/x.."},
		{"s3://b/a b/%2e%2e/x?y#z", "s3", "b", "a b/%2e%2e/x?y#z"}, // literal, no decoding
		{"s3://b/ü/ñ", "s3", "b", "ü/ñ"},
		{"file:///abs/path", "file", "", "/abs/path"},
		{"file:/abs/path", "file", "", "/abs/path"},
		{"file://localhost/abs/path", "file", "", "/abs/path"},
		{"FILE:///abs", "file", "", "/abs"},
		{"file:///abs/dir/", "file", "", "/abs/dir"},
		{"file:////abs//path", "file", "", "/abs/path"},
		{"file:///", "file", "", "/"},
		{"/abs/path", "file", "", "/abs/path"},
		{"/abs//path/", "file", "", "/abs/path"},
		{"/", "file", "", "/"},
		{"/a/.hidden/b..", "file", "", "/a/.hidden/b.."},
	}
	for _, tt := range tests {
		t.Run(tt.uri, func(t *testing.T) {
			scheme, bucket, key, err := location.ParseURI(tt.uri)
			require.NoError(t, err)
			assert.Equal(t, tt.scheme, scheme, "scheme")
			assert.Equal(t, tt.bucket, bucket, "bucket")
			assert.Equal(t, tt.key, key, "key")
		})
	}
}

func TestParseURIErrors(t *testing.T) {
	invalid := []string{
		"",
		"relative/path",
		"./x",
		"../x",
		"x",
		":/x",
		"1s3://b/k",
		"/a/../b",
		"/a/..",
		"/a/./b",
		"/a/.",
		"/..",
		"file://host/abs",
		"file://localhost",
		"file:relative",
		"file:",
		"file:///a/../../etc/passwd",
		"file:///a/./b",
		"s3:/bucket/key",
		"s3:bucket/key",
		"s3://",
		"s3:///key",
		"s3://bu/cket/../x",
		"s3://b/..",
		"s3://b/../x",
		"s3://b/a/..",
		"s3://b/a/./x",
		"s3://b/.",
		"s3://b:80/k",
		"s3://user@b/k",
		"s3://b?x/k",
		"s3://../k",
		"s3://./k",
		"s3://b/a\x00b",
		"/a\x00b",
	}
	for _, uri := range invalid {
		t.Run(uri, func(t *testing.T) {
			_, _, _, err := location.ParseURI(uri)
			require.ErrorIs(t, err, location.ErrInvalidURI)
			assert.NotErrorIs(t, err, location.ErrUnsupportedScheme)
		})
	}

	for _, uri := range []string{"gs://b/k", "abfs://c@a.dfs.core.windows.net/k", "http://host/x", "hdfs://nn/x", "c:/windows"} {
		t.Run(uri, func(t *testing.T) {
			_, _, _, err := location.ParseURI(uri)
			require.ErrorIs(t, err, location.ErrUnsupportedScheme)
			assert.ErrorContains(t, err, uri)
		})
	}
}

func TestIsWithin(t *testing.T) {
	tests := []struct {
		parent, child string
		want          bool
	}{
		// Segment boundaries.
		{"s3://b/t1", "s3://b/t1/x", true},
		{"s3://b/t1", "s3://b/t1/x/y/z.parquet", true},
		{"s3://b/t1", "s3://b/t10", false},
		{"s3://b/t1", "s3://b/t10/x", false},
		{"s3://b/t1", "s3://b/t1.json", false},
		{"s3://b/t1", "s3://b/t", false},
		{"s3://b/wh/db/t1", "s3://b/wh/db/t1-old/x", false},
		{"/wh/t1", "/wh/t10/x", false},
		{"/wh/t1", "/wh/t1/x", true},

		// Equal locations count as within.
		{"s3://b/t1", "s3://b/t1", true},
		{"s3://b/t1/", "s3://b/t1", true},
		{"s3://b/t1", "s3://b/t1/", true},
		{"/wh", "/wh", true},

		// Trailing slashes.
		{"s3://b/t1/", "s3://b/t1/x", true},
		{"s3://b/t1//", "s3://b/t1/x", true},
		{"s3://b/t1/", "s3://b/t10", false},
		{"file:///wh/", "file:///wh/x", true},

		// s3a/s3n are s3.
		{"s3a://b/wh", "s3://b/wh/t", true},
		{"s3://b/wh", "s3n://b/wh/t", true},
		{"S3A://b/wh", "s3://b/wh/t", true},

		// file spellings.
		{"file:/wh", "file:///wh/t", true},
		{"file:///wh", "/wh/t", true},
		{"/wh", "file:/wh/t", true},
		{"file://localhost/wh", "/wh/t", true},
		{"/wh", "/wh//t", true},
		{"/", "/anything/at/all", true},
		{"file:///", "/x", true},
		{"/wh", "/", false},
		{"/wh/t", "/wh", false},

		// Buckets and schemes must match.
		{"s3://b/wh", "s3://c/wh/t", false},
		{"s3://b", "s3://bb/x", false},
		{"s3://b", "s3://b/x", true},
		{"s3://b/", "s3://b/x/y", true},
		{"s3://b", "s3://b", true},
		{"s3://b/wh", "/wh/t", false},
		{"/b/wh", "s3://b/wh/t", false},
		{"s3://b/wh", "gs://b/wh/t", false},

		// Parent is not a prefix of a string, it is a path.
		{"s3://b/wh", "s3://b/wh_x", false},
		{"s3://b/a b", "s3://b/a b/c", true},
		{"s3://b/a", "s3://b/a//x", true},

		// Anything that does not parse is never within.
		{"s3://b/wh", "s3://b/wh/../other", false},
		{"s3://b/wh", "s3://b/wh/x/../../other", false},
		{"s3://b/wh", "s3://b/wh/./x", false},
		{"/wh", "/wh/../etc/passwd", false},
		{"file:///wh", "file:///wh/../x", false},
		{"/wh", "wh/x", false},
		{"s3://b/wh/../wh", "s3://b/wh/x", false},
		{"", "s3://b/x", false},
		{"s3://b/x", "", false},
		{"file://host/wh", "file://host/wh/x", false},
		{"gs://b/wh", "gs://b/wh/x", false},
	}
	for _, tt := range tests {
		t.Run(tt.parent+" > "+tt.child, func(t *testing.T) {
			assert.Equal(t, tt.want, location.IsWithin(tt.parent, tt.child))
		})
	}
}
