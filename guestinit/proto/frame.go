package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version this package speaks.
const Version = 1

// FrameType is the one-byte type of a frame.
type FrameType byte

// Frame types. The JSON types (Hello, Request, Response, Event) carry one
// JSON object, possibly split over several frames with FlagMore; Data
// carries raw bytes; DataEnd ends a data stream.
const (
	TypeHello    FrameType = 0x01
	TypeRequest  FrameType = 0x02
	TypeResponse FrameType = 0x03
	TypeEvent    FrameType = 0x04
	TypeData     FrameType = 0x05
	TypeDataEnd  FrameType = 0x06

	// FlagMore, or'ed into a JSON frame's type, says that the message
	// continues in the next frame, which must have the same type.
	FlagMore FrameType = 0x80
)

func (t FrameType) String() string {
	switch t {
	case TypeHello:
		return "hello"
	case TypeRequest:
		return "request"
	case TypeResponse:
		return "response"
	case TypeEvent:
		return "event"
	case TypeData:
		return "data"
	case TypeDataEnd:
		return "data-end"
	}
	return fmt.Sprintf("type-0x%02x", byte(t))
}

// isJSON reports whether frames of type t carry JSON.
func (t FrameType) isJSON() bool {
	return t == TypeHello || t == TypeRequest || t == TypeResponse || t == TypeEvent
}

// Limits of the format.
const (
	// HeaderSize is the length prefix plus the type byte.
	HeaderSize = 5
	// MaxFramePayload is the largest payload of one frame. A frame's
	// length field (type byte + payload) is at most MaxFramePayload+1.
	MaxFramePayload = 1 << 20
	// DefaultMaxMessage bounds one reassembled JSON message unless a Conn
	// is given less: what the host accepts from the agent (a cell's final
	// result can hold many images); the agent accepts far less
	// (MaxRequest). No Conn writes a larger message.
	DefaultMaxMessage = MaxAgentMessage
	// MaxRequest bounds a request's JSON: a cell's code (4 MiB) or an
	// exec's stdin (4 MiB, base64) plus room for the rest.
	MaxRequest = 8 << 20
	// MaxHello bounds a hello message.
	MaxHello = 4 << 10
	// MaxDataEnd bounds the optional error JSON of a DataEnd frame.
	MaxDataEnd = 64 << 10
)

// Errors of the decoder. They are wrapped with detail; test with errors.Is.
var (
	ErrFrameTooLarge   = errors.New("frame too large")
	ErrMessageTooLarge = errors.New("message too large")
	ErrBadFrame        = errors.New("malformed frame")
	ErrUnknownType     = errors.New("unknown frame type")
)

// Frame is one decoded frame.
type Frame struct {
	Type    FrameType // without FlagMore
	More    bool
	Payload []byte
}

// writeFrame writes one frame with a single Write call, so frames from
// different goroutines never interleave on a conn that serializes writes.
func writeFrame(w io.Writer, t FrameType, payload []byte) error {
	if len(payload) > MaxFramePayload {
		return fmt.Errorf("write %v frame: %w: %d bytes", t&^FlagMore, ErrFrameTooLarge, len(payload))
	}
	buf := make([]byte, HeaderSize+len(payload))
	binary.BigEndian.PutUint32(buf, uint32(1+len(payload)))
	buf[4] = byte(t)
	copy(buf[HeaderSize:], payload)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write %v frame: %w", t&^FlagMore, err)
	}
	return nil
}

// readFrame reads one frame into buf (grown up to MaxFramePayload) and
// returns it; the payload aliases buf's storage.
func readFrame(r io.Reader, buf *[]byte) (Frame, error) {
	var hdr [HeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, fmt.Errorf("%w: truncated header: %w", ErrBadFrame, io.ErrUnexpectedEOF)
		}
		return Frame{}, err // io.EOF between frames: a clean end
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n == 0 {
		return Frame{}, fmt.Errorf("%w: zero length", ErrBadFrame)
	}
	if n-1 > MaxFramePayload {
		return Frame{}, fmt.Errorf("%w: %d bytes (max %d)", ErrFrameTooLarge, n-1, MaxFramePayload)
	}
	raw := FrameType(hdr[4])
	f := Frame{Type: raw &^ FlagMore, More: raw&FlagMore != 0}
	switch {
	case f.Type.isJSON():
	case f.Type == TypeData || f.Type == TypeDataEnd:
		if f.More {
			return Frame{}, fmt.Errorf("%w: %v frame with the more flag", ErrBadFrame, f.Type)
		}
	default:
		return Frame{}, fmt.Errorf("%w: 0x%02x", ErrUnknownType, byte(raw))
	}
	size := int(n - 1)
	if cap(*buf) < size {
		*buf = make([]byte, size)
	}
	p := (*buf)[:size]
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, fmt.Errorf("%w: truncated %v payload: %w", ErrBadFrame, f.Type, io.ErrUnexpectedEOF)
		}
		// A read that failed (a timeout, a closed connection) says
		// nothing about what the peer sent.
		return Frame{}, fmt.Errorf("read %v payload: %w", f.Type, err)
	}
	f.Payload = p
	return f, nil
}
