package proto

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzDecoder feeds arbitrary bytes to the decoder as a hostile peer
// would: it must never panic, never return a frame bigger than the limits,
// and every message it accepts must decode into the typed messages without
// panicking.
func FuzzDecoder(f *testing.F) {
	var seed bytes.Buffer
	c := NewConn(&seed, 0)
	c.WriteJSON(TypeHello, &Hello{Version: Version, Software: "seed"})
	c.WriteJSON(TypeRequest, &Request{Op: OpRun, Code: "1+1"})
	c.WriteData([]byte("abc"))
	c.WriteDataEnd(&Error{Code: CodeIO, Message: "x"})
	f.Add(seed.Bytes())
	f.Add(frame(3, byte(TypeRequest|FlagMore), []byte("{\"")))
	f.Add(frame(0xffffffff, 1, nil))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := NewConn(readWriter{bytes.NewReader(in)}, 64<<10)
		for i := 0; i < 64; i++ {
			m, err := c.ReadMessage()
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrBadFrame) && !errors.Is(err, ErrFrameTooLarge) &&
					!errors.Is(err, ErrUnknownType) && !errors.Is(err, ErrMessageTooLarge) {
					t.Fatalf("unexpected error class: %v", err)
				}
				return
			}
			if m.Type == TypeData && len(m.Payload) > MaxFramePayload || m.Type != TypeData && len(m.Payload) > 64<<10 {
				t.Fatalf("%v message of %d bytes passed the limits", m.Type, len(m.Payload))
			}
			switch m.Type {
			case TypeHello:
				var h Hello
				_ = DecodeJSON(m.Payload, &h)
			case TypeRequest:
				var r Request
				if DecodeJSON(m.Payload, &r) == nil && r.Validate() != nil {
					t.Fatal("accepted request fails validation")
				}
			case TypeResponse:
				var r Response
				_ = DecodeJSON(m.Payload, &r)
			case TypeEvent:
				var e Event
				_ = DecodeJSON(m.Payload, &e)
			case TypeDataEnd:
				if len(m.Payload) > 0 {
					var e Error
					_ = DecodeJSON(m.Payload, &e)
				}
			}
		}
	})
}
