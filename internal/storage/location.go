package storage

import (
	loc "github.com/floe-catalog/floe/internal/location"
)

// Normalised scheme names returned by ParseURI.
const (
	SchemeFile = loc.SchemeFile
	SchemeS3   = loc.SchemeS3
)

// location is a parsed URI (see package location): scheme is normalised
// (s3a/s3n become s3); raw keeps the scheme as the caller spelled it so that
// URIs handed back to the caller (List) use the same spelling.
type location struct {
	scheme string // SchemeFile or SchemeS3
	raw    string // scheme as written, lower-cased; "" for a bare path
	bucket string // s3 only
	key    string // s3: object key without leading slash; file: absolute, cleaned path
}

// uriFor returns the URI of key k in l's bucket, spelled with l's raw scheme.
func (l location) uriFor(k string) string {
	return loc.URI{Scheme: l.scheme, Raw: l.raw, Bucket: l.bucket, Key: l.key}.URIFor(k)
}

func parse(uri string) (location, error) {
	u, err := loc.Parse(uri)
	if err != nil {
		return location{}, err
	}
	return location{scheme: u.Scheme, raw: u.Raw, bucket: u.Bucket, key: u.Key}, nil
}

// ParseURI splits uri into its normalised scheme, bucket and key: see
// location.ParseURI, whose rules and errors (ErrInvalidURI,
// ErrUnsupportedScheme) it shares.
func ParseURI(uri string) (scheme, bucket, key string, err error) {
	return loc.ParseURI(uri)
}

// IsWithin reports whether child names parent itself or an object below it,
// comparing whole path segments: see location.IsWithin.
func IsWithin(parent, child string) bool {
	return loc.IsWithin(parent, child)
}
