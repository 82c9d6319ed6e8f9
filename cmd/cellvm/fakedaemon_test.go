package main

import (
	"context"
	"encoding/base64"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/cellvm/cellvm/agent/fakesandbox"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// fakeDeps make the test binary's `serve` (and `run` without a daemon)
// serve a fake manager: the real command line, API server, listeners and
// auth, with no VM. Only the test binary has them (CELLVM_TEST_FAKE_MANAGER).
func fakeDeps() deps {
	m := newScriptedFake()
	return deps{
		daemonManager:   func(*serveOptions, *slog.Logger) (sandbox.Manager, func(), error) { return m, func() {}, nil },
		embeddedManager: func(*guestFlags, *slog.Logger) (sandbox.Manager, func(), error) { return m, func() {}, nil },
	}
}

// Cells the fake daemon understands besides the stand-in interpreter's
// "name = int", "name" and "print(name)".
const (
	cellRaise  = "raise"  // a KeyError
	cellSpin   = "spin"   // times out, variables kept
	cellCrash  = "crash"  // the interpreter is lost
	cellLose   = "lose"   // the sandbox's VM is lost (its info then says why)
	cellStream = "stream" // prints "tick 1", waits for $CELLVM_TEST_RELEASE to exist, prints "tick 2"
	cellChart  = "chart"  // a PNG display
	cellLog    = "log:"   // log:TEXT appends TEXT to the sandbox's console log
)

func newScriptedFake() *fakesandbox.Manager {
	m := fakesandbox.New(func(code string) (cell.Result, bool) {
		switch code {
		case cellRaise:
			return cell.Result{Status: cell.StatusError, StateKept: true, Error: &cell.Error{Name: "KeyError", Value: "'x'",
				Traceback: []string{"Traceback (most recent call last):", "KeyError: 'x'"}}}, true
		case cellSpin:
			return cell.Result{Status: cell.StatusTimeout, StateKept: true, KilledBy: cell.KilledByTimeout, Stdout: "spinning\n"}, true
		case cellCrash:
			return cell.Result{Status: cell.StatusLost, KilledBy: cell.KilledByOOM}, true
		case cellChart:
			return cell.Result{Status: cell.StatusOK, StateKept: true, Results: []cell.Display{{Data: map[string]string{
				cell.MIMEPNG: base64.StdEncoding.EncodeToString(fakesandbox.ChartPNG()), cell.MIMEText: "<Figure>"}}}}, true
		}
		return cell.Result{}, false
	})
	m.Streamer = func(ctx context.Context, id, code string, emit func(cell.Event)) (cell.Result, bool) {
		switch {
		case code == cellStream:
			emit(cell.Event{Type: cell.EventStdout, Text: "tick 1\n"})
			release := os.Getenv("CELLVM_TEST_RELEASE")
			for release != "" && ctx.Err() == nil {
				if _, err := os.Stat(release); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			emit(cell.Event{Type: cell.EventStdout, Text: "tick 2\n"})
			return cell.Result{Status: cell.StatusOK, StateKept: true, Stdout: "tick 1\ntick 2\n"}, true
		case code == cellLose:
			why := sandbox.LostInfo{Reason: "the VMM was killed by killed (test)", KilledBy: "signal", Exit: "killed by SIGKILL",
				Console: []string{"last console line"}}
			m.Lose(id, why)
			return cell.Result{Status: cell.StatusLost, Stderr: "the sandbox's VM stopped while the cell ran; its state is gone"}, true
		case strings.HasPrefix(code, cellLog):
			m.AppendLog(id, sandbox.LogConsole, strings.TrimPrefix(code, cellLog))
			return cell.Result{Status: cell.StatusOK, StateKept: true}, true
		}
		return cell.Result{}, false
	}
	return m
}
