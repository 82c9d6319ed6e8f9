package sandbox

import (
	"fmt"
	"strings"
	"time"
)

// Processes: commands that outlive the call that started them (E2B's
// background commands, a shell behind `cellvm exec -it`, a web server the
// user reaches through a port). A process runs in the guest as the cell
// user (or root when asked and the sandbox allows it), in the cells'
// cgroup, with the sandbox's environment plus its own. It lives until it
// exits, is signalled, or its Timeout passes; the streams that watch it
// (StartProcess's and AttachProcess's onEvent) come and go without
// touching it.
//
// Its output goes to whoever watches it at the time: StartProcess's
// caller from the first byte, an AttachProcess caller from when it
// attached. Output nobody watches is not kept past a bounded backlog
// (MaxProcessBacklog, the most recent bytes), which a new attacher gets
// first.

// Bounds on processes.
const (
	// MaxProcesses is how many processes one sandbox may run at once
	// (running, or exited and not yet reaped by a watcher).
	MaxProcesses = 64
	// MaxProcessBacklog is the output kept for a process nobody watches.
	MaxProcessBacklog = 1 << 20
	// MaxProcessInput is the most bytes one SendInput carries.
	MaxProcessInput = 1 << 20
	// MaxProcessTag bounds ProcessRequest.Tag.
	MaxProcessTag = 128
	// MaxPTYSide bounds a PTY's columns and rows.
	MaxPTYSide = 1000
)

// GuestUserRoot names root as a guest user; "" (or GuestUserDefault) is
// the cell user, "user" with home /home/user, as E2B's images have.
const (
	GuestUserDefault = ""
	GuestUserCell    = "user"
	GuestUserRoot    = "root"
)

// ValidGuestUser reports whether u names a user requests may ask for.
func ValidGuestUser(u string) bool {
	return u == GuestUserDefault || u == GuestUserCell || u == GuestUserRoot
}

// PTYSize is a terminal's size in characters.
type PTYSize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// Validate checks both sides are 1..MaxPTYSide.
func (s PTYSize) Validate() error {
	if s.Cols < 1 || s.Cols > MaxPTYSide || s.Rows < 1 || s.Rows > MaxPTYSide {
		return fmt.Errorf("%w: pty size %dx%d: columns and rows must be 1..%d", ErrInvalid, s.Cols, s.Rows, MaxPTYSide)
	}
	return nil
}

// ProcessRequest starts a process (Manager.StartProcess).
type ProcessRequest struct {
	Argv []string `json:"argv"`
	// Cwd is the working directory ("": the user's home).
	Cwd string `json:"cwd,omitempty"`
	// Env is added to the sandbox's environment (Config.Env).
	Env map[string]string `json:"env,omitempty"`
	// User is GuestUserDefault, GuestUserCell or GuestUserRoot; root
	// needs a sandbox created with Config.Root (else ErrForbidden).
	User string `json:"user,omitempty"`
	// PTY, when set, runs the process on a terminal of that size: its
	// output is one stream ("pty") and its input is the terminal's.
	PTY *PTYSize `json:"pty,omitempty"`
	// Stdin keeps the process's standard input open for SendInput;
	// without it (and without a PTY) stdin is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// Tag is the caller's name for it, shown in ListProcesses.
	Tag string `json:"tag,omitempty"`
	// Timeout ends the process (SIGKILL) that long after its start; 0 is
	// none: it lives until it exits, is killed or the sandbox ends.
	Timeout time.Duration `json:"-"`
}

// Validate checks argv's and env's bounds, the user, the PTY, the tag and
// the timeout.
func (r ProcessRequest) Validate() error {
	if err := (ExecRequest{Argv: r.Argv, Timeout: time.Second}).Validate(); err != nil {
		return err
	}
	if len(r.Cwd) > MaxGuestPathLen || strings.IndexByte(r.Cwd, 0) >= 0 {
		return fmt.Errorf("%w: cwd is longer than %d bytes or holds a NUL", ErrInvalid, MaxGuestPathLen)
	}
	if err := validateEnv(r.Env); err != nil {
		return err
	}
	if !ValidGuestUser(r.User) {
		return fmt.Errorf("%w: user %q: use %q or %q", ErrInvalid, clip(r.User, 64), GuestUserCell, GuestUserRoot)
	}
	if r.PTY != nil {
		if err := r.PTY.Validate(); err != nil {
			return err
		}
	}
	if len(r.Tag) > MaxProcessTag || strings.IndexByte(r.Tag, 0) >= 0 {
		return fmt.Errorf("%w: tag is longer than %d bytes or holds a NUL", ErrInvalid, MaxProcessTag)
	}
	if r.Timeout < 0 || r.Timeout > MaxTTL {
		return fmt.Errorf("%w: timeout %v out of 0..%v", ErrInvalid, r.Timeout, MaxTTL)
	}
	return nil
}

// ProcessInfo describes a process of ListProcesses.
type ProcessInfo struct {
	PID  int      `json:"pid"`
	Argv []string `json:"argv"`
	Cwd  string   `json:"cwd,omitempty"`
	Tag  string   `json:"tag,omitempty"`
	User string   `json:"user,omitempty"`
	PTY  bool     `json:"pty,omitempty"`
	// Env holds the names of the request's own variables (values are
	// write-only, as Config.Env's).
	EnvNames  []string  `json:"env_names,omitempty"`
	StartedAt time.Time `json:"started_at"`
}

// Process event kinds.
const (
	ProcessStart  = "start"  // PID set: the process runs
	ProcessStdout = "stdout" // Data
	ProcessStderr = "stderr" // Data
	ProcessPTY    = "pty"    // Data: a terminal's output
	ProcessEnd    = "end"    // Exit set: the last event
)

// ProcessEvent is one thing a watched process did.
type ProcessEvent struct {
	Kind string       `json:"kind"`
	PID  int          `json:"pid,omitempty"`
	Data []byte       `json:"data,omitempty"` // base64 in JSON
	Exit *ProcessExit `json:"exit,omitempty"`
}

// ProcessExit is how a process ended.
type ProcessExit struct {
	// ExitCode is its exit status, or -1 when a signal ended it.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that ended it ("SIGKILL"), if one did.
	Signal string `json:"signal,omitempty"`
	// TimedOut: ProcessRequest.Timeout ended it.
	TimedOut bool `json:"timed_out,omitempty"`
	// Error says what went wrong outside the process (it could not be
	// started: no such program, a bad cwd), if anything did.
	Error string `json:"error,omitempty"`
}

// Signals SignalProcess sends.
const (
	SignalTerm = "SIGTERM"
	SignalKill = "SIGKILL"
	SignalInt  = "SIGINT"
	SignalHup  = "SIGHUP"
)

// ValidSignal reports whether s is one SignalProcess sends.
func ValidSignal(s string) bool {
	switch s {
	case SignalTerm, SignalKill, SignalInt, SignalHup:
		return true
	}
	return false
}
