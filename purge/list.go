package purge

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"

	"github.com/apache/iceberg-go"
	"github.com/twmb/avro"
	"github.com/twmb/avro/ocf"
)

// Limits of what one walk takes from manifest lists. A list is streamed,
// but a walk remembers every distinct manifest it met (to pass each once,
// and to hold back what a later phase reads): a few tens of bytes each. A
// crafted list of a few megabytes (deflate shrinks repeated entries to a
// fraction of a byte each) otherwise ran a node out of memory, and the
// job's next run the next node. A list or table past these is corrupt
// metadata: the job fails, and an operator releases it.
//
// Variables only so that tests can lower them.
var (
	// maxListEntries bounds the entries of one manifest list, repeated
	// ones included.
	maxListEntries = 1 << 22
	// maxWalkManifests bounds the distinct manifests of one table.
	maxWalkManifests = 1 << 20
)

// listEntry is what a walk needs of a manifest list's entry.
type listEntry struct {
	Path    string `avro:"manifest_path"`
	Length  int64  `avro:"manifest_length"`
	Content int32  `avro:"content"`
}

// listFields are the fields listEntry decodes; the others are skipped.
var listFields = []string{"manifest_path", "manifest_length", "content"}

// listManifests streams the manifest list at uri (read with Open when the
// Reader is an Opener, else whole) and calls fn with each of its
// manifests, in the list's order, decoding one entry at a time and only
// its path, length and content (a format version 1 list has none: data).
// Each manifest is given as format version 3, the newest: a walk does not
// judge whether a manifest is newer than the list naming it, it deletes
// it all the same. A list that does not decode, or holds more than
// maxListEntries entries, wraps ErrCorruptMetadata; a failed read of its
// body is returned as a storage error. A missing list is storage's
// ErrNotFound, for the caller to tell.
func (w Walker) listManifests(ctx context.Context, uri string, fn func(iceberg.ManifestFile) error) error {
	body, err := w.open(ctx, uri)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	src := &trackedReader{r: body}
	corrupt := func(err error) error { return decodeError("manifest list", uri, src, err) }
	hdr, err := checkedHeader(src)
	if err != nil {
		return corrupt(err)
	}
	rd, err := ocf.NewReader(hdr, ocf.WithReaderSchemaFunc(func(rd *ocf.Reader) (*avro.Schema, error) {
		return projectedList(rd.Schema())
	}))
	if err != nil {
		return corrupt(err)
	}
	defer func() { _ = rd.Close() }()
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		var e listEntry
		if err := rd.Decode(&e); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return corrupt(err)
		}
		if n >= maxListEntries {
			return corrupt(fmt.Errorf("more than %d entries", maxListEntries))
		}
		content := iceberg.ManifestContentData
		switch e.Content {
		case 0:
		case 1:
			content = iceberg.ManifestContentDeletes
		default:
			return corrupt(fmt.Errorf("entry %d: content %d is neither data (0) nor deletes (1)", n, e.Content))
		}
		if e.Path == "" {
			return corrupt(fmt.Errorf("entry %d has no manifest_path", n))
		}
		if err := fn(iceberg.NewManifestFile(3, e.Path, e.Length, 0, 0).Content(content).Build()); err != nil {
			return err
		}
	}
}

// projectedList is the writer schema of a manifest list with only
// listFields: Avro resolution skips the others (partition summaries, key
// metadata, counts) without decoding them into anything.
func projectedList(writer *avro.Schema) (*avro.Schema, error) {
	root := writer.Root()
	if root.Type != "record" {
		return nil, fmt.Errorf("a manifest list holds records, not %q", root.Type)
	}
	projected := *root
	projected.Fields = slices.DeleteFunc(slices.Clone(root.Fields), func(f avro.SchemaField) bool {
		return !slices.Contains(listFields, f.Name)
	})
	if !slices.ContainsFunc(projected.Fields, func(f avro.SchemaField) bool { return f.Name == "manifest_path" }) {
		return nil, errors.New("its entries have no manifest_path")
	}
	return projected.Schema()
}

// pathSet remembers paths by a 128-bit hash of each (FNV-1a), a few tens
// of bytes a path whatever its length; two paths that collide (never met
// in practice) would make a walk pass the second as already passed.
type pathSet map[[16]byte]struct{}

func pathKey(p string) [16]byte {
	h := fnv.New128a()
	_, _ = io.WriteString(h, p)
	var k [16]byte
	h.Sum(k[:0])
	return k
}

// add records p and reports whether it is new.
func (s pathSet) add(p string) bool {
	k := pathKey(p)
	if _, ok := s[k]; ok {
		return false
	}
	s[k] = struct{}{}
	return true
}

func (s pathSet) has(p string) bool {
	_, ok := s[pathKey(p)]
	return ok
}

// errTooManyManifests is the corrupt-metadata error of a walk that met more
// than maxWalkManifests distinct manifests.
func errTooManyManifests() error {
	return fmt.Errorf("%w: the table names more than %d distinct manifests", ErrCorruptMetadata, maxWalkManifests)
}
