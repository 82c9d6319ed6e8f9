package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/agentclient/hostileagent"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/consolelog"
)

// fakeHostileVMM is the test binary's role as a VMM whose guest agent is
// hostile (agentclient/hostileagent): it answers a hello and health, and
// misbehaves on command. Its console is capped the way `cellvm vmm` caps
// it, from the spec the daemon wrote.
func fakeHostileVMM(args []string) int {
	spec, _, ln, err := fakeVMMStart(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake vmm:", err)
		return 1
	}
	console, err := consolelog.New(os.Stdout, spec.ConsoleMaxBytes)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake vmm:", err)
		return 1
	}
	fmt.Fprintln(console, "fake guest: booted")
	return fakeVMMServe(ln, func(nc net.Conn) {
		hostileagent.Serve(nc, console, func() { os.Exit(0) })
	})
}

// newHostileManager is a manager whose VMs have a hostile agent.
func newHostileManager(t *testing.T, opt func(*Options)) (*VMManager, string, *lockedBuffer) {
	t.Helper()
	return newRoleManager(t, "hostile", opt)
}

// newRoleManager is a manager whose VMMs are this test binary in role
// (CELLVM_TEST_FAKE_VMM: see TestMain), logging into the buffer returned.
func newRoleManager(t *testing.T, role string, opt func(*Options)) (*VMManager, string, *lockedBuffer) {
	t.Helper()
	t.Setenv("CELLVM_TEST_FAKE_VMM", role)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	m, state := newTestManager(t, exe, func(o *Options) {
		o.BootTimeout = 30 * time.Second
		o.Log = slog.New(slog.NewTextHandler(logs, nil))
		if opt != nil {
			opt(o)
		}
	})
	return m, state, logs
}

// assertCondemned checks that a sandbox whose guest broke the protocol
// reads lost, its VMM is gone, the log says why, and deleting it leaves
// nothing.
func assertCondemned(t *testing.T, m *VMManager, state, id string, logs *lockedBuffer) {
	t.Helper()
	ctx := context.Background()
	info, err := m.Get(ctx, id)
	if err != nil || info.State != sandbox.StateLost {
		t.Fatalf("sandbox after a protocol violation: %+v, %v; want state lost", info, err)
	}
	if info.Lost == nil || info.Lost.KilledBy != sandbox.KilledByProtocol || !strings.Contains(info.Lost.Reason, "broke the agent protocol") {
		t.Errorf("lost info after a protocol violation: %+v, want killed_by %q and the reason", info.Lost, sandbox.KilledByProtocol)
	}
	m.mu.Lock()
	s := m.sandboxes[id]
	m.mu.Unlock()
	if s.proc.alive() {
		t.Error("the VMM of a condemned sandbox still runs")
	}
	if !strings.Contains(logs.String(), "broke the agent protocol") {
		t.Errorf("the log does not say the guest broke the protocol:\n%s", logs.String())
	}
	if _, err := m.RunCell(ctx, id, sandbox.Cell{Code: hostileagent.CodeOK, Timeout: time.Minute}, nil); !errors.Is(err, sandbox.ErrLost) {
		t.Errorf("cell on a condemned sandbox: %v, want ErrLost", err)
	}
	if err := m.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, m, state)
}

// TestHostileGuestOversizedResult: a guest answering a cell with more than
// the host accepts (a 90 MiB message; a result whose stdout passes the
// host's bound in a message of ordinary size) gets a lost result, and its
// sandbox is lost.
func TestHostileGuestOversizedResult(t *testing.T) {
	for _, code := range []string{hostileagent.CodeHugeResult, hostileagent.CodeLongStdout} {
		t.Run(code, func(t *testing.T) {
			m, state, logs := newHostileManager(t, nil)
			ctx := context.Background()
			info, err := m.Create(ctx, sandbox.Config{})
			if err != nil {
				t.Fatal(err)
			}
			var ends int
			r, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: code, Timeout: time.Minute}, func(e cell.Event) {
				if e.Type == cell.EventEnd {
					ends++
				}
			})

			if err != nil || r.Status != cell.StatusLost || r.StateKept || ends != 1 {
				t.Fatalf("oversized result: %+v, %v, %d end events; want status lost, one end event", r, err, ends)
			}
			if len(r.Stdout) != 0 || !strings.Contains(r.Stderr, "broke the agent protocol") {
				t.Errorf("the lost result carries the guest's output or no reason: stdout %d bytes, stderr %q", len(r.Stdout), r.Stderr)
			}
			assertCondemned(t, m, state, info.ID, logs)
		})
	}
}

// TestHostileGuestDownloadLongerThanAnnounced: the download stops at the
// announced byte and the sandbox is lost.
func TestHostileGuestDownloadLongerThanAnnounced(t *testing.T) {
	m, state, logs := newHostileManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	n, err := m.Download(ctx, info.ID, hostileagent.PathLongerThanAnnounced, &got)
	if !errors.Is(err, sandbox.ErrLost) || got.Len() > 1 || n > 1 {
		t.Fatalf("download of 64 MiB announced as 1 byte: %d bytes (%d written), %v; want at most 1 and ErrLost", n, got.Len(), err)
	}
	assertCondemned(t, m, state, info.ID, logs)
}

// TestDownloadOverTheConfiguredMaximum: a file announced as larger than
// the manager's maximum is refused with ErrTooLarge, writing nothing; the
// sandbox stays usable.
func TestDownloadOverTheConfiguredMaximum(t *testing.T) {
	m, _, _ := newHostileManager(t, func(o *Options) { o.MaxDownloadBytes = 4 })
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := m.Download(ctx, info.ID, hostileagent.PathHello, &got); !errors.Is(err, sandbox.ErrTooLarge) || got.Len() != 0 {
		t.Fatalf("5-byte download over a maximum of 4: %v, %d bytes written; want ErrTooLarge, none", err, got.Len())
	}
	if r, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: hostileagent.CodeOK, Timeout: time.Minute}, nil); err != nil || r.Status != cell.StatusOK {
		t.Fatalf("next cell: %+v, %v", r, err)
	}
}

// TestHostDeadlineOnASilentGuest: a guest that never answers a cell or a
// command still gives a result once the timeout plus the grace has
// passed, and the sandbox answers the next cell.
func TestHostDeadlineOnASilentGuest(t *testing.T) {
	m, _, logs := newHostileManager(t, func(o *Options) { o.CallGrace = 200 * time.Millisecond })
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var end *cell.Result
	r, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: hostileagent.CodeSilent, Timeout: 100 * time.Millisecond}, func(e cell.Event) {
		if e.Type == cell.EventEnd {
			end = e.End
		}
	})

	if err != nil || r.Status != cell.StatusTimeout || r.KilledBy != cell.KilledByTimeout || r.StateKept {
		t.Fatalf("cell on a silent guest: %+v, %v; want status timeout, killed_by timeout, state_kept false", r, err)
	}
	if r.Error == nil || !strings.Contains(r.Error.Value, "did not answer") || end == nil || end.Status != cell.StatusTimeout {
		t.Errorf("the result does not say the guest did not answer, or no end event: %+v, end %+v", r.Error, end)
	}
	x, err := m.Exec(ctx, info.ID, sandbox.ExecRequest{Argv: []string{hostileagent.ArgvSilent}, Timeout: 100 * time.Millisecond})
	if err != nil || !x.TimedOut || x.ExitCode != -1 || !strings.Contains(x.Stderr, "did not answer") {
		t.Fatalf("command on a silent guest: %+v, %v; want timed_out, exit code -1", x, err)
	}
	if !strings.Contains(logs.String(), "host deadline") {
		t.Errorf("the log does not say the host deadline fired:\n%s", logs.String())
	}
	if r, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: hostileagent.CodeOK, Timeout: time.Minute}, nil); err != nil || r.Status != cell.StatusOK {
		t.Fatalf("next cell: %+v, %v", r, err)
	}
	if got, _ := m.Get(ctx, info.ID); got.State != sandbox.StateRunning || got.CellRunning {
		t.Errorf("sandbox after the deadlines: %+v, want running with no cell", got)
	}
}

// waitGone waits (bounded generously: the reaper ticks every second) until
// the sandbox is destroyed.
func waitGone(t *testing.T, m *VMManager, id string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		m.mu.Lock()
		_, there := m.sandboxes[id] // gone from the map: destroy is done
		m.mu.Unlock()
		if !there {
			return
		}
	}
	t.Fatalf("sandbox %s was not reaped", id)
}

// TestTTLReapsASandboxWithAStuckCell: a cell that would run for an hour on
// a guest that never answers does not keep its sandbox past its TTL; the
// cell gets a lost result.
func TestTTLReapsASandboxWithAStuckCell(t *testing.T) {
	m, state, _ := newHostileManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan cell.Result, 1)
	go func() {
		r, _ := m.RunCell(ctx, info.ID, sandbox.Cell{Code: hostileagent.CodeSilent, Timeout: time.Hour}, nil)
		done <- r
	}()
	waitGone(t, m, info.ID)
	select {
	case r := <-done:
		if r.Status != cell.StatusLost {
			t.Errorf("the stuck cell's result after its sandbox was reaped: %+v, want lost", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stuck cell did not return after its sandbox was reaped")
	}
	assertNothingLeft(t, m, state)
}

// TestIdleReapsAStuckCall: a cell call stuck past
// its host deadline (here: a streaming client that never takes the end
// event) does not keep its sandbox from idling out.
func TestIdleReapsAStuckCall(t *testing.T) {
	m, _, _ := newHostileManager(t, func(o *Options) { o.CallGrace = 100 * time.Millisecond })
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{IdleTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	go m.RunCell(ctx, info.ID, sandbox.Cell{Code: hostileagent.CodeSilent, Timeout: 100 * time.Millisecond}, func(e cell.Event) {
		if e.Type == cell.EventEnd {
			<-release
		}
	})

	waitGone(t, m, info.ID)
}

// TestConsoleFloodStaysUnderItsCap: a guest printing 64 MiB on its
// console leaves a console log within the configured cap, ending with the
// newest output; the sandbox answers, and no console text ended it.
func TestConsoleFloodStaysUnderItsCap(t *testing.T) {
	const limit = 1 << 20
	m, _, _ := newHostileManager(t, func(o *Options) { o.ConsoleMaxBytes = limit })
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: hostileagent.CodeFloodConsole, Timeout: time.Minute}, nil); err != nil || r.Status != cell.StatusOK {
		t.Fatalf("cell that floods the console: %+v, %v", r, err)
	}
	path := filepath.Join(m.sandboxDir(info.ID), consoleFile)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > limit {
		t.Fatalf("console.log is %d bytes after a %d-byte flood, above its cap of %d", st.Size(), hostileagent.FloodBytes, limit)
	}
	b, _ := os.ReadFile(path)
	if !bytes.HasPrefix(b, []byte("[cellvm: console log capped")) || !bytes.HasSuffix(b, []byte("not syncing \n")) {
		t.Errorf("console.log does not hold the marker and then the newest output: starts %q, ends %q", b[:min(len(b), 80)], b[max(0, len(b)-80):])
	}
	if r, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: hostileagent.CodeOK, Timeout: time.Minute}, nil); err != nil || r.Status != cell.StatusOK {
		t.Fatalf("next cell: %+v, %v", r, err)
	}
}

// TestAgentHangUpKeepsTheSandbox: an agent that ends a cell's stream
// midway (it gave up writing to the host) while its VM runs gets a lost
// result that says the sandbox is kept, not that the VM stopped; the
// sandbox runs and answers the next cell.
func TestAgentHangUpKeepsTheSandbox(t *testing.T) {
	m, _, logs := newHostileManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: hostileagent.CodeHangUp, Timeout: time.Minute}, nil)
	if err != nil || r.Status != cell.StatusLost || r.StateKept {
		t.Fatalf("cell whose stream the agent ended: %+v, %v; want status lost, state_kept false", r, err)
	}
	if strings.Contains(r.Stderr, "VM stopped") || !strings.Contains(r.Stderr, "sandbox is kept") {
		t.Errorf("the result's words: %q; want that the sandbox is kept, not that its VM stopped", r.Stderr)
	}
	if !strings.Contains(logs.String(), "ended a cell's stream") {
		t.Errorf("the log does not say the agent ended the stream:\n%s", logs.String())
	}
	if r, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: hostileagent.CodeOK, Timeout: time.Minute}, nil); err != nil || r.Status != cell.StatusOK {
		t.Fatalf("next cell: %+v, %v", r, err)
	}
	if got, _ := m.Get(ctx, info.ID); got.State != sandbox.StateRunning {
		t.Errorf("sandbox after the hang-up: %+v, want running", got)
	}
}
