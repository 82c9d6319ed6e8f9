package cell

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// oldResult encodes a Result the way the API did before resultjson.go:
// json.Marshal of the plain struct inside MarshalJSON, whose bytes the
// outer json.Marshal then compacts again. It is the reference the new
// encoder must match byte for byte.
type oldResult Result

func (r oldResult) MarshalJSON() ([]byte, error) {
	type plain Result
	p := plain(r)
	if p.Results == nil {
		p.Results = []Display{}
	}
	return json.Marshal(p)
}

// oldEvent is Event with its end result encoded the old way.
type oldEvent struct {
	Type   EventType  `json:"type"`
	Text   string     `json:"text,omitempty"`
	Result *Display   `json:"result,omitempty"`
	Error  *Error     `json:"error,omitempty"`
	End    *oldResult `json:"end,omitempty"`
}

func toOldEvent(ev Event) oldEvent {
	return oldEvent{Type: ev.Type, Text: ev.Text, Result: ev.Result, Error: ev.Error, End: (*oldResult)(ev.End)}
}

// awkward holds strings encoding/json escapes in every way it can.
var awkward = []string{
	"",
	"plain text",
	"<script>alert('x') && 1 > 0</script>",
	`"quoted" \back\slash/ slash`,
	"\x00\x01\x07\b\t\n\v\f\r\x1b\x1f\x7f",
	"line\u2028para\u2029end",
	"héllo 世界 🎉 \ufffd",
	"bad \xff\xfe bytes",
	"cut rune \xe4\xb8",
	"surrogate \xed\xa0\x80 overlong \xc0\xaf",
	"\xf4\x90\x80\x80 past U+10FFFF",
	strings.Repeat("<&>", 1000),
}

// corpus is a spread of results: empty, rich MIME data, errors, clipped
// output, timeouts and kills, hostile strings in every field.
func corpus() []Result {
	clip := NewClipper(16, 16)
	fmt.Fprint(clip, strings.Repeat("0123456789<>&\u2028é", 50))
	clipped, cut := clip.Text()

	rs := []Result{
		{},
		{Status: StatusOK, ExecutionCount: 1, Results: []Display{}},
		{Status: StatusOK, ExecutionCount: 7, Stdout: "hi\n", DurationMS: 12, StateKept: true,
			Results: []Display{
				{Main: false, Data: map[string]string{MIMEPNG: "iVBORw0KGgo=", MIMEText: "<Figure size 640x480>"}},
				{Main: true, Data: map[string]string{
					MIMEText: "   a\n0  1", MIMEHTML: "<table><tr><td>&amp;</td></tr></table>",
					MIMEJSON: `{"a": [1, 2, "<x>"]}`, MIMESVG: `<svg xmlns="http://www.w3.org/2000/svg"/>`,
					MIMELaTeX: `$\frac{1}{2}$`, MIMEMD: "# Title\n* item", MIMEJPEG: "/9j/4AAQ",
				}},
				{Data: nil},
				{Data: map[string]string{}},
			}},
		{Status: StatusError, ExecutionCount: 3, Stderr: "Traceback...\n",
			Error: &Error{Name: "KeyError", Value: "'x'", Traceback: []string{"Traceback (most recent call last):", `  File "<cell>", line 1`, "KeyError: 'x'"}}},
		{Status: StatusError, Error: &Error{Name: "OutOfMemory"}, KilledBy: KilledByOOM},
		{Status: StatusError, Error: &Error{Name: "E", Traceback: []string{}}},
		{Status: StatusTimeout, KilledBy: KilledByTimeout, StateKept: true, DurationMS: 30000,
			Error: &Error{Name: "TimeoutError", Value: "cell ran past 30s"}},
		{Status: StatusLost, KilledBy: KilledBySignal, Error: &Error{Name: "InterpreterLost", Value: "signal 9"}},
		{Status: StatusOK, Stdout: clipped, Stderr: clipped, Truncated: Truncated{StdoutBytes: cut, StderrBytes: cut}},
		{Status: StatusOK, ExecutionCount: 2, Checkpoint: 2},
		{Status: StatusError, Checkpoint: -1, CheckpointError: "disk full <&>\u2028\xff"},
		{Status: StatusOK, CheckpointError: "checkpoint: no space"},
		{Status: "not a status <&>", KilledBy: "martians\u2028", ExecutionCount: -1 << 62, DurationMS: -1,
			Truncated: Truncated{StdoutBytes: 1<<63 - 1, StderrBytes: -1 << 63}},
	}
	for _, s := range awkward {
		rs = append(rs, Result{
			Status: Status(s), Stdout: s, Stderr: s, KilledBy: KilledBy(s),
			Results:         []Display{{Main: true, Data: map[string]string{s: s, s + "z": s, "a" + s: s}}},
			Error:           &Error{Name: s, Value: s, Traceback: []string{s, s}},
			CheckpointError: s,
		})
	}
	return rs
}

func events(r *Result) []Event {
	evs := []Event{
		{Type: EventStdout, Text: r.Stdout},
		{Type: EventStderr, Text: r.Stderr},
		{Type: EventError, Error: r.Error},
		{Type: EventEnd, End: r},
		{Type: EventType(r.Stdout), Text: r.Stderr, Error: r.Error, End: r},
	}
	for i := range r.Results {
		evs = append(evs, Event{Type: EventResult, Result: &r.Results[i]})
	}
	return evs
}

// TestResultJSONMatchesEncodingJSON: every encoding path gives the bytes
// the old json.Marshal path gave, and Len is their length.
func TestResultJSONMatchesEncodingJSON(t *testing.T) {
	for i, r := range corpus() {
		checkResult(t, fmt.Sprint("result ", i), r)
	}
}

func checkResult(t *testing.T, name string, r Result) {
	t.Helper()
	want, err := json.Marshal(oldResult(r))
	if err != nil {
		t.Fatalf("%s: old encoding: %v", name, err)
	}
	checkJSON(t, name, ResultJSON(&r), want)
	if got, err := json.Marshal(r); err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s: json.Marshal = %s, %v\nwant %s", name, got, err, want)
	}
	if got, err := r.MarshalJSON(); err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s: MarshalJSON = %s, %v\nwant %s", name, got, err, want)
	}
	for j, ev := range events(&r) {
		want, err := json.Marshal(toOldEvent(ev))
		if err != nil {
			t.Fatalf("%s event %d: old encoding: %v", name, j, err)
		}
		checkJSON(t, fmt.Sprintf("%s event %d", name, j), EventJSON(&ev), want)
		if got, err := json.Marshal(ev); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s event %d: json.Marshal = %s, %v\nwant %s", name, j, got, err, want)
		}
	}
}

func checkJSON(t *testing.T, name string, j JSON, want []byte) {
	t.Helper()
	var b bytes.Buffer
	n, err := j.WriteTo(&b)
	if err != nil || n != int64(len(want)) || !bytes.Equal(b.Bytes(), want) {
		t.Errorf("%s: WriteTo = %d, %v:\n%s\nwant %d:\n%s", name, n, err, b.Bytes(), len(want), want)
	}
	if j.Len() != int64(len(want)) {
		t.Errorf("%s: Len = %d, want %d", name, j.Len(), len(want))
	}
	if got := j.Append([]byte("prefix")); string(got) != "prefix"+string(want) {
		t.Errorf("%s: Append = %s, want prefix%s", name, got, want)
	}
}

// TestResultJSONLarge: a result bigger than the write buffer, its strings
// crossing the buffer's edges with escapes, is still byte-identical.
func TestResultJSONLarge(t *testing.T) {
	s := strings.Repeat("abc<def>\n\xff\u2028é", writeBuf/7)
	checkResult(t, "large", Result{Status: StatusOK, Stdout: s, Stderr: strings.Repeat("x", 3*writeBuf),
		Results: []Display{{Main: true, Data: map[string]string{MIMEPNG: strings.Repeat("iVBOR", writeBuf), MIMEText: s}}}})
}

// FuzzResultJSON: any string in any field encodes as encoding/json does.
func FuzzResultJSON(f *testing.F) {
	for _, s := range awkward {
		f.Add(s, "k")
	}
	f.Fuzz(func(t *testing.T, s, k string) {
		checkResult(t, "fuzz", Result{Status: Status(k), Stdout: s, KilledBy: KilledBy(k),
			Results: []Display{{Data: map[string]string{k: s, s: k}}},
			Error:   &Error{Name: k, Value: s, Traceback: []string{s}}})
	})
}

type failWriter struct{ after int }

func (w *failWriter) Write(b []byte) (int, error) {
	if len(b) > w.after {
		n := w.after
		w.after = 0
		return n, errors.New("connection reset")
	}
	w.after -= len(b)
	return len(b), nil
}

// TestResultJSONWriteError: a failed write is reported, with no more
// counted as written than reached the writer.
func TestResultJSONWriteError(t *testing.T) {
	r := Result{Stdout: strings.Repeat("o", 4*writeBuf)}
	n, err := ResultJSON(&r).WriteTo(&failWriter{after: writeBuf + 10})
	if err == nil || n > writeBuf+10 {
		t.Errorf("WriteTo to a failing writer = %d, %v; want an error and at most %d", n, err, writeBuf+10)
	}
}

// TestMaximalResultMarshalAllocation: MarshalJSON of a maximal result
// (64 MiB of displays, 1 MiB each of stdout and stderr) allocates its
// output once, where json.Marshal of the plain struct grew a buffer and
// copied it out.
func TestMaximalResultMarshalAllocation(t *testing.T) {
	if testing.Short() {
		t.Skip("moves ~300 MiB")
	}
	png := strings.Repeat("iVBORw0KGgo", (64<<20)/11)
	r := Result{Status: StatusOK, Stdout: strings.Repeat("o", 1<<20), Stderr: strings.Repeat("e", 1<<20),
		Results: []Display{{Main: true, Data: map[string]string{MIMEPNG: png}}}}
	marshal := func() int {
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	size := marshal() // warm encoding/json's caches and pools
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n = 3
	for range n {
		marshal()
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / n
	t.Logf("MarshalJSON of a maximal result: %d MiB, %d MiB allocated (%.2fx)", size>>20, per>>20, float64(per)/float64(size))
	if per > uint64(size)*3/2 {
		t.Errorf("MarshalJSON allocated %d MiB, more than 1.5x its %d MiB", per>>20, size>>20)
	}
}
