package interp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
)

func TestStatePersistsAcrossCells(t *testing.T) {
	in := newTestInterp(t, nil)
	r1 := run(t, in, "import math\nx = 21\nopen('data.txt', 'w').write('kept')")
	expectOK(t, r1)
	r2 := run(t, in, "y = x * 2\nmath.sqrt(16), open('data.txt').read(), y")
	expectOK(t, r2)
	if got := mainText(t, r2); got != "(4.0, 'kept', 42)" {
		t.Errorf("main result %q, want (4.0, 'kept', 42)", got)
	}
	if r1.ExecutionCount != 1 || r2.ExecutionCount != 2 {
		t.Errorf("execution counts %d, %d; want 1, 2", r1.ExecutionCount, r2.ExecutionCount)
	}
	if !r2.StateKept {
		t.Error("state_kept false after a normal cell")
	}
	// Functions and classes defined in cells live in __main__, so pickle
	// works as in a notebook.
	r3 := run(t, in, "import pickle\nclass P: pass\ndef f(): return 7\npickle.loads(pickle.dumps(f))()")
	expectOK(t, r3)
	if got := mainText(t, r3); got != "7" {
		t.Errorf("pickled function returned %q", got)
	}
}

func TestLastExpressionIsMainResult(t *testing.T) {
	in := newTestInterp(t, nil)
	for _, tc := range []struct {
		code     string
		wantMain string // "" means no main result
	}{
		{"1 + 1", "2"},
		{"a = 5", ""},
		{"a = 5\na", "5"},
		{"None", ""},
		{"a;", ""}, // trailing semicolon hides it, as in IPython
		{"a  # comment", "5"},
		{"if a:\n    a + 1", ""}, // last statement is not an expression
		{"import asyncio\nawait asyncio.sleep(0)\n'awaited'", "'awaited'"},
		{"_", "'awaited'"}, // _ is the previous main result
	} {
		res := run(t, in, tc.code)
		expectOK(t, res)
		m := res.MainResult()
		switch {
		case tc.wantMain == "" && m != nil:
			t.Errorf("%q: unexpected main result %v", tc.code, m.Data)
		case tc.wantMain != "" && (m == nil || m.Data[cell.MIMEText] != tc.wantMain):
			t.Errorf("%q: main result %v, want %q", tc.code, m, tc.wantMain)
		}
	}
}

func TestDataFrameGivesHTML(t *testing.T) {
	in := newTestInterp(t, nil)
	res := run(t, in, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
	expectOK(t, res)
	m := res.MainResult()
	if m == nil {
		t.Fatalf("no main result: %+v", res)
	}
	if html := m.Data[cell.MIMEHTML]; !strings.Contains(html, "<table") || !strings.Contains(html, "<td>x</td>") {
		t.Errorf("text/html = %q", html)
	}
	if !strings.Contains(m.Data[cell.MIMEText], "a  b") {
		t.Errorf("text/plain = %q", m.Data[cell.MIMEText])
	}
}

func decodePNG(t *testing.T, b64 string) (w, h int) {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("image/png is not base64: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("image/png does not decode: %v", err)
	}
	return img.Bounds().Dx(), img.Bounds().Dy()
}

func TestMatplotlibFigureComesBackAsPNG(t *testing.T) {
	in := newTestInterp(t, nil)
	res := run(t, in, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t')\nplt.show()")
	expectOK(t, res)
	var pngs []string
	for _, d := range res.Results {
		if p, ok := d.Data[cell.MIMEPNG]; ok {
			pngs = append(pngs, p)
		}
	}
	if len(pngs) != 1 {
		t.Fatalf("got %d PNG results, want 1: %+v", len(pngs), res)
	}
	if w, h := decodePNG(t, pngs[0]); w < 100 || h < 100 {
		t.Errorf("PNG is %dx%d", w, h)
	}
	if strings.Contains(res.Stderr, "non-GUI") {
		t.Errorf("plt.show() warned: %q", res.Stderr)
	}
	// The figure was closed: the next cell has none.
	res = run(t, in, "len(plt.get_fignums())")
	if got := mainText(t, res); got != "0" {
		t.Errorf("figures still open after the cell: %s", got)
	}
	// A figure as the last expression is shown once, as the main result.
	res = run(t, in, "fig, ax = plt.subplots()\nax.bar([1, 2], [3, 4])\nfig")
	expectOK(t, res)
	if len(res.Results) != 1 || !res.Results[0].Main || res.Results[0].Data[cell.MIMEPNG] == "" {
		t.Fatalf("figure as last expression: %+v", res.Results)
	}
	decodePNG(t, res.Results[0].Data[cell.MIMEPNG])
}

func TestDisplayAddsResults(t *testing.T) {
	in := newTestInterp(t, nil)
	res := run(t, in, "display(1, 'two')\nfrom IPython.display import HTML, display as idisplay\nidisplay(HTML('<b>hi</b>'))\n3")
	expectOK(t, res)
	if len(res.Results) != 4 {
		t.Fatalf("got %d results, want 4: %+v", len(res.Results), res.Results)
	}
	want := []struct {
		main bool
		mime string
		text string
	}{
		{false, cell.MIMEText, "1"},
		{false, cell.MIMEText, "'two'"},
		{false, cell.MIMEHTML, "<b>hi</b>"},
		{true, cell.MIMEText, "3"},
	}
	for i, w := range want {
		d := res.Results[i]
		if d.Main != w.main || d.Data[w.mime] != w.text {
			t.Errorf("result %d = %+v, want main=%v %s=%q", i, d, w.main, w.mime, w.text)
		}
	}
	if res.Stdout != "" {
		t.Errorf("IPython display printed to stdout: %q", res.Stdout)
	}
}

func TestRichReprs(t *testing.T) {
	in := newTestInterp(t, nil)
	res := run(t, in, `
class R:
    def _repr_svg_(self): return '<svg/>'
    def _repr_json_(self): return {'k': [1, 2]}
    def _repr_png_(self): return b'\x89PNG'
R()`)
	expectOK(t, res)
	d := mainOf(t, res)
	if d.Data[cell.MIMESVG] != "<svg/>" {
		t.Errorf("svg = %q", d.Data[cell.MIMESVG])
	}
	var js map[string][]int
	if err := json.Unmarshal([]byte(d.Data[cell.MIMEJSON]), &js); err != nil || len(js["k"]) != 2 {
		t.Errorf("json = %q (%v)", d.Data[cell.MIMEJSON], err)
	}
	if d.Data[cell.MIMEPNG] != base64.StdEncoding.EncodeToString([]byte("\x89PNG")) {
		t.Errorf("png = %q", d.Data[cell.MIMEPNG])
	}
	// A huge repr is clipped like output.
	res = run(t, in, "list(range(10**6))")
	expectOK(t, res)
	if text := mainText(t, res); len(text) > 2*(cell.DefaultHeadBytes+cell.DefaultTailBytes) ||
		!strings.Contains(text, "characters cut") || !strings.HasSuffix(text, "999999]") {
		t.Errorf("huge repr: %d bytes, ends %q", len(text), text[max(0, len(text)-20):])
	}
}

func mainOf(t *testing.T, res cell.Result) cell.Display {
	t.Helper()
	m := res.MainResult()
	if m == nil {
		t.Fatalf("no main result: %+v", res)
	}
	return *m
}

func TestStdoutStderrSeparateAndStreamed(t *testing.T) {
	in := newTestInterp(t, nil)
	var rec recorder
	code := `import sys, time, os
print('first')
print('oops', file=sys.stderr)
time.sleep(1.5)
os.system('echo from-shell')
os.write(1, b'raw-fd\n')
print('last')`
	res, err := in.Run(context.Background(), code, 30*time.Second, rec.on)
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	expectOK(t, res)
	if res.Stdout != "first\nfrom-shell\nraw-fd\nlast\n" {
		t.Errorf("stdout = %q", res.Stdout)
	}
	if res.Stderr != "oops\n" {
		t.Errorf("stderr = %q", res.Stderr)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.events) == 0 || rec.events[len(rec.events)-1].Type != cell.EventEnd {
		t.Fatalf("events do not end with end: %+v", rec.events)
	}
	var first time.Time
	var out, errs strings.Builder
	for i, e := range rec.events {
		switch e.Type {
		case cell.EventStdout:
			if first.IsZero() {
				first = rec.times[i]
			}
			out.WriteString(e.Text)
		case cell.EventStderr:
			errs.WriteString(e.Text)
		}
	}
	if first.IsZero() || end.Sub(first) < time.Second {
		t.Errorf("first stdout event came %v before the end; want it while the cell still ran", end.Sub(first))
	}
	if out.String() != res.Stdout || errs.String() != res.Stderr {
		t.Errorf("streamed %q / %q, result %q / %q", out.String(), errs.String(), res.Stdout, res.Stderr)
	}
	if e := rec.events[len(rec.events)-1].End; e == nil || e.Stdout != res.Stdout {
		t.Errorf("end event does not carry the result: %+v", e)
	}
}

func TestExceptionsAreResults(t *testing.T) {
	in := newTestInterp(t, nil)
	res := run(t, in, "d = {}\ndef f():\n    return d['x']\nf()")
	if res.Status != cell.StatusError || res.Error == nil {
		t.Fatalf("status %q error %+v", res.Status, res.Error)
	}
	if res.Error.Name != "KeyError" || res.Error.Value != "'x'" {
		t.Errorf("error = %s: %s", res.Error.Name, res.Error.Value)
	}
	tb := strings.Join(res.Error.Traceback, "\n")
	for _, want := range []string{"<cell-1>", "return d['x']", "in f", "KeyError: 'x'"} {
		if !strings.Contains(tb, want) {
			t.Errorf("traceback lacks %q:\n%s", want, tb)
		}
	}
	if strings.Contains(tb, "cellvm_driver") || strings.Contains(tb, "\x1b") {
		t.Errorf("traceback shows driver frames or escapes:\n%s", tb)
	}
	if !res.StateKept {
		t.Error("state_kept false after an exception")
	}

	res = run(t, in, "x = (1,\ny = 2")
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "SyntaxError" {
		t.Fatalf("syntax error: %+v", res)
	}
	tb = strings.Join(res.Error.Traceback, "\n")
	if !strings.Contains(tb, "<cell-2>") || strings.Contains(tb, "cellvm_driver") || strings.ContainsRune(tb, 0x1b) {
		t.Errorf("syntax error traceback:\n%s", tb)
	}

	// Output printed before the exception is kept.
	res = run(t, in, "print('before')\n1/0")
	if res.Stdout != "before\n" || res.Error == nil || res.Error.Name != "ZeroDivisionError" {
		t.Errorf("got stdout %q error %+v", res.Stdout, res.Error)
	}
	// Colour codes written into an exception message are removed.
	res = run(t, in, "raise ValueError('\\x1b[31mred\\x1b[0m')")
	if res.Error == nil || res.Error.Value != "red" || strings.ContainsRune(strings.Join(res.Error.Traceback, ""), 0x1b) {
		t.Errorf("escapes not removed: %+v", res.Error)
	}
	// sys.exit(0) ends the cell normally; exit(3) is an error; neither
	// ends the interpreter.
	expectOK(t, run(t, in, "import sys\nsys.exit(0)"))
	res = run(t, in, "exit(3)")
	if res.Status != cell.StatusError || res.Error.Name != "SystemExit" || !res.StateKept {
		t.Errorf("exit(3): %+v", res)
	}
	expectOK(t, run(t, in, "d"))
}

func TestInputFailsAtOnce(t *testing.T) {
	t.Parallel()
	in := newTestInterp(t, nil)
	start := time.Now()
	res := runT(t, in, "name = input('name? ')", 20*time.Second)
	if time.Since(start) > 5*time.Second {
		t.Errorf("input() took %v", time.Since(start))
	}
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "EOFError" || !strings.Contains(res.Error.Value, "input() is not available") {
		t.Fatalf("input(): %+v", res)
	}
}

func TestTimeoutInterruptsAndKeepsState(t *testing.T) {
	t.Parallel()
	in := newTestInterp(t, nil)
	expectOK(t, run(t, in, "x = 'survives'"))
	start := time.Now()
	res := runT(t, in, "import time\nprint('working')\ntime.sleep(60)", time.Second)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timed-out cell took %v", d)
	}
	if res.Status != cell.StatusTimeout || res.KilledBy != cell.KilledByTimeout || !res.StateKept {
		t.Fatalf("got status %q killed_by %q state_kept %v", res.Status, res.KilledBy, res.StateKept)
	}
	if res.Error == nil || res.Error.Name != "TimeoutError" || !strings.Contains(strings.Join(res.Error.Traceback, "\n"), "time.sleep(60)") {
		t.Errorf("error = %+v", res.Error)
	}
	if res.Stdout != "working\n" {
		t.Errorf("stdout = %q", res.Stdout)
	}
	res = run(t, in, "x")
	expectOK(t, res)
	if got := mainText(t, res); got != "'survives'" {
		t.Errorf("x = %s after timeout", got)
	}
}

func TestCellIgnoringInterruptIsKilled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, code string }{
		{"catches KeyboardInterrupt", "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass"},
		{"masks SIGINT", "import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\ntime.sleep(60)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := newTestInterp(t, nil) // grace 500ms
			expectOK(t, run(t, in, "x = 1"))
			start := time.Now()
			res := runT(t, in, tc.code, 500*time.Millisecond)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("cell took %v to be killed", d)
			}
			if res.Status != cell.StatusTimeout || res.KilledBy != cell.KilledByTimeout || res.StateKept {
				t.Fatalf("got status %q killed_by %q state_kept %v", res.Status, res.KilledBy, res.StateKept)
			}
			res = run(t, in, "x")
			if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "NameError" {
				t.Fatalf("next cell should see a fresh interpreter: %+v", res)
			}
			if !res.StateKept {
				t.Error("state_kept false on the cell after the restart (the loss was already reported)")
			}
		})
	}
}

func TestUserInterrupt(t *testing.T) {
	t.Parallel()
	in := newTestInterp(t, nil)
	expectOK(t, run(t, in, "x = 5"))
	go func() {
		for !in.Interrupt() {
			time.Sleep(10 * time.Millisecond)
		}
	}()
	res := runT(t, in, "import time\nfor i in range(600):\n    time.sleep(0.1)", time.Minute)
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "KeyboardInterrupt" || !res.StateKept || res.KilledBy != cell.KilledByNone {
		t.Fatalf("interrupted cell: %+v", res)
	}
	if got := mainText(t, run(t, in, "x")); got != "5" {
		t.Errorf("x = %s", got)
	}
	if in.Interrupt() {
		t.Error("Interrupt reported a running cell while idle")
	}
}

func TestContextCancelInterrupts(t *testing.T) {
	t.Parallel()
	in := newTestInterp(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	res, err := in.Run(ctx, "import time\ntime.sleep(30)", time.Minute, nil)
	if err == nil || res.Error == nil || res.Error.Name != "KeyboardInterrupt" || !res.StateKept {
		t.Fatalf("err %v res %+v", err, res)
	}
}

func TestInterpreterDeathIsLost(t *testing.T) {
	t.Parallel()
	in := newTestInterp(t, nil)
	expectOK(t, run(t, in, "x = 1"))
	res := run(t, in, "import os\nprint('bye')\nos._exit(3)")
	if res.Status != cell.StatusLost || res.StateKept || res.KilledBy != cell.KilledByNone {
		t.Fatalf("os._exit: %+v", res)
	}
	if res.Error == nil || !strings.Contains(res.Error.Value, "exited with code 3") || res.Stdout != "bye\n" {
		t.Errorf("error %+v stdout %q", res.Error, res.Stdout)
	}
	res = run(t, in, "'x' in globals()")
	expectOK(t, res)
	if got := mainText(t, res); got != "False" {
		t.Errorf("old state visible in new interpreter: %s", got)
	}
	res = run(t, in, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
	if res.Status != cell.StatusLost || res.KilledBy != cell.KilledBySignal || res.StateKept {
		t.Fatalf("SIGKILL: %+v", res)
	}
	if !strings.Contains(res.Error.Value, "killed by signal killed") {
		t.Errorf("error %+v", res.Error)
	}
	expectOK(t, run(t, in, "1"))
}

func TestDeathBetweenCellsIsReported(t *testing.T) {
	t.Parallel()
	in := newTestInterp(t, nil)
	expectOK(t, run(t, in, "import os, threading, time\nthreading.Timer(0.2, lambda: os._exit(0)).start()"))
	time.Sleep(time.Second)
	res := run(t, in, "1")
	expectOK(t, res)
	if res.StateKept || !strings.Contains(res.Stderr, "fresh one") {
		t.Errorf("silent restart: %+v", res)
	}
}

func TestRestart(t *testing.T) {
	t.Parallel()
	in := newTestInterp(t, nil)
	expectOK(t, run(t, in, "x = 1"))
	if err := in.Restart(); err != nil {
		t.Fatal(err)
	}
	res := run(t, in, "'x' in globals()")
	if got := mainText(t, res); got != "False" {
		t.Errorf("x survived a restart")
	}
	// Restart during a cell ends it as lost. The cell's Run returns as
	// soon as Restart kills the process, before Restart starts the next
	// one: the test waits for Restart before its next cell, which could
	// otherwise run and end the test (closing the interpreter) first.
	restarted := make(chan error, 1)
	go func() {
		for in.running.Load() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond)
		restarted <- in.Restart()
	}()
	res = runT(t, in, "import time\ntime.sleep(30)", time.Minute)
	if res.Status != cell.StatusLost || res.StateKept {
		t.Errorf("cell during restart: %+v", res)
	}
	if err := <-restarted; err != nil {
		t.Errorf("restart during a cell: %v", err)
	}
	expectOK(t, run(t, in, "1"))
}

func TestClosedInterp(t *testing.T) {
	in := newTestInterp(t, nil)
	expectOK(t, run(t, in, "1"))
	in.Close()
	if _, err := in.Run(context.Background(), "1", 0, nil); err != ErrClosed {
		t.Errorf("Run after Close: %v", err)
	}
}
