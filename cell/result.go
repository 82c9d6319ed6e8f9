package cell

import (
	"encoding/json"
	"fmt"
)

// Status says how a cell ended.
type Status string

const (
	// StatusOK: the cell ran to its end.
	StatusOK Status = "ok"
	// StatusError: the cell raised an exception (Error says which), or was
	// killed for using too much memory (KilledBy "oom").
	StatusError Status = "error"
	// StatusTimeout: the cell ran past its time limit. StateKept says
	// whether the interrupt worked and variables survived.
	StatusTimeout Status = "timeout"
	// StatusLost: the interpreter process ended during the cell for any
	// other reason (os._exit, a crash, a signal, a kill after an ignored
	// interrupt, a restart). State is always lost; the next cell starts a
	// fresh interpreter.
	StatusLost Status = "lost"
)

// KilledBy names what killed the interpreter during a cell. The zero value
// means nothing did and is encoded as JSON null.
type KilledBy string

const (
	// KilledByNone: the interpreter was not killed.
	KilledByNone KilledBy = ""
	// KilledByTimeout: the cell ran past its limit and was interrupted
	// (StateKept true) or, ignoring the interrupt, killed (StateKept false).
	KilledByTimeout KilledBy = "timeout"
	// KilledByOOM: the kernel's OOM killer ended the interpreter.
	KilledByOOM KilledBy = "oom"
	// KilledBySignal: the interpreter died from a signal that was neither
	// the timeout's nor the OOM killer's.
	KilledBySignal KilledBy = "signal"
)

// MarshalJSON encodes KilledByNone as null and the rest as strings.
func (k KilledBy) MarshalJSON() ([]byte, error) {
	if k == KilledByNone {
		return []byte("null"), nil
	}
	return json.Marshal(string(k))
}

// UnmarshalJSON accepts null or one of the known strings.
func (k *KilledBy) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*k = KilledByNone
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("killed_by: %w", err)
	}
	switch v := KilledBy(s); v {
	case KilledByNone, KilledByTimeout, KilledByOOM, KilledBySignal:
		*k = v
		return nil
	}
	return fmt.Errorf("killed_by: unknown value %q", s)
}

// Display is one rich output of a cell: a MIME bundle in Jupyter's display
// data convention. Binary types (image/png) are base64 text.
type Display struct {
	// Main marks the value of the cell's last expression; display() calls
	// and figures produce Displays with Main false.
	Main bool              `json:"main"`
	Data map[string]string `json:"data"`
}

// MIME types the interpreter produces.
const (
	MIMEText  = "text/plain"
	MIMEHTML  = "text/html"
	MIMEPNG   = "image/png"
	MIMESVG   = "image/svg+xml"
	MIMEJSON  = "application/json"
	MIMEJPEG  = "image/jpeg"
	MIMELaTeX = "text/latex"
	MIMEMD    = "text/markdown"
)

// Error is an exception raised by a cell, or the supervisor's account of
// why a cell could not finish (TimeoutError, InterpreterLost, OutOfMemory).
// Traceback holds plain text entries without terminal colour codes.
type Error struct {
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	Traceback []string `json:"traceback"`
}

// Truncated counts the bytes cut from the middle of each output stream.
type Truncated struct {
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
}

// Result is the outcome of one cell.
type Result struct {
	Status         Status    `json:"status"`
	ExecutionCount int       `json:"execution_count"`
	Stdout         string    `json:"stdout"`
	Stderr         string    `json:"stderr"`
	Results        []Display `json:"results"`
	Error          *Error    `json:"error"`
	StateKept      bool      `json:"state_kept"`
	KilledBy       KilledBy  `json:"killed_by"`
	Truncated      Truncated `json:"truncated"`
	DurationMS     int64     `json:"duration_ms"`
	// Checkpoint is the checkpoint recorded after the cell (a sandbox
	// with every-cell checkpoints), and CheckpointError why none was: the
	// sandbox runs on either way.
	Checkpoint      int    `json:"checkpoint,omitempty"`
	CheckpointError string `json:"checkpoint_error,omitempty"`
}

// MainResult returns the Display marked main, or nil when the cell's last
// statement was not an expression (or its value was None).
func (r *Result) MainResult() *Display {
	for i := range r.Results {
		if r.Results[i].Main {
			return &r.Results[i]
		}
	}
	return nil
}

// MarshalJSON writes results as [] rather than null when there are none, so
// clients can index it without a nil check. It encodes in one allocation
// of the exact size (resultjson.go); a caller that writes the result to a
// connection should use ResultJSON and write it straight there.
func (r Result) MarshalJSON() ([]byte, error) {
	return ResultJSON(&r).Append(nil), nil
}

// ExecResult is the outcome of running one argv command (the exec route).
type ExecResult struct {
	// ExitCode is the command's exit status; a command ended by a signal
	// reports 128+signal number, as shells do; a command that could not be
	// started reports 127 with the reason in Stderr.
	ExitCode   int       `json:"exit_code"`
	Stdout     string    `json:"stdout"`
	Stderr     string    `json:"stderr"`
	TimedOut   bool      `json:"timed_out"`
	Truncated  Truncated `json:"truncated"`
	DurationMS int64     `json:"duration_ms"`
	// Checkpoint and CheckpointError are Result's.
	Checkpoint      int    `json:"checkpoint,omitempty"`
	CheckpointError string `json:"checkpoint_error,omitempty"`
}
