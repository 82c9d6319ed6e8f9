package proto

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cellvm/cellvm/cell"
)

// Bounds on what the agent sends. The host checks every response and event
// against them itself (Response.Validate, Event.Validate, run on the host
// as it decodes) and treats anything past them as a protocol violation;
// it never relies on the guest having clipped. The agent fits what it
// sends to them first (FitResult, FitExec, FitEvent), so an honest guest
// never passes them.
const (
	// MaxAgentMessage bounds one reassembled message from the agent (a
	// response or an event): what the host reads before it decodes.
	MaxAgentMessage = 80 << 20
	// MaxOutputBytes bounds the stdout and the stderr of a cell result or
	// an exec result, each, and the text of one stdout or stderr event.
	// The interpreter keeps 64 KiB at each end of a stream; this leaves
	// room for the cut marker and for invalid bytes replaced by U+FFFD.
	MaxOutputBytes = 1 << 20
	// MaxDisplays bounds the displays of one result.
	MaxDisplays = 1024
	// MaxDisplayMIMEs bounds the MIME types of one display, and
	// MaxMIMEBytes the length of one type's name.
	MaxDisplayMIMEs = 32
	MaxMIMEBytes    = 255
	// MaxDisplaysBytes bounds the displays of one result together (MIME
	// names plus values), as the interpreter counts them.
	MaxDisplaysBytes = 64 << 20
	// MaxErrorNameBytes, MaxErrorValueBytes, MaxTraceback and
	// MaxTracebackBytes bound a cell's error.
	MaxErrorNameBytes  = 1 << 10
	MaxErrorValueBytes = 64 << 10
	MaxTraceback       = 1024
	MaxTracebackBytes  = 1 << 20
)

// errLimit marks a field past its bound.
var errLimit = errors.New("past the host's limit")

func checkLen(what string, n, max int) error {
	if n > max {
		return fmt.Errorf("%s is %d (max %d): %w", what, n, max, errLimit)
	}
	return nil
}

// checkResultSize checks r's fields against the bounds above.
func checkResultSize(r *cell.Result) error {
	if err := checkLen("stdout bytes", len(r.Stdout), MaxOutputBytes); err != nil {
		return err
	}
	if err := checkLen("stderr bytes", len(r.Stderr), MaxOutputBytes); err != nil {
		return err
	}
	if err := checkDisplays(r.Results); err != nil {
		return err
	}
	return checkError(r.Error)
}

func checkDisplays(ds []cell.Display) error {
	if err := checkLen("displays", len(ds), MaxDisplays); err != nil {
		return err
	}
	total := 0
	for i := range ds {
		n, err := displaySize(&ds[i])
		if err != nil {
			return err
		}
		total += n
	}
	return checkLen("display bytes", total, MaxDisplaysBytes)
}

func displaySize(d *cell.Display) (int, error) {
	if err := checkLen("MIME types of a display", len(d.Data), MaxDisplayMIMEs); err != nil {
		return 0, err
	}
	n := 0
	for k, v := range d.Data {
		if err := checkLen("MIME type name bytes", len(k), MaxMIMEBytes); err != nil {
			return 0, err
		}
		n += len(k) + len(v)
	}
	return n, nil
}

func checkError(e *cell.Error) error {
	if e == nil {
		return nil
	}
	if err := checkLen("error name bytes", len(e.Name), MaxErrorNameBytes); err != nil {
		return err
	}
	if err := checkLen("error value bytes", len(e.Value), MaxErrorValueBytes); err != nil {
		return err
	}
	if err := checkLen("traceback entries", len(e.Traceback), MaxTraceback); err != nil {
		return err
	}
	total := 0
	for _, t := range e.Traceback {
		total += len(t)
	}
	return checkLen("traceback bytes", total, MaxTracebackBytes)
}

func checkExecSize(r *cell.ExecResult) error {
	if err := checkLen("stdout bytes", len(r.Stdout), MaxOutputBytes); err != nil {
		return err
	}
	return checkLen("stderr bytes", len(r.Stderr), MaxOutputBytes)
}

// clipText returns s cut from the middle to at most max bytes, with the
// interpreter's cut marker, and the number of bytes cut.
func clipText(s string, max int) (string, int64) {
	if len(s) <= max {
		return s, 0
	}
	keep := max/2 - 64 // the marker takes less than 2*64 bytes
	c := cell.NewClipper(keep, keep)
	c.Write([]byte(s))
	return c.Text()
}

// FitResult makes r fit the bounds above: output streams are cut from the
// middle (and the cut counted in Truncated), displays past the bounds are
// dropped with a note on stderr, and an oversized error is shortened. The
// agent calls it on every result before sending it.
func FitResult(r *cell.Result) {
	var cut int64
	r.Stdout, cut = clipText(r.Stdout, MaxOutputBytes)
	r.Truncated.StdoutBytes += cut
	if kept, note := fitDisplays(r.Results); note != "" {
		r.Results = kept
		r.Stderr += note
	}
	r.Stderr, cut = clipText(r.Stderr, MaxOutputBytes)
	r.Truncated.StderrBytes += cut
	fitError(r.Error)
}

// fitDisplays returns the displays that fit, in order, and a note saying
// what was dropped ("" when nothing was).
func fitDisplays(ds []cell.Display) ([]cell.Display, string) {
	var kept []cell.Display
	total, dropped := 0, 0
	for _, d := range ds {
		n, err := displaySize(&d)
		if err != nil || len(kept) == MaxDisplays || total+n > MaxDisplaysBytes {
			dropped++
			continue
		}
		total += n
		kept = append(kept, d)
	}
	if dropped == 0 {
		return ds, ""
	}
	return kept, fmt.Sprintf("\ncellvm: %d rich results were dropped: a result holds at most %d, of at most %d MIME types each, and %d bytes in all\n",
		dropped, MaxDisplays, MaxDisplayMIMEs, MaxDisplaysBytes)
}

func fitError(e *cell.Error) {
	if e == nil {
		return
	}
	e.Name, _ = clipText(e.Name, MaxErrorNameBytes)
	e.Value, _ = clipText(e.Value, MaxErrorValueBytes)
	if checkError(e) == nil {
		return
	}
	// Keep the innermost entries (the end of the list), which say where
	// the cell failed, each cut to maxTracebackEntry, and say how many
	// outer ones were cut. A new slice: the caller's may be shared.
	const maxTracebackEntry = 16 << 10
	const room = 128 // for the note
	var kept []string
	total, cut := 0, 0
	for i := len(e.Traceback) - 1; i >= 0; i-- {
		t, _ := clipText(e.Traceback[i], maxTracebackEntry)
		if len(kept) == MaxTraceback-1 || total+len(t) > MaxTracebackBytes-room {
			cut = i + 1
			break
		}
		kept = append(kept, t)
		total += len(t)
	}
	slices.Reverse(kept)
	if cut > 0 {
		kept = append([]string{fmt.Sprintf("... [%d outer traceback entries cut] ...", cut)}, kept...)
	}
	e.Traceback = kept
}

// FitExec makes r fit the bounds above.
func FitExec(r *cell.ExecResult) {
	var cut int64
	r.Stdout, cut = clipText(r.Stdout, MaxOutputBytes)
	r.Truncated.StdoutBytes += cut
	r.Stderr, cut = clipText(r.Stderr, MaxOutputBytes)
	r.Truncated.StderrBytes += cut
}

// FitEvent makes e fit the bounds above and reports whether it should be
// sent at all: a rich result too large to stream is left to the final
// result, which fits it with the rest.
func FitEvent(e *cell.Event) bool {
	switch e.Type {
	case cell.EventStdout, cell.EventStderr:
		e.Text, _ = clipText(e.Text, MaxOutputBytes)
	case cell.EventResult:
		if e.Result == nil {
			return false
		}
		if n, err := displaySize(e.Result); err != nil || n > MaxDisplaysBytes {
			return false
		}
	case cell.EventError:
		fitError(e.Error)
	}
	return true
}

// AgentPort is the vsock port the guest's agent listens on and the host
// dials. It lives here, beside the frames, so that the host side needs
// only the protocol, not the agent's implementation.
const AgentPort = 1024

// ReadyPort is the host vsock port the agent connects to once it listens
// on AgentPort, so that the host need not poll for it: the VMM dials the
// host's Unix socket "<vsock uds>_<ReadyPort>" (Firecracker's rule for
// guest-initiated connections), where the daemon listens while the VM
// starts. The agent writes one line, ReadyPrefix and an identifier of its
// boot, and keeps the connection open: a restored or forked machine's
// vsock transport is reset, which ends it, and the agent connects again at
// once, which is that machine's signal. The host trusts the line no
// further than "something answered" and reads at most MaxReadyLine bytes
// of it.
const ReadyPort = 1025

// ReadyPrefix starts the line the agent writes on its ready connection.
const ReadyPrefix = "READY"

// MaxReadyLine bounds the ready line, its newline included.
const MaxReadyLine = 64
