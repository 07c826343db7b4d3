// Package backup is floe's backup file: one consistent, point-in-time copy
// of the whole replicated state (the state machine file, fsm.db) with a
// header saying where and when it was taken, and SHA-256 checksums that let
// a reader refuse a truncated or altered file. It writes the file (Writer,
// used by the operator API), reads and verifies it (Reader, Verify), and
// seeds a new cluster's first node from it (Restore). See DESIGN.md.
package backup

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// FormatVersion is the version of the file layout this package writes and
// the only one it reads.
const FormatVersion = 1

// The layout of a version 1 file (integers big-endian):
//
//	offset       size  what
//	0            8     magic "FLOEBKUP"
//	8            4     format version (1)
//	12           4     header length n, at most maxHeaderLen
//	16           n     header, JSON (Header)
//	16+n         32    SHA-256 of bytes [0, 16+n): the header checksum
//	48+n         P     payload: the state machine file, P = Header.PayloadSize
//	48+n+P       32    SHA-256 of bytes [0, 48+n+P): the file checksum
//
// The file ends right after the file checksum.
const (
	prefixLen    = 16
	sumLen       = sha256.Size
	maxHeaderLen = 1 << 20
)

// magic opens every backup file.
var magic = [8]byte{'F', 'L', 'O', 'E', 'B', 'K', 'U', 'P'}

// IsBackupFile reports whether the file at path starts as a floe backup
// does (its magic). A file shorter than that, or unreadable, is not one.
func IsBackupFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var head [len(magic)]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return false
	}
	return head == magic
}

// Errors a Reader (and so Verify and Restore) returns for a file it
// refuses. Each is wrapped with the detail.
var (
	// ErrNotBackup: the file does not start with the backup magic.
	ErrNotBackup = errors.New("backup: not a floe backup file")
	// ErrVersion: the file's format version is not FormatVersion (a file
	// from a newer floe, or a corrupt version field).
	ErrVersion = errors.New("backup: unsupported format version")
	// ErrTruncated: the file ends before the layout says it does.
	ErrTruncated = errors.New("backup: truncated")
	// ErrCorrupt: a checksum does not match, the header does not parse, or
	// bytes follow the end of the file.
	ErrCorrupt = errors.New("backup: corrupt")
)

// Header describes a backup. It is written as JSON; unknown fields are
// ignored by readers of the same format version.
type Header struct {
	// Created is when the copy was taken, UTC.
	Created time.Time `json:"created"`
	// NodeID is the Raft server ID of the node that took the copy.
	NodeID string `json:"node-id"`
	// ClusterID identifies the cluster, when it has an identity of its
	// own; empty otherwise, and Members identifies it.
	ClusterID string `json:"cluster-id,omitempty"`
	// Members are the Raft server IDs in the cluster's configuration as
	// the node knew it when the copy was taken, sorted.
	Members []string `json:"members"`
	// Index is the log index the copy reflects: the state machine's applied
	// index, stored inside the payload too.
	Index uint64 `json:"index"`
	// PayloadSize is the payload's length in bytes.
	PayloadSize int64 `json:"payload-size"`
}

// encodeHeader returns the bytes of a file up to and including the header
// checksum.
func encodeHeader(h Header) ([]byte, error) {
	if h.PayloadSize < 0 {
		return nil, fmt.Errorf("backup: negative payload size %d", h.PayloadSize)
	}
	body, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("backup: encode header: %w", err)
	}
	if len(body) > maxHeaderLen {
		return nil, fmt.Errorf("backup: header of %d bytes exceeds %d", len(body), maxHeaderLen)
	}
	out := make([]byte, 0, prefixLen+len(body)+sumLen)
	out = append(out, magic[:]...)
	out = binary.BigEndian.AppendUint32(out, FormatVersion)
	out = binary.BigEndian.AppendUint32(out, uint32(len(body)))
	out = append(out, body...)
	sum := sha256.Sum256(out)
	return append(out, sum[:]...), nil
}

// Size returns the length in bytes of the file a Writer writes for h: the
// header part, h.PayloadSize and the file checksum. A server uses it as the
// Content-Length of a streamed backup.
func Size(h Header) (int64, error) {
	head, err := encodeHeader(h)
	if err != nil {
		return 0, err
	}
	return int64(len(head)) + h.PayloadSize + sumLen, nil
}

// readFull reads exactly len(p) bytes; a short read is ErrTruncated, naming
// what was being read.
func readFull(r io.Reader, p []byte, what string) error {
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: the file ends inside the %s", ErrTruncated, what)
		}
		return fmt.Errorf("backup: reading the %s: %w", what, err)
	}
	return nil
}
