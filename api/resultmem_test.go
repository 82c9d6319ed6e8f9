package api

import (
	"bytes"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/cell"
)

// maximalResult is a cell result at the host's bounds (guestinit/proto:
// 64 MiB of displays, 1 MiB each of stdout and stderr): one PNG's base64
// text, as an honest agent may send.
func maximalResult() cell.Result {
	const displays, output = 64 << 20, 1 << 20
	png := strings.Repeat("iVBORw0KGgo", (displays-len(cell.MIMEPNG))/11)
	return cell.Result{Status: cell.StatusOK, ExecutionCount: 1, StateKept: true,
		Stdout: strings.Repeat("o", output), Stderr: strings.Repeat("e", output),
		Results: []cell.Display{{Main: true, Data: map[string]string{cell.MIMEPNG: png}}}}
}

// sinkWriter is a ResponseWriter that counts and drops the body (or keeps
// it, when keep is set), and flushes.
type sinkWriter struct {
	h    http.Header
	code int
	n    int64
	keep bool
	body bytes.Buffer
}

func newSinkWriter(keep bool) *sinkWriter { return &sinkWriter{h: http.Header{}, keep: keep} }

func (w *sinkWriter) Header() http.Header  { return w.h }
func (w *sinkWriter) WriteHeader(code int) { w.code = code }
func (w *sinkWriter) Flush()               {}
func (w *sinkWriter) Write(b []byte) (int, error) {
	w.n += int64(len(b))
	if w.keep {
		w.body.Write(b)
	}
	return len(b), nil
}

// allocOf returns the bytes f allocates, on average over a few runs, and
// the bytes it wrote to its sinkWriter.
func allocOf(f func(w *sinkWriter)) (alloc uint64, wrote int64) {
	f(newSinkWriter(false)) // warm: type caches and pools
	var before, after runtime.MemStats
	const n = 3
	ws := make([]*sinkWriter, n)
	for i := range ws {
		ws[i] = newSinkWriter(false)
	}
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, w := range ws {
		f(w)
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / n, ws[0].n
}

// TestMaximalResultEncodingAllocation measures what the daemon allocates
// to send one maximal result to an HTTP client, as one JSON body and as
// the stream's two big lines (the display event and the end event).
// Measured before cell.ResultJSON (json.Marshal, then the Marshaler's
// bytes compacted again): 177-222 MiB for the 66 MiB body and for the
// 66 MiB end event (2.7x-3.4x, depending on how warm encoding/json's
// pooled buffer was), the display event 1.0x with that pool warm. After:
// 64 KiB each, the result written straight to the connection through a
// 64 KiB buffer. The
// bound, 1/8 of the bytes sent, also catches a return to building the
// whole encoding in memory (1x).
func TestMaximalResultEncodingAllocation(t *testing.T) {
	if testing.Short() {
		t.Skip("moves ~1 GiB")
	}
	res := maximalResult()
	s := &server{}
	cases := []struct {
		name string
		send func(w *sinkWriter)
	}{
		{"json body", func(w *sinkWriter) { s.writeJSON(w, http.StatusOK, res) }},
		{"display event", func(w *sinkWriter) {
			o := ndjsonOut{w: w, rc: http.NewResponseController(w)}
			if !o.line(cell.Event{Type: cell.EventResult, Result: &res.Results[0]}) {
				t.Error("display event line failed")
			}
		}},
		{"end event", func(w *sinkWriter) {
			o := ndjsonOut{w: w, rc: http.NewResponseController(w)}
			if !o.line(cell.Event{Type: cell.EventEnd, End: &res}) {
				t.Error("end event line failed")
			}
		}},
	}
	for _, c := range cases {
		per, wrote := allocOf(c.send)
		t.Logf("%s: %d MiB sent, %d KiB allocated (%.4fx)", c.name, wrote>>20, per>>10, float64(per)/float64(wrote))
		if wrote < 64<<20 {
			t.Errorf("%s: sent %d bytes, want a maximal result (> 64 MiB)", c.name, wrote)
		}
		if per > uint64(wrote)/8 {
			t.Errorf("%s: sending one maximal result allocated %d KiB, more than 1/8 of its %d MiB", c.name, per>>10, wrote>>20)
		}
	}
}
