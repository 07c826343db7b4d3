package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/raft"
)

// formatV1 is the only log encoding this package writes and reads.
//
// Layout of a version 1 record (all fixed-width integers big-endian):
//
//	offset  size  field
//	0       1     format version (= 1)
//	1       8     Index
//	9       8     Term
//	17      1     Type
//	18      1     flags (bit 0: AppendedAt is set; other bits must be 0)
//	19      8     AppendedAt as Unix nanoseconds (int64; 0 when bit 0 is clear)
//	27      var   uvarint len(Data), then Data
//	...     var   uvarint len(Extensions), then Extensions
//
// The record must end exactly after Extensions; trailing bytes are an error.
//
// Any change to this layout must use a new version byte and keep decoding
// version 1, because records written by an older binary stay on disk until
// raft compacts them away.
const formatV1 byte = 1

const (
	fixedHeaderLen = 1 + 8 + 8 + 1 + 1 + 8 // version..AppendedAt
	flagAppendedAt = byte(1 << 0)
	knownFlags     = flagAppendedAt
)

// Time range representable as int64 Unix nanoseconds (years 1677..2262).
var (
	minAppendedAt = time.Unix(0, math.MinInt64)
	maxAppendedAt = time.Unix(0, math.MaxInt64)
)

// ErrUnknownFormat is returned (wrapped) when a stored log record starts with
// a format version byte this build does not understand, e.g. a file written
// by a newer floe binary. Check it with errors.Is.
var ErrUnknownFormat = errors.New("raftlog: unknown log record format version")

// ErrCorruptRecord is returned (wrapped) when a stored log record is
// truncated, has trailing bytes, or is otherwise malformed. Check it with
// errors.Is.
var ErrCorruptRecord = errors.New("raftlog: corrupt log record")

// encodeLog returns the version 1 encoding of l.
//
// It fails only if l.AppendedAt is non-zero but outside the range that int64
// Unix nanoseconds can represent (before 1677 or after 2262).
func encodeLog(l *raft.Log) ([]byte, error) {
	var flags byte
	var appendedAt int64
	if !l.AppendedAt.IsZero() {
		if l.AppendedAt.Before(minAppendedAt) || l.AppendedAt.After(maxAppendedAt) {
			return nil, fmt.Errorf("raftlog: log %d: AppendedAt %s is outside the range of Unix nanoseconds", l.Index, l.AppendedAt)
		}
		flags |= flagAppendedAt
		appendedAt = l.AppendedAt.UnixNano()
	}

	size := fixedHeaderLen +
		uvarintLen(uint64(len(l.Data))) + len(l.Data) +
		uvarintLen(uint64(len(l.Extensions))) + len(l.Extensions)
	buf := make([]byte, 0, size)

	buf = append(buf, formatV1)
	buf = binary.BigEndian.AppendUint64(buf, l.Index)
	buf = binary.BigEndian.AppendUint64(buf, l.Term)
	buf = append(buf, byte(l.Type))
	buf = append(buf, flags)
	buf = binary.BigEndian.AppendUint64(buf, uint64(appendedAt))
	buf = binary.AppendUvarint(buf, uint64(len(l.Data)))
	buf = append(buf, l.Data...)
	buf = binary.AppendUvarint(buf, uint64(len(l.Extensions)))
	buf = append(buf, l.Extensions...)
	return buf, nil
}

// decodeLog overwrites every field of l with the record in buf.
//
// Data and Extensions are copied, so buf may be memory owned by bbolt that
// becomes invalid when its transaction ends. Empty Data or Extensions decode
// as nil. AppendedAt decodes in UTC, or as the zero time if it was not set.
//
// On error l is left unchanged.
func decodeLog(buf []byte, l *raft.Log) error {
	if len(buf) == 0 {
		return fmt.Errorf("%w: empty record", ErrCorruptRecord)
	}
	if buf[0] != formatV1 {
		return fmt.Errorf("%w: got version %d, this build understands only version %d", ErrUnknownFormat, buf[0], formatV1)
	}
	if len(buf) < fixedHeaderLen {
		return fmt.Errorf("%w: record is %d bytes, shorter than the %d byte header", ErrCorruptRecord, len(buf), fixedHeaderLen)
	}

	var out raft.Log
	out.Index = binary.BigEndian.Uint64(buf[1:9])
	out.Term = binary.BigEndian.Uint64(buf[9:17])
	out.Type = raft.LogType(buf[17])
	flags := buf[18]
	if flags&^knownFlags != 0 {
		return fmt.Errorf("%w: unknown flag bits %#x", ErrCorruptRecord, flags&^knownFlags)
	}
	appendedAt := int64(binary.BigEndian.Uint64(buf[19:27]))
	if flags&flagAppendedAt != 0 {
		out.AppendedAt = time.Unix(0, appendedAt).UTC()
	}

	rest := buf[fixedHeaderLen:]
	var err error
	out.Data, rest, err = readBytes(rest, "Data")
	if err != nil {
		return err
	}
	out.Extensions, rest, err = readBytes(rest, "Extensions")
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorruptRecord, len(rest))
	}

	*l = out
	return nil
}

// readBytes reads a uvarint length followed by that many bytes from buf and
// returns a copy of those bytes (nil when the length is 0) and the remainder.
func readBytes(buf []byte, field string) ([]byte, []byte, error) {
	n, used := binary.Uvarint(buf)
	if used <= 0 {
		return nil, nil, fmt.Errorf("%w: bad length prefix for %s", ErrCorruptRecord, field)
	}
	buf = buf[used:]
	if n > uint64(len(buf)) {
		return nil, nil, fmt.Errorf("%w: %s length %d exceeds the %d remaining bytes", ErrCorruptRecord, field, n, len(buf))
	}
	if n == 0 {
		return nil, buf, nil
	}
	out := make([]byte, n)
	copy(out, buf[:n])
	return out, buf[n:], nil
}

func uvarintLen(v uint64) int {
	var tmp [binary.MaxVarintLen64]byte
	return binary.PutUvarint(tmp[:], v)
}
