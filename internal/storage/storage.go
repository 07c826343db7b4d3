// Package storage reads, writes, lists and deletes the files of Iceberg tables.
//
// The catalog uses it to write and read table metadata files and the purge
// worker uses it to delete the files of dropped tables. Objects are addressed
// by absolute URIs, either on the local filesystem (file:///abs/path, or a bare
// /abs/path) or in S3 (s3://bucket/key; s3a:// and s3n:// are accepted and
// treated as s3://). Every operation works on whole objects; there is no
// streaming and no partial read.
//
// New returns a *Mux, which implements Storage for both schemes and also
// produces the FileIO properties an Iceberg client needs to access the same
// locations (Mux.ClientConfig). ParseURI and IsWithin validate and compare
// locations; use IsWithin to refuse table locations outside the warehouse and
// deletions outside a table's location.
//
// Errors from this package name the operation and the URI. A missing object is
// reported with an error wrapping ErrNotFound, an unknown scheme with one
// wrapping ErrUnsupportedScheme and a malformed URI with one wrapping
// ErrInvalidURI. The package does not log.
//
// Local paths never follow symbolic links. IsWithin compares paths as
// written, so a link inside a table's directory (data -> /etc, or -> another
// table) would otherwise let a purge delete, or a write create, files outside
// the location it was checked against. Every local operation therefore
// resolves its path one component at a time without following links: a link
// in any directory component (the warehouse path included, which must be
// given in its resolved form) fails the operation with an error wrapping
// ErrSymlink, and so do Read and Exists of a file that is itself a link.
// Delete of such a file removes the link, never its target; Write replaces
// it with a regular file; List skips links.
package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/aws/aws-sdk-go-v2/aws"
	"io"
	"maps"
	"strconv"
	"strings"
	"time"

	iceio "github.com/apache/iceberg-go/io"

	loc "github.com/floe-catalog/floe/internal/location"
)

var (
	// ErrNotFound is wrapped by errors for objects that do not exist.
	ErrNotFound = errors.New("object not found")
	// ErrTimeout is wrapped by errors of S3 calls that made no progress
	// for Config.S3RequestTimeout: the server or the path to it stalled.
	// A write that timed out may still land later; nothing refers to it.
	ErrTimeout = errors.New("object storage did not answer in time")
	// ErrUnreachable is wrapped by errors of S3 calls that could not reach
	// the server, or lost the connection (refused, reset, no route), after
	// the SDK's own retries. A write whose connection was reset may have
	// landed; nothing refers to it.
	ErrUnreachable = errors.New("object storage is unreachable")
	// ErrThrottled is wrapped by errors of S3 calls the server refused as
	// too many (SlowDown, 503) after the SDK's own retries: nothing was
	// done, and a later try may succeed.
	ErrThrottled = errors.New("object storage is refusing requests for now (throttled)")
	// ErrServerFailed is wrapped by errors of S3 calls the server failed
	// itself (a 5xx answer such as InternalError, or a response body cut
	// short) after the SDK's own retries: a later try may succeed. A write
	// so failed may have landed; nothing refers to it.
	ErrServerFailed = errors.New("object storage failed the request (server error)")
	// ErrTooLarge is wrapped by errors of Read for an object larger than
	// MaxReadBytes.
	ErrTooLarge = errors.New("object too large to read whole")
	// ErrUnsupportedScheme is wrapped by errors for URIs whose scheme is
	// neither file nor s3 (s3a, s3n): location.ErrUnsupportedScheme.
	ErrUnsupportedScheme = loc.ErrUnsupportedScheme
	// ErrInvalidURI is wrapped by errors for URIs that cannot be parsed or are
	// not allowed (relative paths, "." or ".." segments, bad bucket names):
	// location.ErrInvalidURI.
	ErrInvalidURI = loc.ErrInvalidURI
)

// Storage reads, writes and deletes whole objects addressed by absolute URIs:
// file:///abs/path (also a bare absolute path) and s3://bucket/key (s3a:// and
// s3n:// accepted as s3).
//
// All methods are safe for concurrent use. Errors are *ObjectError values
// naming the operation and URI (Delete joins one per failed URI), except that
// List returns fn's error unchanged. A canceled context fails the operation
// with an error wrapping the context's error. No method retries beyond what
// the underlying client (the AWS SDK's standard retryer) does by itself.
type Storage interface {
	// Write creates or overwrites the object at uri with data. A reader sees
	// either the old or the new content, never a partial object. On error the
	// previous object, if any, is left in place.
	Write(ctx context.Context, uri string, data []byte) error
	// Read returns the whole content of the object at uri. A missing object
	// is an error wrapping ErrNotFound; one larger than MaxReadBytes, an
	// error wrapping ErrTooLarge (nothing more than that is read).
	Read(ctx context.Context, uri string) ([]byte, error)
	// Exists reports whether an object exists at uri. It returns false and a
	// nil error only when the object is known to be missing; any other
	// failure (permissions, network) is returned as an error.
	Exists(ctx context.Context, uri string) (bool, error)
	// Delete removes uris in bulk. A missing object counts as deleted. It
	// returns the number deleted and a joined error naming each uri that
	// could not be deleted (each one an *ObjectError). A failure for one uri
	// does not stop the others; the count and the error together account for
	// every uri passed in (duplicates included).
	Delete(ctx context.Context, uris []string) (int, error)
	// List calls fn for every object whose URI starts with prefix, in lexical
	// order. The prefix is a plain string prefix, not a directory: prefix
	// s3://b/t1 matches s3://b/t10/x too; end it with "/" to list one
	// "directory". The URIs passed to fn use prefix's scheme spelling
	// (s3a:// stays s3a://; a bare path prefix yields bare paths, any file:
	// prefix yields file:/// URIs). If fn returns an error, List stops and
	// returns that error unchanged. Objects created or deleted while List runs
	// may or may not be reported.
	List(ctx context.Context, prefix string, fn func(uri string) error) error
}

// ObjectError records a failed operation on one object.
type ObjectError struct {
	Op  string // "write", "read", "exists", "delete" or "list"
	URI string
	Err error
}

func (e *ObjectError) Error() string { return "storage: " + e.Op + " " + e.URI + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *ObjectError) Unwrap() error { return e.Err }

func objErr(op, uri string, err error) error {
	return &ObjectError{Op: op, URI: uri, Err: err}
}

// Config configures New. The zero value serves local files and S3 with the
// AWS SDK's default credential chain and region.
type Config struct {
	// S3Endpoint is the S3 API base URL (for example http://127.0.0.1:7070)
	// for S3-compatible servers; empty means AWS.
	S3Endpoint string
	// S3Region is the signing region. Empty means the SDK default (AWS_REGION,
	// shared config), falling back to us-east-1.
	S3Region string
	// S3AccessKeyID and S3SecretAccessKey are static credentials. Set both or
	// neither; neither means the SDK's default credential chain.
	S3AccessKeyID     string
	S3SecretAccessKey string
	// S3PathStyle addresses buckets as endpoint/bucket/key instead of
	// bucket.endpoint/key. Most S3-compatible servers need it.
	S3PathStyle bool
	// S3RequestTimeout bounds every S3 call, so that a stalled server or
	// a half-open connection fails the call (ErrTimeout) instead of
	// holding it, and whatever waits on it, forever: a PutObject,
	// HeadObject, DeleteObjects request or List page, the SDK's own
	// retries included, must finish within it, and a GetObject must
	// answer and then deliver each read of its body within it (a slow
	// reader of a large object is not cut off). 0 means 30s.
	S3RequestTimeout time.Duration
	// DeleteBatchSize is the number of keys per S3 DeleteObjects request,
	// 1 to 1000; 0 means 1000.
	DeleteBatchSize int
	// LocalDeleteConcurrency bounds the goroutines deleting local files;
	// 0 means 8.
	LocalDeleteConcurrency int
	// LocalSyncEachWrite makes every local Write sync its own file and
	// directory, as floe did before group commit, instead of sharing that
	// step with the Writes running at the same time. Either way a Write
	// returns only once its file is durable. For measurements.
	LocalSyncEachWrite bool
}

const (
	defaultDeleteBatchSize        = 1000
	maxDeleteBatchSize            = 1000 // S3 DeleteObjects limit
	defaultLocalDeleteConcurrency = 8
	defaultS3Region               = "us-east-1"
	defaultS3RequestTimeout       = 30 * time.Second
)

// Mux implements Storage for file and s3 URIs, dispatching on the scheme.
type Mux struct {
	local *localStorage
	s3    *s3Storage
}

var _ Storage = (*Mux)(nil)

// New returns a Mux serving file and s3 URIs. It fails on invalid settings
// (out-of-range DeleteBatchSize or LocalDeleteConcurrency, only one of the two
// S3 keys, an unusable AWS shared configuration). It does not contact S3.
func New(cfg Config) (*Mux, error) {
	if cfg.DeleteBatchSize == 0 {
		cfg.DeleteBatchSize = defaultDeleteBatchSize
	}
	if cfg.DeleteBatchSize < 1 || cfg.DeleteBatchSize > maxDeleteBatchSize {
		return nil, fmt.Errorf("storage: DeleteBatchSize %d out of range 1..%d", cfg.DeleteBatchSize, maxDeleteBatchSize)
	}
	if cfg.LocalDeleteConcurrency == 0 {
		cfg.LocalDeleteConcurrency = defaultLocalDeleteConcurrency
	}
	if cfg.LocalDeleteConcurrency < 1 {
		return nil, fmt.Errorf("storage: LocalDeleteConcurrency %d must be positive", cfg.LocalDeleteConcurrency)
	}
	s3s, err := newS3Storage(cfg)
	if err != nil {
		return nil, err
	}
	return &Mux{local: newLocalStorage(cfg.LocalDeleteConcurrency, cfg.LocalSyncEachWrite), s3: s3s}, nil
}

// backend is what each scheme implements, on already parsed locations.
type backend interface {
	write(ctx context.Context, uri string, l location, data []byte) error
	read(ctx context.Context, uri string, l location) ([]byte, error)
	exists(ctx context.Context, uri string, l location) (bool, error)
	// delete deletes the given objects; errs[i] is nil when locs[i] is gone.
	delete(ctx context.Context, uris []string, locs []location) (errs []error)
	list(ctx context.Context, prefix string, l location, fn func(uri string) error) error
}

func (m *Mux) backend(l location) backend {
	if l.scheme == SchemeS3 {
		return m.s3
	}
	return m.local
}

// Write implements Storage.
func (m *Mux) Write(ctx context.Context, uri string, data []byte) error {
	l, err := parse(uri)
	if err != nil {
		return objErr("write", uri, err)
	}
	return m.backend(l).write(ctx, uri, l, data)
}

// Read implements Storage.
func (m *Mux) Read(ctx context.Context, uri string) ([]byte, error) {
	l, err := parse(uri)
	if err != nil {
		return nil, objErr("read", uri, err)
	}
	return m.backend(l).read(ctx, uri, l)
}

// Open returns the object at uri for reading as a stream: for s3 URIs the
// object's body as it arrives, so a large object is never held whole; for
// local files the file read whole (a local read is cheap and the file
// cannot be held open across the symlink-safe walk). A missing object is
// an error wrapping ErrNotFound from Open itself. The caller closes the
// reader.
func (m *Mux) Open(ctx context.Context, uri string) (io.ReadCloser, error) {
	l, err := parse(uri)
	if err != nil {
		return nil, objErr("open", uri, err)
	}
	if l.scheme == SchemeS3 {
		return m.s3.open(ctx, uri, l)
	}
	data, err := m.local.read(ctx, uri, l)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// Exists implements Storage.
func (m *Mux) Exists(ctx context.Context, uri string) (bool, error) {
	l, err := parse(uri)
	if err != nil {
		return false, objErr("exists", uri, err)
	}
	return m.backend(l).exists(ctx, uri, l)
}

// List implements Storage.
func (m *Mux) List(ctx context.Context, prefix string, fn func(uri string) error) error {
	l, err := parse(prefix)
	if err != nil {
		return objErr("list", prefix, err)
	}
	return m.backend(l).list(ctx, prefix, l, fn)
}

// Delete implements Storage. Errors are reported in the order of uris.
func (m *Mux) Delete(ctx context.Context, uris []string) (int, error) {
	errs := make([]error, len(uris))
	type group struct {
		idx  []int
		uris []string
		locs []location
	}
	var groups [2]group // 0: local, 1: s3
	for i, uri := range uris {
		l, err := parse(uri)
		if err != nil {
			errs[i] = objErr("delete", uri, err)
			continue
		}
		g := &groups[0]
		if l.scheme == SchemeS3 {
			g = &groups[1]
		}
		g.idx = append(g.idx, i)
		g.uris = append(g.uris, uri)
		g.locs = append(g.locs, l)
	}
	for gi, g := range groups {
		if len(g.idx) == 0 {
			continue
		}
		var b backend = m.local
		if gi == 1 {
			b = m.s3
		}
		for j, err := range b.delete(ctx, g.uris, g.locs) {
			errs[g.idx[j]] = err
		}
	}
	deleted := 0
	for _, err := range errs {
		if err == nil {
			deleted++
		}
	}
	return deleted, errors.Join(errs...)
}

// RemoveEmptyDirs removes, for a file: URI, the directory it names and the
// directories under it that are empty, deepest first, and returns how many
// it removed: a directory holding a file, a link or anything else stays,
// and so does every directory above it; links are never followed. Object
// stores have no directories: for s3 URIs it does nothing. A missing
// directory is no error.
func (m *Mux) RemoveEmptyDirs(ctx context.Context, uri string) (int, error) {
	l, err := parse(uri)
	if err != nil {
		return 0, objErr("remove empty directories", uri, err)
	}
	if l.scheme == SchemeS3 {
		return 0, nil
	}
	return m.local.removeEmptyDirs(ctx, uri, l)
}

// FileIO property keys. The s3.* keys besides s3.path-style-access are the
// ones iceberg-go's io package defines (io/config.go) and its S3 FileIO reads.
const (
	propS3Endpoint               = iceio.S3EndpointURL            // "s3.endpoint"
	propS3Region                 = iceio.S3Region                 // "s3.region"
	propS3AccessKeyID            = iceio.S3AccessKeyID            // "s3.access-key-id"
	propS3SecretAccessKey        = iceio.S3SecretAccessKey        // "s3.secret-access-key"
	propS3ForceVirtualAddressing = iceio.S3ForceVirtualAddressing // "s3.force-virtual-addressing"
	// propS3PathStyleAccess is not read by iceberg-go (which uses path-style
	// addressing whenever s3.endpoint is set, unless
	// s3.force-virtual-addressing is true) but by the Java and Rust
	// implementations; it is sent as well so that they address buckets the
	// same way.
	propS3PathStyleAccess = "s3.path-style-access"
	// propClientRegion is the region property the REST spec names for
	// clients ("client.region"); the Java client's AwsClientProperties reads it.
	propClientRegion = "client.region"
)

// ClientConfig returns the FileIO properties an Iceberg client needs to read
// and write files at uri with the same endpoint, region and addressing style
// as this Mux, and never a credential: it is what a catalog may hand to any
// client. For file URIs, and for URIs that do not parse, it returns an empty
// map. The returned map is a fresh copy.
func (m *Mux) ClientConfig(uri string) map[string]string {
	return WithoutSecrets(m.FileIOConfig(uri))
}

// FileIOConfig is ClientConfig plus this node's static S3 keys, when Config
// had them: the FileIO properties the node itself reads tables with (the
// purge worker). It must never leave the node. The returned map is a fresh
// copy.
func (m *Mux) FileIOConfig(uri string) map[string]string {
	l, err := parse(uri)
	if err != nil || l.scheme != SchemeS3 {
		return map[string]string{}
	}
	return maps.Clone(m.s3.clientProps)
}

// AWSConfig returns the AWS SDK configuration S3 requests are made with:
// the node's region and credential provider (static keys, or the SDK's
// default chain).
func (m *Mux) AWSConfig() aws.Config { return m.s3.awsCfg }

// secretFragments mark FileIO property names whose values are credentials.
var secretFragments = []string{"secret", "token", "password", "credential", "access-key-id"}

// IsSecretProperty reports whether the FileIO property name holds a
// credential (s3.access-key-id, s3.secret-access-key, s3.session-token, ...).
func IsSecretProperty(name string) bool {
	name = strings.ToLower(name)
	for _, f := range secretFragments {
		if strings.Contains(name, f) {
			return true
		}
	}
	return false
}

// WithoutSecrets returns a copy of props without its credentials: what may
// be stored in the replicated state, logged or shown.
func WithoutSecrets(props map[string]string) map[string]string {
	out := make(map[string]string, len(props))
	for k, v := range props {
		if !IsSecretProperty(k) {
			out[k] = v
		}
	}
	return out
}

func s3ClientProps(cfg Config, region string) map[string]string {
	props := map[string]string{
		propS3Region:                 region,
		propClientRegion:             region,
		propS3ForceVirtualAddressing: strconv.FormatBool(!cfg.S3PathStyle),
		propS3PathStyleAccess:        strconv.FormatBool(cfg.S3PathStyle),
	}
	if cfg.S3Endpoint != "" {
		props[propS3Endpoint] = cfg.S3Endpoint
	}
	if cfg.S3AccessKeyID != "" {
		props[propS3AccessKeyID] = cfg.S3AccessKeyID
		props[propS3SecretAccessKey] = cfg.S3SecretAccessKey
	}
	return props
}
