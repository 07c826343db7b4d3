package storage_test

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/floe-catalog/floe/internal/storage"
)

// uriSeeds are URIs of every accepted form and of the forms ParseURI must
// refuse: dot segments, NUL, hosts, percent-encoded dots, other schemes.
var uriSeeds = []string{
	"s3://bucket/key",
	"s3://bucket/a/b/c.json",
	"s3a://bucket/a/b",
	"s3n://bucket/a/b",
	"S3://bucket/a",
	"s3://bucket",
	"s3://bucket/",
	"s3://bucket/dir/",
	"s3://b/a//b",
	"s3://b//lead",
	"s3://b/.hidden/..x/x..",
	"s3://b/a b/%2e%2e/x?y#z",
	"file:///abs/path",
	"file:/abs/path",
	"file://localhost/abs/path",
	"FILE:///abs",
	"file:////abs//path",
	"file:///",
	"/abs/path",
	"/abs//path/",
	"/",
	"/wh/t/%2e%2e/%2E%2E/etc",
	"/wh/t/..%2f..%2fetc",
	"",
	"relative/path",
	"/a/../b",
	"/a/.",
	"file://host/abs",
	"file:///a/../../etc/passwd",
	"s3://",
	"s3:///key",
	"s3://b/..",
	"s3://b/a/./x",
	"s3://b:80/k",
	"s3://b/a\x00b",
	"/a\x00b",
	"gs://b/k",
	"c:/windows",
}

// FuzzParseURI checks that ParseURI never panics and that what it accepts
// is normalised: scheme file or s3; a key free of NUL and of "." and ".."
// segments; for file no bucket and an absolute, clean key; for s3 a valid
// bucket. The canonical spelling of an accepted URI parses to the same
// location, and every accepted URI is within itself and its canonical
// spelling (and the other way round). Any URI with a NUL byte or a "." or
// ".." path segment is refused.
func FuzzParseURI(f *testing.F) {
	for _, s := range uriSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		scheme, bucket, key, err := storage.ParseURI(uri)
		if err != nil {
			if !errors.Is(err, storage.ErrInvalidURI) && !errors.Is(err, storage.ErrUnsupportedScheme) {
				t.Fatalf("ParseURI(%q) failed with an unclassified error: %v", uri, err)
			}
			if storage.IsWithin(uri, uri) {
				t.Fatalf("IsWithin(%q, itself) is true, but ParseURI refuses it: %v", uri, err)
			}
			return
		}
		if strings.IndexByte(uri, 0) >= 0 {
			t.Fatalf("ParseURI(%q) accepted a NUL byte", uri)
		}
		if hasDotSegment(uri) {
			t.Fatalf("ParseURI(%q) accepted a URI with a dot segment", uri)
		}
		if strings.IndexByte(key, 0) >= 0 || hasDotSegment(key) {
			t.Fatalf("ParseURI(%q) returned key %q with NUL or a dot segment", uri, key)
		}
		var canonical string
		switch scheme {
		case storage.SchemeFile:
			if bucket != "" {
				t.Fatalf("ParseURI(%q) returned bucket %q for a file URI", uri, bucket)
			}
			if !strings.HasPrefix(key, "/") || path.Clean(key) != key {
				t.Fatalf("ParseURI(%q) returned file key %q, not an absolute clean path", uri, key)
			}
			canonical = "file://" + key
		case storage.SchemeS3:
			if !validBucket(bucket) {
				t.Fatalf("ParseURI(%q) returned invalid bucket %q", uri, bucket)
			}
			canonical = "s3://" + bucket + "/" + key
		default:
			t.Fatalf("ParseURI(%q) returned scheme %q", uri, scheme)
		}
		s2, b2, k2, err := storage.ParseURI(canonical)
		if err != nil || s2 != scheme || b2 != bucket || k2 != key {
			t.Fatalf("canonical %q of %q parses to (%q, %q, %q, %v), want (%q, %q, %q)",
				canonical, uri, s2, b2, k2, err, scheme, bucket, key)
		}
		if !storage.IsWithin(uri, uri) {
			t.Fatalf("IsWithin(%q, itself) is false", uri)
		}
		if !storage.IsWithin(uri, canonical) || !storage.IsWithin(canonical, uri) {
			t.Fatalf("%q and its canonical spelling %q are not within each other", uri, canonical)
		}
	})
}

// FuzzIsWithin checks that IsWithin never panics and never lets a child
// escape its parent: when IsWithin(parent, child) holds, both parse, they
// name the same scheme and bucket, and the child's key, split into
// segments, starts with all of the parent's segments (a bucket root and the
// file root "/" contain everything). Segments are compared literally, so no
// "..", ".", NUL or percent-encoded dot can climb out. When each is within
// the other they are the same location.
func FuzzIsWithin(f *testing.F) {
	pairs := [][2]string{
		{"s3://b/t1", "s3://b/t1/x"},
		{"s3://b/t1", "s3://b/t10"},
		{"s3://b/t1/", "s3://b/t1"},
		{"s3://b/t1//", "s3://b/t1/x"},
		{"s3a://b/wh", "s3://b/wh/t"},
		{"s3://b", "s3://bb/x"},
		{"s3://b/", "s3://b/x/y"},
		{"s3://b/a", "s3://b/a//x"},
		{"s3://b//a", "s3://b/a/x"},
		{"s3://b/wh", "s3://b/wh/../other"},
		{"s3://b/wh", "s3://b/wh/%2e%2e/other"},
		{"s3://b/wh", "s3://b/wh_x"},
		{"file:/wh", "file:///wh/t"},
		{"file://localhost/wh", "/wh/t"},
		{"/", "/anything/at/all"},
		{"/wh", "/"},
		{"/wh", "/wh//t"},
		{"/wh", "/wh/../etc/passwd"},
		{"/wh", "/wh/%2e%2e/etc/passwd"},
		{"/wh", "/wh/t\x00/../../etc"},
		{"file:///wh", "file:///wh/./x"},
		{"file://host/wh", "file://host/wh/x"},
		{"gs://b/wh", "gs://b/wh/x"},
		{"", "s3://b/x"},
	}
	for _, p := range pairs {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, parent, child string) {
		if !storage.IsWithin(parent, child) {
			return
		}
		ps, pb, pk, perr := storage.ParseURI(parent)
		cs, cb, ck, cerr := storage.ParseURI(child)
		if perr != nil || cerr != nil {
			t.Fatalf("IsWithin(%q, %q) is true, but ParseURI fails: %v, %v", parent, child, perr, cerr)
		}
		if ps != cs || pb != cb {
			t.Fatalf("IsWithin(%q, %q) is true across (%s, %q) and (%s, %q)", parent, child, ps, pb, cs, cb)
		}
		if strings.IndexByte(child, 0) >= 0 || hasDotSegment(child) {
			t.Fatalf("IsWithin(%q, %q) is true for a child with NUL or a dot segment", parent, child)
		}
		pseg, cseg := segments(pk), segments(ck)
		if len(pseg) > len(cseg) || !slices.Equal(pseg, cseg[:len(pseg)]) {
			t.Fatalf("IsWithin(%q, %q) is true, but key %q does not lie under key %q", parent, child, ck, pk)
		}
		if storage.IsWithin(child, parent) && !slices.Equal(pseg, cseg) {
			t.Fatalf("%q and %q are within each other but are different locations", parent, child)
		}
	})
}

// segments splits a key into its path segments, ignoring leading and
// trailing slashes, so that the root is no segments at all.
func segments(key string) []string {
	key = strings.Trim(key, "/")
	if key == "" {
		return nil
	}
	return strings.Split(key, "/")
}

// hasDotSegment reports whether any slash-separated segment of s is "." or "..".
func hasDotSegment(s string) bool {
	for seg := range strings.SplitSeq(s, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// validBucket is the bucket rule ParseURI documents: 1 to 255 characters
// from [A-Za-z0-9._-], not "." or "..".
func validBucket(b string) bool {
	if b == "" || len(b) > 255 || b == "." || b == ".." {
		return false
	}
	for _, c := range []byte(b) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_'
		if !ok {
			return false
		}
	}
	return true
}
