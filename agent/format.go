package agent

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/cellvm/cellvm/cell"
)

// FormatOptions bound what a tool result shows a model.
type FormatOptions struct {
	// MaxChars bounds each text section (stdout, stderr, each displayed
	// value) in characters; longer text is cut from the middle with the
	// count stated. Default 8000.
	MaxChars int
	// TracebackLines is how many of a traceback's last lines are kept
	// (the end names the failing line and the exception). Default 20.
	TracebackLines int
	// MaxImages bounds the images returned per call. Default 4.
	MaxImages int
	// MaxImageBytes bounds one image's decoded size; larger images are
	// described instead (APIs reject them). Default 5 MiB.
	MaxImageBytes int
}

func (o FormatOptions) withDefaults() FormatOptions {
	if o.MaxChars <= 0 {
		o.MaxChars = 8000
	}
	if o.TracebackLines <= 0 {
		o.TracebackLines = 20
	}
	if o.MaxImages <= 0 {
		o.MaxImages = 4
	}
	if o.MaxImageBytes <= 0 {
		o.MaxImageBytes = 5 << 20
	}
	return o
}

// FormatCell turns a cell's result into the text and images a model reads.
// The text is plain (no terminal codes), bounded, and ends with a note
// that says plainly what happened when the cell did not simply finish: an
// error, a timeout (and whether variables were kept), or an interpreter
// that was killed or lost ("variables are gone"), as StateKept and
// KilledBy say.
func FormatCell(r cell.Result, o FormatOptions) ToolResult {
	o = o.withDefaults()
	var b strings.Builder
	section := func(label, text string, guestCut int64) {
		text = StripANSI(text)
		if text == "" && guestCut == 0 {
			return
		}
		clipped, _ := ClipMiddle(text, o.MaxChars)
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "[%s]\n%s", label, clipped)
		if !strings.HasSuffix(clipped, "\n") {
			b.WriteString("\n")
		}
		if guestCut > 0 {
			fmt.Fprintf(&b, "[the sandbox cut %d bytes from the middle of %s]\n", guestCut, label)
		}
	}
	section("stdout", r.Stdout, r.Truncated.StdoutBytes)
	section("stderr", r.Stderr, r.Truncated.StderrBytes)

	var images []Image
	for i, d := range r.Results {
		shown := false
		for _, mime := range []string{cell.MIMEPNG, cell.MIMEJPEG} {
			data, ok := d.Data[mime]
			if !ok {
				continue
			}
			img, note := decodeImage(mime, data, len(images), o)
			if img != nil {
				images = append(images, *img)
				note = fmt.Sprintf("[image %d: %s, %d bytes, attached]", len(images), mime, len(img.Data))
			}
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(note + "\n")
			shown = true
			break
		}
		if svg, ok := d.Data[cell.MIMESVG]; ok && !shown {
			fmt.Fprintf(&b, "[an SVG image of %d bytes was produced; it cannot be shown to you, use a PNG figure to see it]\n", len(svg))
			shown = true
		}
		text, ok := d.Data[cell.MIMEText]
		if !ok || (shown && !d.Main) {
			continue
		}
		label := fmt.Sprintf("display %d", i+1)
		if d.Main {
			label = fmt.Sprintf("Out[%d]", r.ExecutionCount)
		}
		section(label, text, 0)
	}

	isError := false
	if r.Error != nil {
		isError = true
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString(formatError(r.Error, o))
	}
	if note := statusNote(r); note != "" {
		isError = isError || r.Status != cell.StatusOK
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString(note + "\n")
	}
	if b.Len() == 0 {
		b.WriteString("(the cell ran and printed nothing; print what you need to see)\n")
	}
	return ToolResult{Text: strings.TrimRight(b.String(), "\n"), Images: images, IsError: isError}
}

func decodeImage(mime, data string, have int, o FormatOptions) (*Image, string) {
	if have >= o.MaxImages {
		return nil, fmt.Sprintf("[a further %s image was produced but not attached: at most %d images per call]", mime, o.MaxImages)
	}
	if base64.StdEncoding.DecodedLen(len(data)) > o.MaxImageBytes+3 {
		return nil, fmt.Sprintf("[a %s image of about %d bytes was produced but not attached: larger than %d bytes; make the figure smaller]", mime, base64.StdEncoding.DecodedLen(len(data)), o.MaxImageBytes)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(data))
	if err != nil {
		return nil, fmt.Sprintf("[a %s image was produced but its data is not valid base64]", mime)
	}
	if len(raw) > o.MaxImageBytes {
		return nil, fmt.Sprintf("[a %s image of %d bytes was produced but not attached: larger than %d bytes; make the figure smaller]", mime, len(raw), o.MaxImageBytes)
	}
	return &Image{MIME: mime, Data: raw}, ""
}

// formatError keeps the exception's name and value and the last lines of
// its traceback: the end is where the failing line and the exception are.
func formatError(e *cell.Error, o FormatOptions) string {
	var b strings.Builder
	var lines []string
	for _, entry := range e.Traceback {
		for _, l := range strings.Split(strings.TrimRight(StripANSI(entry), "\n"), "\n") {
			lines = append(lines, l)
		}
	}
	kept, dropped := lastLines(lines, o.TracebackLines)
	if len(kept) > 0 {
		b.WriteString("[traceback]\n")
		if dropped > 0 {
			fmt.Fprintf(&b, "... [%d earlier traceback lines cut] ...\n", dropped)
		}
		tb, _ := ClipMiddle(strings.Join(kept, "\n"), o.MaxChars)
		b.WriteString(tb + "\n")
	}
	value, _ := ClipMiddle(StripANSI(e.Value), o.MaxChars/4)
	fmt.Fprintf(&b, "Error: %s: %s\n", StripANSI(e.Name), value)
	return b.String()
}

// statusNote says, in words a model acts on, how the cell ended when that
// is anything but a plain finish. The words come from StateKept and
// KilledBy, not from Status alone: "timeout" covers both an interrupted
// cell (variables kept) and one whose interpreter had to be killed
// (variables gone), and a model told "kept" wrongly meets a NameError
// later with nothing to explain it. Whenever the variables did not
// survive, the note says "variables are gone".
func statusNote(r cell.Result) string {
	switch r.Survival() {
	case cell.Kept:
		return ""
	case cell.KeptAfterTimeout:
		return "Note: the cell ran past its time limit and was interrupted. The interpreter survived: variables defined before the call are still there (and anything the cell assigned before the interrupt). Do less per call, or pass a larger timeout_s."
	case cell.GoneTimeout:
		return "Note: the cell ran past its time limit and did not stop when interrupted, so the interpreter was killed and restarted: variables are gone, and so are imports and functions. Re-run the setup code before continuing."
	case cell.GoneOOM:
		return "Note: the cell ran out of memory, so the interpreter was killed and restarted: variables are gone, and so are imports and functions. Use less memory (smaller data, chunks) and re-run the setup code."
	case cell.GoneLost:
		return "Note: the interpreter was lost during this cell (it crashed, exited or was killed) and restarted: variables are gone, and so are imports and functions. Re-run the setup code before continuing."
	}
	return "Note: this cell ran in a fresh interpreter (the previous one had ended): variables are gone, and so are imports and functions from earlier cells. Re-run the setup code before continuing."
}

// FormatExec turns an exec result into text for a model.
func FormatExec(r cell.ExecResult, o FormatOptions) ToolResult {
	o = o.withDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "exit code: %d\n", r.ExitCode)
	for _, s := range []struct {
		label string
		text  string
		cut   int64
	}{{"stdout", r.Stdout, r.Truncated.StdoutBytes}, {"stderr", r.Stderr, r.Truncated.StderrBytes}} {
		text := StripANSI(s.text)
		if text == "" {
			continue
		}
		clipped, _ := ClipMiddle(text, o.MaxChars)
		fmt.Fprintf(&b, "[%s]\n%s\n", s.label, strings.TrimRight(clipped, "\n"))
		if s.cut > 0 {
			fmt.Fprintf(&b, "[the sandbox cut %d bytes from the middle of %s]\n", s.cut, s.label)
		}
	}
	if r.TimedOut {
		b.WriteString("Note: the command ran past its time limit and was killed.\n")
	}
	return ToolResult{Text: strings.TrimRight(b.String(), "\n"), IsError: r.ExitCode != 0 || r.TimedOut}
}
