package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"

	"github.com/hashicorp/raft"
)

// formatV2 is the log encoding this package writes; it reads formatV1
// too.
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
// A version 2 record is a version 1 record (with version byte 2) followed
// by the CRC-32C (Castagnoli) of every byte before it, 4 bytes. bbolt
// checks no page's content: without it a byte flipped on disk in an
// entry was read as it stood, applied by this node and sent to lagging
// followers, which then held a state the others never had. A record
// whose checksum does not match is ErrCorruptRecord: raft does not send
// it, and a node that must apply it stops.
//
// Any change to this layout must use a new version byte and keep decoding
// the older versions, because records written by an older binary stay on
// disk until raft compacts them away. (An older binary cannot read version
// 2 records: a node is not moved back to a release before them while its
// log holds any.)
const (
	formatV1 byte = 1
	formatV2 byte = 2
)

// checksumLen is the length of a version 2 record's checksum.
const checksumLen = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

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

// encodeLog returns the version 2 encoding of l.
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
		uvarintLen(uint64(len(l.Extensions))) + len(l.Extensions) + checksumLen
	buf := make([]byte, 0, size)

	buf = append(buf, formatV2)
	buf = binary.BigEndian.AppendUint64(buf, l.Index)
	buf = binary.BigEndian.AppendUint64(buf, l.Term)
	buf = append(buf, byte(l.Type))
	buf = append(buf, flags)
	buf = binary.BigEndian.AppendUint64(buf, uint64(appendedAt))
	buf = binary.AppendUvarint(buf, uint64(len(l.Data)))
	buf = append(buf, l.Data...)
	buf = binary.AppendUvarint(buf, uint64(len(l.Extensions)))
	buf = append(buf, l.Extensions...)
	buf = binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
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
	switch buf[0] {
	case formatV1:
	case formatV2:
		if len(buf) < fixedHeaderLen+checksumLen {
			return fmt.Errorf("%w: record is %d bytes, shorter than the %d byte header and checksum", ErrCorruptRecord, len(buf), fixedHeaderLen+checksumLen)
		}
		body, sum := buf[:len(buf)-checksumLen], binary.BigEndian.Uint32(buf[len(buf)-checksumLen:])
		if crc32.Checksum(body, castagnoli) != sum {
			return fmt.Errorf("%w: checksum mismatch (the record was changed on disk)", ErrCorruptRecord)
		}
		buf = body
	default:
		return fmt.Errorf("%w: got version %d, this build understands versions %d and %d", ErrUnknownFormat, buf[0], formatV1, formatV2)
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
