package storage

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
)

// MaxReadBytes bounds what Read returns, and MaxUngzippedBytes what
// Ungzipped inflates (gzip expands up to about 1000:1). The objects read
// whole are metadata files, manifest lists and view metadata, JSON or
// Avro documents far below this: tables with tens of thousands of
// snapshots stay within tens of MiB. Whoever can write into an allowed
// location could otherwise have a node read, and parse at several times
// the size, any object a register names.
const (
	MaxReadBytes      = 128 << 20
	MaxUngzippedBytes = MaxReadBytes
)

// Ungzipped returns raw decompressed when it is a gzip stream (it starts
// with gzip's magic bytes), else raw itself. Iceberg writers may gzip a
// table metadata file (write.metadata.compression-codec=gzip, named
// *.gz.metadata.json or, by older Java releases, *.metadata.json.gz);
// readers tell by the content, as Java's TableMetadataParser does by name.
// An error means the stream is corrupt or inflates beyond
// MaxUngzippedBytes.
func Ungzipped(raw []byte) ([]byte, error) {
	return ungzipped(raw, MaxUngzippedBytes)
}

// UngzippedUpTo is Ungzipped with limit in place of MaxUngzippedBytes: a
// stream that inflates beyond it is an error wrapping ErrTooLarge.
func UngzippedUpTo(raw []byte, limit int64) ([]byte, error) {
	return ungzipped(raw, limit)
}

func ungzipped(raw []byte, limit int64) ([]byte, error) {
	if len(raw) < 2 || raw[0] != 0x1f || raw[1] != 0x8b {
		return raw, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(io.LimitReader(zr, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(out)) > limit {
		return nil, fmt.Errorf("%w: gzip stream inflates beyond %d bytes", ErrTooLarge, limit)
	}
	return out, nil
}
