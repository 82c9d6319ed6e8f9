package proto

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Conn reads and writes frames on a byte stream. Reads must come from one
// goroutine at a time; writes may come from several (each frame is one
// Write under a lock, and a fragmented JSON message holds the lock for all
// its frames).
type Conn struct {
	r          io.Reader
	w          io.Writer
	maxMessage int
	buf        []byte // reused for frame payloads

	wmu sync.Mutex
}

// NewConn returns a Conn on rw (which it reads ahead of the current
// frame, so rw must not be read by others while the Conn is in use) that accepts reassembled JSON messages of
// up to maxMessage bytes (<= 0: DefaultMaxMessage).
func NewConn(rw io.ReadWriter, maxMessage int) *Conn {
	if maxMessage <= 0 {
		maxMessage = DefaultMaxMessage
	}
	// Buffered reads: a frame header is 5 bytes, and reading it straight
	// from a socket would cost a system call per header.
	return &Conn{r: bufio.NewReaderSize(rw, 64<<10), w: rw, maxMessage: maxMessage}
}

// Message is one JSON message (reassembled from its frames) or one data
// frame. Payload is the caller's to keep for JSON messages; for Data it is
// only valid until the next read.
type Message struct {
	Type    FrameType
	Payload []byte
}

// ReadMessage reads the next message. JSON messages split over several
// frames are reassembled, bounded by the Conn's maxMessage; a DataEnd
// payload is bounded by MaxDataEnd.
func (c *Conn) ReadMessage() (Message, error) {
	f, err := readFrame(c.r, &c.buf)
	if err != nil {
		return Message{}, err
	}
	switch {
	case f.Type == TypeData:
		return Message{Type: f.Type, Payload: f.Payload}, nil
	case f.Type == TypeDataEnd:
		if len(f.Payload) > MaxDataEnd {
			return Message{}, fmt.Errorf("%w: data-end payload %d bytes", ErrMessageTooLarge, len(f.Payload))
		}
		return Message{Type: f.Type, Payload: bytes.Clone(f.Payload)}, nil
	}
	if len(f.Payload) > c.maxMessage {
		return Message{}, fmt.Errorf("%w: %v message over %d bytes", ErrMessageTooLarge, f.Type, c.maxMessage)
	}
	msg := Message{Type: f.Type, Payload: bytes.Clone(f.Payload)}
	if !f.More {
		return msg, nil
	}
	// A message of many frames is kept as its frames' copies (in pooled
	// buffers) and joined once at the end, at its exact size: appending
	// frame by frame would regrow (and copy) the whole message every few
	// frames, about five times its size for a large result.
	parts, total := [][]byte{msg.Payload}, len(msg.Payload)
	defer func() {
		for _, p := range parts[1:] {
			framePool.Put(&p)
		}
	}()
	for f.More {
		t := msg.Type
		if f, err = readFrame(c.r, &c.buf); err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: stream ended inside a %v message: %w", ErrBadFrame, t, io.ErrUnexpectedEOF)
			}
			return Message{}, err
		}
		if f.Type != t {
			return Message{}, fmt.Errorf("%w: %v frame inside a %v message", ErrBadFrame, f.Type, t)
		}
		if total+len(f.Payload) > c.maxMessage {
			return Message{}, fmt.Errorf("%w: %v message over %d bytes", ErrMessageTooLarge, t, c.maxMessage)
		}
		parts = append(parts, append((*framePool.Get().(*[]byte))[:0], f.Payload...))
		total += len(f.Payload)
	}
	msg.Payload = bytes.Join(parts, nil)
	return msg, nil
}

// framePool holds frame-sized buffers for reassembling messages.
var framePool = sync.Pool{New: func() any { b := make([]byte, 0, MaxFramePayload); return &b }}

// Validator is implemented by every JSON message type.
type Validator interface {
	Validate() error
}

// ReadJSON reads the next message, which must be of type want, and decodes
// and validates it into v. Unknown fields and trailing data are errors.
func (c *Conn) ReadJSON(want FrameType, v Validator) error {
	m, err := c.ReadMessage()
	if err != nil {
		return err
	}
	if m.Type != want {
		return fmt.Errorf("%w: got a %v frame, want %v", ErrBadFrame, m.Type, want)
	}
	return DecodeJSON(m.Payload, v)
}

// DecodeJSON decodes one JSON object strictly and validates it.
func DecodeJSON(p []byte, v Validator) error {
	d := json.NewDecoder(bytes.NewReader(p))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: decode %T: %v", ErrBadFrame, v, err)
	}
	if d.More() {
		return fmt.Errorf("%w: trailing data after %T", ErrBadFrame, v)
	}
	if _, err := d.Token(); err != io.EOF {
		return fmt.Errorf("%w: trailing data after %T", ErrBadFrame, v)
	}
	if err := v.Validate(); err != nil {
		return fmt.Errorf("%w: %T: %v", ErrBadFrame, v, err)
	}
	return nil
}

// WriteJSON encodes v as one message of type t, split into frames of at
// most MaxFramePayload bytes.
func (c *Conn) WriteJSON(t FrameType, v any) error {
	if !t.isJSON() {
		return fmt.Errorf("write %v: not a JSON frame type", t)
	}
	b, err := marshal(v)
	if err != nil {
		return fmt.Errorf("encode %v: %w", t, err)
	}
	if len(b) > DefaultMaxMessage {
		return fmt.Errorf("write %v: %w: %d bytes (max %d)", t, ErrMessageTooLarge, len(b), DefaultMaxMessage)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for len(b) > MaxFramePayload {
		if err := writeFrame(c.w, t|FlagMore, b[:MaxFramePayload]); err != nil {
			return err
		}
		b = b[MaxFramePayload:]
	}
	return writeFrame(c.w, t, b)
}

// WriteData writes p as data frames of at most MaxFramePayload bytes.
func (c *Conn) WriteData(p []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for len(p) > 0 {
		n := min(len(p), MaxFramePayload)
		if err := writeFrame(c.w, TypeData, p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// WriteDataEnd ends a data stream, with e saying why it ended early (nil:
// it is complete).
func (c *Conn) WriteDataEnd(e *Error) error {
	var payload []byte
	if e != nil {
		var err error
		if payload, err = json.Marshal(e); err != nil {
			return fmt.Errorf("encode data-end: %w", err)
		}
		if len(payload) > MaxDataEnd {
			payload, _ = json.Marshal(&Error{Code: e.Code, Message: "(message too long)"})
		}
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return writeFrame(c.w, TypeDataEnd, payload)
}

// WriterTo returns an io.Writer that sends what is written as data frames.
func (c *Conn) DataWriter() io.Writer { return dataWriter{c} }

type dataWriter struct{ c *Conn }

func (w dataWriter) Write(p []byte) (int, error) {
	if err := w.c.WriteData(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// DataReader returns an io.Reader over the data frames that follow, up to
// the DataEnd frame: it then returns io.EOF, or the DataEnd's error as a
// *Error. Any other frame is a protocol error. limit bounds the bytes read
// (< 0: none; 0: the stream must be empty); a stream past it fails with
// ErrMessageTooLarge, before any byte of the frame that passed it is
// returned.
func (c *Conn) DataReader(limit int64) *DataReader {
	return &DataReader{c: c, limit: limit}
}

// DataReader reads one data stream; see Conn.DataReader.
type DataReader struct {
	c     *Conn
	limit int64
	n     int64
	pend  []byte
	err   error
}

// Read implements io.Reader.
func (d *DataReader) Read(p []byte) (int, error) {
	for len(d.pend) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		m, err := d.c.ReadMessage()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: stream ended inside data: %w", ErrBadFrame, io.ErrUnexpectedEOF)
			}
			d.err = err
			return 0, err
		}
		switch m.Type {
		case TypeData:
			d.n += int64(len(m.Payload))
			if d.limit >= 0 && d.n > d.limit {
				d.err = fmt.Errorf("%w: data stream over %d bytes", ErrMessageTooLarge, d.limit)
				return 0, d.err
			}
			d.pend = m.Payload
		case TypeDataEnd:
			d.err = io.EOF
			if len(m.Payload) > 0 {
				var e Error
				if err := DecodeJSON(m.Payload, &e); err != nil {
					d.err = err
				} else {
					d.err = &e
				}
			}
		default:
			d.err = fmt.Errorf("%w: %v frame inside a data stream", ErrBadFrame, m.Type)
		}
	}
	n := copy(p, d.pend)
	d.pend = d.pend[n:]
	return n, nil
}

// Done reports whether the stream's DataEnd (or an error) was read.
func (d *DataReader) Done() bool { return d.err != nil && len(d.pend) == 0 }

// Drain reads and discards the rest of the stream and returns its ending
// (nil for a complete stream).
func (d *DataReader) Drain() error {
	_, err := io.Copy(io.Discard, d)
	if err == nil {
		return nil
	}
	return err
}

// marshal encodes v as JSON without HTML escaping: HTML results would
// otherwise grow by up to six times ("<" as "\u003c") on the wire.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
