package storage

import (
	"fmt"
	"path"
	"strings"
)

// Normalised scheme names returned by ParseURI.
const (
	SchemeFile = "file"
	SchemeS3   = "s3"
)

// location is a parsed URI. scheme is normalised (s3a/s3n become s3); raw
// keeps the scheme as the caller spelled it so that URIs handed back to the
// caller (List) use the same spelling.
type location struct {
	scheme string // SchemeFile or SchemeS3
	raw    string // scheme as written, lower-cased; "" for a bare path
	bucket string // s3 only
	key    string // s3: object key without leading slash; file: absolute, cleaned path
}

// uriFor returns the URI of key k in l's bucket, spelled with l's raw scheme.
func (l location) uriFor(k string) string {
	switch {
	case l.scheme == SchemeS3:
		return l.raw + "://" + l.bucket + "/" + k
	case l.raw == "":
		return k
	default:
		return "file://" + k
	}
}

// ParseURI splits uri into its normalised scheme, bucket and key.
//
// Accepted forms:
//
//	s3://bucket/key      scheme "s3"; s3a:// and s3n:// are accepted and reported as "s3"
//	file:///abs/path     scheme "file", bucket "", key "/abs/path"
//	file:/abs/path       the same
//	file://localhost/p   the same (no other host is accepted)
//	/abs/path            a bare absolute path is a file URI
//
// Schemes are case-insensitive. The rest of the URI is taken literally: there
// is no percent-decoding, no query and no fragment. For s3 the key has no
// leading slash and may be empty (the bucket root); a trailing slash is kept.
// For file the key is the cleaned absolute path (repeated slashes collapsed,
// trailing slash removed).
//
// ParseURI fails, with an error wrapping ErrInvalidURI, on an empty URI, a
// relative path, a file URI with a host, an s3 URI without a valid bucket, a
// NUL byte, or any "." or ".." path segment. It fails with an error wrapping
// ErrUnsupportedScheme on any other scheme.
func ParseURI(uri string) (scheme, bucket, key string, err error) {
	l, err := parse(uri)
	if err != nil {
		return "", "", "", err
	}
	return l.scheme, l.bucket, l.key, nil
}

func parse(uri string) (location, error) {
	bad := func(format string, args ...any) (location, error) {
		return location{}, fmt.Errorf("%w %q: %s", ErrInvalidURI, uri, fmt.Sprintf(format, args...))
	}
	if uri == "" {
		return bad("empty")
	}
	if strings.IndexByte(uri, 0) >= 0 {
		return bad("contains a NUL byte")
	}
	if strings.HasPrefix(uri, "/") {
		p, err := cleanAbs(uri)
		if err != nil {
			return bad("%v", err)
		}
		return location{scheme: SchemeFile, key: p}, nil
	}

	i := strings.IndexByte(uri, ':')
	if i <= 0 || !validScheme(uri[:i]) {
		return bad("not an absolute path or a URI with a scheme")
	}
	raw := strings.ToLower(uri[:i])
	rest := uri[i+1:]

	switch raw {
	case "file":
		var p string
		switch {
		case strings.HasPrefix(rest, "//"):
			hostAndPath := rest[2:]
			j := strings.IndexByte(hostAndPath, '/')
			if j < 0 {
				return bad("file URI without a path")
			}
			if host := hostAndPath[:j]; host != "" && !strings.EqualFold(host, "localhost") {
				return bad("file URI with host %q", host)
			}
			p = hostAndPath[j:]
		case strings.HasPrefix(rest, "/"):
			p = rest
		default:
			return bad("file URI with a relative path")
		}
		p, err := cleanAbs(p)
		if err != nil {
			return bad("%v", err)
		}
		return location{scheme: SchemeFile, raw: raw, key: p}, nil

	case "s3", "s3a", "s3n":
		if !strings.HasPrefix(rest, "//") {
			return bad("s3 URI must look like s3://bucket/key")
		}
		rest = rest[2:]
		bucket, key, _ := strings.Cut(rest, "/")
		if !validBucket(bucket) {
			return bad("invalid bucket name %q", bucket)
		}
		if err := checkSegments(key); err != nil {
			return bad("%v", err)
		}
		return location{scheme: SchemeS3, raw: raw, bucket: bucket, key: key}, nil

	default:
		return location{}, fmt.Errorf("%w: %q in %q", ErrUnsupportedScheme, raw, uri)
	}
}

// cleanAbs validates an absolute path and returns it with repeated slashes
// collapsed and any trailing slash removed ("/" stays "/").
func cleanAbs(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("path %q is not absolute", p)
	}
	if err := checkSegments(p); err != nil {
		return "", err
	}
	// With "." and ".." excluded, Clean only collapses slashes.
	return path.Clean(p), nil
}

// checkSegments rejects "." and ".." segments anywhere in a slash-separated
// path, including a trailing one.
func checkSegments(p string) error {
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("path segment %q is not allowed", seg)
		}
	}
	return nil
}

// validScheme reports whether s is an RFC 3986 scheme.
func validScheme(s string) bool {
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// validBucket accepts S3 bucket names, including legacy ones with upper-case
// letters and underscores: 1 to 255 characters from [A-Za-z0-9._-], not "."
// or "..".
func validBucket(b string) bool {
	if b == "" || len(b) > 255 || b == "." || b == ".." {
		return false
	}
	for _, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.' || c == '-' || c == '_':
		default:
			return false
		}
	}
	return true
}

// IsWithin reports whether child names parent itself or an object below it,
// comparing whole path segments: s3://b/t1 contains s3://b/t1/x but not
// s3://b/t10. Both URIs are normalised first: s3a:// and s3n:// count as s3://;
// file:///x, file:/x, file://localhost/x and /x are the same; trailing slashes
// are ignored. A bucket root (s3://b) contains every key in the bucket, and "/"
// contains every local path.
//
// IsWithin is false whenever either URI fails ParseURI (for example because of
// a ".." segment), so it can be used directly to refuse locations: a URI that
// cannot be parsed is never within anything.
func IsWithin(parent, child string) bool {
	p, err := parse(parent)
	if err != nil {
		return false
	}
	c, err := parse(child)
	if err != nil {
		return false
	}
	if p.scheme != c.scheme || p.bucket != c.bucket {
		return false
	}
	pk := strings.TrimRight(p.key, "/")
	ck := strings.TrimRight(c.key, "/")
	if p.scheme == SchemeFile {
		// Local keys always start with "/"; compare them without it so that
		// the root "/" (pk == "") contains everything.
		pk = strings.TrimPrefix(pk, "/")
		ck = strings.TrimPrefix(ck, "/")
	}
	if pk == "" {
		return true
	}
	return ck == pk || strings.HasPrefix(ck, pk+"/")
}
