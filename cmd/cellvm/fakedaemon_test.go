package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// fakeDeps make the test binary's `serve` (and `run` without a daemon)
// serve a fake manager: the real command line, API server, listeners and
// auth, with no VM. Only the test binary has them (CELLVM_TEST_FAKE_MANAGER).
func fakeDeps() deps {
	m := newScriptedFake()
	e := sessionEcho{m, &sync.Mutex{}, new([]string)}
	return deps{
		// serve's --node, --max-sandboxes and lifetimes reach the fake as
		// they reach the VM manager (the router test runs two nodes, one
		// full).
		daemonManager: func(o *serveOptions, _ *slog.Logger) (sandbox.Manager, func(), error) {
			m.Node, m.MaxSandboxes = o.node, o.maxSandboxes
			m.Lifetimes = o.life.lifetimes()
			return e, func() {}, nil
		},
		embeddedManager: func(*guestFlags, *slog.Logger) (sandbox.Manager, func(), error) {
			return e, func() {}, nil
		},
	}
}

// Cells the fake daemon understands besides the stand-in interpreter's
// "name = int", "name" and "print(name)". Those marked built in are
// sandboxtest's own; the others are this file's Script.
const (
	cellRaise    = "raise"   // built in: a KeyError
	cellTimedOut = "timeout" // built in: times out after printing "started", variables kept
	cellChart    = "chart"   // built in: a PNG display
	cellCrash    = "crash"   // the interpreter is lost
	cellLose     = "lose"    // the sandbox's VM is lost (its info then says why)
	cellStream   = "stream"  // prints "tick 1", waits for $CELLVM_TEST_RELEASE to exist, prints "tick 2"
	cellLog      = "log:"    // log:TEXT appends TEXT to the sandbox's console log
	cellListen   = "listen:" // listen:PORT serves HTTP on the sandbox's PORT (files_cmds_test.go)
)

// cellSession is a cell that prints the session it was given
// ("language=javascript context=c1") and the sessions restarted so far, in
// order ("restart=bash/default"), so tests see what the CLI passed on
// (each as the API passes it on: "" is python and default).
const cellSession = "session?"

// sessionEcho is the fake manager with cellSession answered and restarts'
// sessions noted.
type sessionEcho struct {
	*sandboxtest.Manager
	mu       *sync.Mutex
	restarts *[]string
}

func (m sessionEcho) RunCell(ctx context.Context, id string, c sandbox.Cell, onEvent func(cell.Event)) (cell.Result, error) {
	if c.Code != cellSession {
		return m.Manager.RunCell(ctx, id, c, onEvent)
	}
	if _, err := m.Get(ctx, id); err != nil {
		return cell.Result{}, err
	}
	m.mu.Lock()
	out := "language=" + sessionName(c.Session, " context=") + "\n"
	for _, r := range *m.restarts {
		out += "restart=" + r + "\n"
	}
	m.mu.Unlock()
	res := cell.Result{Status: cell.StatusOK, StateKept: true, Stdout: out}
	if onEvent != nil {
		onEvent(cell.Event{Type: cell.EventStdout, Text: out})
		onEvent(cell.Event{Type: cell.EventEnd, End: &res})
	}
	return res, nil
}

// Restart notes s; the double restarts a default session (a named one it
// has not seen would be not found).
func (m sessionEcho) Restart(ctx context.Context, id string, s sandbox.Session) error {
	if s.Context == "" || s.Context == cell.DefaultContext {
		if err := m.Manager.Restart(ctx, id, s); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	*m.restarts = append(*m.restarts, sessionName(s, "/"))
	return nil
}

// sessionName is "language<sep>context", "" read as python and default.
func sessionName(s sandbox.Session, sep string) string {
	l, c := string(s.Language), s.Context
	if l == "" {
		l = string(cell.Python)
	}
	if c == "" {
		c = cell.DefaultContext
	}
	return l + sep + c
}

func newScriptedFake() *sandboxtest.Manager {
	m := sandboxtest.New()
	m.Script = func(ctx context.Context, c *sandboxtest.Cell) (cell.Result, error) {
		switch {
		case c.Code == cellCrash:
			return cell.Result{Status: cell.StatusLost, KilledBy: cell.KilledByOOM}, nil
		case c.Code == cellStream:
			c.Emit(cell.Event{Type: cell.EventStdout, Text: "tick 1\n"})
			release := os.Getenv("CELLVM_TEST_RELEASE")
			for release != "" && ctx.Err() == nil {
				if _, err := os.Stat(release); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			c.Emit(cell.Event{Type: cell.EventStdout, Text: "tick 2\n"})
			return cell.Result{Status: cell.StatusOK, StateKept: true, Stdout: "tick 1\ntick 2\n"}, nil
		case c.Code == cellLose:
			why := sandbox.LostInfo{Reason: "the VMM was killed by killed (test)", KilledBy: "signal", Exit: "killed by SIGKILL",
				Console: []string{"last console line"}}
			m.Lose(c.Sandbox, why)
			return cell.Result{Status: cell.StatusLost, Stderr: "the sandbox's VM stopped while the cell ran; its state is gone"}, nil
		case strings.HasPrefix(c.Code, cellListen):
			return listenCell(m, c)
		case strings.HasPrefix(c.Code, cellLog):
			m.AppendLog(c.Sandbox, sandbox.LogConsole, strings.TrimPrefix(c.Code, cellLog))
			return cell.Result{Status: cell.StatusOK, StateKept: true}, nil
		}
		return cell.Result{}, sandboxtest.Pass
	}
	return m
}
