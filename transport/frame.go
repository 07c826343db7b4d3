package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// MaxFrameSize bounds one frame's payload, enforced on read and on write.
const MaxFrameSize = 64 << 20

// wireVersion is the first byte of every request and response payload, so a
// later format can be told apart from this one.
const wireVersion byte = 1

const (
	statusOK    byte = 0
	statusError byte = 1
)

// maxMessageLen caps a RemoteError message on the wire; longer messages are
// truncated rather than failing the response.
const maxMessageLen = 64 << 10

var errMalformed = errors.New("transport: malformed frame")

// request is one RPC request. Deadline is Unix nanoseconds; 0 means none.
type request struct {
	ID       uint64
	Deadline int64
	Method   string
	Body     []byte
}

// response is one RPC response; Err is nil on success.
type response struct {
	ID   uint64
	Err  *RemoteError
	Body []byte
}

// appendFrame appends the 4-byte length prefix and the payload.
func appendFrame(dst, payload []byte) ([]byte, error) {
	if len(payload) > MaxFrameSize {
		return nil, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, len(payload))
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...), nil
}

// readFrame reads one frame. Memory grows with the bytes actually received,
// so a peer announcing a huge length cannot make us allocate it up front.
func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrameSize {
		return nil, fmt.Errorf("%w: peer announced %d bytes", ErrFrameTooLarge, n)
	}
	if n <= 1<<20 {
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		return p, nil
	}
	var b bytes.Buffer
	b.Grow(1 << 20)
	if _, err := io.CopyN(&b, r, int64(n)); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b.Bytes(), nil
}

// encodeRequest returns the complete frame (length prefix included).
//
//	version u8 | id u64 | deadline i64 | len(method) u16 | method | body
func encodeRequest(q request) ([]byte, error) {
	if len(q.Method) > math.MaxUint16 {
		return nil, fmt.Errorf("transport: method name too long (%d bytes)", len(q.Method))
	}
	size := 1 + 8 + 8 + 2 + len(q.Method) + len(q.Body)
	if size > MaxFrameSize {
		return nil, fmt.Errorf("%w: request of %d bytes", ErrFrameTooLarge, size)
	}
	p := make([]byte, 0, size)
	p = append(p, wireVersion)
	p = binary.BigEndian.AppendUint64(p, q.ID)
	p = binary.BigEndian.AppendUint64(p, uint64(q.Deadline))
	p = binary.BigEndian.AppendUint16(p, uint16(len(q.Method)))
	p = append(p, q.Method...)
	p = append(p, q.Body...)
	return appendFrame(make([]byte, 0, 4+len(p)), p)
}

func decodeRequest(p []byte) (request, error) {
	var q request
	d := decoder{b: p}
	if v := d.u8(); v != wireVersion && d.err == nil {
		return q, fmt.Errorf("%w: unsupported version %d", errMalformed, v)
	}
	q.ID = d.u64()
	q.Deadline = int64(d.u64())
	q.Method = string(d.bytes(int(d.u16())))
	q.Body = d.rest()
	return q, d.err
}

// encodeResponse returns the complete frame (length prefix included).
//
//	version u8 | id u64 | status u8 | [len(code) u16 | code | len(msg) u32 | msg] | body
func encodeResponse(s response) ([]byte, error) {
	p := make([]byte, 0, 1+8+1+len(s.Body))
	p = append(p, wireVersion)
	p = binary.BigEndian.AppendUint64(p, s.ID)
	if s.Err == nil {
		p = append(p, statusOK)
		p = append(p, s.Body...)
	} else {
		code, msg := s.Err.Code, s.Err.Message
		if len(code) > math.MaxUint16 {
			code = code[:math.MaxUint16]
		}
		if len(msg) > maxMessageLen {
			msg = msg[:maxMessageLen]
		}
		p = append(p, statusError)
		p = binary.BigEndian.AppendUint16(p, uint16(len(code)))
		p = append(p, code...)
		p = binary.BigEndian.AppendUint32(p, uint32(len(msg)))
		p = append(p, msg...)
	}
	return appendFrame(make([]byte, 0, 4+len(p)), p)
}

func decodeResponse(p []byte) (response, error) {
	var s response
	d := decoder{b: p}
	if v := d.u8(); v != wireVersion && d.err == nil {
		return s, fmt.Errorf("%w: unsupported version %d", errMalformed, v)
	}
	s.ID = d.u64()
	switch st := d.u8(); {
	case d.err != nil:
	case st == statusOK:
		s.Body = d.rest()
	case st == statusError:
		code := string(d.bytes(int(d.u16())))
		msg := string(d.bytes(int(d.u32())))
		s.Err = &RemoteError{Code: code, Message: msg}
		if len(d.rest()) != 0 && d.err == nil {
			d.err = fmt.Errorf("%w: body after error", errMalformed)
		}
	default:
		return s, fmt.Errorf("%w: unknown status %d", errMalformed, st)
	}
	return s, d.err
}

// decoder reads big-endian fields; the first short read sets err and every
// later read returns zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.err = fmt.Errorf("%w: truncated", errMalformed)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() byte {
	if b := d.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if b := d.bytes(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.bytes(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if b := d.bytes(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (d *decoder) rest() []byte {
	if d.err != nil {
		return nil
	}
	v := d.b
	d.b = nil
	return v
}
