package cell

import (
	"bufio"
	"bytes"
	"io"
	"slices"
	"strconv"
	"unicode/utf8"
)

// A maximal cell result is ~66 MiB of JSON (64 MiB of displays, 1 MiB each
// of stdout and stderr), and the daemon may send several at once. Encoding
// it with encoding/json costs the struct walk's growing buffer, a copy out
// of it, and, when the Result sits inside another value (an Event, an HTTP
// body), a second pass that validates and compacts the Marshaler's bytes
// into yet another buffer: about 3x the result in transient garbage.
//
// JSON below writes the same bytes as encoding/json in one pass, straight
// to the connection through a small buffer, after a counting pass that
// gives the exact length (for Content-Length, or for MarshalJSON's one
// allocation). Both passes run the same code, so they cannot disagree.
// The bytes are encoding/json's exactly (HTML-special characters, U+2028
// and U+2029 escaped, invalid UTF-8 as U+FFFD, map keys sorted): clients
// see no change, and resultjson_test.go holds the two encoders to that.
//
// There are functions for Events rather than methods because
// guestinit/proto.Event embeds cell.Event: a method would be promoted and
// would encode a proto.Event as only its cell.Event.

// JSON is one value's encoding, sized but not yet written.
type JSON struct {
	size  int64
	write func(*jsonEnc)
}

// ResultJSON returns r's encoding, the bytes of json.Marshal(r). r must
// not change until the JSON is written.
func ResultJSON(r *Result) JSON { return sized(func(e *jsonEnc) { e.result(r) }) }

// EventJSON returns ev's encoding, the bytes of json.Marshal(ev). ev must
// not change until the JSON is written.
func EventJSON(ev *Event) JSON { return sized(func(e *jsonEnc) { e.event(ev) }) }

func sized(write func(*jsonEnc)) JSON {
	var e jsonEnc
	write(&e)
	return JSON{size: e.n, write: write}
}

// Len is the number of bytes WriteTo writes.
func (j JSON) Len() int64 { return j.size }

// writeBuf bounds what WriteTo holds at a time.
const writeBuf = 64 << 10

// WriteTo writes the encoding to w through a small buffer. After a failed
// write it stops writing and returns the bytes w took.
func (j JSON) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, writeBuf)
	j.write(&jsonEnc{w: bw})
	err := bw.Flush()
	return cw.n, err
}

// countWriter counts what its writer took.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// Append appends the encoding to dst, growing it at most once.
func (j JSON) Append(dst []byte) []byte {
	b := bytes.NewBuffer(slices.Grow(dst, int(j.size)))
	j.write(&jsonEnc{w: b})
	return b.Bytes()
}

// sink is what jsonEnc writes to: a bufio.Writer or a bytes.Buffer. Their
// errors are sticky (bufio) or impossible (bytes), so writes are not
// checked one by one.
type sink interface {
	io.ByteWriter
	io.StringWriter
}

// jsonEnc writes JSON to w, or with w nil only counts the bytes.
type jsonEnc struct {
	w sink
	n int64
}

func (e *jsonEnc) raw(s string) {
	e.n += int64(len(s))
	if e.w != nil {
		_, _ = e.w.WriteString(s)
	}
}

func (e *jsonEnc) byte1(c byte) {
	e.n++
	if e.w != nil {
		_ = e.w.WriteByte(c)
	}
}

func (e *jsonEnc) int(v int64) {
	var b [20]byte
	e.raw(string(strconv.AppendInt(b[:0], v, 10)))
}

func (e *jsonEnc) bool(v bool) {
	if v {
		e.raw("true")
	} else {
		e.raw("false")
	}
}

const hexDigits = "0123456789abcdef"

// str writes s as a JSON string the way encoding/json does by default:
// ", \ and control characters escaped (\b \f \n \r \t by name, the rest
// as \u00XX), <, > and & as \u003c \u003e \u0026, U+2028 and U+2029 as
// \u2028 \u2029, and each byte of invalid UTF-8 as \ufffd.
func (e *jsonEnc) str(s string) {
	e.byte1('"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if plainASCII(c) {
				i++
				continue
			}
			e.raw(s[start:i])
			switch c {
			case '\\', '"':
				e.byte1('\\')
				e.byte1(c)
			case '\b':
				e.raw(`\b`)
			case '\f':
				e.raw(`\f`)
			case '\n':
				e.raw(`\n`)
			case '\r':
				e.raw(`\r`)
			case '\t':
				e.raw(`\t`)
			default:
				e.raw(`\u00`)
				e.byte1(hexDigits[c>>4])
				e.byte1(hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			e.raw(s[start:i])
			e.raw(`\ufffd`)
		case r == '\u2028' || r == '\u2029':
			e.raw(s[start:i])
			e.raw(`\u202`)
			e.byte1(hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	e.raw(s[start:])
	e.byte1('"')
}

// plainASCII reports whether c goes into a JSON string as itself.
func plainASCII(c byte) bool {
	return c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

func (e *jsonEnc) key(k string) {
	// Every key below is plain ASCII.
	e.byte1('"')
	e.raw(k)
	e.raw(`":`)
}

func (e *jsonEnc) result(r *Result) {
	e.key1("status")
	e.str(string(r.Status))
	e.comma("execution_count")
	e.int(int64(r.ExecutionCount))
	e.comma("stdout")
	e.str(r.Stdout)
	e.comma("stderr")
	e.str(r.Stderr)
	e.comma("results")
	e.byte1('[')
	for i := range r.Results {
		if i > 0 {
			e.byte1(',')
		}
		e.display(&r.Results[i])
	}
	e.byte1(']')
	e.comma("error")
	e.errorObj(r.Error)
	e.comma("state_kept")
	e.bool(r.StateKept)
	e.comma("killed_by")
	if r.KilledBy == KilledByNone {
		e.raw("null")
	} else {
		e.str(string(r.KilledBy))
	}
	e.comma("truncated")
	e.key1("stdout_bytes")
	e.int(r.Truncated.StdoutBytes)
	e.comma("stderr_bytes")
	e.int(r.Truncated.StderrBytes)
	e.byte1('}')
	e.comma("duration_ms")
	e.int(r.DurationMS)
	if r.Checkpoint != 0 {
		e.comma("checkpoint")
		e.int(int64(r.Checkpoint))
	}
	if r.CheckpointError != "" {
		e.comma("checkpoint_error")
		e.str(r.CheckpointError)
	}
	e.byte1('}')
}

// key1 opens an object with its first key; comma adds a later one.
func (e *jsonEnc) key1(k string) {
	e.byte1('{')
	e.key(k)
}

func (e *jsonEnc) comma(k string) {
	e.byte1(',')
	e.key(k)
}

func (e *jsonEnc) display(d *Display) {
	e.key1("main")
	e.bool(d.Main)
	e.comma("data")
	if d.Data == nil {
		e.raw("null")
	} else {
		keys := make([]string, 0, len(d.Data))
		for k := range d.Data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		e.byte1('{')
		for i, k := range keys {
			if i > 0 {
				e.byte1(',')
			}
			e.str(k)
			e.byte1(':')
			e.str(d.Data[k])
		}
		e.byte1('}')
	}
	e.byte1('}')
}

func (e *jsonEnc) errorObj(er *Error) {
	if er == nil {
		e.raw("null")
		return
	}
	e.key1("name")
	e.str(er.Name)
	e.comma("value")
	e.str(er.Value)
	e.comma("traceback")
	if er.Traceback == nil {
		e.raw("null")
	} else {
		e.byte1('[')
		for i, line := range er.Traceback {
			if i > 0 {
				e.byte1(',')
			}
			e.str(line)
		}
		e.byte1(']')
	}
	e.byte1('}')
}

// event follows Event's omitempty tags.
func (e *jsonEnc) event(ev *Event) {
	e.key1("type")
	e.str(string(ev.Type))
	if ev.Text != "" {
		e.comma("text")
		e.str(ev.Text)
	}
	if ev.Result != nil {
		e.comma("result")
		e.display(ev.Result)
	}
	if ev.Error != nil {
		e.comma("error")
		e.errorObj(ev.Error)
	}
	if ev.End != nil {
		e.comma("end")
		e.result(ev.End)
	}
	e.byte1('}')
}
