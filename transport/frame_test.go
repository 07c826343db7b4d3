package transport

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFrameRoundTrip(t *testing.T) {
	q := request{ID: 42, Deadline: 1_700_000_000_123_456_789, Method: "Forward", Body: []byte("payload")}
	frame, err := encodeRequest(q)
	require.NoError(t, err)
	p, err := readFrame(bytes.NewReader(frame))
	require.NoError(t, err)
	got, err := decodeRequest(p)
	require.NoError(t, err)
	assert.Equal(t, q, got)

	for _, s := range []response{
		{ID: 1, Body: []byte("ok")},
		{ID: 2, Err: &RemoteError{Code: "not_leader", Message: "try node-2"}},
	} {
		frame, err := encodeResponse(s)
		require.NoError(t, err)
		p, err := readFrame(bytes.NewReader(frame))
		require.NoError(t, err)
		got, err := decodeResponse(p)
		require.NoError(t, err)
		assert.Equal(t, s, got)
	}
}

func TestFrameLimits(t *testing.T) {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], MaxFrameSize+1)
	_, err := readFrame(bytes.NewReader(hdr[:]))
	require.ErrorIs(t, err, ErrFrameTooLarge, "an oversized announcement is refused before reading")

	binary.BigEndian.PutUint32(hdr[:], 10)
	_, err = readFrame(bytes.NewReader(append(hdr[:], "short"...)))
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)

	_, err = encodeRequest(request{Body: make([]byte, MaxFrameSize)})
	require.ErrorIs(t, err, ErrFrameTooLarge)
}

func TestDecodeRejectsGarbage(t *testing.T) {
	for _, p := range [][]byte{
		nil,
		{wireVersion, 0, 0},
		{9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},             // unknown version
		{wireVersion, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 200}, // method longer than frame
	} {
		_, err := decodeRequest(p)
		assert.ErrorIs(t, err, errMalformed, "%v", p)
	}
	_, err := decodeResponse([]byte{wireVersion, 0, 0, 0, 0, 0, 0, 0, 1, 7})
	assert.ErrorIs(t, err, errMalformed, "unknown status")
}
