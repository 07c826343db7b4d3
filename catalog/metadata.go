package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/storage"
)

// tableMetadata is one parsed metadata file. Metadata files are immutable,
// so a parsed copy keyed by location never goes stale.
type tableMetadata struct {
	location string
	raw      []byte
	meta     table.Metadata
}

// cachedDoc is a parsed metadata file the cache keeps: a table's
// (*tableMetadata) or a view's (*viewMetadata).
type cachedDoc interface {
	docBytes() int64
}

func (tm *tableMetadata) docBytes() int64 { return int64(len(tm.raw)) }
func (vm *viewMetadata) docBytes() int64  { return int64(len(vm.raw)) }

// viewKeyPrefix sets a view's documents apart in the cache's keys. A
// location holds one table or one view, never both, but a register may
// point either at any file.
const viewKeyPrefix = "view\x00"

// metadataCache keeps parsed metadata files, tables' and views', by
// location, at most count of them and at most maxBytes of documents (a
// parsed object takes a few times its document's size again). A document
// over a quarter of maxBytes is not kept: a table whose metadata is that
// large is read from storage each time, so one such table cannot evict
// every other. A nil lru (cache disabled) keeps nothing.
type metadataCache struct {
	lru      *lru.Cache[string, cachedDoc]
	maxBytes int64
	bytes    atomic.Int64
}

func newMetadataCache(count int, maxBytes int64) *metadataCache {
	c := &metadataCache{maxBytes: maxBytes}
	if count < 0 {
		return c
	}
	l, err := lru.NewWithEvict(count, func(_ string, d cachedDoc) {
		c.bytes.Add(-d.docBytes())
	})
	if err != nil {
		panic(err) // only for count <= 0, which New rules out
	}
	c.lru = l
	return c
}

func (c *metadataCache) get(loc string) (*tableMetadata, bool) {
	if c.lru == nil {
		return nil, false
	}
	d, ok := c.lru.Get(loc)
	if !ok {
		return nil, false
	}
	tm, ok := d.(*tableMetadata)
	return tm, ok
}

func (c *metadataCache) getView(loc string) (*viewMetadata, bool) {
	if c.lru == nil {
		return nil, false
	}
	d, ok := c.lru.Get(viewKeyPrefix + loc)
	if !ok {
		return nil, false
	}
	vm, ok := d.(*viewMetadata)
	return vm, ok
}

func (c *metadataCache) add(tm *tableMetadata) { c.put(tm.location, tm) }

func (c *metadataCache) addView(vm *viewMetadata) { c.put(viewKeyPrefix+vm.location, vm) }

func (c *metadataCache) put(key string, d cachedDoc) {
	if c.lru == nil || d.docBytes() > c.maxBytes/4 {
		return
	}
	// One step: two loads missing the same location at once must count
	// its bytes once (an Add over an existing key evicts nothing, so a
	// second count would never be given back). The bytes are counted
	// just after the entry is in; an eviction in between gives back
	// bytes not yet counted, for a moment only.
	if found, _ := c.lru.ContainsOrAdd(key, d); found {
		return // immutable: the same document
	}
	c.bytes.Add(d.docBytes())
	for c.bytes.Load() > c.maxBytes {
		if _, _, ok := c.lru.RemoveOldest(); !ok {
			return
		}
	}
}

func (c *metadataCache) remove(loc string) {
	if c.lru != nil {
		c.lru.Remove(loc)
	}
}

func (c *metadataCache) removeView(loc string) {
	if c.lru != nil {
		c.lru.Remove(viewKeyPrefix + loc)
	}
}

// readMetadata returns the metadata file at loc, from the cache when it can.
func (s *Server) readMetadata(ctx context.Context, loc string) (*tableMetadata, error) {
	if tm, ok := s.cache.get(loc); ok {
		s.metrics.cacheHits.Inc()
		return tm, nil
	}
	s.metrics.cacheMisses.Inc()
	return sharedRead(ctx, s, "", loc, s.readMetadataFile, s.cache.add)
}

// sharedRead reads and parses the document at loc with read, once for
// every load of it that missed the cache at the same time (keyPrefix sets
// views' reads apart from tables'), and keeps it with add. A document too
// large to cache (a table of 128 MiB of metadata) took several times its
// size per concurrent load. The warehouse is part of the key: the same
// URI may name a file of two warehouses' storage. The shared read does
// not end with the request that started it (the others wait for it),
// only at sharedLoadTimeout; each waiting request may leave at its own
// deadline.
func sharedRead[T any](ctx context.Context, s *Server, keyPrefix, loc string,
	read func(context.Context, string) (T, error), add func(T)) (T, error) {
	ch := s.loads.DoChan(keyPrefix+s.whOf(ctx).location+"\x00"+loc, func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sharedLoadTimeout)
		defer cancel()
		doc, err := read(lctx, loc)
		if err != nil {
			return nil, err
		}
		add(doc)
		return doc, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			var zero T
			return zero, res.Err
		}
		return res.Val.(T), nil
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("read metadata %s: %w", loc, ctx.Err())
	}
}

// tableRecord reads the record of the table at id linearizably; ok is
// false when there is none.
func (s *Server) tableRecord(ctx context.Context, id fsm.Ident) (t fsm.Table, ok bool, err error) {
	err = s.store.Read(ctx, func(rd *fsm.Reader) error {
		t, ok = rd.Table(id)
		return nil
	})
	return t, ok, err
}

// readTableMetadata reads the metadata file of t, the entry of table id as
// read a moment before. A purge after a concurrent drop, or a concurrent
// commit's cleanup of expired metadata files, can delete that file in
// between: on a file not found it reads the table again, linearizably,
// and answers from what it holds now: 404 when the table is gone, its
// newer file when it moved on (returned with the entry it read). Only a
// file missing while the table still names it is the storage error, as is
// any error of the second read.
func (s *Server) readTableMetadata(ctx context.Context, id fsm.Ident, t fsm.Table) (fsm.Table, *tableMetadata, error) {
	for moves := 0; ; moves++ {
		tm, err := s.readMetadata(ctx, t.MetadataLocation)
		if err == nil {
			return t, tm, checkTableUUID(id, t, tm)
		}
		if !errors.Is(err, storage.ErrNotFound) || moves == maxMetadataMoves {
			return t, tm, err
		}
		now, ok, rerr := s.tableRecord(ctx, id)
		if rerr != nil {
			return t, nil, err
		}
		switch {
		case !ok:
			return t, nil, notFoundTable("table does not exist: %s", id)
		case now.MetadataLocation == t.MetadataLocation:
			return t, nil, err
		}
		t = now
	}
}

// checkTableUUID refuses the metadata file tm of the table id, whose
// record is t, when the file names another table (its table-uuid is not
// the one the catalog recorded): a file replaced outside the catalog, by
// a copy of another table's, say. Served, it would hand out that table's
// metadata; committed on, it would give this table the other's identity
// and location, and a purge of this table would then delete files of
// that one. A record without a UUID (a release that kept none) is not
// judged.
func checkTableUUID(id fsm.Ident, t fsm.Table, tm *tableMetadata) error {
	if t.UUID == "" {
		return nil
	}
	if got := tm.meta.TableUUID().String(); got != t.UUID {
		return fmt.Errorf("%w: metadata %s names table-uuid %s, but table %s is %s: the file was replaced outside the catalog",
			errCorruptMetadata, tm.location, got, id, t.UUID)
	}
	return nil
}

// maxMetadataMoves bounds how many times readTableMetadata follows a table
// that moved on while its file was being read.
const maxMetadataMoves = 3

// sharedLoadTimeout bounds a metadata read that concurrent loads share.
const sharedLoadTimeout = 2 * time.Minute

// bigMetadataBytes is the size (inflated) above which a metadata document
// is inflated and parsed only in one of bigMetadataSlots at a time: the
// parse takes several times the document's size, and without a bound each
// concurrent request for a document near the 128 MiB limit (or a small
// gzip file that inflates to it) took several hundred MB.
const (
	bigMetadataBytes = 16 << 20
	bigMetadataSlots = 2
)

// readMetadataFile reads and parses the metadata file at loc from
// storage, and does not cache it: for a file that is not yet known to be
// a table's (a register's, until it is accepted). A document larger than
// bigMetadataBytes waits for one of the node's bigMetadataSlots (or ctx).
func (s *Server) readMetadataFile(ctx context.Context, loc string) (*tableMetadata, error) {
	raw, err := s.whOf(ctx).objects.Read(ctx, loc)
	if err != nil {
		return nil, fmt.Errorf("read metadata %s: %w", loc, err)
	}
	// A gzip stream is inflated up to bigMetadataBytes first; only one
	// that goes beyond takes a slot, and is inflated whole in it.
	inflated, err := storage.UngzippedUpTo(raw, bigMetadataBytes)
	big := len(raw) > bigMetadataBytes || errors.Is(err, storage.ErrTooLarge)
	if big {
		if err := s.bigDocs.Acquire(ctx, 1); err != nil {
			return nil, fmt.Errorf("read metadata %s: waiting to parse a large document: %w", loc, err)
		}
		defer s.bigDocs.Release(1)
		inflated, err = storage.Ungzipped(raw)
	}
	raw = inflated
	if err != nil {
		return nil, fmt.Errorf("%w: metadata %s: %v", errCorruptMetadata, loc, err)
	}
	meta, err := table.ParseMetadataBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: metadata %s: %v", errCorruptMetadata, loc, err)
	}
	// Answers carry the document with the fields old readers require, also
	// when another writer (or floe before it wrote them) left them out.
	raw, err = encodedJSON(withEmptyCollections(withRequiredFields(raw)))
	if err != nil {
		return nil, fmt.Errorf("%w: metadata %s: %v", errCorruptMetadata, loc, err)
	}
	return &tableMetadata{location: loc, raw: raw, meta: meta}, nil
}

// encodedJSON returns raw as encoding/json writes a json.RawMessage:
// compact, with <, >, & and U+2028/U+2029 escaped. A table's document is
// held so once, when it is read, and answers write it as it is held
// (writeLoadTableResult) rather than each copying it through an encoder.
func encodedJSON(raw []byte) ([]byte, error) {
	var compact bytes.Buffer
	compact.Grow(len(raw))
	if err := json.Compact(&compact, raw); err != nil {
		return nil, err
	}
	out := compact.Bytes()
	if !bytes.ContainsAny(out, "<>&\u2028\u2029") {
		return out, nil
	}
	var escaped bytes.Buffer
	escaped.Grow(len(out) + 64)
	json.HTMLEscape(&escaped, out)
	return escaped.Bytes(), nil
}

var errCorruptMetadata = errors.New("unreadable table metadata")

// writeMetadata writes meta as <tableLocation>/metadata/<version>-<uuid>.metadata.json
// and returns it. The file is written before the command that points at it
// is proposed; the caller deletes it if the command does not take effect.
// A version iceberg-go's parser would refuse is a 400, and nothing is
// written.
func (s *Server) writeMetadata(ctx context.Context, meta table.Metadata, version int) (*tableMetadata, error) {
	raw, err := encodeMetadata(meta)
	if err != nil {
		return nil, fmt.Errorf("encode metadata: %w", err)
	}
	// iceberg-go's parser is stricter than its builder: a version it
	// built but cannot read back would be served from this node's cache
	// while every other node, and this one after a restart, answered 500
	// for the table. What is cached is what any node would read.
	if len(raw) > storage.MaxReadBytes {
		return nil, badRequest("the new metadata would be %d bytes, over the %d a node reads", len(raw), storage.MaxReadBytes)
	}
	if !skipWriteParse.Load() {
		if meta, err = table.ParseMetadataBytes(raw); err != nil {
			return nil, badRequest("the new metadata would not be readable: %v", err)
		}
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	loc := fmt.Sprintf("%s/metadata/%05d-%s.metadata.json", strings.TrimSuffix(meta.Location(), "/"), version, id)
	if err := s.whOf(ctx).objects.Write(ctx, loc, raw); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errMetadataNotWritten, loc, err)
	}
	tm := &tableMetadata{location: loc, raw: raw, meta: meta}
	s.cache.add(tm)
	return tm, nil
}

// errMetadataNotWritten wraps a failure to write a new metadata file. Every
// change writes its file before it proposes anything, so such a failure
// (a full disk, a permission, a store refusing the PUT) applied nothing:
// 503, not the 500 "commit state unknown" an unclassified commit error
// gets, which makes a client keep files it could have cleaned up.
var errMetadataNotWritten = errors.New("the new metadata file could not be written, nothing was applied")

// encodeMetadata serialises meta as json.Marshal(meta) does, once, with
// the fields old readers require (withRequiredFields) and empty maps and
// lists where iceberg-go writes null (withEmptyCollections). iceberg-go's
// metadata types marshal themselves with json.Marshal, whose output is
// already compact and HTML-escaped; json.Marshal(meta) would validate and
// copy those bytes once more (its compaction of a Marshaler's output),
// which cost more CPU than the serialisation itself. The bytes are the
// file's and the answer's (writeCommitResult) alike.
func encodeMetadata(meta table.Metadata) ([]byte, error) {
	var raw []byte
	var err error
	if m, ok := meta.(json.Marshaler); ok && !reencodeMetadata.Load() {
		raw, err = m.MarshalJSON()
	} else {
		raw, err = json.Marshal(meta)
	}
	if err != nil {
		return nil, err
	}
	return withEmptyCollections(withRequiredFields(raw)), nil
}

// emptyCollections are the keys of maps and lists that iceberg-go writes
// as null when they are empty or were absent where it read them: a
// statistics file's blob-metadata, a blob's properties (Java and
// iceberg-rust leave an empty map out, and iceberg-go reads that as nil)
// and its fields. Java's and iceberg-rust's readers refuse the null, so a
// table with such statistics could not be loaded by them. No metadata key
// of these names holds anything but a map or a list.
var emptyCollections = []struct{ null, empty []byte }{
	{[]byte(`"properties":null`), []byte(`"properties":{}`)},
	{[]byte(`"blob-metadata":null`), []byte(`"blob-metadata":[]`)},
	{[]byte(`"fields":null`), []byte(`"fields":[]`)},
}

// withEmptyCollections replaces, in the compact metadata document raw,
// each of emptyCollections' keys with a null value by the empty map or
// list. A match not preceded by a backslash is always such a key: in valid
// JSON a quote followed by a name and '":' opens a key, unless it is an
// escaped quote inside a string (a closing quote is never followed by a
// letter). raw itself is not modified.
func withEmptyCollections(raw []byte) []byte {
	if !bytes.Contains(raw, []byte(`":null`)) {
		return raw
	}
	for _, c := range emptyCollections {
		var out []byte
		rest := raw
		for {
			i := bytes.Index(rest, c.null)
			if i < 0 {
				break
			}
			if out == nil {
				out = make([]byte, 0, len(raw))
			}
			if i > 0 && rest[i-1] == '\\' {
				out = append(out, rest[:i+len(c.null)]...)
			} else {
				out = append(append(out, rest[:i]...), c.empty...)
			}
			rest = rest[i+len(c.null):]
		}
		if out != nil {
			raw = append(out, rest...)
		}
	}
	return raw
}

// requiredFields are the top-level fields Java's metadata reader before
// 1.4 requires, with the value Java writes for "none". iceberg-go leaves
// them out when empty (no properties, no snapshot yet), and engines that
// bundle Iceberg 1.3 or older then cannot load the table ("Cannot parse
// missing map: properties"). Every reader accepts them: Java itself writes
// all three, -1 included.
var requiredFields = []struct{ key, empty string }{
	{"properties", `{}`},
	{"snapshots", `[]`},
	{"current-snapshot-id", `-1`},
}

// withRequiredFields adds to the metadata document raw, a JSON object,
// each required field its top level lacks; anything else is returned as
// it is. Keys are read at the top level only (scanTopLevelKeys), so a
// nested key of the same name neither hides nor doubles a field.
func withRequiredFields(raw []byte) []byte {
	present := make([]bool, len(requiredFields))
	fields := 0
	ok := scanTopLevelKeys(raw, func(key []byte) {
		fields++
		for i, f := range requiredFields {
			if string(key) == f.key {
				present[i] = true
			}
		}
	})
	if !ok {
		return raw
	}
	var add []byte
	for i, f := range requiredFields {
		if !present[i] {
			add = append(add, ',', '"')
			add = append(add, f.key...)
			add = append(add, '"', ':')
			add = append(add, f.empty...)
		}
	}
	if len(add) == 0 {
		return raw
	}
	end := bytes.LastIndexByte(raw, '}')
	out := make([]byte, 0, len(raw)+len(add))
	out = append(out, raw[:end]...)
	if fields == 0 {
		add = add[1:] // no field before: no comma
	}
	out = append(out, add...)
	return append(out, raw[end:]...)
}

// scanTopLevelKeys calls key with each key of the outermost object of the
// JSON document raw (escaped keys decoded), whitespace and nesting
// allowed; it reports false when raw is not an object that scans to its
// end. It decodes no value: strings are skipped with IndexByte.
func scanTopLevelKeys(raw []byte, key func([]byte)) bool {
	depth, expectKey, closed := 0, false, false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case ' ', '\t', '\n', '\r':
		case '"':
			j := stringEnd(raw, i)
			if j < 0 || depth == 0 {
				return false
			}
			if depth == 1 && expectKey {
				k := raw[i+1 : j]
				if bytes.IndexByte(k, '\\') >= 0 {
					var s string
					if json.Unmarshal(raw[i:j+1], &s) != nil {
						return false
					}
					k = []byte(s)
				}
				key(k)
				expectKey = false
			}
			i = j
		case '{', '[':
			if closed || (depth == 0 && c != '{') {
				return false
			}
			depth++
			expectKey = depth == 1
		case '}', ']':
			depth--
			if depth < 0 {
				return false
			}
			closed = depth == 0
		case ',':
			expectKey = depth == 1
		default:
			if depth == 0 {
				return false
			}
		}
	}
	return closed
}

// stringEnd returns the index of the quote that ends the JSON string
// starting at raw[start], or -1.
func stringEnd(raw []byte, start int) int {
	for j := start + 1; j < len(raw); {
		q := bytes.IndexByte(raw[j:], '"')
		if q < 0 {
			return -1
		}
		j += q
		backslashes := 0
		for k := j - 1; k > start && raw[k] == '\\'; k-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return j
		}
		j++
	}
	return -1
}

// reencodeMetadata restores the commit path's earlier encoding: metadata
// through json.Marshal, and the answer's metadata re-encoded by writeJSON.
// Only BenchmarkCommitPath sets it, to measure the two in one run; the
// bytes are the same either way (TestMetadataEncodingIsByteCompatible).
var reencodeMetadata atomic.Bool

// skipWriteParse leaves out writeMetadata's parse of the new version,
// for BenchmarkCommitPath's measure of its cost only: without it an
// unreadable version would be written (see writeMetadata).
var skipWriteParse atomic.Bool

// discard deletes metadata files that no committed pointer references: the
// files of attempts that lost. A failure only leaves an orphan behind.
func (s *Server) discard(ctx context.Context, locs ...string) {
	if len(locs) == 0 {
		return
	}
	for _, l := range locs {
		s.cache.remove(l)
		s.cache.removeView(l)
	}
	if _, err := s.whOf(ctx).objects.Delete(context.WithoutCancel(ctx), locs); err != nil {
		s.metrics.orphanedFiles.Add(float64(len(locs)))
		s.log.Warn("could not delete unused metadata files", "files", locs, "error", err)
	}
}

var metadataFileRE = regexp.MustCompile(`^(\d+)-[0-9a-fA-F-]{36}(?:\.[a-z]+)?\.metadata\.json$`)
var legacyMetadataFileRE = regexp.MustCompile(`^v(\d+)(?:\.gz)?\.metadata\.json$`)

// metadataVersion parses the version out of a metadata file name; -1 when the
// name follows neither convention (a registered table may use any name).
func metadataVersion(loc string) int {
	base := path.Base(loc)
	m := metadataFileRE.FindStringSubmatch(base)
	if m == nil {
		m = legacyMetadataFileRE.FindStringSubmatch(base)
	}
	if m == nil {
		return -1
	}
	v, err := strconv.Atoi(m[1])
	if err != nil {
		return -1
	}
	return v
}

// defaultLocation is <warehouse>/<namespace levels joined by />/<table>,
// in the warehouse the request whose context is ctx addresses.
func (s *Server) defaultLocation(ctx context.Context, id fsm.Ident) string {
	return s.whOf(ctx).location + "/" + strings.Join(external(id.Namespace), "/") + "/" + id.Name
}

// claimCheck is fsm.Reader.CheckClaim for a table, CheckViewClaim for a
// view.
type claimCheck func(rd *fsm.Reader, id fsm.Ident, loc string) error

// newDefaultLocation is the location of a new table or view at id whose
// request gave none. It is defaultLocation, unless that is held by
// another live table (or view, for a view) whose location equals it or
// lies inside it: after a rename, which moves a name and keeps the
// location, the old name's default location still belongs to the renamed
// object, and so would be refused to a new object of that name (Spark's
// "rename the live table away, recreate it" pattern). Then it is
// defaultLocation-<the new object's UUID>, which no other object holds.
// When that is held too (the default lies inside another table's
// location) the create is a 400 asking for a location: every client reads
// a 409 on a create as "the table exists". The owner is named only
// without an Authorizer, as the 409s of the claim check name it. A
// location being purged is never avoided: that refusal is the
// tombstone's 409.
//
// It is advice, like every check before Apply: a create that races
// another for the location is refused by the state machine.
func (s *Server) newDefaultLocation(ctx context.Context, id fsm.Ident, objectUUID uuid.UUID, claim claimCheck) (string, error) {
	def := s.defaultLocation(ctx, id)
	var loc string
	err := s.store.Read(ctx, func(rd *fsm.Reader) error {
		loc = def
		if !errors.Is(claim(rd, id, loc), fsm.ErrLocationInUse) {
			return nil
		}
		// Only a location that passes checkLocation's limits (a long
		// name plus the suffix may not): otherwise the owner's 409 says
		// more than a 400 about a location the client never gave.
		alt := loc + "-" + objectUUID.String()
		err := claim(rd, id, alt)
		if err == nil && s.checkLocation(ctx, alt) == nil {
			loc = alt
			return nil
		}
		if errors.Is(err, fsm.ErrLocationInUse) {
			// Neither is free: a table owns a directory above both (a
			// table named as the namespace is, beside it). Every client
			// reads a 409 on a create as "the table exists" (Spark's
			// CREATE TABLE IF NOT EXISTS then does nothing), and this
			// one does not.
			owner := ""
			if s.cfg.Authorizer == nil {
				owner = " (" + err.Error() + ")"
			}
			return badRequest("the default location %s lies inside another table's location%s: give this table a location of its own", def, owner)
		}
		return nil
	})
	return loc, err
}

// Location limits: S3 keys end at 1024 bytes and file names at 255, and a
// table's files add their own names below its location.
const (
	maxLocationBytes = 2048
	maxSegmentBytes  = 255
	maxKeyBytes      = 768
)

// checkLocation refuses a location that does not lie strictly inside one of
// the allowed locations (by default the warehouse).
func (s *Server) checkLocation(ctx context.Context, loc string) error {
	if len(loc) > maxLocationBytes {
		return badRequest("location is %d bytes long, the limit is %d", len(loc), maxLocationBytes)
	}
	_, _, key, err := storage.ParseURI(loc)
	if err != nil {
		return badRequest("invalid location %q: %v", loc, err)
	}
	// Files go below the location (metadata/<version>-<uuid>.metadata.json,
	// data/...): a segment a file system cannot name, or a key S3 cannot
	// hold once those are added, is refused here rather than failing the
	// write with a 5xx.
	for seg := range strings.SplitSeq(key, "/") {
		if len(seg) > maxSegmentBytes {
			return badRequest("location %q has a path segment of %d bytes, the limit is %d", loc, len(seg), maxSegmentBytes)
		}
	}
	if len(key) > maxKeyBytes {
		return badRequest("location %q is %d bytes below its bucket or root, the limit is %d", loc, len(key), maxKeyBytes)
	}
	allowedLocations := s.whOf(ctx).allowed
	for _, allowed := range allowedLocations {
		if storage.IsWithin(allowed, loc) && fsm.LocationKey(allowed) != fsm.LocationKey(loc) {
			return nil
		}
	}
	return badRequest("location %q is outside the allowed locations (%s)", loc, strings.Join(allowedLocations, ", "))
}

// checkNewLocationSpelling refuses, for a location a table or view is
// about to take, a '?' or '#' anywhere and any '%', a percent-escape
// ("%2F", "%2e") or not ("50%", which no URI parser accepts): clients read a location as a URI, and some drop what follows
// '?' or '#' (Java's S3URI, PyIceberg's urlparse) or decode the escapes
// (Hadoop's Path), so two tables' locations that floe tells apart could
// name the same files for them. Likewise an empty path segment (a doubled
// '/' after the scheme's "//"): S3 keeps "a//b" and "a/b" apart, but
// Hadoop's Path, S3A and S3 servers backed by a file system read them as
// one place. Locations a table already holds are not judged again.
func checkNewLocationSpelling(loc string) error {
	// Python's urlsplit (PyIceberg's FileIO) deletes tab, CR and LF
	// anywhere and strips leading and trailing spaces and control
	// characters: "a/t\t1" or "a/t1 " is a/t1 for it.
	if i := strings.IndexFunc(loc, func(r rune) bool { return r < 0x20 || r == 0x7f }); i >= 0 {
		return badRequest("location %q contains the control character %U: some clients delete it", loc, loc[i])
	}
	if i := strings.IndexFunc(loc, storage.NotXMLChar); i >= 0 {
		return badRequest("location %q contains %U, which object stores' XML requests cannot carry", loc, []rune(loc[i:])[0])
	}
	if strings.TrimSpace(loc) != loc {
		return badRequest("location %q starts or ends with white space: some clients strip it", loc)
	}
	if i := strings.IndexAny(loc, "?#"); i >= 0 {
		return badRequest("location %q contains %q: clients read locations as URIs, and some drop what follows it", loc, loc[i:i+1])
	}
	if i := strings.Index(loc, ":"); i > 0 && isScheme(loc[:i]) && loc[:i] != strings.ToLower(loc[:i]) {
		// Schemes are case-insensitive to the catalog, but not to every
		// client: Java's vended-credentials refresh keeps only prefixes
		// starting with "s3", and file systems match "S3://" to nothing.
		return badRequest("location %q: write its scheme in lower case (%s)", loc, strings.ToLower(loc[:i+1]))
	}
	if hasEmptySegment(loc) {
		return badRequest("location %q has an empty path segment (\"//\"): some clients and stores read it as the path without it, others do not", loc)
	}
	if i := strings.IndexByte(loc, '%'); i >= 0 {
		if i+2 < len(loc) && isHex(loc[i+1]) && isHex(loc[i+2]) {
			return badRequest("location %q contains the percent-escape %q: some clients decode it, others do not", loc, loc[i:i+3])
		}
		// A '%' that starts no escape makes the location no URI at all:
		// Go's url.Parse and Java's URI refuse it.
		return badRequest("location %q contains '%%' outside a percent-escape: clients read locations as URIs, and such a URI is invalid", loc)
	}
	return nil
}

// isScheme reports whether s is spelled as a URI scheme (RFC 3986 3.1).
func isScheme(s string) bool {
	for i, r := range s {
		letter := (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !letter && (i == 0 || !(r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.')) {
			return false
		}
	}
	return s != ""
}

// hasEmptySegment reports whether loc's path, after the scheme's "//",
// holds "//".
func hasEmptySegment(loc string) bool {
	if i := strings.Index(loc, "://"); i >= 0 {
		loc = loc[i+len("://"):]
	}
	return strings.Contains(loc, "//")
}

// checkRootLocation checks a warehouse or allowed location at start: one
// with an empty path segment would make every default location, and any
// location inside it, one the catalog refuses (checkNewLocationSpelling).
func checkRootLocation(loc string) error {
	if _, _, _, err := storage.ParseURI(loc); err != nil {
		return err
	}
	if hasEmptySegment(strings.TrimSuffix(loc, "/") + "/") { // as locations below it are made
		return fmt.Errorf("%q has an empty path segment (\"//\"), which S3 and file-backed stores read differently; remove it", loc)
	}
	return nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// checkOwner answers early, before any file is written, when loc is equal
// to, inside or around the location of a live table other than id, or of a
// table being purged. It is advice read linearizably: the state machine
// decides again when the command is applied, so two racing requests
// cannot both win.
func (s *Server) checkOwner(ctx context.Context, id fsm.Ident, loc string) error {
	return s.store.Read(ctx, func(rd *fsm.Reader) error { return rd.CheckClaim(id, loc) })
}

// tableFiles is files of the table at id.
type tableFiles struct {
	id    fsm.Ident
	files []string
}

// ownedOnly returns the files of each table that no other live table
// holds (nor a live view as its current metadata file), read linearizably
// just before they are deleted: a registered table's metadata log may name
// any file inside its location, including one of a view or table that
// shares or lies inside it. A JSON file inside a live view's location is
// read, and kept unless it is a table's metadata file: a view's earlier
// metadata files are not in the index. When the read fails nothing is
// returned, so nothing is deleted: the files are left as orphans.
func (s *Server) ownedOnly(ctx context.Context, files []tableFiles) []string {
	var keep []string
	type inView struct {
		table fsm.Ident
		file  string
		view  string
	}
	var inViews []inView
	err := s.store.Read(ctx, func(rd *fsm.Reader) error {
		keep, inViews = keep[:0], inViews[:0]
		for _, tf := range files {
			for _, f := range tf.files {
				if owner, ok := rd.LocationOwnerExcept(f, tf.id); ok {
					s.log.Warn("expired metadata file left in place: another table or view holds it",
						"table", tf.id.String(), "file", f, "owner", owner.Ident().String())
					continue
				}
				if storage.MayBeViewMetadata(f) {
					if v, ok := rd.ViewOverlapping(f); ok {
						inViews = append(inViews, inView{table: tf.id, file: f, view: v.Ident().String()})
						continue
					}
				}
				keep = append(keep, f)
			}
		}
		return nil
	})
	if err == nil {
		for _, f := range inViews {
			raw, rerr := s.whOf(ctx).objects.Read(ctx, f.file)
			if rerr == nil && storage.IsTableMetadata(raw) {
				keep = append(keep, f.file)
				continue
			}
			s.log.Warn("expired metadata file left in place: it lies in a live view's location and is not a table's metadata file",
				"table", f.table.String(), "file", f.file, "view", f.view, "error", rerr)
		}
	}
	if err != nil {
		n := 0
		for _, tf := range files {
			n += len(tf.files)
		}
		s.metrics.orphanedFiles.Add(float64(n))
		s.log.Warn("could not check expired metadata files against other tables; left in place", "files", n, "error", err)
		return nil
	}
	return keep
}

// expiredMetadataFiles lists the metadata files that fell out of the
// metadata log with this commit, when the table asks for them to be deleted
// (write.metadata.delete-after-commit.enabled).
// Only files under the table's location are ever offered for deletion.
func expiredMetadataFiles(beforeLoc string, before, after table.Metadata) []string {
	if !after.Properties().GetBool(table.MetadataDeleteAfterCommitEnabledKey, table.MetadataDeleteAfterCommitEnabledDefault) {
		return nil
	}
	kept := map[string]bool{}
	for e := range after.PreviousFiles() {
		kept[e.MetadataFile] = true
	}
	var out []string
	candidates := []string{beforeLoc}
	for e := range before.PreviousFiles() {
		candidates = append(candidates, e.MetadataFile)
	}
	for _, f := range candidates {
		if f != "" && !kept[f] && storage.IsWithin(after.Location(), f) {
			out = append(out, f)
		}
	}
	return out
}
