package sandboxtest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// Script answers a test's own cells. It is called for every cell, before
// the scripted cells and the stand-in interpreter, while the sandbox is
// busy with the cell; it returns Pass for a cell it leaves to them.
//
// A Script may stream events with Cell.Emit as it goes, and may block
// until ctx ends. If it emitted nothing, the manager streams its result
// (stdout, stderr, displays, error) for it. Either way the manager sends
// the end event with the result, so a Script never emits one. An error
// other than Pass is a request that never became a cell: RunCell returns
// it, with no end event.
type Script func(ctx context.Context, c *Cell) (cell.Result, error)

// Pass is what a Script returns for a cell it does not answer.
var Pass = errors.New("sandboxtest: the cell is left to the built-in ones")

// Cell is the cell a Script answers.
type Cell struct {
	Sandbox string // the sandbox's id
	// Session is the cell's session, normalized (sandbox.Session.Normalize).
	Session sandbox.Session
	Code    string
	Timeout time.Duration

	sess    *session
	onEvent func(cell.Event)
	emitted bool
}

// Emit streams ev to the caller of RunCell.
func (c *Cell) Emit(ev cell.Event) {
	c.emitted = true
	if c.onEvent != nil {
		c.onEvent(ev)
	}
}

// out emits text as stdout and adds it to res.
func (c *Cell) out(res *cell.Result, text string) {
	c.Emit(cell.Event{Type: cell.EventStdout, Text: text})
	res.Stdout += text
}

// stream emits res's output as the VM manager streams a cell's.
func (c *Cell) stream(res cell.Result) {
	if res.Stdout != "" {
		c.Emit(cell.Event{Type: cell.EventStdout, Text: res.Stdout})
	}
	if res.Stderr != "" {
		c.Emit(cell.Event{Type: cell.EventStderr, Text: res.Stderr})
	}
	for i := range res.Results {
		c.Emit(cell.Event{Type: cell.EventResult, Result: &res.Results[i]})
	}
	if res.Error != nil {
		c.Emit(cell.Event{Type: cell.EventError, Error: res.Error})
	}
}

func (m *Manager) RunCell(ctx context.Context, id string, spec sandbox.Cell, onEvent func(cell.Event)) (cell.Result, error) {
	code, timeout := spec.Code, spec.Timeout
	if err := m.enter("RunCell", id, strconv.Quote(code)+sessionSuffix(spec.Session)); err != nil {
		return cell.Result{}, err
	}
	if timeout <= 0 {
		return cell.Result{}, fmt.Errorf("%w: timeout must be positive", sandbox.ErrInvalid)
	}
	if code == "internal" {
		return cell.Result{}, errors.New("the fake's disk is on fire")
	}
	m.mu.Lock()
	b, err := m.usable(id)
	if err == nil && b.info.CellRunning {
		err = fmt.Errorf("%w: a cell is already running in %s", sandbox.ErrBusy, id)
	}
	var sess sandbox.Session
	var ss *session
	if err == nil {
		sess, err = m.normalize(b, spec.Session)
	}
	if err == nil {
		ss, err = b.sessionFor(sess)
	}
	if err != nil {
		m.mu.Unlock()
		return cell.Result{}, err
	}
	ss.used = true
	b.info.CellRunning = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		b.info.CellRunning = false
		m.mu.Unlock()
	}()
	c := &Cell{Sandbox: id, Session: sess, Code: code, Timeout: timeout, sess: ss, onEvent: onEvent}
	res, err := m.play(ctx, b, c)
	if err != nil {
		return cell.Result{}, err
	}
	m.mu.Lock()
	b.info.Cells++
	res.ExecutionCount = b.info.Cells
	if res.Status != cell.StatusLost {
		res.Checkpoint, res.CheckpointError = m.afterCell(b, sandbox.CheckpointCell, code)
	}
	m.mu.Unlock()
	if onEvent != nil {
		onEvent(cell.Event{Type: cell.EventEnd, End: &res})
	}
	return res, nil
}

// play answers a cell: the Script, a scripted cell, or the interpreter.
func (m *Manager) play(ctx context.Context, b *box, c *Cell) (cell.Result, error) {
	if m.Script != nil {
		res, err := m.Script(ctx, c)
		if !errors.Is(err, Pass) {
			if err == nil && !c.emitted {
				c.stream(res)
			}
			return res, err
		}
	}
	if res, ok := m.scripted(ctx, b, c); ok {
		return res, nil
	}
	m.mu.Lock()
	res := interpret(c.sess.vars, c.Code)
	m.mu.Unlock()
	c.stream(res)
	return res, nil
}

// scripted plays the scripted cells (see the package doc), emitting
// their events as it goes; false for other code.
func (m *Manager) scripted(ctx context.Context, b *box, c *Cell) (cell.Result, bool) {
	res := cell.Result{Status: cell.StatusOK, StateKept: true}
	switch c.Code {
	case "stream":
		c.out(&res, "out 1\n")
		c.Emit(cell.Event{Type: cell.EventStderr, Text: "err 1\n"})
		res.Stderr = "err 1\n"
		c.out(&res, "out 2\n")
		d := cell.Display{Main: true, Data: map[string]string{cell.MIMEText: "3"}}
		c.Emit(cell.Event{Type: cell.EventResult, Result: &d})
		res.Results = []cell.Display{d}
	case "gate":
		select { // an interrupt before the gate opened is not for it
		case <-b.release:
		default:
		}
		c.out(&res, "waiting\n")
		select {
		case <-b.release:
			c.out(&res, "released\n")
		case <-ctx.Done():
			res.Status, res.Error = cell.StatusError, &cell.Error{Name: "KeyboardInterrupt", Value: "the client went away"}
		case <-time.After(time.Minute):
			res.Status, res.Error = cell.StatusError, &cell.Error{Name: "GateError", Value: "nobody interrupted the gate within a minute"}
		}
	case "hang":
		select {
		case <-ctx.Done():
			m.noteLocked("hang %s: the client went away", c.Sandbox)
		case <-time.After(time.Minute):
			m.noteLocked("hang %s: the client stayed a minute", c.Sandbox)
		}
		res.Status, res.Error = cell.StatusError, &cell.Error{Name: "KeyboardInterrupt", Value: ""}
	case "break":
		c.Emit(cell.Event{Type: cell.EventStdout, Text: "partial\n"})
		m.noteLocked("break %s", c.Sandbox)
		panic(http.ErrAbortHandler) // net/http closes the connection mid-response
	case "raise":
		e := &cell.Error{Name: "KeyError", Value: "'x'", Traceback: []string{
			"Traceback (most recent call last):", "  File \"<cell>\", line 1, in <module>\n    {}['x']", "KeyError: 'x'"}}
		c.Emit(cell.Event{Type: cell.EventError, Error: e})
		res.Status, res.Error = cell.StatusError, e
	case "timeout":
		c.out(&res, "started\n")
		res.Status, res.KilledBy = cell.StatusTimeout, cell.KilledByTimeout
		res.Error = &cell.Error{Name: "TimeoutError", Value: fmt.Sprintf("the cell ran past its %v limit and was interrupted", c.Timeout),
			Traceback: []string{"KeyboardInterrupt"}}
	case "die":
		m.Lose(c.Sandbox, sandbox.LostInfo{Reason: "the VMM was killed by SIGKILL (sandboxtest)", KilledBy: "signal", Exit: "killed by SIGKILL"})
		res.Status, res.StateKept, res.KilledBy = cell.StatusLost, false, cell.KilledBySignal
		res.Error = &cell.Error{Name: "InterpreterLost", Value: "the interpreter died (signal 9)"}
	case "chart":
		fig := cell.Display{Data: map[string]string{cell.MIMEPNG: base64.StdEncoding.EncodeToString(ChartPNG()),
			cell.MIMEText: "<Figure size 640x480 with 1 Axes>"}}
		c.Emit(cell.Event{Type: cell.EventResult, Result: &fig})
		main := cell.Display{Main: true, Data: map[string]string{cell.MIMEText: "'done'", cell.MIMEHTML: "<b>done</b>",
			cell.MIMEJSON: `{"a": [1, 2]}`, cell.MIMESVG: "<svg xmlns=\"http://www.w3.org/2000/svg\"/>", cell.MIMEMD: "**done**"}}
		c.Emit(cell.Event{Type: cell.EventResult, Result: &main})
		res.Results = []cell.Display{fig, main}
	case "big":
		c.out(&res, strings.Repeat("0123456789abcdef", 1<<16))
	case "env":
		m.mu.Lock()
		env, _ := json.Marshal(b.info.Config.Env)
		m.mu.Unlock()
		c.out(&res, string(env)+"\n")
	case "timeout_ms":
		c.out(&res, fmt.Sprintf("%d\n", c.Timeout.Milliseconds()))
	default:
		return cell.Result{}, false
	}
	return res, true
}

// noteLocked records what happened, taking m.mu.
func (m *Manager) noteLocked(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.note(format, args...)
}

// interpret runs the stand-in language on vars, one statement a line:
// "name = integer", "name" (the cell's value) or "print(name)"; blank
// lines, comments and imports do nothing. Anything else is a NameError.
// JavaScript's and Bash's spellings of the same read alike: "let",
// "const", "var" or "export" before an assignment, a trailing ";",
// "console.log(name)" and "echo $name".
func interpret(vars map[string]int, code string) cell.Result {
	res := cell.Result{Status: cell.StatusOK, StateKept: true}
	var out strings.Builder
	for _, line := range strings.Split(code, "\n") {
		line = strings.TrimSuffix(strings.TrimSpace(line), ";")
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "//") || strings.HasPrefix(line, "import ") {
			continue
		}
		for _, kw := range []string{"let ", "const ", "var ", "export "} {
			line = strings.TrimPrefix(line, kw)
		}
		if name, ok := strings.CutPrefix(line, "console.log("); ok {
			line = "print(" + name
		} else if name, ok := strings.CutPrefix(line, "echo $"); ok {
			line = "print(" + name + ")"
		}
		if name, val, ok := strings.Cut(line, "="); ok {
			v, err := strconv.Atoi(strings.TrimSpace(val))
			if err != nil {
				return nameError(res, out.String(), strings.TrimSpace(val))
			}
			vars[strings.TrimSpace(name)] = v
			continue
		}
		name, printed := strings.CutPrefix(line, "print(")
		if printed {
			name = strings.TrimSuffix(name, ")")
		}
		v, ok := vars[name]
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

// nameError is the interpreter's error for an unknown name, with an
// IPython-style coloured traceback.
func nameError(res cell.Result, stdout, name string) cell.Result {
	res.Status = cell.StatusError
	res.Stdout = stdout
	msg := fmt.Sprintf("name '%s' is not defined", name)
	res.Error = &cell.Error{Name: "NameError", Value: msg,
		Traceback: []string{"Traceback (most recent call last):", "\x1b[0;31mNameError\x1b[0m: " + msg}}
	return res
}

func (m *Manager) Interrupt(ctx context.Context, id string) error {
	if err := m.enter("Interrupt", id); err != nil {
		return err
	}
	return m.withBox(id, func(b *box) error {
		if b.info.CellRunning {
			select {
			case b.release <- struct{}{}:
			default:
			}
		}
		m.note("interrupt %s", id)
		return nil
	})
}

func (m *Manager) Restart(ctx context.Context, id string, s sandbox.Session) error {
	suffix := sessionSuffix(s)
	if err := m.enter("Restart", id+suffix); err != nil {
		return err
	}
	return m.withBox(id, func(b *box) error {
		s, err := m.normalize(b, s)
		if err != nil {
			return err
		}
		k := sessionKey(s)
		if b.sessions[k] == nil && !s.IsDefault() {
			return fmt.Errorf("%w: sandbox %s has no %s", sandbox.ErrNotFound, id, k)
		}
		cwd := ""
		if old := b.sessions[k]; old != nil {
			cwd = old.cwd
		}
		b.sessions[k] = &session{vars: map[string]int{}, cwd: cwd, used: true}
		m.note("restart %s%s", id, suffix)
		return nil
	})
}
