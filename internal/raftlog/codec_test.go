package raftlog

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

func TestCodecRoundTripAllFields(t *testing.T) {
	in := &raft.Log{
		Index:      1<<40 + 7,
		Term:       1<<33 + 3,
		Type:       raft.LogConfiguration,
		Data:       []byte("some data \x00\xff"),
		Extensions: []byte("ext"),
		AppendedAt: time.Date(2025, 3, 4, 5, 6, 7, 891011121, time.UTC),
	}
	buf, err := encodeLog(in)
	require.NoError(t, err)
	require.Equal(t, formatV2, buf[0])

	// Pre-fill the destination so we can see every field is overwritten.
	out := raft.Log{Index: 99, Term: 99, Type: raft.LogBarrier, Data: []byte("old"), Extensions: []byte("old"), AppendedAt: time.Now()}
	require.NoError(t, decodeLog(buf, &out))
	require.Equal(t, *in, out)

	// The decoded slices must not alias the input buffer.
	for i := range buf {
		buf[i] = 0
	}
	require.Equal(t, []byte("some data \x00\xff"), out.Data)
	require.Equal(t, []byte("ext"), out.Extensions)
}

func TestCodecZeroValues(t *testing.T) {
	buf, err := encodeLog(&raft.Log{Index: 1, Term: 1, Data: []byte{}})
	require.NoError(t, err)
	var out raft.Log
	require.NoError(t, decodeLog(buf, &out))
	require.Equal(t, raft.Log{Index: 1, Term: 1}, out) // empty slices decode as nil
	require.True(t, out.AppendedAt.IsZero())
}

func TestCodecUnixEpochIsNotZeroTime(t *testing.T) {
	in := &raft.Log{Index: 1, AppendedAt: time.Unix(0, 0).UTC()}
	buf, err := encodeLog(in)
	require.NoError(t, err)
	var out raft.Log
	require.NoError(t, decodeLog(buf, &out))
	require.False(t, out.AppendedAt.IsZero())
	require.True(t, in.AppendedAt.Equal(out.AppendedAt))
}

func TestCodecRejectsUnrepresentableTime(t *testing.T) {
	_, err := encodeLog(&raft.Log{Index: 1, AppendedAt: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)})
	require.ErrorContains(t, err, "outside the range")
}

func TestCodecRejectsUnknownVersion(t *testing.T) {
	buf, err := encodeLog(&raft.Log{Index: 1, Term: 1})
	require.NoError(t, err)
	buf[0] = 3
	var out raft.Log
	err = decodeLog(buf, &out)
	require.ErrorIs(t, err, ErrUnknownFormat)
	require.ErrorContains(t, err, "got version 3")
}

// asV1 is the version 1 record of a version 2 one: the same bytes
// without the checksum, as an older binary wrote them.
func asV1(v2 []byte) []byte {
	b := append([]byte{}, v2[:len(v2)-checksumLen]...)
	b[0] = formatV1
	return b
}

// Records an older binary wrote (no checksum) are still read.
func TestCodecReadsVersion1(t *testing.T) {
	in := &raft.Log{Index: 5, Term: 2, Type: raft.LogCommand, Data: []byte("cmd"), AppendedAt: time.Unix(1700000000, 5).UTC()}
	buf, err := encodeLog(in)
	require.NoError(t, err)
	var out raft.Log
	require.NoError(t, decodeLog(asV1(buf), &out))
	require.Equal(t, *in, out)
}

// A byte changed anywhere in a version 2 record (the entry's data, its
// index, the checksum itself) is caught: before, a flipped byte in an
// entry's data was applied and replicated as it read.
func TestCodecCatchesAnyChangedByte(t *testing.T) {
	good, err := encodeLog(&raft.Log{Index: 9, Term: 3, Type: raft.LogCommand, Data: []byte(`{"namespace":["rlog_target"]}`)})
	require.NoError(t, err)
	for i := 1; i < len(good); i++ {
		for _, flip := range []byte{0x01, 0x80, 0xff} {
			b := append([]byte{}, good...)
			b[i] ^= flip
			out := raft.Log{Index: 42}
			err := decodeLog(b, &out)
			require.ErrorIs(t, err, ErrCorruptRecord, "byte %d ^ %#x", i, flip)
			require.Equal(t, raft.Log{Index: 42}, out)
		}
	}
}

func TestCodecRejectsCorruptRecords(t *testing.T) {
	v2, err := encodeLog(&raft.Log{Index: 1, Term: 1, Data: []byte("abc"), Extensions: []byte("de")})
	require.NoError(t, err)
	good := asV1(v2) // the structure is checked as such in version 1 records

	cases := map[string][]byte{
		"empty":          {},
		"v2 too short":   {formatV2, 0, 0, 0},
		"short header":   good[:10],
		"truncated data": good[:len(good)-4],
		"trailing bytes": append(append([]byte{}, good...), 0),
		"unknown flag":   func() []byte { b := append([]byte{}, good...); b[18] = 0x80; return b }(),
	}
	for name, buf := range cases {
		t.Run(name, func(t *testing.T) {
			out := raft.Log{Index: 42}
			err := decodeLog(buf, &out)
			require.ErrorIs(t, err, ErrCorruptRecord)
			require.Equal(t, raft.Log{Index: 42}, out, "destination must be untouched on error")
		})
	}
}
