package proto

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/cellvm/cellvm/cell"
)

// Bounds on request fields.
const (
	MaxCodeBytes  = 4 << 20
	MaxStdinBytes = 4 << 20
	MaxArgs       = 4096
	MaxArgBytes   = 128 << 10
	MaxArgvBytes  = 1 << 20
	MaxPathBytes  = 4096
	MaxTimeoutMS  = 24 * 60 * 60 * 1000
	MaxNameBytes  = 128
	MaxErrorBytes = 16 << 10
	// The environment of setenv: as many variables and bytes as a
	// sandbox's config may hold (sandbox.Config.Env).
	MaxEnvVars       = 256
	MaxEnvKeyBytes   = 256
	MaxEnvValueBytes = 32 << 10
	MaxEnvTotalBytes = 256 << 10
	// MinEntropyBytes and MaxEntropyBytes bound a reseed's entropy.
	MinEntropyBytes = 32
	MaxEntropyBytes = 512
)

// Hello is the first message each way. The client sends its version; the
// agent answers with its own, or with an error Response and closes the
// connection when it does not speak the client's version.
type Hello struct {
	Version  int    `json:"version"`
	Software string `json:"software,omitempty"`
}

// Validate implements Validator.
func (h *Hello) Validate() error {
	if h.Version < 1 || h.Version > 1<<16 {
		return fmt.Errorf("version %d out of range", h.Version)
	}
	return checkText("software", h.Software, MaxNameBytes)
}

// Op names a request.
type Op string

// Requests. See PROTOCOL.md for what follows each one on the wire.
const (
	OpRun       Op = "run"
	OpInterrupt Op = "interrupt"
	OpRestart   Op = "restart"
	OpExec      Op = "exec"
	OpUpload    Op = "upload"
	OpDownload  Op = "download"
	OpHealth    Op = "health"
	OpShutdown  Op = "shutdown"
	// OpSetEnv sets the environment variables of the guest's processes
	// (the interpreter and commands) started after it. The host sends it
	// once, before the first cell.
	OpSetEnv Op = "setenv"
	// OpReseed tells a guest restored from a snapshot that it is a new
	// machine: it mixes the host's entropy into the kernel's pool and
	// reseeds the CRNG, steps the clock to the host's, and has the
	// interpreter reseed its random generators. With Net it also takes
	// the network of its own sandbox (a fork's TAP has its own address).
	// With KeepGenerators the interpreters' generators are left alone: a
	// sandbox resumed from its own pause is the same machine later, and a
	// user's seeded sequence must carry on where it stopped.
	OpReseed Op = "reseed"
	// OpContext creates, lists or deletes sessions (contexts.go).
	OpContext Op = "context"
)

// Request is one request from the host. Fields that an op does not use
// must be empty.
type Request struct {
	Op   Op     `json:"op"`
	Code string `json:"code,omitempty"` // run
	// Language and Context pick the session of run and restart: a
	// cell.Language ("" is Python) and a context name ("" is
	// cell.DefaultContext). A context that does not exist is created by
	// run (with the sandbox's working directory) and is an error to
	// restart.
	Language  string   `json:"language,omitempty"`
	Context   string   `json:"context,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"` // run, exec (0: none)
	Argv      []string `json:"argv,omitempty"`       // exec
	Stdin     []byte   `json:"stdin,omitempty"`      // exec (base64 in JSON)
	Path      string   `json:"path,omitempty"`       // upload, download
	Mode      uint32   `json:"mode,omitempty"`       // upload (permission bits; 0: 0644)
	// Env holds the variables of setenv (NAME -> value).
	Env        map[string]string `json:"env,omitempty"`
	Entropy    []byte            `json:"entropy,omitempty"`      // reseed (base64 in JSON)
	TimeUnixNS int64             `json:"time_unix_ns,omitempty"` // reseed: the host's clock (0: leave the guest's)
	Net        *NetConfig        `json:"net,omitempty"`          // reseed: eth0's new configuration (nil: leave it)
	// KeepGenerators: a reseed renews the kernel's pool and the clock
	// only; the interpreters' generators keep their state (a resume).
	KeepGenerators bool `json:"keep_generators,omitempty"`
	// File is the op of OpFile (fileops.go).
	File *FileOp `json:"file_op,omitempty"`
	// Proc is a process request (OpProc, procs.go).
	Proc *ProcRequest `json:"proc,omitempty"`
	// ContextOp is the op of OpContext (contexts.go).
	ContextOp *ContextOp `json:"context_op,omitempty"`
}

// NetConfig is the configuration of the guest's eth0 that a reseed
// applies: what a booting guest takes from its kernel command line
// (cellvm.ip, cellvm.gw, cellvm.dns).
type NetConfig struct {
	Addr    string   `json:"addr"`    // address/prefix, IPv4
	Gateway string   `json:"gateway"` // the host's side of the link
	DNS     []string `json:"dns,omitempty"`
}

// MaxNetDNS bounds a NetConfig's name servers.
const MaxNetDNS = 3

// Parsed checks c and returns its parts.
func (c *NetConfig) Parsed() (addr netip.Prefix, gw netip.Addr, dns []netip.Addr, err error) {
	if addr, err = netip.ParsePrefix(c.Addr); err != nil || !addr.Addr().Is4() || addr.Bits() < 8 || addr.Bits() > 30 {
		return addr, gw, nil, fmt.Errorf("net addr %q is not an IPv4 host address/prefix", truncate(c.Addr, 64))
	}
	if gw, err = netip.ParseAddr(c.Gateway); err != nil || !gw.Is4() || !addr.Contains(gw) || gw == addr.Addr() {
		return addr, gw, nil, fmt.Errorf("net gateway %q is not another IPv4 address in %v", truncate(c.Gateway, 64), addr)
	}
	if len(c.DNS) > MaxNetDNS {
		return addr, gw, nil, fmt.Errorf("net has %d name servers (max %d)", len(c.DNS), MaxNetDNS)
	}
	for _, d := range c.DNS {
		a, err := netip.ParseAddr(d)
		if err != nil || a.Zone() != "" {
			return addr, gw, nil, fmt.Errorf("net name server %q is not an IP address", truncate(d, 64))
		}
		dns = append(dns, a)
	}
	return addr, gw, dns, nil
}

// Validate implements Validator.
func (r *Request) Validate() error {
	if r.TimeoutMS < 0 || r.TimeoutMS > MaxTimeoutMS {
		return fmt.Errorf("timeout_ms %d out of range", r.TimeoutMS)
	}
	if r.Mode&^0o7777 != 0 {
		return fmt.Errorf("mode %#o has bits beyond permissions", r.Mode)
	}
	if len(r.Code) > MaxCodeBytes {
		return fmt.Errorf("code is %d bytes (max %d)", len(r.Code), MaxCodeBytes)
	}
	if len(r.Stdin) > MaxStdinBytes {
		return fmt.Errorf("stdin is %d bytes (max %d)", len(r.Stdin), MaxStdinBytes)
	}
	uses := map[string]bool{}
	switch r.Op {
	case OpRun:
		uses["code"], uses["timeout"], uses["session"] = true, true, true
		if err := checkSession(r.Language, r.Context); err != nil {
			return err
		}
	case OpRestart:
		uses["session"] = true
		if err := checkSession(r.Language, r.Context); err != nil {
			return err
		}
	case OpContext:
		uses["ctxop"] = true
		if r.ContextOp == nil {
			return errors.New("op context without context_op")
		}
		if err := r.ContextOp.Validate(); err != nil {
			return err
		}
	case OpExec:
		uses["argv"], uses["stdin"], uses["timeout"] = true, true, true
		if err := checkArgv(r.Argv); err != nil {
			return err
		}
	case OpUpload, OpDownload:
		uses["path"] = true
		uses["mode"] = r.Op == OpUpload
		if err := CheckPath(r.Path); err != nil {
			return err
		}
	case OpSetEnv:
		uses["env"] = true
		if err := checkEnv(r.Env); err != nil {
			return err
		}
	case OpReseed:
		uses["entropy"], uses["time"], uses["net"], uses["keep"] = true, true, true, true
		if r.Net != nil {
			if _, _, _, err := r.Net.Parsed(); err != nil {
				return err
			}
		}
		if len(r.Entropy) < MinEntropyBytes || len(r.Entropy) > MaxEntropyBytes {
			return fmt.Errorf("reseed with %d bytes of entropy (%d to %d)", len(r.Entropy), MinEntropyBytes, MaxEntropyBytes)
		}
		if r.TimeUnixNS < 0 {
			return fmt.Errorf("time_unix_ns %d is negative", r.TimeUnixNS)
		}
	case OpFile:
		uses["file"] = true
		if r.File == nil {
			return errors.New("op file without file_op")
		}
		if err := r.File.Validate(); err != nil {
			return err
		}
	case OpProc:
		uses["proc"] = true
		if r.Proc == nil {
			return errors.New("proc op without a process request")
		}
		if err := r.Proc.Validate(); err != nil {
			return err
		}
	case OpInterrupt, OpHealth, OpShutdown:
	default:
		return fmt.Errorf("unknown op %q", truncate(string(r.Op), 32))
	}
	for name, set := range map[string]bool{
		"code":    r.Code != "",
		"timeout": r.TimeoutMS != 0,
		"argv":    r.Argv != nil,
		"stdin":   r.Stdin != nil,
		"path":    r.Path != "",
		"mode":    r.Mode != 0,
		"env":     r.Env != nil,
		"entropy": r.Entropy != nil,
		"time":    r.TimeUnixNS != 0,
		"net":     r.Net != nil,
		"keep":    r.KeepGenerators,
		"file":    r.File != nil,
		"proc":    r.Proc != nil,
		"session": r.Language != "" || r.Context != "",
		"ctxop":   r.ContextOp != nil,
	} {
		if set && !uses[name] {
			return fmt.Errorf("op %s does not take %s", r.Op, name)
		}
	}
	return nil
}

func checkArgv(argv []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return errors.New("argv is empty")
	}
	if len(argv) > MaxArgs {
		return fmt.Errorf("argv has %d entries (max %d)", len(argv), MaxArgs)
	}
	total := 0
	for i, a := range argv {
		if len(a) > MaxArgBytes {
			return fmt.Errorf("argv[%d] is %d bytes (max %d)", i, len(a), MaxArgBytes)
		}
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("argv[%d] contains a NUL byte", i)
		}
		total += len(a)
	}
	if total > MaxArgvBytes {
		return fmt.Errorf("argv is %d bytes (max %d)", total, MaxArgvBytes)
	}
	return nil
}

// checkEnv bounds setenv's variables: names are identifiers
// ([A-Za-z_][A-Za-z0-9_]*), values are UTF-8 without NUL bytes, and the
// count and sizes stay within the Max* limits.
func checkEnv(env map[string]string) error {
	if len(env) > MaxEnvVars {
		return fmt.Errorf("env has %d variables (max %d)", len(env), MaxEnvVars)
	}
	total := 0
	for k, v := range env {
		if !isEnvName(k) || len(k) > MaxEnvKeyBytes {
			return fmt.Errorf("env name %q is not an identifier of at most %d bytes", truncate(k, 64), MaxEnvKeyBytes)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("env %s contains a NUL byte", k)
		}
		if err := checkText("env "+k, v, MaxEnvValueBytes); err != nil {
			return err
		}
		total += len(k) + len(v)
	}
	if total > MaxEnvTotalBytes {
		return fmt.Errorf("env is %d bytes in all (max %d)", total, MaxEnvTotalBytes)
	}
	return nil
}

func isEnvName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '_' && (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return s != ""
}

// CheckPath checks that p is a clean absolute path of bounded length
// without NUL bytes. Which paths may be written is the agent's decision.
func CheckPath(p string) error {
	if p == "" {
		return errors.New("path is empty")
	}
	if len(p) > MaxPathBytes {
		return fmt.Errorf("path is %d bytes (max %d)", len(p), MaxPathBytes)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return errors.New("path contains a NUL byte")
	}
	if !path.IsAbs(p) {
		return fmt.Errorf("path %q is not absolute", truncate(p, 256))
	}
	if path.Clean(p) != p {
		return fmt.Errorf("path %q is not clean (want %q)", truncate(p, 256), truncate(path.Clean(p), 256))
	}
	return nil
}

// Error codes.
const (
	CodeBadRequest  = "bad_request"
	CodeBadPath     = "bad_path"
	CodeNotFound    = "not_found"
	CodeTooLarge    = "too_large"
	CodeUnsupported = "unsupported_version"
	CodeInterp      = "interpreter"
	CodeIO          = "io"
	CodeInternal    = "internal"
)

// Error is a failed request, as the agent reports it.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return "agent: " + e.Code + ": " + e.Message }

// Validate implements Validator.
func (e *Error) Validate() error {
	if e.Code == "" {
		return errors.New("error without a code")
	}
	if err := checkText("error code", e.Code, MaxNameBytes); err != nil {
		return err
	}
	return checkText("error message", e.Message, MaxErrorBytes)
}

// Health is the agent's view of the guest.
type Health struct {
	UptimeMS          int64   `json:"uptime_ms"`
	MemTotalBytes     uint64  `json:"mem_total_bytes"`
	MemAvailableBytes uint64  `json:"mem_available_bytes"`
	Procs             int     `json:"procs"`
	Load1             float64 `json:"load1"`
	Agent             string  `json:"agent"`
}

// FileInfo describes a file about to be downloaded.
type FileInfo struct {
	Size int64  `json:"size"`
	Mode uint32 `json:"mode"`
}

// Response ends every request. Exactly one of its fields is set (none for
// requests that only succeed or fail, such as restart).
type Response struct {
	Error       *Error           `json:"error,omitempty"`
	Result      *cell.Result     `json:"result,omitempty"`
	Exec        *cell.ExecResult `json:"exec,omitempty"`
	Interrupted *bool            `json:"interrupted,omitempty"`
	Health      *Health          `json:"health,omitempty"`
	File        *FileInfo        `json:"file,omitempty"`
	Written     *int64           `json:"written,omitempty"`
	Reseeded    *Reseeded        `json:"reseeded,omitempty"`
	Files       *FileReply       `json:"files,omitempty"`    // file (fileops.go)
	Proc        *ProcReply       `json:"proc,omitempty"`     // OpProc (procs.go)
	Contexts    []ContextInfo    `json:"contexts,omitempty"` // OpContext (contexts.go)
}

// Reseeded says what a reseed did.
type Reseeded struct {
	Kernel      bool `json:"kernel"`      // entropy mixed in and the CRNG reseeded
	Clock       bool `json:"clock"`       // the clock stepped to the host's
	Interpreter bool `json:"interpreter"` // a running interpreter's random reseeded
	NumPy       bool `json:"numpy"`       // and NumPy's global generator
	Network     bool `json:"network"`     // eth0 took the request's Net
	// Steps is how long each part took in the guest, by its own clock,
	// for the host's log only (a guest's report of time is not trusted
	// for anything else): "kernel=N clock=N network=N interpreter=N" in
	// microseconds, the parts it ran. Empty from an older agent.
	Steps string `json:"steps,omitempty"`
}

// Validate implements Validator.
func (r *Response) Validate() error {
	set := 0
	for _, b := range []bool{r.Error != nil, r.Result != nil, r.Exec != nil, r.Interrupted != nil, r.Health != nil, r.File != nil, r.Written != nil, r.Reseeded != nil, r.Files != nil, r.Proc != nil, r.Contexts != nil} {
		if b {
			set++
		}
	}
	if set > 1 {
		return errors.New("response has more than one field set")
	}
	switch {
	case r.Error != nil:
		return r.Error.Validate()
	case r.Result != nil:
		return validateResult(r.Result)
	case r.Exec != nil:
		if r.Exec.DurationMS < 0 || r.Exec.Truncated.StdoutBytes < 0 || r.Exec.Truncated.StderrBytes < 0 {
			return errors.New("exec result with negative counts")
		}
		return checkExecSize(r.Exec)
	case r.Health != nil:
		h := r.Health
		if h.UptimeMS < 0 || h.Procs < 0 || h.MemAvailableBytes > h.MemTotalBytes || h.Load1 < 0 {
			return errors.New("implausible health values")
		}
		return checkText("agent", h.Agent, MaxNameBytes)
	case r.File != nil:
		if r.File.Size < 0 || r.File.Mode&^0o7777 != 0 {
			return errors.New("bad file info")
		}
	case r.Written != nil:
		if *r.Written < 0 {
			return errors.New("negative written count")
		}
	case r.Files != nil:
		return r.Files.Validate()
	case r.Proc != nil:
		return r.Proc.Validate()
	case r.Contexts != nil:
		return validateContexts(r.Contexts)
	case r.Reseeded != nil:
		return checkText("reseed steps", r.Reseeded.Steps, maxReseedSteps)
	}
	return nil
}

// maxReseedSteps bounds Reseeded.Steps: four parts of a name and a number
// each need under 80 bytes.
const maxReseedSteps = 128

func validateResult(r *cell.Result) error {
	switch r.Status {
	case cell.StatusOK, cell.StatusError, cell.StatusTimeout, cell.StatusLost:
	default:
		return fmt.Errorf("unknown cell status %q", truncate(string(r.Status), 32))
	}
	if r.ExecutionCount < 0 || r.DurationMS < 0 || r.Truncated.StdoutBytes < 0 || r.Truncated.StderrBytes < 0 {
		return errors.New("cell result with negative counts")
	}
	return checkResultSize(r)
}

// Event is one streamed event of a running cell. The agent never sends
// the end event: the final result travels in the Response instead, so it
// is not sent twice.
type Event struct {
	cell.Event
}

// Validate implements Validator.
func (e *Event) Validate() error {
	switch e.Type {
	case cell.EventStdout, cell.EventStderr:
		if e.Result != nil || e.Error != nil || e.End != nil {
			return fmt.Errorf("%s event with extra fields", e.Type)
		}
		return checkLen("event text bytes", len(e.Text), MaxOutputBytes)
	case cell.EventResult:
		if e.Result == nil || e.Text != "" || e.Error != nil || e.End != nil {
			return errors.New("result event without exactly a result")
		}
		n, err := displaySize(e.Result)
		if err != nil {
			return err
		}
		return checkLen("display bytes", n, MaxDisplaysBytes)
	case cell.EventError:
		if e.Error == nil || e.Text != "" || e.Result != nil || e.End != nil {
			return errors.New("error event without exactly an error")
		}
		return checkError(e.Error)
	default:
		return fmt.Errorf("unknown event type %q", truncate(string(e.Type), 32))
	}
}

func checkText(what, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%s is %d bytes (max %d)", what, len(s), max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not UTF-8", what)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
