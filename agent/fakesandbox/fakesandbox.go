// Package fakesandbox is a sandbox.Manager with no VM, for tests of the
// front ends that drive sandboxes (the agent loop, the MCP server, the
// chat command). Each sandbox keeps its own variables in a tiny stand-in
// for a Python interpreter that understands "name = integer", "name" and
// "print(name)", so tests can show that state persists within a sandbox
// and not across sandboxes. Cells matching a Handler get scripted results
// (an error with a coloured traceback, a figure, long output). Snapshots
// copy a sandbox's variables, forks start with them, and a paused sandbox
// resumes on the next call, as with the VM manager.
package fakesandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// Handler returns a scripted result for code, or false to let the
// stand-in interpreter run it. The result's stdout and stderr are streamed
// as events before its end.
type Handler func(code string) (cell.Result, bool)

// Streamer is a Handler that emits its own events as it goes (it may block,
// until ctx ends, to show a cell still running); the end event is sent for
// it. It returns false to leave the code to the Handler.
type Streamer func(ctx context.Context, id, code string, emit func(cell.Event)) (cell.Result, bool)

// Manager is the fake.
type Manager struct {
	Handler  Handler
	Streamer Streamer
	// MaxSandboxes caps Create (0: none), for Capacity and ErrFull.
	MaxSandboxes int

	events  sandbox.EventHub
	mu      sync.Mutex
	changed *sync.Cond // broadcast when a log grows or a sandbox goes
	next    int
	boxes   map[string]*box
	snaps   map[string]*snap
	// workspaces are the named volumes' files (workspaces.go).
	workspaces map[string]*workspace
	deleted    []string
	cells      []string
}

type box struct {
	info  sandbox.Info
	vars  map[string]int
	files map[string][]byte
	// ws is the workspace the box holds, if any: its /workspace files.
	ws    *workspace
	count int
	logs  map[sandbox.LogSource][]string
}

// New returns an empty fake manager.
func New(h Handler) *Manager {
	m := &Manager{Handler: h, boxes: map[string]*box{}, snaps: map[string]*snap{}, workspaces: map[string]*workspace{}}
	m.changed = sync.NewCond(&m.mu)
	return m
}

// Deleted returns the ids of deleted sandboxes, in order.
func (m *Manager) Deleted() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.deleted...)
}

// Live returns the number of sandboxes not deleted.
func (m *Manager) Live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.boxes)
}

// Cells returns every cell's code, in order, as "sandbox-id: code".
func (m *Manager) Cells() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.cells...)
}

func (m *Manager) get(id string) (*box, error) {
	b, ok := m.boxes[id]
	if !ok {
		return nil, fmt.Errorf("%w: sandbox %s", sandbox.ErrNotFound, id)
	}
	return b, nil
}

func (m *Manager) Create(ctx context.Context, cfg sandbox.Config) (sandbox.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var from *snap
	if cfg.Snapshot != "" {
		var err error
		if cfg, from, err = m.forkConfig(cfg); err != nil {
			return sandbox.Info{}, err
		}
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return sandbox.Info{}, err
	}
	if m.MaxSandboxes > 0 && len(m.boxes) >= m.MaxSandboxes {
		return sandbox.Info{}, fmt.Errorf("%w: %d sandboxes, the cap is %d", sandbox.ErrFull, len(m.boxes), m.MaxSandboxes)
	}
	ws, err := m.holdWorkspace(cfg.Workspace)
	if err != nil {
		return sandbox.Info{}, err
	}
	m.next++
	id := fmt.Sprintf("sb-fake%d", m.next)
	b := &box{info: sandbox.Info{ID: id, State: sandbox.StateRunning, Config: cfg, CreatedAt: time.Now(), BootMS: 42},
		vars: map[string]int{}, files: map[string][]byte{}, ws: ws, logs: map[sandbox.LogSource][]string{}}
	if ws != nil {
		ws.holder = id
	}
	if from != nil {
		for k, v := range from.vars {
			b.vars[k] = v
		}
	}
	m.boxes[id] = b
	m.events.Publish(sandbox.Event{Type: sandbox.EventCreated, Sandbox: id})
	return b.info, nil
}

func (m *Manager) List(ctx context.Context) ([]sandbox.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []sandbox.Info
	for _, b := range m.boxes {
		out = append(out, b.info)
	}
	return out, nil
}

func (m *Manager) Get(ctx context.Context, id string) (sandbox.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.get(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return b.info, nil
}

func (m *Manager) Delete(ctx context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.get(id); err != nil {
		return err
	}
	if b := m.boxes[id]; b.ws != nil {
		b.ws.holder = ""
	}
	delete(m.boxes, id)
	m.deleted = append(m.deleted, id)
	m.changed.Broadcast()
	m.events.Publish(sandbox.Event{Type: sandbox.EventDeleted, Sandbox: id, Reason: sandbox.DeletedByRequest})
	return nil
}

func (m *Manager) RunCell(ctx context.Context, id, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error) {
	if timeout <= 0 {
		return cell.Result{}, fmt.Errorf("%w: timeout must be positive", sandbox.ErrInvalid)
	}
	m.mu.Lock()
	b, err := m.get(id)
	if err != nil {
		m.mu.Unlock()
		return cell.Result{}, err
	}
	if err := m.usable(b); err != nil {
		m.mu.Unlock()
		return cell.Result{}, err
	}
	b.count++
	b.info.Cells++
	m.cells = append(m.cells, id+": "+code)
	n := b.count
	m.mu.Unlock()
	var res cell.Result
	emit := func(ev cell.Event) {
		if onEvent != nil {
			onEvent(ev)
		}
	}
	if m.Streamer != nil {
		if r, ok := m.Streamer(ctx, id, code, emit); ok {
			res = r
			res.ExecutionCount = n
			emit(cell.Event{Type: cell.EventEnd, End: &res})
			return res, nil
		}
	}
	if m.Handler != nil {
		if r, ok := m.Handler(code); ok {
			res = r
			res.ExecutionCount = n
			if res.Stdout != "" {
				emit(cell.Event{Type: cell.EventStdout, Text: res.Stdout})
			}
			if res.Stderr != "" {
				emit(cell.Event{Type: cell.EventStderr, Text: res.Stderr})
			}
			emit(cell.Event{Type: cell.EventEnd, End: &res})
			return res, nil
		}
	}
	m.mu.Lock()
	res = b.interpret(code)
	m.mu.Unlock()
	res.ExecutionCount = n
	if res.Stdout != "" {
		emit(cell.Event{Type: cell.EventStdout, Text: res.Stdout})
	}
	emit(cell.Event{Type: cell.EventEnd, End: &res})
	return res, nil
}

// usable refuses calls on a lost sandbox and resumes a paused one, as the
// VM manager does. The caller holds m.mu.
func (m *Manager) usable(b *box) error {
	switch b.info.State {
	case sandbox.StateLost:
		return fmt.Errorf("%w: sandbox %s's VM exited; delete it", sandbox.ErrLost, b.info.ID)
	case sandbox.StatePaused:
		b.info.State = sandbox.StateRunning
		m.events.Publish(sandbox.Event{Type: sandbox.EventResumed, Sandbox: b.info.ID})
	}
	return nil
}

// interpret runs the stand-in language, one statement per line.
func (b *box) interpret(code string) cell.Result {
	res := cell.Result{Status: cell.StatusOK, StateKept: true}
	var out strings.Builder
	for _, line := range strings.Split(code, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "import ") {
			continue
		}
		if name, val, ok := strings.Cut(line, "="); ok {
			v, err := strconv.Atoi(strings.TrimSpace(val))
			if err != nil {
				return nameError(res, out.String(), strings.TrimSpace(val))
			}
			b.vars[strings.TrimSpace(name)] = v
			continue
		}
		name, printed := strings.CutPrefix(line, "print(")
		name = strings.TrimSuffix(name, ")")
		v, ok := b.vars[name]
		if !ok {
			return nameError(res, out.String(), name)
		}
		if printed {
			fmt.Fprintf(&out, "%d\n", v)
		} else {
			res.Results = []cell.Display{{Main: true, Data: map[string]string{cell.MIMEText: strconv.Itoa(v)}}}
		}
	}
	res.Stdout = out.String()
	return res
}

func nameError(res cell.Result, stdout, name string) cell.Result {
	res.Status = cell.StatusError
	res.Stdout = stdout
	res.Error = &cell.Error{Name: "NameError", Value: fmt.Sprintf("name '%s' is not defined", name),
		Traceback: []string{"\x1b[0;31mNameError\x1b[0m: name '" + name + "' is not defined"}}
	return res
}

func (m *Manager) Interrupt(ctx context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err := m.get(id)
	return err
}

func (m *Manager) Restart(ctx context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.get(id)
	if err != nil {
		return err
	}
	b.vars = map[string]int{}
	return nil
}

func (m *Manager) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (cell.ExecResult, error) {
	if err := req.Validate(); err != nil {
		return cell.ExecResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.get(id)
	if err == nil {
		err = m.usable(b)
	}
	if err != nil {
		return cell.ExecResult{}, err
	}
	if req.Argv[0] == "echo" {
		return cell.ExecResult{Stdout: strings.Join(req.Argv[1:], " ") + "\n"}, nil
	}
	return cell.ExecResult{ExitCode: 127, Stderr: req.Argv[0] + ": not found\n"}, nil
}

func (m *Manager) Upload(ctx context.Context, id, guestPath string, r io.Reader) (int64, error) {
	data, err := io.ReadAll(io.LimitReader(r, 64<<20))
	if err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.get(id)
	if err == nil {
		err = m.usable(b)
	}
	if err != nil {
		return 0, err
	}
	b.filesAt(guestPath)[guestPath] = data
	return int64(len(data)), nil
}

func (m *Manager) Download(ctx context.Context, id, guestPath string, w io.Writer) (int64, error) {
	m.mu.Lock()
	b, err := m.get(id)
	if err == nil {
		err = m.usable(b)
	}
	var data []byte
	if err == nil {
		var ok bool
		if data, ok = b.filesAt(guestPath)[guestPath]; !ok {
			err = fmt.Errorf("%w: %s", sandbox.ErrNotFound, guestPath)
		}
	}
	m.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return io.Copy(w, bytes.NewReader(data))
}

func (m *Manager) SetNetwork(ctx context.Context, id string, p sandbox.NetworkPolicy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return m.update(id, func(b *box) error {
		pol := sandbox.NetworkPolicy{Allow: append([]string{}, p.Allow...)}
		b.info.Config.Network = &pol
		m.events.Publish(sandbox.Event{Type: sandbox.EventPolicyChanged, Sandbox: id, Network: &pol})
		return nil
	})
}

// Pause and Resume move the sandbox between running and paused.
func (m *Manager) Pause(ctx context.Context, id string) error {
	return m.setState(id, sandbox.StateRunning, sandbox.StatePaused, sandbox.EventPaused)
}

func (m *Manager) Resume(ctx context.Context, id string) error {
	return m.setState(id, sandbox.StatePaused, sandbox.StateRunning, sandbox.EventResumed)
}

// update runs f on the sandbox under the lock.
func (m *Manager) update(id string, f func(b *box) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.get(id)
	if err != nil {
		return err
	}
	return f(b)
}

func (m *Manager) setState(id string, from, to sandbox.State, ev sandbox.EventType) error {
	return m.update(id, func(b *box) error {
		if b.info.State != from {
			return fmt.Errorf("%w: sandbox %s is %s, not %s", sandbox.ErrBusy, id, b.info.State, from)
		}
		b.info.State = to
		m.events.Publish(sandbox.Event{Type: ev, Sandbox: id})
		return nil
	})
}

// Lose makes the sandbox lost, as a VM that died would.
func (m *Manager) Lose(id string, why sandbox.LostInfo) error {
	return m.update(id, func(b *box) error {
		b.info.State = sandbox.StateLost
		b.info.Lost = &why
		m.events.Publish(sandbox.Event{Type: sandbox.EventLost, Sandbox: id, Lost: &why})
		return nil
	})
}

// SetNetworkCounters sets the egress counters the sandbox's info reports.
func (m *Manager) SetNetworkCounters(id string, c sandbox.NetworkCounters) error {
	return m.update(id, func(b *box) error { b.info.Network = c; return nil })
}

// AppendLog adds lines to one of a sandbox's logs (and wakes followers).
func (m *Manager) AppendLog(id string, src sandbox.LogSource, lines ...string) error {
	return m.update(id, func(b *box) error {
		b.logs[src] = append(b.logs[src], lines...)
		m.changed.Broadcast()
		return nil
	})
}

// Logs implements sandbox.Manager over the lines AppendLog added.
func (m *Manager) Logs(ctx context.Context, id string, req sandbox.LogRequest, onLine func(sandbox.LogLine) error) error {
	if err := req.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.get(id)
	if err != nil {
		return err
	}
	// Wake the wait below when ctx ends.
	stop := context.AfterFunc(ctx, func() { m.mu.Lock(); m.changed.Broadcast(); m.mu.Unlock() })
	defer stop()
	lines := b.logs[req.Source]
	sent := max(len(lines)-req.Tail, 0)
	for {
		for ; sent < len(b.logs[req.Source]); sent++ {
			l := sandbox.LogLine{Source: req.Source, Text: b.logs[req.Source][sent]}
			m.mu.Unlock()
			err := onLine(l)
			m.mu.Lock()
			if err != nil {
				return err
			}
		}
		if !req.Follow || ctx.Err() != nil {
			return nil
		}
		if _, err := m.get(id); err != nil {
			return nil // deleted
		}
		m.changed.Wait()
	}
}

// Events implements sandbox.Manager.
func (m *Manager) Events(ctx context.Context) (sandbox.EventStream, error) {
	return m.events.Subscribe(ctx)
}

// Capacity implements sandbox.Manager.
func (m *Manager) Capacity(ctx context.Context) (sandbox.Capacity, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := sandbox.Capacity{MaxSandboxes: m.MaxSandboxes, Sandboxes: len(m.boxes)}
	for _, b := range m.boxes {
		c.MemoryMiBUsed += b.info.Config.MemoryMiB
		c.VCPUsUsed += b.info.Config.VCPUs
	}
	return c, nil
}

var _ sandbox.Manager = (*Manager)(nil)
