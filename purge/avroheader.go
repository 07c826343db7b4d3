package purge

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Bounds of the header of an Avro object container file (its magic, its
// metadata map, its sync marker) that a walk reads before any decoder
// sees the file. The decoders bound each key and value but not their
// number nor the header's size: a manifest whose header carried 8M tiny
// keys took 1.2 GB while it was opened. And iceberg-go caches the reader
// schema it derives from each distinct writer schema (256 of them, keyed
// by the schema's text): a manifest whose writer schema was padded to
// 40 MiB kept 40 MiB of it for good. A manifest's writer schema describes
// its entries (the table's partition fields among them), not the table's
// columns: a few kilobytes.
const (
	maxHeaderBytes  = 16 << 20
	maxHeaderKeys   = 1024
	maxWriterSchema = 256 << 10
)

var avroMagic = []byte("Obj\x01")

// errHeader wraps a header past a bound, or one that does not parse.
var errHeader = errors.New("avro header")

// checkedHeader reads the Avro object container header at the start of
// body, within the bounds above, and returns a reader that gives the whole
// body again: the bytes it read, then the rest. A header past a bound or
// that does not parse is an error wrapping errHeader; a failed read of
// body is returned as the read failed (a trackedReader body tells the
// two apart).
func checkedHeader(body io.Reader) (io.Reader, error) {
	var seen bytes.Buffer
	br := bufio.NewReader(io.TeeReader(io.LimitReader(body, maxHeaderBytes), &seen))
	err := readHeader(br)
	if err != nil {
		if seen.Len() >= maxHeaderBytes {
			return nil, fmt.Errorf("%w: larger than %d bytes", errHeader, maxHeaderBytes)
		}
		return nil, err
	}
	return io.MultiReader(bytes.NewReader(seen.Bytes()), body), nil
}

func readHeader(br *bufio.Reader) error {
	magic := make([]byte, len(avroMagic))
	if _, err := io.ReadFull(br, magic); err != nil {
		return headerRead(err)
	}
	if !bytes.Equal(magic, avroMagic) {
		return fmt.Errorf("%w: not an Avro object container file", errHeader)
	}
	keys := int64(0)
	for {
		count, err := binary.ReadVarint(br)
		if err != nil {
			return headerRead(err)
		}
		if count == 0 {
			break
		}
		if count < 0 {
			count = -count
			if _, err := binary.ReadVarint(br); err != nil { // the block's size
				return headerRead(err)
			}
		}
		if count < 0 || count > maxHeaderKeys-keys {
			return fmt.Errorf("%w: more than %d metadata keys", errHeader, maxHeaderKeys)
		}
		keys += count
		for range count {
			key, err := readBytes(br, maxHeaderBytes)
			if err != nil {
				return err
			}
			limit := int64(maxHeaderBytes)
			if string(key) == "avro.schema" {
				limit = maxWriterSchema
			}
			n, err := binary.ReadVarint(br)
			if err != nil {
				return headerRead(err)
			}
			if n < 0 || n > limit {
				return fmt.Errorf("%w: metadata %q of %d bytes, over %d", errHeader, key, n, limit)
			}
			if _, err := br.Discard(int(n)); err != nil {
				return headerRead(err)
			}
		}
	}
	if _, err := br.Discard(16); err != nil { // the sync marker
		return headerRead(err)
	}
	return nil
}

// readBytes reads an Avro string or bytes of at most limit bytes.
func readBytes(br *bufio.Reader, limit int64) ([]byte, error) {
	n, err := binary.ReadVarint(br)
	if err != nil {
		return nil, headerRead(err)
	}
	if n < 0 || n > limit {
		return nil, fmt.Errorf("%w: a metadata key of %d bytes", errHeader, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(br, b); err != nil {
		return nil, headerRead(err)
	}
	return b, nil
}

// headerRead makes a header cut short a header error; any other read
// error stays what it is.
func headerRead(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: cut short", errHeader)
	}
	return err
}
