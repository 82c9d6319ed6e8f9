package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// Toolbox runs the tools against one sandbox. Its Call never returns a Go
// error: whatever goes wrong (bad arguments, an unknown tool, a busy or
// lost sandbox) becomes a tool result with IsError set and a sentence the
// model can act on.
type Toolbox struct {
	Manager   sandbox.Manager
	SandboxID string
	Format    FormatOptions
	// Timeout is the default time limit of a call (default 60 s);
	// MaxTimeout caps what a model may ask for with timeout_s (default 10 min).
	Timeout    time.Duration
	MaxTimeout time.Duration
	// Companions offers exec, read_file and write_file beside run_python.
	Companions bool
	// Network is the sandbox's egress allowlist, stated in the description.
	Network []string
	// Root says the sandbox runs code as root ("root": true), stated in
	// the description.
	Root bool
	// Languages are the cell languages the sandbox's image has, offered
	// (besides Python) by run_code; nil means the default image's
	// (image/manifest), and an image whose manifest lists none has no
	// run_code.
	Languages []cell.LanguageInfo
	// MaxReadBytes bounds read_file (default 1 MiB).
	MaxReadBytes int64
	// Approve, if set, is asked before each run_python and exec call
	// runs, and may refuse or edit it (approve.go).
	Approve Approve
	// Checkpoints offers undo_last_cell and list_checkpoints: the sandbox
	// records a checkpoint after each cell (checkpoints.go, EveryCell).
	Checkpoints bool
}

func (t *Toolbox) timeouts() (def, max time.Duration) {
	def, max = t.Timeout, t.MaxTimeout
	if def <= 0 {
		def = 60 * time.Second
	}
	if max <= 0 {
		max = 10 * time.Minute
	}
	return def, max
}

// Specs returns the tools this toolbox offers.
func (t *Toolbox) Specs() []ToolSpec {
	def, _ := t.timeouts()
	return Specs(SandboxFacts{Network: t.Network, TimeoutS: int(def / time.Second), Root: t.Root, Languages: t.Languages,
		Checkpoints: t.Checkpoints}, t.Companions)
}

// Has reports whether the toolbox offers a tool of that name.
func (t *Toolbox) Has(name string) bool {
	for _, s := range t.Specs() {
		if s.Name == name {
			return true
		}
	}
	return false
}

func (t *Toolbox) names() string {
	var n []string
	for _, s := range t.Specs() {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}

// ToolError is a failed call's result.
func ToolError(format string, args ...any) ToolResult {
	return ToolResult{Text: "Tool error: " + fmt.Sprintf(format, args...), IsError: true}
}

// Call runs one tool call.
func (t *Toolbox) Call(ctx context.Context, name string, args json.RawMessage) ToolResult {
	if !t.Has(name) {
		return ToolError("there is no tool named %q; the tools are: %s", clipName(name), t.names())
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	switch name {
	case ToolRunPython:
		return t.runPython(ctx, args)
	case ToolRunCode:
		return t.runCode(ctx, args)
	case ToolExec:
		return t.exec(ctx, args)
	case ToolReadFile:
		return t.readFile(ctx, args)
	case ToolWriteFile:
		return t.writeFile(ctx, args)
	case ToolListFiles:
		return t.listFiles(ctx, args)
	case ToolUploadFile:
		return t.uploadFile(ctx, args)
	case ToolRestartPython:
		if err := t.Manager.Restart(ctx, t.SandboxID, sandbox.Session{}); err != nil {
			return sandboxError(err)
		}
		return ToolResult{Text: "The interpreter was restarted: earlier variables and imports are gone; files on disk are kept."}
	case ToolUndoLastCell:
		return t.undoLastCell(ctx)
	case ToolListCheckpoints:
		return t.listCheckpoints(ctx)
	}
	return ToolError("tool %q is not implemented", name)
}

func clipName(s string) string {
	s, _ = ClipMiddle(s, 64)
	return s
}

func decodeArgs(args json.RawMessage, v any) error {
	if err := json.Unmarshal(args, v); err != nil {
		return fmt.Errorf("the arguments do not match the tool's schema: %v", err)
	}
	return nil
}

func (t *Toolbox) timeout(seconds int) (time.Duration, error) {
	def, max := t.timeouts()
	if seconds == 0 {
		return def, nil
	}
	d := time.Duration(seconds) * time.Second
	if seconds < 0 || d > max {
		return 0, fmt.Errorf("timeout_s %d out of range 1..%d", seconds, int(max/time.Second))
	}
	return d, nil
}

func (t *Toolbox) runPython(ctx context.Context, args json.RawMessage) ToolResult {
	var a struct {
		Code     *string `json:"code"`
		TimeoutS int     `json:"timeout_s"`
	}
	if err := decodeArgs(args, &a); err != nil {
		return ToolError("%v", err)
	}
	if a.Code == nil {
		return ToolError(`run_python needs "code", a string of Python source`)
	}
	return t.runCell(ctx, ToolRunPython, sandbox.Session{}, *a.Code, a.TimeoutS)
}

// runCell runs a run_python or run_code (tool) call's cell in session s,
// once its size and timeout are checked and the user (Approve) agreed.
func (t *Toolbox) runCell(ctx context.Context, tool string, s sandbox.Session, code string, timeoutS int) ToolResult {
	if len(code) > sandbox.MaxCodeBytes {
		return ToolError("code is %d bytes, at most %d", len(code), sandbox.MaxCodeBytes)
	}
	timeout, err := t.timeout(timeoutS)
	if err != nil {
		return ToolError("%v", err)
	}
	code, edited, refused := t.approveCode(ctx, tool, code)
	if refused != nil {
		return *refused
	}
	res, err := t.Manager.RunCell(ctx, t.SandboxID, sandbox.Cell{Session: s, Code: code, Timeout: timeout}, nil)
	if err != nil {
		return sandboxError(err)
	}
	out := t.noteCheckpoint(FormatCell(res, t.Format), res.CheckpointError)
	if edited {
		return t.noteEdited(out, "code", code)
	}
	return out
}

func (t *Toolbox) exec(ctx context.Context, args json.RawMessage) ToolResult {
	var a struct {
		Argv     []string `json:"argv"`
		Stdin    string   `json:"stdin"`
		TimeoutS int      `json:"timeout_s"`
	}
	if err := decodeArgs(args, &a); err != nil {
		return ToolError("%v", err)
	}
	timeout, err := t.timeout(a.TimeoutS)
	if err != nil {
		return ToolError("%v", err)
	}
	req := sandbox.ExecRequest{Argv: a.Argv, Stdin: []byte(a.Stdin), Timeout: timeout}
	if err := req.Validate(); err != nil {
		return ToolError("%v", err)
	}
	req, edited, refused := t.approveArgv(ctx, req)
	if refused != nil {
		return *refused
	}
	res, err := t.Manager.Exec(ctx, t.SandboxID, req)
	if err != nil {
		return sandboxError(err)
	}
	if edited {
		argv, _ := json.Marshal(req.Argv)
		return t.noteEdited(FormatExec(res, t.Format), "command", string(argv))
	}
	return FormatExec(res, t.Format)
}

func (t *Toolbox) readFile(ctx context.Context, args json.RawMessage) ToolResult {
	var a struct {
		Path string `json:"path"`
	}
	if err := decodeArgs(args, &a); err != nil {
		return ToolError("%v", err)
	}
	p, err := sandbox.GuestPath(a.Path)
	if err != nil {
		return ToolError("%v", err)
	}
	limit := t.MaxReadBytes
	if limit <= 0 {
		limit = 1 << 20
	}
	w := &cappedBuffer{max: int(limit)}
	n, err := t.Manager.Download(ctx, t.SandboxID, p, w)
	if err != nil && !w.dropped {
		return sandboxError(err)
	}
	data := w.buf.Bytes()
	if w.dropped {
		data = data[:len(data)-cell.PartialRuneLen(data)]
	}
	if !utf8.Valid(data) {
		return ToolError("%s is not a text file (%d bytes); use run_python to read binary data", p, n)
	}
	text, _ := ClipMiddle(strings.ToValidUTF8(string(data), "\uFFFD"), t.Format.withDefaults().MaxChars)
	if w.dropped {
		text += fmt.Sprintf("\n[only the first %d bytes were read; the file is longer]", limit)
	}
	return ToolResult{Text: text}
}

func (t *Toolbox) writeFile(ctx context.Context, args json.RawMessage) ToolResult {
	var a struct {
		Path    string  `json:"path"`
		Content *string `json:"content"`
	}
	if err := decodeArgs(args, &a); err != nil {
		return ToolError("%v", err)
	}
	if a.Content == nil {
		return ToolError(`write_file needs "content", the file's text`)
	}
	p, err := sandbox.GuestPath(a.Path)
	if err != nil {
		return ToolError("%v", err)
	}
	n, err := t.Manager.Upload(ctx, t.SandboxID, p, strings.NewReader(*a.Content))
	if err != nil {
		return sandboxError(err)
	}
	return ToolResult{Text: fmt.Sprintf("wrote %d bytes to %s", n, p)}
}

func (t *Toolbox) listFiles(ctx context.Context, args json.RawMessage) ToolResult {
	var a struct {
		Path string `json:"path"`
	}
	if err := decodeArgs(args, &a); err != nil {
		return ToolError("%v", err)
	}
	if a.Path == "" {
		a.Path = "/workspace"
	}
	p, err := sandbox.GuestPath(a.Path)
	if err != nil {
		return ToolError("%v", err)
	}
	def, _ := t.timeouts()
	res, err := t.Manager.Exec(ctx, t.SandboxID, sandbox.ExecRequest{
		Argv: []string{"ls", "-la", "--time-style=long-iso", "--", p}, Timeout: def})
	if err != nil {
		return sandboxError(err)
	}
	if res.ExitCode != 0 {
		return ToolError("cannot list %s: %s", p, strings.TrimSpace(res.Stderr))
	}
	text, _ := ClipMiddle(res.Stdout, t.Format.withDefaults().MaxChars)
	return ToolResult{Text: text}
}

func (t *Toolbox) uploadFile(ctx context.Context, args json.RawMessage) ToolResult {
	var a struct {
		Path    string  `json:"path"`
		Content *string `json:"content_base64"`
	}
	if err := decodeArgs(args, &a); err != nil {
		return ToolError("%v", err)
	}
	if a.Content == nil {
		return ToolError(`upload_file needs "content_base64", the file's bytes in base64`)
	}
	p, err := sandbox.GuestPath(a.Path)
	if err != nil {
		return ToolError("%v", err)
	}
	data, err := base64.StdEncoding.DecodeString(*a.Content)
	if err != nil {
		return ToolError("content_base64 is not valid base64: %v", err)
	}
	n, err := t.Manager.Upload(ctx, t.SandboxID, p, bytes.NewReader(data))
	if err != nil {
		return sandboxError(err)
	}
	return ToolResult{Text: fmt.Sprintf("wrote %d bytes to %s", n, p)}
}

// sandboxError words a manager error for the model.
func sandboxError(err error) ToolResult {
	switch {
	case errors.Is(err, sandbox.ErrBusy):
		return ToolError("the sandbox is busy (another call is still running, or it is being paused or resumed); wait for it and try again: %v", err)
	case errors.Is(err, sandbox.ErrLost):
		return ToolError("the sandbox's VM is gone; no more code can run in it and all state is lost: %v", err)
	case errors.Is(err, sandbox.ErrNotFound):
		return ToolError("not found: %v", err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ToolError("the call was cancelled: %v", err)
	}
	return ToolError("%v", err)
}

var errCapped = errors.New("read limit reached")

// cappedBuffer keeps the first max bytes written and then fails, so a
// download of a huge file stops early instead of filling memory.
type cappedBuffer struct {
	buf     bytes.Buffer
	max     int
	dropped bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	room := c.max - c.buf.Len()
	if len(p) <= room {
		return c.buf.Write(p)
	}
	c.buf.Write(p[:max(room, 0)])
	c.dropped = true
	return max(room, 0), errCapped
}

var _ io.Writer = (*cappedBuffer)(nil)
