package purge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/apache/iceberg-go"

	"github.com/floe-catalog/floe/internal/storage"
)

// Opener is implemented by a Reader that can also stream an object. When a
// Walker's Reader implements it, each manifest is decoded from the object's
// body as the bytes arrive, so the walk never holds a whole manifest, not
// even its bytes. Without it, the walk reads each manifest whole with Read
// and still decodes its entries one at a time.
type Opener interface {
	// Open returns the body of the object at uri; the caller closes it. A
	// missing object is an error wrapping storage.ErrNotFound, returned by
	// Open itself rather than by a later Read of the body. An error from a
	// Read of the body is a storage failure (worth retrying), never a sign
	// that the content is corrupt.
	Open(ctx context.Context, uri string) (io.ReadCloser, error)
}

// manifestEntries calls fn with the file path and recorded size of every
// entry of the manifest mf, whatever its status, in the order the manifest
// stores them: the order iceberg.ReadManifest returns them in. Entries are
// decoded one at a time, without their column statistics, as the manifest
// is read, so memory holds one Avro block of the manifest (64 KiB
// uncompressed when iceberg-go wrote it), plus the manifest's bytes when the
// Reader is not an Opener.
//
// A missing manifest is reported to OnMissing and yields nothing (or
// OnMissing's error). An error
// opening or reading the manifest is returned as the storage gave it (a
// failure while reading the body is wrapped with the manifest's path); one
// that does not decode wraps ErrCorruptMetadata. A manifest corrupt partway
// fails only when the walk reaches the bad part, after fn has seen the
// entries before it. fn's error, or the context's, stops the walk and is
// returned unchanged.
func (w Walker) manifestEntries(ctx context.Context, mf iceberg.ManifestFile, fn func(uri string, size int64) error) error {
	if !w.mayRead(mf.FilePath()) {
		return nil
	}
	body, err := w.open(ctx, mf.FilePath())
	if errors.Is(err, storage.ErrNotFound) {
		return w.missing(mf.FilePath(), false)
	}
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	src := &trackedReader{r: body}
	// Only the path and size of each entry are used: the projection skips
	// the column statistics (sizes, counts, lower and upper bounds per
	// column), which are most of an entry's bytes in a wide table, and the
	// reader checks the manifest's metadata as NewManifestReader does.
	// Its header first, within bounds (checkedHeader).
	hdr, err := checkedHeader(src)
	if err != nil {
		return decodeError("manifest", mf.FilePath(), src, err)
	}
	mr, err := iceberg.NewManifestReaderWithProjection(mf, hdr, iceberg.ManifestEntryProjection{})
	if err != nil {
		return decodeError("manifest", mf.FilePath(), src, err)
	}
	defer func() { _ = mr.Close() }()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		entry, err := mr.ReadEntry()
		if errors.Is(err, io.EOF) {
			// The Avro reader returns io.EOF only at a clean end of the
			// file; a truncated one is io.ErrUnexpectedEOF.
			break
		}
		if err != nil {
			return decodeError("manifest", mf.FilePath(), src, err)
		}
		df := entry.DataFile()
		if err := fn(df.FilePath(), df.FileSizeBytes()); err != nil {
			return err
		}
	}
	if err := mr.Close(); err != nil {
		return decodeError("manifest", mf.FilePath(), src, err)
	}
	return nil
}

// open returns the body of the object at uri: streamed when the Reader is
// an Opener, else read whole.
func (w Walker) open(ctx context.Context, uri string) (io.ReadCloser, error) {
	if o, ok := w.Reader.(Opener); ok {
		return o.Open(ctx, uri)
	}
	data, err := w.Reader.Read(ctx, uri)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// decodeError classifies a failure to decode the file at uri, a kind
// ("manifest", "manifest list") read through src: a failed read of its
// body is a storage error, anything else is corrupt content.
func decodeError(kind, uri string, src *trackedReader, err error) error {
	if src.err != nil {
		return fmt.Errorf("purge: reading %s %s: %w", kind, uri, src.err)
	}
	return fmt.Errorf("%w: %s %s: %v", ErrCorruptMetadata, kind, uri, err)
}

// trackedReader remembers the first error other than io.EOF that the
// underlying reader returned, so that a transfer that broke off is not
// mistaken for a manifest that does not decode.
type trackedReader struct {
	r   io.Reader
	err error
}

func (t *trackedReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && t.err == nil {
		t.err = err
	}
	return n, err
}
