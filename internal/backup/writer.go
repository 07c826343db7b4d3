package backup

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
)

// ErrPayloadSize is returned by Writer when the payload written is longer
// or shorter than the header announced.
var ErrPayloadSize = errors.New("backup: payload size differs from the header")

// Writer writes one backup file: NewWriter writes the header, Write the
// payload, Close the file checksum. It buffers nothing: every Write goes
// straight to the underlying writer, so a backup of any size is streamed.
type Writer struct {
	w         io.Writer
	sum       hash.Hash
	remaining int64
	written   int64 // bytes of the whole file written so far
	closed    bool
}

// NewWriter writes h's header part to w and returns a Writer for the
// payload, which must be exactly h.PayloadSize bytes. On error nothing
// useful has been written; w may hold a partial header.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	head, err := encodeHeader(h)
	if err != nil {
		return nil, err
	}
	bw := &Writer{w: w, sum: sha256.New(), remaining: h.PayloadSize}
	if _, err := bw.emit(head); err != nil {
		return nil, err
	}
	return bw, nil
}

// emit writes p to the underlying writer and into the checksum.
func (bw *Writer) emit(p []byte) (int, error) {
	n, err := bw.w.Write(p)
	bw.sum.Write(p[:n])
	bw.written += int64(n)
	if err != nil {
		return n, fmt.Errorf("backup: write: %w", err)
	}
	return n, nil
}

// Write writes payload bytes. Writing more than the header announced fails
// with ErrPayloadSize and writes nothing of p.
func (bw *Writer) Write(p []byte) (int, error) {
	if bw.closed {
		return 0, errors.New("backup: write after Close")
	}
	if int64(len(p)) > bw.remaining {
		return 0, fmt.Errorf("%w: %d more bytes than announced", ErrPayloadSize, int64(len(p))-bw.remaining)
	}
	n, err := bw.emit(p)
	bw.remaining -= int64(n)
	return n, err
}

// Close writes the file checksum. It fails with ErrPayloadSize, writing
// nothing, when less payload was written than the header announced: the
// file is then incomplete and a reader refuses it as truncated.
func (bw *Writer) Close() error {
	if bw.closed {
		return nil
	}
	bw.closed = true
	if bw.remaining != 0 {
		return fmt.Errorf("%w: %d bytes missing", ErrPayloadSize, bw.remaining)
	}
	sum := bw.sum.Sum(nil)
	_, err := bw.emit(sum)
	return err
}

// Written is the number of bytes of the file written so far, header and
// checksum included.
func (bw *Writer) Written() int64 { return bw.written }
