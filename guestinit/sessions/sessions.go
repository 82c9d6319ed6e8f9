package sessions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/interp"
)

// Errors of the registry; the agent answers each with its own code.
var (
	// ErrNotFound: no context of that name (restart, delete).
	ErrNotFound = errors.New("no such context")
	// ErrExists: a create of a context that exists.
	ErrExists = errors.New("context exists")
	// ErrFull: cell.MaxContexts sessions exist already.
	ErrFull = errors.New("too many contexts")
	// ErrInvalid: a request the registry refuses as such (a working
	// directory that is not one, the default context named in a create
	// or delete).
	ErrInvalid = errors.New("invalid context request")
	// ErrClosed: the registry is closed.
	ErrClosed = errors.New("sessions closed")
)

// Session is one language's persistent interpreter (*interp.Interp).
type Session interface {
	RunLanguage(ctx context.Context, lang cell.Language, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error)
	Interrupt() bool
	Restart() error
	SetEnv(env map[string]string) error
	Reseed() (numpy bool, err error)
	Running() bool
	Close() error
}

// Config configures a Registry.
type Config struct {
	// Primary is the Python default session, made by the caller (it
	// decides whether cgroups work) and owned by the Registry from now
	// on: Close closes it. Commands run through it (Exec). When it is an
	// *interp.Interp, every other session shares its cells' cgroup.
	Primary Session
	// Exec runs commands; nil: Primary's, when it is an *interp.Interp.
	Exec func(ctx context.Context, argv []string, stdin io.Reader, timeout time.Duration) (cell.ExecResult, error)
	// Base is the configuration the other sessions are made from (the
	// one Primary was made with): Runtime, Dir, RunDir and CellsFrom are
	// set per session.
	Base interp.Config
	// New makes a session; nil: interp.New. Tests give fakes.
	New func(interp.Config) (Session, error)
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// key picks a session: a runtime (cell.Language.Runtime) and a context
// name (cell.DefaultContext for the default ones).
type key struct {
	runtime string
	name    string
}

// entry is one session and what the registry knows of it.
type entry struct {
	s Session
	// lang is the first language of its runtime: what a list says.
	lang cell.Language
	// cwd is the working directory it was created with ("" the
	// sandbox's).
	cwd string
	// runDir is the run directory the registry made for it, removed with
	// it; "" when the Interp made (and removes) its own.
	runDir string
	// used: a cell or a restart reached it (a default session is listed
	// only then).
	used bool
}

// Registry is the sandbox's sessions. Its methods may be called from any
// goroutine; each session serializes its own cells.
type Registry struct {
	cfg  Config
	log  *slog.Logger
	exec func(ctx context.Context, argv []string, stdin io.Reader, timeout time.Duration) (cell.ExecResult, error)

	mu       sync.Mutex
	sessions map[key]*entry
	env      map[string]string // SetEnv's, given to every new session
	closed   bool
}

// New returns a Registry holding cfg.Primary as Python's default session.
func New(cfg Config) (*Registry, error) {
	if cfg.Primary == nil {
		return nil, errors.New("sessions: no primary session")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	primary, isInterp := cfg.Primary.(*interp.Interp)
	if cfg.New == nil {
		cfg.New = func(c interp.Config) (Session, error) { return interp.New(c) }
	}
	cfg.Base.CellsFrom = nil
	if isInterp {
		cfg.Base.CellsFrom = primary
	}
	r := &Registry{cfg: cfg, log: cfg.Logger, exec: cfg.Exec, sessions: map[key]*entry{
		{runtime: cell.Python.Runtime(), name: cell.DefaultContext}: {s: cfg.Primary, lang: cell.Python},
	}}
	if r.exec == nil && isInterp {
		r.exec = primary.Exec
	}
	return r, nil
}

// keyOf is the session of lang's context name ("" is the default).
func keyOf(lang cell.Language, name string) key {
	if name == "" {
		name = cell.DefaultContext
	}
	return key{runtime: lang.Runtime(), name: name}
}

// firstLanguage is the language a runtime's sessions are listed under.
func firstLanguage(runtime string) cell.Language {
	for _, l := range cell.Languages {
		if l.Runtime() == runtime {
			return l
		}
	}
	return cell.Python
}

// getLocked returns k's session, making it (with cwd) when create is set
// and it does not exist. Caller holds mu.
func (r *Registry) getLocked(k key, create bool, cwd string) (*entry, error) {
	if r.closed {
		return nil, ErrClosed
	}
	if e, ok := r.sessions[k]; ok {
		return e, nil
	}
	if k.name != cell.DefaultContext && !cell.ValidContextName(k.name) {
		// The agent's requests were checked; the name becomes a path here.
		return nil, fmt.Errorf("%w: context name %q", ErrInvalid, clip(k.name))
	}
	if !create {
		return nil, fmt.Errorf("%w: %s context %q", ErrNotFound, firstLanguage(k.runtime), k.name)
	}
	if len(r.sessions) >= cell.MaxContexts {
		return nil, fmt.Errorf("%w: a sandbox holds at most %d sessions, all languages together; delete one first", ErrFull, cell.MaxContexts)
	}
	c := r.cfg.Base
	c.Runtime = k.runtime
	if k.runtime != cell.Python.Runtime() {
		// Config.Python names Python's binary; the others find their own.
		// An address-space limit would keep V8 from reserving its heap:
		// the shared cgroup bounds them instead.
		c.Python, c.AddressSpaceLimit = "", 0
	}
	if cwd != "" {
		c.Dir = cwd
	}
	e := &entry{lang: firstLanguage(k.runtime), cwd: cwd}
	if r.cfg.Base.RunDir != "" {
		// The context name is a file name already (cell.ValidContextName).
		e.runDir = filepath.Join(r.cfg.Base.RunDir, k.runtime+"."+k.name)
		if err := os.MkdirAll(e.runDir, 0o755); err != nil {
			return nil, fmt.Errorf("the %s session's run directory: %w", k.runtime, err)
		}
		c.RunDir = e.runDir
	} else {
		c.RunDir = ""
	}
	s, err := r.cfg.New(c)
	if err == nil && r.env != nil {
		if err = s.SetEnv(r.env); err != nil {
			s.Close()
		}
	}
	if err != nil {
		if e.runDir != "" {
			os.RemoveAll(e.runDir)
		}
		return nil, fmt.Errorf("start a %s session: %w", k.runtime, err)
	}
	e.s = s
	r.sessions[k] = e
	r.log.Info("sessions: new session", "runtime", k.runtime, "context", k.name, "cwd", cwd, "sessions", len(r.sessions))
	return e, nil
}

// session returns lang's context name, made if need be, marked used.
func (r *Registry) session(lang cell.Language, name string, create bool) (Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, err := r.getLocked(keyOf(lang, name), create, "")
	if err != nil {
		return nil, err
	}
	e.used = true
	return e.s, nil
}

// RunIn runs a cell of lang in its context name ("" the default): made,
// in the sandbox's working directory, if it does not exist. Errors are
// the session's (interp.Interp.RunLanguage), or ErrFull and ErrClosed.
func (r *Registry) RunIn(ctx context.Context, lang cell.Language, name, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error) {
	s, err := r.session(lang, name, true)
	if err != nil {
		return cell.Result{}, err
	}
	return s.RunLanguage(ctx, lang, code, timeout, onEvent)
}

// RestartIn restarts lang's context name alone: its variables are lost,
// the other sessions keep theirs. A default session is made if need be
// (a restart before any cell starts it fresh); a named one must exist
// (ErrNotFound).
func (r *Registry) RestartIn(lang cell.Language, name string) error {
	s, err := r.session(lang, name, name == "" || name == cell.DefaultContext)
	if err != nil {
		return err
	}
	return s.Restart()
}

// Run runs a Python cell in the default session (the agent's Interpreter
// before languages).
func (r *Registry) Run(ctx context.Context, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error) {
	return r.RunIn(ctx, cell.Python, "", code, timeout, onEvent)
}

// Restart restarts Python's default session.
func (r *Registry) Restart() error { return r.RestartIn(cell.Python, "") }

// Exec runs a command (interp.Interp.Exec of the primary session).
func (r *Registry) Exec(ctx context.Context, argv []string, stdin io.Reader, timeout time.Duration) (cell.ExecResult, error) {
	if r.exec == nil {
		return cell.ExecResult{}, errors.New("sessions: no command runner")
	}
	return r.exec(ctx, argv, stdin, timeout)
}
