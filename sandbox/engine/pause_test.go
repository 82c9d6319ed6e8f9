package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/agent"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
)

// fakeImage is what the pausable fake VMM saves as its machine: the
// interpreter's variables and how often the guest was reseeded.
type fakeImage struct {
	Vars    map[string]string `json:"vars"`
	Reseeds int               `json:"reseeds"`
	// GenReseeds counts the reseeds of the interpreter's generators.
	GenReseeds int `json:"gen_reseeds"`
}

// fakePausableVMM is the test binary's role as a VMM that can be paused
// and restored with no KVM: its "guest" is an agent over varsInterp, its
// control socket saves the variables as the state file (and, for a
// realistic size on disk, half the guest's memory as the memory file),
// and a VMM started with spec.Restore reads them back. A snapshot that
// asks to stop ends the process, as `cellvm vmm` does.
func fakePausableVMM(args []string) int {
	spec, files, ln, err := fakeVMMStart(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake vmm:", err)
		return 1
	}
	if err := recordPlan(args, spec, files); err != nil {
		fmt.Fprintln(os.Stderr, "fake vmm: plan:", err)
		return 1
	}
	if err := fakeGuestMountsWorkspace(spec, files); err != nil {
		fmt.Fprintln(os.Stderr, "fake vmm: workspace:", err)
		return 1
	}
	in := &varsInterp{img: fakeImage{Vars: map[string]string{}}}
	if spec.Restore != nil {
		state, mem := files[control.SlotRestoreState], files[control.SlotRestoreMemory]
		if img, real, err := fakeRestoreRealImage(spec, files); real {
			// A real machine image (compact_test.go): its memory composed.
			if err != nil {
				fmt.Fprintln(os.Stderr, "fake vmm: restore:", err)
				return 1
			}
			in.img = img
		} else if err := json.NewDecoder(state).Decode(&in.img); err != nil {
			fmt.Fprintln(os.Stderr, "fake vmm: restore:", err)
			return 1
		} else if fi, err := mem.Stat(); err != nil || fi.Size() != int64(spec.MemoryMiB)<<19 {
			fmt.Fprintln(os.Stderr, "fake vmm: restore: memory file", fi, err)
			return 1
		}
		state.Close()
		mem.Close()
		if _, fail := in.img.Vars["failrestore"]; fail {
			// As `cellvm vmm` whose restore failed before the guest ran.
			control.WriteEnd(files[control.SlotEnd], control.End{Reason: control.ReasonStartFailed, Error: "fake VMM: restore failed on request"})
			return 1
		}
		fmt.Println("fake guest: restored")
	} else {
		fmt.Println("fake guest: booted")
	}
	if spec.Control != "" {
		cln, err := net.ListenUnix("unix", &net.UnixAddr{Name: spec.Control, Net: "unix"})
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake vmm: control:", err)
			return 1
		}
		go control.Serve(cln, func(state, mem *os.File, req control.Request) error {
			in.mu.Lock()
			defer in.mu.Unlock()
			if _, fail := in.img.Vars["failsave"]; fail {
				return errors.New("fake VMM: save failed on request")
			}
			if _, full := in.img.Vars["nospace"]; full {
				return fmt.Errorf("write memory file: %w", syscall.ENOSPC)
			}
			if ms, slow := in.img.Vars["slowsave"]; slow { // a save that takes MS
				n, _ := strconv.Atoi(ms)
				time.Sleep(time.Duration(n) * time.Millisecond)
			}
			if err := json.NewEncoder(state).Encode(in.img); err != nil {
				return err
			}
			if _, err := io.CopyN(mem, zeroes{}, int64(spec.MemoryMiB)<<19); err != nil {
				return err
			}
			if _, drop := in.img.Vars["dropreply"]; drop && req.Then == control.ThenStop {
				// The machine is written and the VMM ends as asked, but
				// its reply never reaches the daemon.
				control.WriteEnd(files[control.SlotEnd], control.End{Reason: control.ReasonSnapshotStop})
				os.Exit(0)
			}
			return nil
		}, func() { os.Exit(0) }, slog.New(slog.DiscardHandler))
	}
	srv := agent.NewServer(agent.Config{Interp: in, Software: "fake-agent",
		NewMachine: &agent.NewMachine{
			Reseed: func([]byte) error {
				in.mu.Lock()
				defer in.mu.Unlock()
				if _, fail := in.img.Vars["failreseed"]; fail {
					return errors.New("fake guest: reseed failed on request")
				}
				in.img.Reseeds++
				return nil
			},
			SetClock: func(time.Time) error { return nil },
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return fakeVMMServe(ln, srv.ServeConn)
}

// zeroes reads as endless non-zero bytes (written out, they take disk).
type zeroes struct{}

func (zeroes) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 0xa5
	}
	return len(p), nil
}

// varsInterp runs cells of these forms: "NAME = VALUE" sets a variable,
// "NAME" answers its value (an error if unset), "reseeds" answers how
// often the guest was reseeded ("genreseeds": its generators), and
// "crash()" ends the VM. The sandbox's env becomes variables (of a new
// interpreter: SetEnv).
type varsInterp struct {
	mu  sync.Mutex
	img fakeImage
}

func (v *varsInterp) Run(ctx context.Context, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	text := func(s string) cell.Result {
		return cell.Result{Status: cell.StatusOK, StateKept: true, Results: []cell.Display{{Main: true, Data: map[string]string{"text/plain": s}}}}
	}
	switch name, value, set := strings.Cut(code, " = "); {
	case code == "crash()":
		os.Exit(3)
	case code == "reseeds":
		return text(strconv.Itoa(v.img.Reseeds)), nil
	case code == "genreseeds":
		return text(strconv.Itoa(v.img.GenReseeds)), nil
	case set:
		v.img.Vars[name] = value
		return cell.Result{Status: cell.StatusOK, StateKept: true}, nil
	default:
		if x, ok := v.img.Vars[code]; ok {
			return text(x), nil
		}
	}
	return cell.Result{Status: cell.StatusError, StateKept: true, Error: &cell.Error{Name: "NameError", Value: code}}, nil
}

// SetEnv, as the guest's agent does, gives the env to a new interpreter:
// the variables of a running one are gone.
func (v *varsInterp) SetEnv(env map[string]string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.img.Vars = map[string]string{}
	for k, x := range env {
		v.img.Vars[k] = x
	}
	return nil
}

// Reseed is the interpreter's generators reseeded (a fork's, not a
// resume's).
func (v *varsInterp) Reseed() (bool, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.img.GenReseeds++
	return false, nil
}

func (*varsInterp) Interrupt() bool { return false }
func (*varsInterp) Restart() error  { return nil }
func (*varsInterp) Exec(ctx context.Context, argv []string, _ io.Reader, _ time.Duration) (cell.ExecResult, error) {
	if len(argv) == 2 && argv[0] == "sleep" { // sleep MS: a long command
		ms, _ := strconv.Atoi(argv[1])
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-ctx.Done():
			return cell.ExecResult{}, ctx.Err()
		}
		return cell.ExecResult{Stdout: "slept\n"}, nil
	}
	return cell.ExecResult{Stdout: "exec ran\n"}, nil
}

// newPausableManager is a manager whose VMs are fakePausableVMM.
func newPausableManager(t *testing.T, opt func(*Options)) (*VMManager, string) {
	t.Helper()
	t.Setenv("CELLVM_TEST_FAKE_VMM", "pausable")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return newTestManager(t, exe, func(o *Options) {
		o.BootTimeout = 30 * time.Second
		if opt != nil {
			opt(o)
		}
	})
}

// cellText runs code and returns its main result's text ("" if none).
func cellText(t *testing.T, m *VMManager, id, code string) string {
	t.Helper()
	r, err := m.RunCell(context.Background(), id, sandbox.Cell{Code: code, Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatalf("cell %q in %s: %v", code, id, err)
	}
	if r.MainResult() == nil {
		return ""
	}
	return r.MainResult().Data["text/plain"]
}

func vmPID(m *VMManager, id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sandboxes[id]
	s.netMu.Lock()
	defer s.netMu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.pid
}

func stateOf(t *testing.T, m *VMManager, id string) sandbox.State {
	t.Helper()
	in, err := m.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return in.State
}

// assertVMMGone fails t if the VMM process pid of sandbox id still runs.
func assertVMMGone(t *testing.T, m *VMManager, id string, pid int) {
	t.Helper()
	if isVMMFor(pid, filepath.Join(m.sandboxDir(id), specFile)) {
		t.Errorf("sandbox %s's VMM process %d still runs after the pause", id, pid)
	}
}

// TestPauseToDiskAndResume: a pause ends the VMM process and leaves the
// machine's image; pausing again is refused; a cell on the paused
// sandbox resumes it by itself, in a new process, with its variables and
// a reseeded guest; resume and pause events are published; a resume of a
// running sandbox is refused; a paused sandbox deletes cleanly.
func TestPauseToDiskAndResume(t *testing.T) {
	m, state := newPausableManager(t, nil)
	ctx := context.Background()
	events, err := m.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	cellText(t, m, info.ID, "x = 41")
	pid := vmPID(m, info.ID)
	if err := m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if st := stateOf(t, m, info.ID); st != sandbox.StatePaused {
		t.Errorf("state after pause: %s", st)
	}
	assertVMMGone(t, m, info.ID, pid)
	if got, _ := m.Get(ctx, info.ID); got.Usage.MemoryBytes != 0 {
		t.Errorf("a paused sandbox reports %d bytes of memory in use", got.Usage.MemoryBytes)
	}
	if _, err := os.Stat(filepath.Join(m.sandboxDir(info.ID), pausedDir, snapMemFile)); err != nil {
		t.Errorf("no image of the paused sandbox: %v", err)
	}
	if err := m.Pause(ctx, info.ID); !errors.Is(err, sandbox.ErrBusy) || !strings.Contains(err.Error(), "already paused") {
		t.Errorf("pause of a paused sandbox: %v, want ErrBusy saying already paused", err)
	}

	if got := cellText(t, m, info.ID, "x"); got != "41" {
		t.Errorf("x after an auto-resume: %q, want 41", got)
	}
	if st := stateOf(t, m, info.ID); st != sandbox.StateRunning {
		t.Errorf("state after the auto-resume: %s", st)
	}
	if p := vmPID(m, info.ID); p == pid || p == 0 {
		t.Errorf("the resumed sandbox's VMM is pid %d, the paused one's was %d", p, pid)
	}
	if got := cellText(t, m, info.ID, "reseeds"); got != "1" {
		t.Errorf("the resumed guest was reseeded %s times, want 1", got)
	}
	if err := m.Resume(ctx, info.ID); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("resume of a running sandbox: %v, want ErrBusy", err)
	}

	// A second round: explicit resume, and the image the resumed VMM
	// restored from is replaced, not piled up.
	cellText(t, m, info.ID, "x = 42")
	if err := m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Resume(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if got := cellText(t, m, info.ID, "x"); got != "42" {
		t.Errorf("x after the second resume: %q, want 42", got)
	}
	for _, d := range []string{pausedDir, pausedDir + partialSuffix} {
		if _, err := os.Stat(filepath.Join(m.sandboxDir(info.ID), d)); err == nil {
			t.Errorf("%s left in a running sandbox's directory", d)
		}
	}
	var seen []sandbox.EventType
	for len(seen) < 5 {
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		e, err := events.Next(ectx)
		cancel()
		if err != nil {
			t.Fatalf("events so far %v: %v", seen, err)
		}
		seen = append(seen, e.Type)
	}
	want := []sandbox.EventType{sandbox.EventCreated, sandbox.EventPaused, sandbox.EventResumed, sandbox.EventPaused, sandbox.EventResumed}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("events %v, want %v", seen, want)
	}

	if err := m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, m, state)
}

// TestExecAndFilesResumeAPausedSandbox: a command or a file call on a
// paused sandbox resumes it as a cell does.
func TestExecAndFilesResumeAPausedSandbox(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	for _, call := range []struct {
		name string
		do   func() error
	}{
		{"exec", func() error {
			r, err := m.Exec(ctx, info.ID, sandbox.ExecRequest{Argv: []string{"true"}, Timeout: time.Minute})
			if err == nil && r.Stdout != "exec ran\n" {
				err = fmt.Errorf("stdout %q", r.Stdout)
			}
			return err
		}},
		{"download", func() error {
			// The answer comes from a guest that runs again.
			_, err := m.Download(ctx, info.ID, "/nonexistent", io.Discard)
			if errors.Is(err, sandbox.ErrNotFound) {
				return nil // the guest looked
			}
			return fmt.Errorf("%v, want the guest's ErrNotFound", err)
		}},
	} {
		if err := m.Pause(ctx, info.ID); err != nil {
			t.Fatal(err)
		}
		if err := call.do(); err != nil {
			t.Errorf("%s on a paused sandbox: %v", call.name, err)
		}
		if st := stateOf(t, m, info.ID); st != sandbox.StateRunning {
			t.Errorf("after %s on a paused sandbox its state is %s, want running", call.name, st)
		}
	}
}

// TestIdlePause: a sandbox with idle_pause_s is paused once idle that
// long, and the next cell finds its variables; idle_pause_s is in the
// config's JSON and bounded.
func TestIdlePause(t *testing.T) {
	var c sandbox.Config
	if err := json.Unmarshal([]byte(`{"idle_pause_s": 7}`), &c); err != nil || c.IdlePause != 7*time.Second {
		t.Fatalf("decode idle_pause_s: %+v, %v", c, err)
	}
	if b, _ := json.Marshal(sandbox.Config{}); bytes.Contains(b, []byte("idle_pause")) {
		t.Errorf("a config without idle pause encodes one: %s", b)
	}
	if err := (sandbox.Config{IdlePause: -time.Second}).WithDefaults().Validate(); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("negative idle_pause_s: %v", err)
	}
	if err := (sandbox.Config{IdlePause: sandbox.MaxTTL + time.Second}).WithDefaults().Validate(); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("idle_pause_s past the maximum: %v", err)
	}

	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64, IdlePause: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cellText(t, m, info.ID, "x = idle")
	pid := vmPID(m, info.ID)
	deadline := time.Now().Add(time.Minute)
	for stateOf(t, m, info.ID) != sandbox.StatePaused {
		if time.Now().After(deadline) {
			t.Fatal("an idle sandbox with idle_pause_s 1 was not paused within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The state reads paused from the pause's start; the cell waits for
	// it to end and then resumes.
	if got := cellText(t, m, info.ID, "x"); got != "idle" {
		t.Errorf("x after an idle pause: %q", got)
	}
	assertVMMGone(t, m, info.ID, pid)
}

// abandon makes m forget its sandboxes without stopping them, as a daemon
// killed with -9 does: the VMMs (and the images of paused sandboxes) stay
// for the next manager on the state directory.
func abandon(m *VMManager) {
	m.mu.Lock()
	m.sandboxes = map[string]*vmSandbox{}
	m.mu.Unlock()
	m.Close()
}

// TestPausedSandboxesAndSnapshotsSurviveARestart: a manager started on
// the state directory of one that died takes back a paused sandbox as
// paused (and a cell resumes it with its variables), a resumed one as
// running, and the snapshots, which still fork; half-written images and
// snapshots are removed.
func TestPausedSandboxesAndSnapshotsSurviveARestart(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	paused, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64, Env: map[string]string{"K": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	cellText(t, m, paused.ID, "x = paused")
	cellText(t, m, resumed.ID, "x = resumed")
	snap, err := m.Snapshot(ctx, paused.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{paused.ID, resumed.ID} {
		if err := m.Pause(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Resume(ctx, resumed.ID); err != nil {
		t.Fatal(err)
	}
	// What a crash mid-way leaves: a half-written pause and snapshot.
	os.Mkdir(filepath.Join(m.sandboxDir(paused.ID), pausedDir+partialSuffix), 0o700)
	os.Mkdir(m.snapshotDir("snap-00000000000a")+partialSuffix, 0o700)
	abandon(m)

	m2, err := NewVMManager(m.opt)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if st := stateOf(t, m2, paused.ID); st != sandbox.StatePaused {
		t.Errorf("the paused sandbox was taken back %s", st)
	}
	if st := stateOf(t, m2, resumed.ID); st != sandbox.StateRunning {
		t.Errorf("the resumed sandbox was taken back %s", st)
	}
	if got, _ := m2.Get(ctx, paused.ID); got.Config.Env["K"] != "v" || got.Config.MemoryMiB != 64 {
		t.Errorf("the paused sandbox's config after the restart: %+v", got.Config)
	}
	if got := cellText(t, m2, paused.ID, "x"); got != "paused" {
		t.Errorf("x in the paused sandbox after a restart: %q", got)
	}
	if got := cellText(t, m2, resumed.ID, "x"); got != "resumed" {
		t.Errorf("x in the resumed sandbox after a restart: %q", got)
	}
	// The resumed one pauses and resumes again under the new manager.
	if err := m2.Pause(ctx, resumed.ID); err != nil {
		t.Fatal(err)
	}
	if got := cellText(t, m2, resumed.ID, "x"); got != "resumed" {
		t.Errorf("x after a pause under the new manager: %q", got)
	}
	if _, err := m2.GetSnapshot(ctx, snap.ID); err != nil {
		t.Fatalf("the snapshot after a restart: %v", err)
	}
	fork, err := m2.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got := cellText(t, m2, fork.ID, "x"); got != "paused" {
		t.Errorf("x in a fork of the snapshot after a restart: %q", got)
	}
	if left, _ := filepath.Glob(filepath.Join(m.opt.StateDir, "*", "*"+partialSuffix)); len(left) != 0 {
		t.Errorf("half-written images left after the restart: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(m.opt.StateDir, "sandboxes", "*", "*"+partialSuffix)); len(left) != 0 {
		t.Errorf("half-written pauses left after the restart: %v", left)
	}
}

// TestImageDiskCap: snapshots and pauses share the cap on machine images;
// one past it is refused with ErrFull and a message naming the cap,
// writes nothing, and leaves its sandbox running; freeing space lets it
// through.
func TestImageDiskCap(t *testing.T) {
	// The fake's images take half the guest's memory on disk (32 MiB
	// here); a write reserves the whole (65 MiB) until it is measured.
	m, _ := newPausableManager(t, func(o *Options) { o.MaxImageBytes = 100 << 20 })
	ctx := context.Background()
	a, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	cellText(t, m, b.ID, "x = 1")
	if err := m.Pause(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	snap, err := m.Snapshot(ctx, b.ID)
	if err != nil {
		t.Fatalf("snapshot within the cap: %v", err)
	}
	nothingWritten := func(what string) {
		t.Helper()
		left, _ := filepath.Glob(filepath.Join(m.opt.StateDir, "*", "*"+partialSuffix))
		more, _ := filepath.Glob(filepath.Join(m.opt.StateDir, "sandboxes", "*", "*"+partialSuffix))
		if len(left)+len(more) != 0 {
			t.Errorf("a refused %s left %v %v", what, left, more)
		}
		if l, _ := m.ListSnapshots(ctx); len(l) != 1 {
			t.Errorf("a refused %s changed the snapshots: %+v", what, l)
		}
		if got := cellText(t, m, b.ID, "x"); got != "1" {
			t.Errorf("after a refused %s, x = %q", what, got)
		}
	}
	_, err = m.Snapshot(ctx, b.ID)
	if !errors.Is(err, sandbox.ErrFull) || !strings.Contains(err.Error(), "--snapshot-max-mib") {
		t.Errorf("snapshot past the cap: %v, want ErrFull naming the cap", err)
	}
	nothingWritten("snapshot")
	err = m.Pause(ctx, b.ID)
	if !errors.Is(err, sandbox.ErrFull) || !strings.Contains(err.Error(), "cap") {
		t.Errorf("pause past the cap: %v, want ErrFull naming the cap", err)
	}
	if st := stateOf(t, m, b.ID); st != sandbox.StateRunning {
		t.Errorf("a sandbox whose pause was refused is %s", st)
	}
	nothingWritten("pause")
	if err := m.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(ctx, b.ID); err != nil {
		t.Errorf("pause once the snapshot is gone: %v", err)
	}
}

// TestPauseBadInput: a pause of an unknown or lost sandbox, a pause whose
// save fails, and one on a full disk are clear errors that leave nothing
// behind (the failed one's sandbox keeps running); a snapshot of a lost sandbox is
// ErrLost; a fork with another machine than its snapshot's, or of an
// unknown snapshot, is refused and leaves no sandbox.
func TestPauseBadInput(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	if err := m.Pause(ctx, "sb-000000000000"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("pause of an unknown sandbox: %v", err)
	}
	if err := m.Resume(ctx, "sb-000000000000"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("resume of an unknown sandbox: %v", err)
	}
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	cellText(t, m, info.ID, "failsave = 1")
	if err := m.Pause(ctx, info.ID); err == nil || !strings.Contains(err.Error(), "save failed on request") || !strings.Contains(err.Error(), "keeps running") {
		t.Errorf("pause whose save fails: %v", err)
	}
	if got := cellText(t, m, info.ID, "failsave"); got != "1" {
		t.Errorf("after a failed pause the sandbox answers %q", got)
	}
	if _, err := os.Stat(filepath.Join(m.sandboxDir(info.ID), pausedDir+partialSuffix)); err == nil {
		t.Error("a failed pause left its partial image")
	}
	if _, err := m.Snapshot(ctx, info.ID); err == nil {
		t.Fatal("a snapshot whose save fails succeeded")
	}

	// A full disk: both refused with ErrFull, nothing written, the
	// sandbox runs on.
	full, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	cellText(t, m, full.ID, "nospace = 1")
	if err := m.Pause(ctx, full.ID); !errors.Is(err, sandbox.ErrFull) || !strings.Contains(err.Error(), "disk is full") {
		t.Errorf("pause on a full disk: %v, want ErrFull saying the disk is full", err)
	}
	if _, err := m.Snapshot(ctx, full.ID); !errors.Is(err, sandbox.ErrFull) {
		t.Errorf("snapshot on a full disk: %v, want ErrFull", err)
	}
	if got := cellText(t, m, full.ID, "nospace"); got != "1" || stateOf(t, m, full.ID) != sandbox.StateRunning {
		t.Errorf("after a pause on a full disk the sandbox answers %q and is %s", got, stateOf(t, m, full.ID))
	}
	partial, _ := filepath.Glob(filepath.Join(m.opt.StateDir, "*", "*"+partialSuffix))
	paused, _ := filepath.Glob(filepath.Join(m.opt.StateDir, "sandboxes", "*", pausedDir+"*"))
	if l, _ := m.ListSnapshots(ctx); len(partial)+len(paused)+len(l) != 0 {
		t.Errorf("refused snapshots and pauses left %v %v %+v", partial, paused, l)
	}

	lost, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	good, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	gsnap, err := m.Snapshot(ctx, good.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := m.RunCell(ctx, lost.ID, sandbox.Cell{Code: "crash()", Timeout: time.Minute}, nil); r.Status != cell.StatusLost {
		t.Fatalf("crash(): %+v", r)
	}
	if err := m.Pause(ctx, lost.ID); !errors.Is(err, sandbox.ErrLost) {
		t.Errorf("pause of a lost sandbox: %v, want ErrLost", err)
	}
	if _, err := m.Snapshot(ctx, lost.ID); !errors.Is(err, sandbox.ErrLost) {
		t.Errorf("snapshot of a lost sandbox: %v, want ErrLost", err)
	}
	before, _ := m.List(ctx)
	for _, c := range []struct {
		cfg  sandbox.Config
		want error
	}{
		{sandbox.Config{Snapshot: "snap-000000000000"}, sandbox.ErrNotFound},
		{sandbox.Config{Snapshot: gsnap.ID, MemoryMiB: 128}, sandbox.ErrInvalid},
		{sandbox.Config{Snapshot: gsnap.ID, VCPUs: 2}, sandbox.ErrInvalid},
		{sandbox.Config{Snapshot: "snap-../../etc"}, sandbox.ErrInvalid},
	} {
		if _, err := m.Create(ctx, c.cfg); !errors.Is(err, c.want) {
			t.Errorf("fork %+v: %v, want %v", c.cfg, err, c.want)
		}
	}
	if after, _ := m.List(ctx); len(after) != len(before) {
		t.Errorf("refused forks left sandboxes: %d before, %d after", len(before), len(after))
	}
	if d, _ := os.ReadDir(filepath.Join(m.opt.StateDir, "sandboxes")); len(d) != len(before) {
		t.Errorf("refused forks left directories: %d for %d sandboxes", len(d), len(before))
	}
}

// vmmCount counts the live VMM processes of sandbox id.
func vmmCount(m *VMManager, id string) int {
	n := 0
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		if pid, err := strconv.Atoi(filepath.Base(p)); err == nil && isVMMFor(pid, filepath.Join(m.sandboxDir(id), specFile)) {
			n++
		}
	}
	return n
}

// TestPauseResumeCellsConcurrently: pauses, resumes, cells and reads of
// one sandbox from several goroutines at once get either their result or
// ErrBusy (a pause of a paused sandbox, a resume of a running one, a
// second cell), every cell finds the variable, and the sandbox ends with
// at most one VMM process, none while paused.
func TestPauseResumeCellsConcurrently(t *testing.T) {
	m, state := newPausableManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	cellText(t, m, info.ID, "x = 41")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				var err error
				switch (g + i) % 4 {
				case 0:
					err = m.Pause(ctx, info.ID)
				case 1:
					err = m.Resume(ctx, info.ID)
				case 2:
					var r cell.Result
					if r, err = m.RunCell(ctx, info.ID, sandbox.Cell{Code: "x", Timeout: time.Minute}, nil); err == nil && (r.MainResult() == nil || r.MainResult().Data["text/plain"] != "41") {
						t.Errorf("a cell among pauses and resumes: %+v", r)
					}
				case 3:
					_, err = m.Get(ctx, info.ID)
				}
				if err != nil && !errors.Is(err, sandbox.ErrBusy) {
					t.Errorf("goroutine %d op %d: %v", g, i, err)
				}
			}
		}()
	}
	wg.Wait()
	n := vmmCount(m, info.ID)
	switch st := stateOf(t, m, info.ID); {
	case st == sandbox.StatePaused && n != 0, st == sandbox.StateRunning && n != 1, st != sandbox.StatePaused && st != sandbox.StateRunning:
		t.Errorf("sandbox %s with %d VMM processes", st, n)
	}
	if got := cellText(t, m, info.ID, "x"); got != "41" {
		t.Errorf("x at the end: %q", got)
	}
	if err := m.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, m, state)
}

// TestForkKeepsVariablesWithItsSnapshotsEnv: a fork of a sandbox that has
// an env takes that env without its guest being given it again (which
// starts a new interpreter), so the snapshot's variables are there; a fork
// asking for another env gets a new interpreter that sees it.
func TestForkKeepsVariablesWithItsSnapshotsEnv(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	parent, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64, Env: map[string]string{"K": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	cellText(t, m, parent.ID, "x = 41")
	snap, err := m.Snapshot(ctx, parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	same, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got := cellText(t, m, same.ID, "x"); got != "41" {
		t.Errorf("a fork with its snapshot's env: x = %q, want 41 (the snapshot's variables)", got)
	}
	if got := cellText(t, m, same.ID, "K"); got != "v" {
		t.Errorf("a fork with its snapshot's env: K = %q, want v", got)
	}
	if got, _ := m.Get(ctx, same.ID); got.Config.Env["K"] != "v" {
		t.Errorf("a fork's info lacks its snapshot's env: %+v", got.Config.Env)
	}
	other, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID, Env: map[string]string{"K": "w"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := cellText(t, m, other.ID, "K"); got != "w" {
		t.Errorf("a fork with an env of its own: K = %q, want w", got)
	}
	for _, id := range []string{parent.ID, same.ID, other.ID} {
		m.Delete(ctx, id)
	}
}
