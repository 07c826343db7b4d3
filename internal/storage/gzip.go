package storage

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
)

// Ungzipped returns raw decompressed when it is a gzip stream (it starts
// with gzip's magic bytes), else raw itself. Iceberg writers may gzip a
// table metadata file (write.metadata.compression-codec=gzip, named
// *.gz.metadata.json or, by older Java releases, *.metadata.json.gz);
// readers tell by the content, as Java's TableMetadataParser does by name.
// An error means the stream is corrupt.
func Ungzipped(raw []byte) ([]byte, error) {
	if len(raw) < 2 || raw[0] != 0x1f || raw[1] != 0x8b {
		return raw, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	return out, nil
}
