package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime/metrics"
	"testing"
)

// frameSeeds are byte streams as a peer could send them: well-formed request
// and response frames, several frames in a row, and hostile headers.
func frameSeeds() [][]byte {
	mustFrame := func(b []byte, err error) []byte {
		if err != nil {
			panic(err)
		}
		return b
	}
	header := func(n uint32, rest ...byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, n), rest...)
	}
	req := mustFrame(encodeRequest(request{ID: 42, Deadline: 1_700_000_000_123_456_789, Method: "Forward", Body: []byte(`{"x":1}`)}))
	ok := mustFrame(encodeResponse(response{ID: 42, Body: []byte("ok")}))
	remote := mustFrame(encodeResponse(response{ID: 7, Err: &RemoteError{Code: "not_leader", Message: "try node-2"}}))
	empty := mustFrame(encodeRequest(request{}))
	return [][]byte{
		req,
		ok,
		remote,
		empty,
		append(append(append([]byte{}, req...), ok...), remote...),
		nil,
		{0, 0},                              // a truncated header
		header(0),                           // an empty payload
		header(10, 's', 'h', 'o', 'r', 't'), // a truncated payload
		header(1<<20+1, 1, 2, 3),            // just past the small-frame path, almost no data
		header(MaxFrameSize, 1),             // the largest allowed size, one byte sent
		header(MaxFrameSize + 1),            // too large: refused before reading
		header(0xffffffff, 1, 2, 3, 4),      // the largest announceable size
		header(19, 9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),   // unknown version
		header(19, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 200), // method longer than the frame
		header(10, 1, 0, 0, 0, 0, 0, 0, 0, 1, 7),                              // unknown response status
		header(16, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 'c', 0xff, 0xff, 0xff), // error message longer than the frame
	}
}

// countingReader counts the bytes handed out.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// heapAllocBytes is the cumulative number of bytes the process has
// allocated on the heap.
func heapAllocBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// allocSlack covers the first frame buffer readFrame may allocate before
// any payload byte arrives (at most 1 MiB), buffer doubling, and
// allocations by the fuzzing machinery running in the same process.
const allocSlack = 3 << 20

// FuzzReadFrame feeds a byte stream to the frame reader and decodes every
// frame both as a request (what a server reads) and as a response (what a
// client reads). Properties: nothing panics; a length prefix above
// MaxFrameSize is refused with ErrFrameTooLarge; a stream ends with io.EOF
// exactly at a frame boundary and io.ErrUnexpectedEOF otherwise; the memory
// allocated while reading grows with the bytes actually received, not with
// the announced length; and every payload a decoder accepts encodes back to
// the same bytes.
func FuzzReadFrame(f *testing.F) {
	for _, s := range frameSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		payloads, received, allocated, err := readAll(stream)
		if limit := uint64(4*received + allocSlack); allocated > limit {
			// Other goroutines allocate too: measure once more before
			// blaming readFrame.
			if _, _, again, _ := readAll(stream); again > limit {
				t.Fatalf("reading %d bytes allocated %d bytes (limit %d)", received, min(allocated, again), limit)
			}
		}

		consumed := 0
		for _, p := range payloads {
			consumed += 4 + len(p)
		}
		rest := stream[consumed:]
		switch {
		case errors.Is(err, io.EOF):
			if len(rest) != 0 {
				t.Fatalf("io.EOF with %d bytes left", len(rest))
			}
		case errors.Is(err, ErrFrameTooLarge):
			if len(rest) < 4 || binary.BigEndian.Uint32(rest) <= MaxFrameSize {
				t.Fatalf("ErrFrameTooLarge for a frame header %x within the limit", rest[:min(4, len(rest))])
			}
		case errors.Is(err, io.ErrUnexpectedEOF):
			if len(rest) == 0 {
				t.Fatal("io.ErrUnexpectedEOF at a frame boundary")
			}
		default:
			t.Fatalf("unexpected error %v", err)
		}

		for _, p := range payloads {
			checkRequest(t, p)
			checkResponse(t, p)
		}
	})
}

// readAll reads frames from stream until the first error. It returns the
// payloads, how many bytes readFrame took from the stream, how many bytes
// the process allocated meanwhile, and the error that ended the stream.
func readAll(stream []byte) (payloads [][]byte, received int, allocated uint64, err error) {
	cr := &countingReader{r: bytes.NewReader(stream)}
	start := heapAllocBytes()
	for {
		var p []byte
		if p, err = readFrame(cr); err != nil {
			break
		}
		payloads = append(payloads, p)
	}
	return payloads, cr.n, heapAllocBytes() - start, err
}

// checkRequest decodes p as a request; if accepted, it must encode back to p.
func checkRequest(t *testing.T, p []byte) {
	t.Helper()
	q, err := decodeRequest(p)
	if err != nil {
		if !errors.Is(err, errMalformed) {
			t.Fatalf("decodeRequest(%x): unclassified error %v", p, err)
		}
		return
	}
	frame, err := encodeRequest(q)
	if err != nil {
		t.Fatalf("encodeRequest of decoded %+v: %v", q, err)
	}
	if !bytes.Equal(frame[4:], p) {
		t.Fatalf("request does not round-trip:\n  in: %x\n out: %x", p, frame[4:])
	}
}

// checkResponse decodes p as a response; if accepted, it must encode back
// to p, unless the error message is longer than the encoder keeps.
func checkResponse(t *testing.T, p []byte) {
	t.Helper()
	s, err := decodeResponse(p)
	if err != nil {
		if !errors.Is(err, errMalformed) {
			t.Fatalf("decodeResponse(%x): unclassified error %v", p, err)
		}
		return
	}
	if s.Err != nil && s.Body != nil {
		t.Fatalf("decodeResponse(%x) returned both an error and a body", p)
	}
	if s.Err != nil && len(s.Err.Message) > maxMessageLen {
		return // the encoder truncates long messages
	}
	frame, err := encodeResponse(s)
	if err != nil {
		t.Fatalf("encodeResponse of decoded %+v: %v", s, err)
	}
	if !bytes.Equal(frame[4:], p) {
		t.Fatalf("response does not round-trip:\n  in: %x\n out: %x", p, frame[4:])
	}
}
