// Package location parses and compares the URIs that name where table files
// live: s3://bucket/key (s3a:// and s3n:// accepted as s3://) and local paths
// (file:///abs/path, file:/abs/path, file://localhost/abs/path or a bare
// /abs/path). It is pure string work, with no I/O and no dependencies, so
// that the state machine (fsm) and object storage (internal/storage) can
// both normalise locations the same way.
package location

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

var (
	// ErrUnsupportedScheme is wrapped by errors for URIs whose scheme is
	// neither file nor s3 (s3a, s3n).
	ErrUnsupportedScheme = errors.New("unsupported URI scheme")
	// ErrInvalidURI is wrapped by errors for URIs that cannot be parsed or are
	// not allowed (relative paths, "." or ".." segments, bad bucket names).
	ErrInvalidURI = errors.New("invalid URI")
)

// Normalised scheme names returned by ParseURI.
const (
	SchemeFile = "file"
	SchemeS3   = "s3"
)

// URI is a parsed URI. Scheme is normalised (s3a/s3n become s3); Raw keeps
// the scheme as the caller spelled it so that URIs handed back to the caller
// (a listing) can use the same spelling (URIFor).
type URI struct {
	Scheme string // SchemeFile or SchemeS3
	Raw    string // scheme as written, lower-cased; "" for a bare path
	Bucket string // s3 only
	Key    string // s3: object key without leading slash; file: absolute, cleaned path
}

// URIFor returns the URI of key k in u's bucket, spelled with u's raw scheme.
func (u URI) URIFor(k string) string {
	switch {
	case u.Scheme == SchemeS3:
		return u.Raw + "://" + u.Bucket + "/" + k
	case u.Raw == "":
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
	u, err := Parse(uri)
	if err != nil {
		return "", "", "", err
	}
	return u.Scheme, u.Bucket, u.Key, nil
}

// Parse is ParseURI returning the parsed URI whole, with the scheme as
// written (URI.Raw).
func Parse(uri string) (URI, error) {
	bad := func(format string, args ...any) (URI, error) {
		return URI{}, fmt.Errorf("%w %q: %s", ErrInvalidURI, uri, fmt.Sprintf(format, args...))
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
		return URI{Scheme: SchemeFile, Key: p}, nil
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
		return URI{Scheme: SchemeFile, Raw: raw, Key: p}, nil

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
		return URI{Scheme: SchemeS3, Raw: raw, Bucket: bucket, Key: key}, nil

	default:
		return URI{}, fmt.Errorf("%w: %q in %q", ErrUnsupportedScheme, raw, uri)
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
	p, err := Parse(parent)
	if err != nil {
		return false
	}
	c, err := Parse(child)
	if err != nil {
		return false
	}
	if p.Scheme != c.Scheme || p.Bucket != c.Bucket {
		return false
	}
	pk := strings.TrimRight(p.Key, "/")
	ck := strings.TrimRight(c.Key, "/")
	if p.Scheme == SchemeFile {
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
