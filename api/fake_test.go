package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// fakeManager is an in-memory sandbox.Manager that records its calls.
// RunCell follows a script chosen by the code:
//
//	"block"    one stdout event, then waits for release (or ctx, or 5 s)
//	"lost-mid" one stdout event, then an error (breaking the contract)
//	"quiet"    no events, just a result
//	"raise"    an error event and status "error"
//	anything   stdout, stderr, result, end with 5 ms sleeps between
type fakeManager struct {
	mu     sync.Mutex
	calls  []string
	boxes  map[string]*fakeBox
	nextID int
	// full makes Create fail with ErrFull; failWith makes the lifecycle
	// calls (Pause) fail with the given error.
	full     bool
	failWith error

	snaps       []sandbox.SnapshotInfo
	workspaces  []sandbox.WorkspaceInfo
	lastCreate  sandbox.Config
	lastTimeout time.Duration
	lastExec    sandbox.ExecRequest
	lastNet     sandbox.NetworkPolicy

	// cellStarted receives once per "block" cell after its first event.
	cellStarted chan struct{}
	// release lets a "block" cell finish.
	release chan struct{}
	// cellCanceled receives when a "block" cell sees its ctx cancelled.
	cellCanceled chan struct{}
	// blockTimedOut is set when a "block" cell gave up waiting.
	blockTimedOut bool

	events sandbox.EventHub
	// logs are each sandbox's console lines; a follow also gets every
	// line sent on logFeed, until its sandbox is deleted.
	logs    map[string][]string
	logFeed chan string
}

type fakeBox struct {
	info    sandbox.Info
	running bool
	files   map[string][]byte
}

func newFakeManager() *fakeManager {
	return &fakeManager{
		boxes:        map[string]*fakeBox{},
		cellStarted:  make(chan struct{}, 4),
		release:      make(chan struct{}),
		cellCanceled: make(chan struct{}, 4),
		logs:         map[string][]string{},
		logFeed:      make(chan string),
	}
}

func (f *fakeManager) record(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeManager) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// box returns the sandbox id; the caller holds f.mu.
func (f *fakeManager) box(id string) (*fakeBox, error) {
	b, ok := f.boxes[id]
	if !ok {
		return nil, fmt.Errorf("%w: sandbox %q", sandbox.ErrNotFound, id)
	}
	return b, nil
}

func (f *fakeManager) Create(ctx context.Context, cfg sandbox.Config) (sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Create")
	if f.full {
		return sandbox.Info{}, fmt.Errorf("%w: 8 sandboxes running", sandbox.ErrFull)
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		return sandbox.Info{}, err
	}
	f.lastCreate = cfg
	f.nextID++
	id := fmt.Sprintf("sb-%d", f.nextID)
	f.boxes[id] = &fakeBox{
		info:  sandbox.Info{ID: id, State: sandbox.StateRunning, Config: cfg, CreatedAt: time.Unix(1700000000, 0).UTC()},
		files: map[string][]byte{},
	}
	f.events.Publish(sandbox.Event{Type: sandbox.EventCreated, Sandbox: id})
	return f.boxes[id].info, nil
}

func (f *fakeManager) List(ctx context.Context) ([]sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("List")
	var out []sandbox.Info
	for _, b := range f.boxes {
		out = append(out, b.info)
	}
	return out, nil
}

func (f *fakeManager) Get(ctx context.Context, id string) (sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Get %s", id)
	b, err := f.box(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return b.info, nil
}

func (f *fakeManager) Delete(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Delete %s", id)
	if _, err := f.box(id); err != nil {
		return err
	}
	delete(f.boxes, id)
	f.events.Publish(sandbox.Event{Type: sandbox.EventDeleted, Sandbox: id, Reason: sandbox.DeletedByRequest})
	return nil
}

func (f *fakeManager) simple(op, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("%s %s", op, id)
	if f.failWith != nil {
		return f.failWith
	}
	_, err := f.box(id)
	return err
}

func (f *fakeManager) Interrupt(ctx context.Context, id string) error {
	return f.simple("Interrupt", id)
}
func (f *fakeManager) Restart(ctx context.Context, id string) error { return f.simple("Restart", id) }
func (f *fakeManager) Pause(ctx context.Context, id string) error {
	if err := f.simple("Pause", id); err != nil {
		return err
	}
	f.events.Publish(sandbox.Event{Type: sandbox.EventPaused, Sandbox: id})
	return nil
}

func (f *fakeManager) Resume(ctx context.Context, id string) error {
	if err := f.simple("Resume", id); err != nil {
		return err
	}
	f.events.Publish(sandbox.Event{Type: sandbox.EventResumed, Sandbox: id})
	return nil
}

func (f *fakeManager) Snapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	if err := f.simple("Snapshot", id); err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	snap := sandbox.SnapshotInfo{ID: fmt.Sprintf("snap-%012x", len(f.snaps)+1), SandboxID: id, CreatedAt: time.Unix(1700000100, 0).UTC(),
		SizeBytes: 4096, VCPUs: 1, MemoryMiB: 512}
	f.snaps = append(f.snaps, snap)
	return snap, nil
}

func (f *fakeManager) ListSnapshots(ctx context.Context) ([]sandbox.SnapshotInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("ListSnapshots")
	return append([]sandbox.SnapshotInfo(nil), f.snaps...), nil
}

func (f *fakeManager) GetSnapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("GetSnapshot %s", id)
	for _, s := range f.snaps {
		if s.ID == id {
			return s, nil
		}
	}
	return sandbox.SnapshotInfo{}, fmt.Errorf("%w: no snapshot %q", sandbox.ErrNotFound, id)
}

func (f *fakeManager) DeleteSnapshot(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("DeleteSnapshot %s", id)
	for i, s := range f.snaps {
		if s.ID == id {
			f.snaps = append(f.snaps[:i], f.snaps[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("%w: no snapshot %q", sandbox.ErrNotFound, id)
}

func (f *fakeManager) SetNetwork(ctx context.Context, id string, p sandbox.NetworkPolicy) error {
	if err := f.simple("SetNetwork", id); err != nil {
		return err
	}
	f.mu.Lock()
	f.lastNet = p
	f.mu.Unlock()
	f.events.Publish(sandbox.Event{Type: sandbox.EventPolicyChanged, Sandbox: id, Network: &p})
	return nil
}

func (f *fakeManager) Logs(ctx context.Context, id string, req sandbox.LogRequest, onLine func(sandbox.LogLine) error) error {
	f.mu.Lock()
	f.record("Logs %s %s %d %v", id, req.Source, req.Tail, req.Follow)
	_, err := f.box(id)
	lines := f.logs[id]
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return err
	}
	for _, l := range lines[max(len(lines)-req.Tail, 0):] {
		if err := onLine(sandbox.LogLine{Source: req.Source, Text: l}); err != nil {
			return err
		}
	}
	for req.Follow {
		select {
		case <-ctx.Done():
			return nil
		case l := <-f.logFeed:
			if l == "" { // the sandbox is gone
				return nil
			}
			if err := onLine(sandbox.LogLine{Source: req.Source, Text: l}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *fakeManager) Events(ctx context.Context) (sandbox.EventStream, error) {
	f.mu.Lock()
	f.record("Events")
	f.mu.Unlock()
	return f.events.Subscribe(ctx)
}

func (f *fakeManager) Capacity(ctx context.Context) (sandbox.Capacity, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sandbox.Capacity{MaxSandboxes: 8, Sandboxes: len(f.boxes), MaxMemoryMiB: 4096, MemoryMiBUsed: 512 * len(f.boxes)}, nil
}

func (f *fakeManager) RunCell(ctx context.Context, id, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error) {
	f.mu.Lock()
	f.record("RunCell %s %q", id, code)
	f.lastTimeout = timeout
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
	b.info.Cells++
	count := b.info.Cells
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
	res := cell.Result{Status: cell.StatusOK, ExecutionCount: count, StateKept: true}
	switch code {
	case "block":
		emit(cell.Event{Type: cell.EventStdout, Text: "first\n"})
		res.Stdout = "first\n"
		f.cellStarted <- struct{}{}
		select {
		case <-f.release:
		case <-ctx.Done():
			f.cellCanceled <- struct{}{}
			res.Status = cell.StatusError
			res.Error = &cell.Error{Name: "KeyboardInterrupt", Value: "interrupted"}
		case <-time.After(5 * time.Second):
			f.mu.Lock()
			f.blockTimedOut = true
			f.mu.Unlock()
		}
	case "lost-mid":
		emit(cell.Event{Type: cell.EventStdout, Text: "partial\n"})
		return cell.Result{}, fmt.Errorf("%w: VM exited", sandbox.ErrLost)
	case "quiet":
		res.Stdout = "quiet\n"
		return res, nil
	case "raise":
		e := &cell.Error{Name: "KeyError", Value: "'x'", Traceback: []string{"Traceback...", "KeyError: 'x'"}}
		emit(cell.Event{Type: cell.EventError, Error: e})
		res.Status, res.Error = cell.StatusError, e
	default:
		emit(cell.Event{Type: cell.EventStdout, Text: "out 1\n"})
		time.Sleep(5 * time.Millisecond)
		emit(cell.Event{Type: cell.EventStderr, Text: "err 1\n"})
		time.Sleep(5 * time.Millisecond)
		emit(cell.Event{Type: cell.EventStdout, Text: "out 2\n"})
		time.Sleep(5 * time.Millisecond)
		d := cell.Display{Main: true, Data: map[string]string{cell.MIMEText: "3"}}
		emit(cell.Event{Type: cell.EventResult, Result: &d})
		res.Stdout, res.Stderr, res.Results = "out 1\nout 2\n", "err 1\n", []cell.Display{d}
	}
	emit(cell.Event{Type: cell.EventEnd, End: &res})
	return res, nil
}

func (f *fakeManager) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (cell.ExecResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Exec %s %q", id, req.Argv)
	f.lastExec = req
	if _, err := f.box(id); err != nil {
		return cell.ExecResult{}, err
	}
	return cell.ExecResult{ExitCode: 3, Stdout: strings.Join(req.Argv, " "), Stderr: string(req.Stdin)}, nil
}

func (f *fakeManager) Upload(ctx context.Context, id, guestPath string, r io.Reader) (int64, error) {
	f.mu.Lock()
	f.record("Upload %s %s", id, guestPath)
	b, err := f.box(id)
	f.mu.Unlock()
	if err != nil {
		return 0, err
	}
	var buf bytes.Buffer
	n, err := io.Copy(&buf, r)
	if err != nil {
		return n, fmt.Errorf("writing %s: %w", guestPath, err)
	}
	f.mu.Lock()
	b.files[guestPath] = buf.Bytes()
	f.mu.Unlock()
	return n, nil
}

func (f *fakeManager) Download(ctx context.Context, id, guestPath string, w io.Writer) (int64, error) {
	f.mu.Lock()
	f.record("Download %s %s", id, guestPath)
	b, err := f.box(id)
	var data []byte
	var ok bool
	if err == nil {
		data, ok = b.files[guestPath]
	}
	f.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if guestPath == "/workspace/fail-midway" {
		// More than the server's response buffer, so the 200 and part
		// of the body are on the wire when it fails.
		n, _ := w.Write(bytes.Repeat([]byte("x"), 100<<10))
		return int64(n), fmt.Errorf("%w: VM exited during the copy", sandbox.ErrLost)
	}
	if !ok {
		return 0, fmt.Errorf("%w: %s", sandbox.ErrNotFound, guestPath)
	}
	n, err := w.Write(data)
	return int64(n), err
}

func (f *fakeManager) Workspaces(ctx context.Context) ([]sandbox.WorkspaceInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Workspaces")
	return append([]sandbox.WorkspaceInfo(nil), f.workspaces...), nil
}

func (f *fakeManager) DeleteWorkspace(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("DeleteWorkspace %s", name)
	if !sandbox.ValidWorkspaceName(name) {
		return fmt.Errorf("%w: %q is not a workspace name", sandbox.ErrInvalid, name)
	}
	for i, w := range f.workspaces {
		if w.Name != name {
			continue
		}
		if w.Sandbox != "" {
			return fmt.Errorf("%w: workspace %s is held by sandbox %s", sandbox.ErrBusy, name, w.Sandbox)
		}
		f.workspaces = append(f.workspaces[:i], f.workspaces[i+1:]...)
		return nil
	}
	return fmt.Errorf("%w: no workspace %s", sandbox.ErrNotFound, name)
}

func (f *fakeManager) Images(ctx context.Context) ([]sandbox.ImageInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("Images")
	return []sandbox.ImageInfo{{Name: sandbox.DefaultImage, SizeBytes: 1 << 30}, {Name: "extra", SizeBytes: 2 << 30, Python: "3.11.2"}}, nil
}

func (f *fakeManager) DeleteImage(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("DeleteImage %s", name)
	switch name {
	case sandbox.DefaultImage:
		return fmt.Errorf("%w: the default image is the daemon's own", sandbox.ErrInvalid)
	case "extra":
		return fmt.Errorf("%w: image extra is used by sandbox sb-1", sandbox.ErrBusy)
	case "old":
		return nil
	}
	return fmt.Errorf("%w: no image %s", sandbox.ErrNotFound, name)
}

var _ sandbox.Manager = (*fakeManager)(nil)
