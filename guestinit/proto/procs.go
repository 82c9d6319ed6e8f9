package proto

import (
	"errors"
	"fmt"
	"strings"
)

// Processes: commands that outlive the request that started them (the
// host's sandbox.Manager.StartProcess and its kin). Every process op is
// an OpProc request whose Proc says which; start and attach are streams:
// the agent answers with ProcEvent frames (TypeEvent) carrying the
// process's output, then one Response whose Proc holds its exit. When the
// host hangs up a stream the process goes on: only a signal, its timeout
// or its own end stop it.
const OpProc Op = "proc"

// ProcOp names a process request.
type ProcOp string

// Process requests.
const (
	ProcStart  ProcOp = "start"  // Argv...: a stream
	ProcAttach ProcOp = "attach" // PID: a stream
	ProcList   ProcOp = "list"   // Response.Proc.List
	ProcInput  ProcOp = "input"  // PID, Data, EOF
	ProcSignal ProcOp = "signal" // PID, Signal
	ProcResize ProcOp = "resize" // PID, PTY
)

// Bounds on processes. The host keeps the same numbers (package sandbox);
// the agent enforces them whatever the host asks.
const (
	MaxProcs        = 64
	MaxProcBacklog  = 1 << 20
	MaxProcInput    = 1 << 20
	MaxProcTag      = 128
	MaxPTYSide      = 1000
	MaxProcChunk    = 32 << 10 // the most output bytes in one ProcEvent
	MaxProcSignal   = 16
	MaxProcInfoArgv = 8 << 10      // a ProcInfo's argv, in all (ClipArgv)
	CodeFull        = "full"       // MaxProcs reached
	CodeProcInvalid = "proc_state" // the process takes no input, has no terminal
)

// PTYSize is a terminal's size in characters.
type PTYSize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// ProcRequest is the Proc of an OpProc request. Fields an op does not use
// must be empty.
type ProcRequest struct {
	Op   ProcOp            `json:"op"`
	PID  int               `json:"pid,omitempty"`
	Argv []string          `json:"argv,omitempty"`
	Cwd  string            `json:"cwd,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
	// Root runs the process as root; the host allows it only in a
	// sandbox whose cells run as root.
	Root      bool     `json:"root,omitempty"`
	PTY       *PTYSize `json:"pty,omitempty"`
	Stdin     bool     `json:"stdin,omitempty"`
	Tag       string   `json:"tag,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`
	Data      []byte   `json:"data,omitempty"` // input (base64 in JSON)
	EOF       bool     `json:"eof,omitempty"`  // input: close stdin after Data
	Signal    string   `json:"signal,omitempty"`
}

// Validate checks r's op, its fields and their bounds.
func (r *ProcRequest) Validate() error {
	uses := map[string]bool{}
	switch r.Op {
	case ProcStart:
		for _, f := range []string{"argv", "cwd", "env", "root", "pty", "stdin", "tag", "timeout"} {
			uses[f] = true
		}
		if err := checkArgv(r.Argv); err != nil {
			return err
		}
		if r.Cwd != "" {
			if err := CheckPath(r.Cwd); err != nil {
				return fmt.Errorf("cwd: %w", err)
			}
		}
		if err := checkEnv(r.Env); err != nil {
			return err
		}
		if err := checkText("tag", r.Tag, MaxProcTag); err != nil || strings.IndexByte(r.Tag, 0) >= 0 {
			return fmt.Errorf("tag is not UTF-8 of at most %d bytes without NUL", MaxProcTag)
		}
		if r.TimeoutMS < 0 || r.TimeoutMS > MaxTimeoutMS {
			return fmt.Errorf("timeout_ms %d out of range", r.TimeoutMS)
		}
	case ProcAttach:
	case ProcList:
	case ProcInput:
		uses["data"], uses["eof"] = true, true
		if len(r.Data) > MaxProcInput {
			return fmt.Errorf("input is %d bytes (max %d)", len(r.Data), MaxProcInput)
		}
	case ProcSignal:
		uses["signal"] = true
		if r.Signal == "" || len(r.Signal) > MaxProcSignal {
			return fmt.Errorf("signal %q is not a signal's name", truncate(r.Signal, 32))
		}
	case ProcResize:
		uses["pty"] = true
		if r.PTY == nil {
			return errors.New("resize without a size")
		}
	default:
		return fmt.Errorf("unknown process op %q", truncate(string(r.Op), 32))
	}
	if r.Op != ProcStart && r.Op != ProcList && (r.PID < 1 || r.PID > 1<<22) {
		return fmt.Errorf("pid %d out of range", r.PID)
	}
	if r.Op == ProcStart || r.Op == ProcList {
		if r.PID != 0 {
			return fmt.Errorf("process op %s does not take a pid", r.Op)
		}
	}
	if r.PTY != nil && (r.PTY.Cols < 1 || r.PTY.Cols > MaxPTYSide || r.PTY.Rows < 1 || r.PTY.Rows > MaxPTYSide) {
		return fmt.Errorf("pty size %dx%d out of 1..%d", r.PTY.Cols, r.PTY.Rows, MaxPTYSide)
	}
	for name, set := range map[string]bool{
		"argv": r.Argv != nil, "cwd": r.Cwd != "", "env": r.Env != nil, "root": r.Root,
		"pty": r.PTY != nil, "stdin": r.Stdin, "tag": r.Tag != "", "timeout": r.TimeoutMS != 0,
		"data": r.Data != nil, "eof": r.EOF, "signal": r.Signal != "",
	} {
		if set && !uses[name] {
			return fmt.Errorf("process op %s does not take %s", r.Op, name)
		}
	}
	return nil
}

// ProcInfo describes a running process (ProcList).
type ProcInfo struct {
	PID           int      `json:"pid"`
	Argv          []string `json:"argv"`
	Cwd           string   `json:"cwd,omitempty"`
	Tag           string   `json:"tag,omitempty"`
	Root          bool     `json:"root,omitempty"`
	PTY           bool     `json:"pty,omitempty"`
	EnvNames      []string `json:"env_names,omitempty"`
	StartedUnixMS int64    `json:"started_unix_ms"`
}

// ProcExit is how a process ended.
type ProcExit struct {
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	Error    string `json:"error,omitempty"`
}

// ProcReply is the Proc of a Response: the pid a start gave (also on
// attach), the exit that ends a stream, or a list.
type ProcReply struct {
	PID  int        `json:"pid,omitempty"`
	Exit *ProcExit  `json:"exit,omitempty"`
	List []ProcInfo `json:"list,omitempty"`
}

// Validate bounds what a guest may answer.
func (r *ProcReply) Validate() error {
	if r.PID < 0 || len(r.List) > MaxProcs {
		return errors.New("process reply out of bounds")
	}
	if e := r.Exit; e != nil {
		if len(e.Signal) > MaxProcSignal || e.ExitCode < -1 || e.ExitCode > 255 {
			return errors.New("process exit out of bounds")
		}
		if err := checkText("process error", e.Error, MaxErrorBytes); err != nil {
			return err
		}
	}
	for _, p := range r.List {
		if p.PID < 1 || len(p.Tag) > MaxProcTag || len(p.Cwd) > MaxPathBytes || len(p.EnvNames) > MaxEnvVars {
			return errors.New("process info out of bounds")
		}
		if err := checkArgv(p.Argv); err != nil {
			return fmt.Errorf("process info: %w", err)
		}
		if n := argvBytes(p.Argv); n > MaxProcInfoArgv {
			return fmt.Errorf("process info: argv is %d bytes (max %d)", n, MaxProcInfoArgv)
		}
		for _, n := range p.EnvNames {
			if !isEnvName(n) || len(n) > MaxEnvKeyBytes {
				return errors.New("process info: bad env name")
			}
		}
	}
	return nil
}

// ProcEvent kinds.
const (
	ProcEventStart  = "start" // PID: the process runs
	ProcEventStdout = "stdout"
	ProcEventStderr = "stderr"
	ProcEventPTY    = "pty"
)

// ProcEvent is one TypeEvent frame of a process stream.
type ProcEvent struct {
	Kind string `json:"kind"`
	PID  int    `json:"pid,omitempty"`
	Data []byte `json:"data,omitempty"`
}

// Validate implements Validator.
func (e *ProcEvent) Validate() error {
	switch e.Kind {
	case ProcEventStart:
		if e.PID < 1 || e.Data != nil {
			return errors.New("start event without exactly a pid")
		}
	case ProcEventStdout, ProcEventStderr, ProcEventPTY:
		if e.PID != 0 || len(e.Data) > MaxProcChunk {
			return fmt.Errorf("%s event with a pid or over %d bytes", e.Kind, MaxProcChunk)
		}
	default:
		return fmt.Errorf("unknown process event %q", truncate(e.Kind, 32))
	}
	return nil
}

func argvBytes(argv []string) int {
	n := 0
	for _, a := range argv {
		n += len(a)
	}
	return n
}

// ClipArgv returns argv cut to MaxProcInfoArgv bytes in all (whole UTF-8
// characters), for ProcInfo: a list of processes stays small whatever
// they were started with.
func ClipArgv(argv []string) []string {
	out, left := []string{}, MaxProcInfoArgv
	for _, a := range argv {
		if left <= 0 {
			break
		}
		if len(a) > left {
			a = strings.ToValidUTF8(a[:left], "")
		}
		if a == "" && len(out) == 0 {
			break
		}
		out = append(out, a)
		left -= len(a)
	}
	return out
}
