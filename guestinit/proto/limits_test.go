package proto

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/cell"
)

// oversized returns results that each pass one of the host's bounds.
func oversized() map[string]*cell.Result {
	many := make([]cell.Display, MaxDisplays+1)
	for i := range many {
		many[i] = cell.Display{Data: map[string]string{cell.MIMEText: "x"}}
	}
	mimes := map[string]string{}
	for i := 0; i <= MaxDisplayMIMEs; i++ {
		mimes[fmt.Sprintf("text/x-%d", i)] = "v"
	}
	big := strings.Repeat("i", 9<<20)
	heavy := make([]cell.Display, 8) // 72 MiB together
	for i := range heavy {
		heavy[i] = cell.Display{Data: map[string]string{cell.MIMEPNG: big}}
	}
	return map[string]*cell.Result{
		"stdout":      {Status: cell.StatusOK, Stdout: strings.Repeat("o", MaxOutputBytes+1)},
		"stderr":      {Status: cell.StatusOK, Stderr: strings.Repeat("e", 3*MaxOutputBytes)},
		"displays":    {Status: cell.StatusOK, Results: many},
		"mime types":  {Status: cell.StatusOK, Results: []cell.Display{{Data: mimes}}},
		"mime name":   {Status: cell.StatusOK, Results: []cell.Display{{Data: map[string]string{strings.Repeat("m", MaxMIMEBytes+1): "v"}}}},
		"bytes":       {Status: cell.StatusOK, Results: heavy},
		"error value": {Status: cell.StatusError, Error: &cell.Error{Name: "ValueError", Value: strings.Repeat("v", MaxErrorValueBytes+1)}},
		"error name":  {Status: cell.StatusError, Error: &cell.Error{Name: strings.Repeat("N", MaxErrorNameBytes+1)}},
		"traceback entries": {Status: cell.StatusError, Error: &cell.Error{Name: "RecursionError",
			Traceback: strings.Split(strings.Repeat("  File \"<cell>\", line 1, in f\n|", 3*MaxTraceback), "|")}},
		"traceback bytes": {Status: cell.StatusError, Error: &cell.Error{Name: "E",
			Traceback: []string{strings.Repeat("t", MaxTracebackBytes/2), strings.Repeat("u", MaxTracebackBytes/2), "E: the end"}}},
	}
}

// TestHostRefusesResultsPastItsLimits: each oversized result, sent as it
// is, fails the host's decoding as a malformed frame (the host's check,
// not the guest's clip), and after FitResult the same result passes.
func TestHostRefusesResultsPastItsLimits(t *testing.T) {
	for name, r := range oversized() {
		t.Run(name, func(t *testing.T) {
			c, _ := loop(0)
			if err := c.WriteJSON(TypeResponse, &Response{Result: r}); err != nil {
				t.Fatal(err)
			}
			var got Response
			if err := c.ReadJSON(TypeResponse, &got); !errors.Is(err, ErrBadFrame) {
				t.Fatalf("host read an oversized result: %v, want ErrBadFrame", err)
			}
			FitResult(r)
			if err := c.WriteJSON(TypeResponse, &Response{Result: r}); err != nil {
				t.Fatal(err)
			}
			if err := c.ReadJSON(TypeResponse, &got); err != nil {
				t.Fatalf("host refused a fitted result: %v", err)
			}
		})
	}
}

func TestFitResultSaysWhatItCut(t *testing.T) {
	rs := oversized()
	r := rs["stdout"]
	FitResult(r)
	if r.Truncated.StdoutBytes == 0 || !strings.Contains(r.Stdout, "bytes cut]") {
		t.Errorf("clipped stdout does not say it was cut: truncated %d", r.Truncated.StdoutBytes)
	}
	if int64(len(r.Stdout))+r.Truncated.StdoutBytes < MaxOutputBytes+1 {
		t.Errorf("kept %d + cut %d bytes of %d", len(r.Stdout), r.Truncated.StdoutBytes, MaxOutputBytes+1)
	}
	r = rs["displays"]
	FitResult(r)
	if len(r.Results) != MaxDisplays || !strings.Contains(r.Stderr, "1 rich results were dropped") {
		t.Errorf("%d displays kept, stderr %q", len(r.Results), r.Stderr)
	}
	r = rs["traceback entries"]
	FitResult(r)
	tb := r.Error.Traceback
	if len(tb) > MaxTraceback || !strings.Contains(tb[0], "outer traceback entries cut") {
		t.Errorf("%d traceback entries, first %q", len(tb), tb[0])
	}
	r = rs["traceback bytes"]
	FitResult(r)
	if tb := r.Error.Traceback; tb[len(tb)-1] != "E: the end" {
		t.Errorf("the innermost traceback entry was not kept: %q", tb[len(tb)-1])
	}
}

func TestHostRefusesOversizedExecAndEvents(t *testing.T) {
	c, _ := loop(0)
	msgs := []struct {
		t FrameType
		v Validator
	}{
		{TypeResponse, &Response{Exec: &cell.ExecResult{Stdout: strings.Repeat("o", MaxOutputBytes+1)}}},
		{TypeEvent, &Event{cell.Event{Type: cell.EventStdout, Text: strings.Repeat("o", MaxOutputBytes+1)}}},
		{TypeEvent, &Event{cell.Event{Type: cell.EventResult, Result: &cell.Display{Data: map[string]string{cell.MIMEPNG: strings.Repeat("p", MaxDisplaysBytes)}}}}},
		{TypeEvent, &Event{cell.Event{Type: cell.EventError, Error: &cell.Error{Name: "E", Value: strings.Repeat("v", MaxErrorValueBytes+1)}}}},
	}
	for i, m := range msgs {
		if err := c.WriteJSON(m.t, m.v); err != nil {
			t.Fatal(err)
		}
		var err error
		if m.t == TypeEvent {
			err = c.ReadJSON(m.t, &Event{})
		} else {
			err = c.ReadJSON(m.t, &Response{})
		}
		if !errors.Is(err, ErrBadFrame) {
			t.Errorf("message %d: host read it: %v, want ErrBadFrame", i, err)
		}
	}
	e := cell.Event{Type: cell.EventStdout, Text: strings.Repeat("o", 2*MaxOutputBytes)}
	if !FitEvent(&e) || len(e.Text) > MaxOutputBytes {
		t.Errorf("FitEvent left %d bytes of text", len(e.Text))
	}
	x := cell.ExecResult{Stderr: strings.Repeat("e", 2*MaxOutputBytes)}
	FitExec(&x)
	if err := (&Response{Exec: &x}).Validate(); err != nil {
		t.Errorf("fitted exec result refused: %v", err)
	}
}

// TestTruncatedStreamsSayUnexpectedEOF: a stream that ends inside a frame,
// a message or a data stream is an unexpected EOF (the peer went away), which
// callers tell apart from a peer that sent something malformed.
func TestTruncatedStreamsSayUnexpectedEOF(t *testing.T) {
	c, b := loop(0)
	c.WriteJSON(TypeResponse, &Response{Result: &cell.Result{Status: cell.StatusOK, Stdout: "hello"}})
	whole := append([]byte(nil), b.Bytes()...)
	for _, n := range []int{2, HeaderSize + 3} {
		b.Reset()
		b.Write(whole[:n])
		if _, err := c.ReadMessage(); !errors.Is(err, io.ErrUnexpectedEOF) || !errors.Is(err, ErrBadFrame) {
			t.Errorf("stream cut at %d bytes: %v, want ErrBadFrame wrapping io.ErrUnexpectedEOF", n, err)
		}
	}
	b.Reset()
	c.WriteData([]byte("partial"))
	if _, err := io.ReadAll(c.DataReader(-1)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("data stream without its end: %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestWriteJSONKeepsHTMLAsIs(t *testing.T) {
	c, b := loop(0)
	c.WriteJSON(TypeEvent, &Event{cell.Event{Type: cell.EventStdout, Text: "<b>&</b>"}})
	if !strings.Contains(b.String(), "<b>&</b>") {
		t.Fatalf("HTML was escaped on the wire: %q", b.String())
	}
}

// TestReseededStepsBounded: the guest's account of a reseed's parts is a
// short UTF-8 line for the host's log, and anything longer or not UTF-8
// is a bad frame.
func TestReseededStepsBounded(t *testing.T) {
	for steps, ok := range map[string]bool{
		"": true,
		"kernel=12 clock=3 network=40 interpreter=250000": true,
		strings.Repeat("x", maxReseedSteps):               true,
		strings.Repeat("x", maxReseedSteps+1):             false,
		"kernel=\xff":                                     false,
	} {
		err := (&Response{Reseeded: &Reseeded{Kernel: true, Steps: steps}}).Validate()
		if (err == nil) != ok {
			t.Errorf("steps %q (%d bytes): Validate = %v, want ok %v", steps, len(steps), err, ok)
		}
	}
}
