package proto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/cell"
)

// loop is a Conn whose writes are read back by the same Conn.
func loop(max int) (*Conn, *bytes.Buffer) {
	var b bytes.Buffer
	return NewConn(&b, max), &b
}

func TestJSONRoundTrip(t *testing.T) {
	c, _ := loop(0)
	req := Request{Op: OpExec, Argv: []string{"/bin/echo", "hi"}, Stdin: []byte{0, 1, 255}, TimeoutMS: 5000}
	if err := c.WriteJSON(TypeRequest, &req); err != nil {
		t.Fatal(err)
	}
	var got Request
	if err := c.ReadJSON(TypeRequest, &got); err != nil {
		t.Fatal(err)
	}
	if got.Op != req.Op || got.TimeoutMS != 5000 || strings.Join(got.Argv, " ") != "/bin/echo hi" || !bytes.Equal(got.Stdin, req.Stdin) {
		t.Fatalf("round trip: got %+v, want %+v", got, req)
	}
}

// TestLargeMessageIsFragmented sends a result bigger than one frame and
// checks it is split with the more flag and reassembled intact.
func TestLargeMessageIsFragmented(t *testing.T) {
	c, b := loop(0)
	big := strings.Repeat("x", 3*MaxFramePayload+17)
	res := Response{Result: &cell.Result{Status: cell.StatusOK, Results: []cell.Display{{Data: map[string]string{cell.MIMEPNG: big}}}}}
	if err := c.WriteJSON(TypeResponse, &res); err != nil {
		t.Fatal(err)
	}
	if b.Bytes()[4] != byte(TypeResponse|FlagMore) {
		t.Fatalf("first frame type %#x, want response|more", b.Bytes()[4])
	}
	var got Response
	if err := c.ReadJSON(TypeResponse, &got); err != nil {
		t.Fatal(err)
	}
	if got.Result == nil || len(got.Result.Results) != 1 || got.Result.Results[0].Data[cell.MIMEPNG] != big {
		t.Fatal("large result did not survive the round trip")
	}
	if b.Len() != 0 {
		t.Fatalf("%d bytes left unread", b.Len())
	}
}

func TestMessageLimit(t *testing.T) {
	c, _ := loop(MaxFramePayload + 10)
	if err := c.WriteJSON(TypeRequest, &Request{Op: OpRun, Code: strings.Repeat("a", MaxFramePayload+100)}); err != nil {
		t.Fatal(err)
	}
	var got Request
	if err := c.ReadJSON(TypeRequest, &got); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("ReadJSON = %v, want ErrMessageTooLarge", err)
	}
}

func TestDataStream(t *testing.T) {
	c, _ := loop(0)
	data := bytes.Repeat([]byte{0, 0xff, '\n', 'a'}, MaxFramePayload/2+3)
	if _, err := c.DataWriter().Write(data); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteDataEnd(nil); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c.DataReader(-1))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("data stream: %d bytes, err %v; want %d bytes", len(got), err, len(data))
	}
}

func TestDataStreamErrorAndLimit(t *testing.T) {
	c, _ := loop(0)
	c.WriteData([]byte("partial"))
	c.WriteDataEnd(&Error{Code: CodeIO, Message: "disk on fire"})
	_, err := io.ReadAll(c.DataReader(-1))
	var pe *Error
	if !errors.As(err, &pe) || pe.Code != CodeIO {
		t.Fatalf("err = %v, want the data-end error", err)
	}

	c.WriteData(make([]byte, 100))
	c.WriteDataEnd(nil)
	if _, err := io.ReadAll(c.DataReader(99)); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("over-limit stream: err = %v, want ErrMessageTooLarge", err)
	}
}

func frame(n uint32, typ byte, payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, n)
	return append(append(b, typ), payload...)
}

func TestDecoderRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"zero length", frame(0, 1, nil), ErrBadFrame},
		{"oversized", frame(MaxFramePayload+2, byte(TypeData), nil), ErrFrameTooLarge},
		{"huge", frame(0xffffffff, byte(TypeRequest), nil), ErrFrameTooLarge},
		{"unknown type", frame(1, 0x07, nil), ErrUnknownType},
		{"type zero", frame(1, 0x00, nil), ErrUnknownType},
		{"data with more", frame(1, byte(TypeData|FlagMore), nil), ErrBadFrame},
		{"truncated header", []byte{0, 0, 1}, ErrBadFrame},
		{"truncated payload", frame(10, byte(TypeData), []byte("abc")), ErrBadFrame},
		{"type switch inside message", append(frame(2, byte(TypeRequest|FlagMore), []byte("{")), frame(2, byte(TypeEvent), []byte("}"))...), ErrBadFrame},
		{"end inside message", frame(2, byte(TypeRequest|FlagMore), []byte("{")), ErrBadFrame},
		{"oversized data-end", frame(MaxDataEnd+2, byte(TypeDataEnd), make([]byte, MaxDataEnd+1)), ErrMessageTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewConn(readWriter{bytes.NewReader(tc.in)}, 0)
			_, err := c.ReadMessage()
			if !errors.Is(err, tc.want) {
				t.Fatalf("ReadMessage = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestCleanEOF(t *testing.T) {
	c := NewConn(readWriter{bytes.NewReader(nil)}, 0)
	if _, err := c.ReadMessage(); err != io.EOF {
		t.Fatalf("empty stream: %v, want io.EOF", err)
	}
}

func TestRequestValidation(t *testing.T) {
	bad := map[string]string{
		"unknown op":         `{"op":"format-disk"}`,
		"unknown field":      `{"op":"health","color":"red"}`,
		"relative path":      `{"op":"upload","path":"etc/passwd"}`,
		"unclean path":       `{"op":"download","path":"/workspace/../etc/shadow"}`,
		"NUL in path":        `{"op":"upload","path":"/a\u0000b"}`,
		"empty argv":         `{"op":"exec","argv":[]}`,
		"NUL in argv":        `{"op":"exec","argv":["/bin/sh","a\u0000"]}`,
		"negative timeout":   `{"op":"run","code":"1","timeout_ms":-1}`,
		"mode bits":          `{"op":"upload","path":"/x","mode":65536}`,
		"field for wrong op": `{"op":"health","code":"1"}`,
		"trailing data":      `{"op":"health"} {}`,
		"not an object":      `[1,2]`,
		"reseed, no entropy": `{"op":"reseed","time_unix_ns":1}`,
		"reseed, 8 bytes":    `{"op":"reseed","entropy":"AAAAAAAAAAA="}`,
		"reseed, 1 KiB":      `{"op":"reseed","entropy":"` + strings.Repeat("A", 1368) + `"}`,
		"reseed, time < 0":   `{"op":"reseed","entropy":"` + strings.Repeat("A", 44) + `","time_unix_ns":-5}`,
		"entropy for run":    `{"op":"run","code":"1","entropy":"` + strings.Repeat("A", 44) + `"}`,
	}
	for name, js := range bad {
		var r Request
		if err := DecodeJSON([]byte(js), &r); !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: DecodeJSON(%s) = %v, want ErrBadFrame", name, js, err)
		}
	}
	good := []string{
		`{"op":"health"}`,
		`{"op":"run","code":"print(1)","timeout_ms":1000}`,
		`{"op":"exec","argv":["/bin/true"],"stdin":"AAE="}`,
		`{"op":"upload","path":"/workspace/a.csv","mode":420}`,
		`{"op":"download","path":"/workspace/a.csv"}`,
		`{"op":"reseed","entropy":"` + strings.Repeat("A", 44) + `","time_unix_ns":1700000000000000000}`,
	}
	for _, js := range good {
		var r Request
		if err := DecodeJSON([]byte(js), &r); err != nil {
			t.Errorf("DecodeJSON(%s) = %v", js, err)
		}
	}
}

func TestEventAndResponseValidation(t *testing.T) {
	var e Event
	if err := DecodeJSON([]byte(`{"type":"end","end":{"status":"ok"}}`), &e); err == nil {
		t.Error("end event accepted; the agent never sends it")
	}
	var out Event
	if err := DecodeJSON([]byte(`{"type":"stdout","text":"hi"}`), &out); err != nil || out.Text != "hi" {
		t.Errorf("stdout event: %v %+v", err, out)
	}
	var r Response
	if err := DecodeJSON([]byte(`{"error":{"code":"io","message":"x"},"written":3}`), &r); err == nil {
		t.Error("response with two fields accepted")
	}
	if err := DecodeJSON([]byte(`{"result":{"status":"weird"}}`), &r); err == nil {
		t.Error("unknown status accepted")
	}
	if err := DecodeJSON([]byte(`{"health":{"mem_total_bytes":1,"mem_available_bytes":2}}`), &r); err == nil {
		t.Error("available > total accepted")
	}
}

type readWriter struct{ io.Reader }

func (readWriter) Write(p []byte) (int, error) { return len(p), nil }
