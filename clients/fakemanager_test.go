package clients

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellvm/cellvm/agent/fakesandbox"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// fakeManager is the sandbox.Manager behind the daemon the clients' tests
// talk to: no VM, scenarios chosen by the request. Cells, by their code:
//
//	"stream"       stdout, stderr, stdout, a main result, end (in that order)
//	"gate"         stdout "waiting", then blocks until the sandbox is
//	               interrupted (the client does it from its callback),
//	               then stdout "released" and ends ok
//	"hang"         blocks until the client goes away (its context ends)
//	"break"        one stdout event, then the connection is cut mid-stream
//	"raise"        an error event (KeyError) and status "error"
//	"timeout"      status "timeout" with the state kept
//	"die"          status "lost"; the sandbox is lost from then on
//	"chart"        a figure (PNG and text) and a main result in several formats
//	"big"          one stdout event of 1 MiB
//	"env"          stdout: the create's env as JSON
//	"timeout_ms"   stdout: the timeout the request carried, in ms
//	"internal"     a plain error before the cell starts (500)
//	"NAME = INT"   sets a variable; "NAME" shows it (state across cells)
//
// Commands, by argv[0]: echo (its arguments), cat (stdin), hex (stdin in
// hex), argv (the argv as JSON, exit 3), sleep (timed out); anything else
// exits 127 with its argv as JSON on stdout.
// Create with memory_mib above 8192 is refused as full; a network policy
// naming "not-supported.test" is refused as not supported. Downloading
// /workspace/fail-midway sends 100 KiB and then fails. Pause, resume,
// snapshots and forks keep variables and files (fakesnapshots_test.go).
// A create with a workspace holds it; its files under /workspace/ are the
// workspace's, which outlive the sandbox (fakeworkspaces_test.go). A
// create boots one of the fake's images, "default", "team" or "scratch"
// (fakeimages_test.go).
type fakeManager struct {
	mu      sync.Mutex
	next    int
	boxes   map[string]*fakeBox
	events  []string // what happened, for the Go side of the tests
	chart   []byte
	deleted []string
	hub     sandbox.EventHub
	snaps   map[string]*fakeSnap
	// workspaces are the named volumes, by name.
	workspaces map[string]*fakeWorkspace
	// images are the root images, by name (fakeimages_test.go).
	images map[string]sandbox.ImageInfo
}

type fakeBox struct {
	info    sandbox.Info
	vars    map[string]int
	files   map[string][]byte
	count   int
	running bool
	lost    bool
	release chan struct{}
	// ws is the workspace the sandbox holds, if any: its /workspace files.
	ws *fakeWorkspace
}

func newFakeManager() *fakeManager {
	return &fakeManager{boxes: map[string]*fakeBox{}, snaps: map[string]*fakeSnap{}, workspaces: map[string]*fakeWorkspace{},
		images: fakeImages(), chart: fakesandbox.ChartPNG()}
}

func (f *fakeManager) note(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, fmt.Sprintf(format, args...))
}

// Happened returns what happened so far.
func (f *fakeManager) Happened() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.events...)
}

// box returns a usable sandbox, resumed if it was paused (as the VM
// manager resumes one for a call that needs its guest); the caller holds
// f.mu.
func (f *fakeManager) box(id string) (*fakeBox, error) {
	b, ok := f.boxes[id]
	if !ok {
		return nil, fmt.Errorf("%w: no sandbox %q", sandbox.ErrNotFound, id)
	}
	if b.lost {
		return nil, fmt.Errorf("%w: sandbox %s's VM exited; delete it", sandbox.ErrLost, id)
	}
	if b.info.State == sandbox.StatePaused {
		b.info.State = sandbox.StateRunning
		f.events = append(f.events, "resume "+id+" (by a call)")
	}
	return b, nil
}

// withBox runs fn on a usable sandbox under f.mu.
func (f *fakeManager) withBox(id string, fn func(*fakeBox) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return err
	}
	return fn(b)
}

func (f *fakeManager) Create(ctx context.Context, cfg sandbox.Config) (sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var from *fakeSnap
	if cfg.Snapshot != "" {
		var err error
		if cfg, from, err = f.forkConfig(cfg); err != nil {
			return sandbox.Info{}, err
		}
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return sandbox.Info{}, err
	}
	if cfg.MemoryMiB > 8192 {
		return sandbox.Info{}, fmt.Errorf("%w: %d MiB more would pass the cap of 8192 MiB", sandbox.ErrFull, cfg.MemoryMiB)
	}
	if cfg.Network != nil && containsEntry(cfg.Network.Allow, "not-supported.test") {
		return sandbox.Info{}, fmt.Errorf("%w: this manager has no network policy support", sandbox.ErrNotSupported)
	}
	if err := f.checkImage(cfg); err != nil {
		return sandbox.Info{}, err
	}
	id := fmt.Sprintf("sb-fake%d", f.next+1)
	ws, err := f.holdWorkspace(cfg.Workspace, id)
	if err != nil {
		return sandbox.Info{}, err
	}
	f.next++
	b := &fakeBox{
		info: sandbox.Info{ID: id, State: sandbox.StateRunning, Config: cfg, CreatedAt: time.Unix(1700000000, 0).UTC(),
			StartedFrom: startedFrom(cfg)},
		vars:    map[string]int{},
		files:   map[string][]byte{},
		release: make(chan struct{}, 1),
		ws:      ws,
	}
	if from != nil {
		b.vars, b.files = from.copyState()
	}
	f.boxes[id] = b
	if cfg.Image != "" {
		f.events = append(f.events, "create "+id+" image "+cfg.Image)
	} else {
		f.events = append(f.events, "create "+id)
	}
	return b.info, nil
}

func containsEntry(list []string, e string) bool {
	for _, x := range list {
		if x == e {
			return true
		}
	}
	return false
}

func (f *fakeManager) List(ctx context.Context) ([]sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.Info
	for _, b := range f.boxes {
		out = append(out, b.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (f *fakeManager) Get(ctx context.Context, id string) (sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.boxes[id]
	if !ok {
		return sandbox.Info{}, fmt.Errorf("%w: no sandbox %q", sandbox.ErrNotFound, id)
	}
	info := b.info
	info.CellRunning = b.running
	if b.lost {
		info.State = sandbox.StateLost
	}
	return info, nil
}

func (f *fakeManager) Delete(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.boxes[id]
	if !ok {
		return fmt.Errorf("%w: no sandbox %q", sandbox.ErrNotFound, id)
	}
	f.releaseWorkspace(b)
	delete(f.boxes, id)
	f.deleted = append(f.deleted, id)
	f.events = append(f.events, "delete "+id)
	return nil
}

func (f *fakeManager) RunCell(ctx context.Context, id, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error) {
	if code == "internal" {
		return cell.Result{}, errors.New("the fake's disk is on fire")
	}
	f.mu.Lock()
	b, err := f.box(id)
	if err != nil {
		f.mu.Unlock()
		return cell.Result{}, err
	}
	if b.running {
		f.mu.Unlock()
		return cell.Result{}, fmt.Errorf("%w: a cell is already running in %s", sandbox.ErrBusy, id)
	}
	b.running = true
	b.count++
	b.info.Cells++
	count := b.count
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		b.running = false
		f.mu.Unlock()
	}()
	emit := func(ev cell.Event) {
		if onEvent != nil {
			onEvent(ev)
		}
	}
	res := f.play(ctx, b, code, timeout, emit)
	res.ExecutionCount = count
	emit(cell.Event{Type: cell.EventEnd, End: &res})
	return res, nil
}

// play runs one scripted cell, emitting its events, and returns its result.
func (f *fakeManager) play(ctx context.Context, b *fakeBox, code string, timeout time.Duration, emit func(cell.Event)) cell.Result {
	res := cell.Result{Status: cell.StatusOK, StateKept: true}
	out := func(s string) {
		emit(cell.Event{Type: cell.EventStdout, Text: s})
		res.Stdout += s
	}
	switch code {
	case "stream":
		out("out 1\n")
		emit(cell.Event{Type: cell.EventStderr, Text: "err 1\n"})
		res.Stderr = "err 1\n"
		out("out 2\n")
		d := cell.Display{Main: true, Data: map[string]string{cell.MIMEText: "3"}}
		emit(cell.Event{Type: cell.EventResult, Result: &d})
		res.Results = []cell.Display{d}
	case "gate":
		out("waiting\n")
		select {
		case <-b.release:
			out("released\n")
		case <-ctx.Done():
			res.Status, res.Error = cell.StatusError, &cell.Error{Name: "KeyboardInterrupt", Value: "the client went away"}
		case <-time.After(time.Minute):
			res.Status, res.Error = cell.StatusError, &cell.Error{Name: "GateError", Value: "nobody interrupted the gate within a minute"}
		}
	case "hang":
		select {
		case <-ctx.Done():
			f.note("hang %s: the client went away", b.info.ID)
		case <-time.After(time.Minute):
			f.note("hang %s: the client stayed a minute", b.info.ID)
		}
		res.Status, res.Error = cell.StatusError, &cell.Error{Name: "KeyboardInterrupt", Value: ""}
	case "break":
		emit(cell.Event{Type: cell.EventStdout, Text: "partial\n"})
		f.note("break %s", b.info.ID)
		panic(http.ErrAbortHandler) // net/http closes the connection mid-response
	case "raise":
		e := &cell.Error{Name: "KeyError", Value: "'x'", Traceback: []string{
			"Traceback (most recent call last):", "  File \"<cell>\", line 1, in <module>\n    {}['x']", "KeyError: 'x'"}}
		emit(cell.Event{Type: cell.EventError, Error: e})
		res.Status, res.Error = cell.StatusError, e
	case "timeout":
		out("started\n")
		res.Status, res.KilledBy = cell.StatusTimeout, cell.KilledByTimeout
		res.Error = &cell.Error{Name: "TimeoutError", Value: fmt.Sprintf("the cell ran past its %v limit and was interrupted", timeout),
			Traceback: []string{"KeyboardInterrupt"}}
	case "die":
		f.mu.Lock()
		b.lost = true
		f.mu.Unlock()
		res.Status, res.StateKept, res.KilledBy = cell.StatusLost, false, cell.KilledBySignal
		res.Error = &cell.Error{Name: "InterpreterLost", Value: "the interpreter died (signal 9)"}
	case "chart":
		fig := cell.Display{Data: map[string]string{cell.MIMEPNG: base64.StdEncoding.EncodeToString(f.chart), cell.MIMEText: "<Figure size 640x480 with 1 Axes>"}}
		emit(cell.Event{Type: cell.EventResult, Result: &fig})
		main := cell.Display{Main: true, Data: map[string]string{cell.MIMEText: "'done'", cell.MIMEHTML: "<b>done</b>",
			cell.MIMEJSON: `{"a": [1, 2]}`, cell.MIMESVG: "<svg xmlns=\"http://www.w3.org/2000/svg\"/>", cell.MIMEMD: "**done**"}}
		emit(cell.Event{Type: cell.EventResult, Result: &main})
		res.Results = []cell.Display{fig, main}
	case "big":
		out(strings.Repeat("0123456789abcdef", 1<<16))
	case "env":
		b, _ := json.Marshal(b.info.Config.Env)
		out(string(b) + "\n")
	case "timeout_ms":
		out(fmt.Sprintf("%d\n", timeout.Milliseconds()))
	default:
		return f.interpret(b, code, out)
	}
	return res
}

// interpret runs "NAME = INT" and "NAME" cells.
func (f *fakeManager) interpret(b *fakeBox, code string, out func(string)) cell.Result {
	res := cell.Result{Status: cell.StatusOK, StateKept: true}
	f.mu.Lock()
	defer f.mu.Unlock()
	if name, val, ok := strings.Cut(code, "="); ok {
		if v, err := strconv.Atoi(strings.TrimSpace(val)); err == nil {
			b.vars[strings.TrimSpace(name)] = v
			return res
		}
	}
	if v, ok := b.vars[strings.TrimSpace(code)]; ok {
		res.Results = []cell.Display{{Main: true, Data: map[string]string{cell.MIMEText: strconv.Itoa(v)}}}
		return res
	}
	res.Status = cell.StatusError
	res.Error = &cell.Error{Name: "NameError", Value: fmt.Sprintf("name %q is not defined", code),
		Traceback: []string{"Traceback (most recent call last):", fmt.Sprintf("NameError: name %q is not defined", code)}}
	return res
}

func (f *fakeManager) Interrupt(ctx context.Context, id string) error {
	return f.withBox(id, func(b *fakeBox) error {
		select {
		case b.release <- struct{}{}:
		default:
		}
		f.events = append(f.events, "interrupt "+id)
		return nil
	})
}

func (f *fakeManager) Restart(ctx context.Context, id string) error {
	return f.withBox(id, func(b *fakeBox) error {
		b.vars = map[string]int{}
		f.events = append(f.events, "restart "+id)
		return nil
	})
}

func (f *fakeManager) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (cell.ExecResult, error) {
	if err := req.Validate(); err != nil {
		return cell.ExecResult{}, err
	}
	if err := f.withBox(id, func(*fakeBox) error { return nil }); err != nil {
		return cell.ExecResult{}, err
	}
	switch req.Argv[0] {
	case "echo":
		return cell.ExecResult{Stdout: strings.Join(req.Argv[1:], " ") + "\n"}, nil
	case "cat":
		return cell.ExecResult{Stdout: string(req.Stdin)}, nil
	case "hex":
		return cell.ExecResult{Stdout: hex.EncodeToString(req.Stdin)}, nil
	case "argv":
		b, _ := json.Marshal(req.Argv)
		return cell.ExecResult{Stdout: string(b), ExitCode: 3, Stderr: "to stderr\n"}, nil
	case "sleep":
		return cell.ExecResult{ExitCode: 137, TimedOut: true, DurationMS: req.Timeout.Milliseconds()}, nil
	}
	b, _ := json.Marshal(req.Argv)
	return cell.ExecResult{ExitCode: 127, Stdout: string(b), Stderr: req.Argv[0] + ": not found\n"}, nil
}

// Upload keeps the file; the API server bounds the body.
func (f *fakeManager) Upload(ctx context.Context, id, guestPath string, r io.Reader) (int64, error) {
	if err := f.withBox(id, func(*fakeBox) error { return nil }); err != nil {
		return 0, err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return int64(len(data)), fmt.Errorf("writing %s: %w", guestPath, err)
	}
	return int64(len(data)), f.withBox(id, func(b *fakeBox) error {
		b.filesAt(guestPath)[guestPath] = data
		return nil
	})
}

func (f *fakeManager) Download(ctx context.Context, id, guestPath string, w io.Writer) (int64, error) {
	var data []byte
	err := f.withBox(id, func(b *fakeBox) error {
		var ok bool
		if data, ok = b.filesAt(guestPath)[guestPath]; !ok && guestPath != "/workspace/fail-midway" {
			return fmt.Errorf("%w: %s", sandbox.ErrNotFound, guestPath)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if guestPath == "/workspace/fail-midway" {
		// More than the server buffers, so the 200 and part of the body
		// are on the wire when it fails.
		n, _ := w.Write(make([]byte, 100<<10))
		return int64(n), fmt.Errorf("%w: the VM exited during the copy", sandbox.ErrLost)
	}
	n, err := w.Write(data)
	return int64(n), err
}

func (f *fakeManager) SetNetwork(ctx context.Context, id string, p sandbox.NetworkPolicy) error {
	if containsEntry(p.Allow, "not-supported.test") {
		return fmt.Errorf("%w: this manager has no network policy support", sandbox.ErrNotSupported)
	}
	return f.withBox(id, func(b *fakeBox) error {
		b.info.Config.Network = &sandbox.NetworkPolicy{Allow: append([]string{}, p.Allow...)}
		return nil
	})
}

// The observation routes: no logs, no events, no caps; the clients do not
// use them.
func (f *fakeManager) Logs(ctx context.Context, id string, req sandbox.LogRequest, onLine func(sandbox.LogLine) error) error {
	return f.withBox(id, func(*fakeBox) error { return nil })
}

func (f *fakeManager) Events(ctx context.Context) (sandbox.EventStream, error) {
	return f.hub.Subscribe(ctx)
}

func (f *fakeManager) Capacity(ctx context.Context) (sandbox.Capacity, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sandbox.Capacity{Sandboxes: len(f.boxes)}, nil
}

var _ sandbox.Manager = (*fakeManager)(nil)
