package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
)

// Reader reads a backup file and checks it as it goes. NewReader reads and
// checks the header; Read returns the payload. The payload is verified only
// when Read has returned io.EOF: until then the bytes read are unverified,
// and any other error (ErrTruncated, ErrCorrupt, or the source's) means the
// file must not be used.
type Reader struct {
	src       io.Reader
	sum       hash.Hash
	header    Header
	remaining int64
	checksum  []byte // the file checksum, once verified
	err       error  // sticky: io.EOF after a verified end
}

// NewReader reads the header part of a backup from r and checks the magic,
// the format version and the header checksum. Its errors wrap ErrNotBackup,
// ErrVersion, ErrTruncated or ErrCorrupt, or are the source's read errors.
func NewReader(r io.Reader) (*Reader, error) {
	br := &Reader{src: r, sum: sha256.New()}
	prefix := make([]byte, prefixLen)
	if err := readFull(r, prefix, "file prefix"); err != nil {
		return nil, err
	}
	if !bytes.Equal(prefix[:8], magic[:]) {
		return nil, fmt.Errorf("%w: the file starts with %q", ErrNotBackup, prefix[:8])
	}
	if v := binary.BigEndian.Uint32(prefix[8:12]); v != FormatVersion {
		return nil, fmt.Errorf("%w: the file is format version %d; this floe reads version %d only", ErrVersion, v, FormatVersion)
	}
	n := binary.BigEndian.Uint32(prefix[12:16])
	if n > maxHeaderLen {
		return nil, fmt.Errorf("%w: header length %d exceeds %d", ErrCorrupt, n, maxHeaderLen)
	}
	body := make([]byte, int(n)+sumLen)
	if err := readFull(r, body, "header"); err != nil {
		return nil, err
	}
	br.sum.Write(prefix)
	br.sum.Write(body[:n])
	if !bytes.Equal(br.sum.Sum(nil), body[n:]) {
		return nil, fmt.Errorf("%w: header checksum mismatch", ErrCorrupt)
	}
	br.sum.Write(body[n:])
	if err := json.Unmarshal(body[:n], &br.header); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	if br.header.PayloadSize < 0 {
		return nil, fmt.Errorf("%w: negative payload size %d", ErrCorrupt, br.header.PayloadSize)
	}
	br.remaining = br.header.PayloadSize
	return br, nil
}

// Header returns the file's header, as checked by NewReader.
func (br *Reader) Header() Header { return br.header }

// Read reads payload bytes. After the last one it reads the file checksum,
// compares it and checks that nothing follows; only then does it return
// io.EOF.
func (br *Reader) Read(p []byte) (int, error) {
	if br.err != nil {
		return 0, br.err
	}
	if br.remaining == 0 {
		if err := br.finish(); err != nil {
			br.err = err
			return 0, err
		}
		br.err = io.EOF
		return 0, io.EOF
	}
	if int64(len(p)) > br.remaining {
		p = p[:br.remaining]
	}
	n, err := br.src.Read(p)
	br.sum.Write(p[:n])
	br.remaining -= int64(n)
	switch {
	case err == io.EOF && br.remaining > 0:
		br.err = fmt.Errorf("%w: the file ends %d bytes into the payload of %d", ErrTruncated, br.header.PayloadSize-br.remaining, br.header.PayloadSize)
	case err != nil && err != io.EOF:
		br.err = fmt.Errorf("backup: reading the payload: %w", err)
	}
	if n > 0 {
		return n, nil // the error, if any, comes with the next Read
	}
	if br.err != nil {
		return 0, br.err
	}
	return 0, nil
}

// finish reads and compares the file checksum and checks the end of file.
func (br *Reader) finish() error {
	want := br.sum.Sum(nil)
	got := make([]byte, sumLen)
	if err := readFull(br.src, got, "file checksum"); err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%w: file checksum mismatch (the payload or the checksum was altered)", ErrCorrupt)
	}
	var one [1]byte
	if n, _ := io.ReadFull(br.src, one[:]); n > 0 {
		return fmt.Errorf("%w: data follows the end of the backup", ErrCorrupt)
	}
	br.checksum = got
	return nil
}

// Checksum returns the file checksum in hex once Read has returned io.EOF,
// else "".
func (br *Reader) Checksum() string {
	if br.checksum == nil {
		return ""
	}
	return hex.EncodeToString(br.checksum)
}

// Verify reads a whole backup from r and checks it. It returns the header
// and the hex file checksum of a sound file; any error means the file must
// not be used (see Reader).
func Verify(r io.Reader) (Header, string, error) {
	br, err := NewReader(r)
	if err != nil {
		return Header{}, "", err
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return br.Header(), "", err
	}
	return br.Header(), br.Checksum(), nil
}
