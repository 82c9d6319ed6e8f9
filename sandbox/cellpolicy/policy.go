package cellpolicy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/ratelog"
	"github.com/cellvm/cellvm/sandbox"
)

// ErrorName is the cell.Error name of a refused cell.
const ErrorName = "PolicyRefused"

// ExecExitCode is the exit code of a refused exec; its Stderr starts with
// ErrorName and ": ".
const ExecExitCode = 126

// Request kinds.
const (
	KindCell = "cell"
	KindExec = "exec"
)

// Request is the JSON object the hook reads on its stdin.
type Request struct {
	Kind string `json:"kind"`
	// Language is "python" for a cell, empty for an exec.
	Language string `json:"language,omitempty"`
	// Code is the cell's source (cells only).
	Code *string `json:"code,omitempty"`
	// Argv is the command (exec only).
	Argv     []string `json:"argv,omitempty"`
	Tenant   string   `json:"tenant"`
	Operator bool     `json:"operator"`
	Sandbox  string   `json:"sandbox"`
}

// Refusal is one refused request, as Options.OnRefuse is told of it.
type Refusal struct {
	Kind    string // KindCell or KindExec
	Sandbox string
	Tenant  string
	Reason  string
	// HookFailed: the hook did not decide (it timed out, crashed or could
	// not start) and the refusal is the fail-closed default.
	HookFailed bool
}

// Options configure New.
type Options struct {
	// Hook is the absolute path of the operator's program (see the
	// package doc for its contract).
	Hook string
	// Timeout is the hook's deadline per request (DefaultTimeout if 0).
	Timeout time.Duration
	// Log gets a line per refusal and per failed hook, rate-limited (a
	// client can cause them at will). Nil discards.
	Log *slog.Logger
	// OnRefuse, if set, is called for each refusal with the request's
	// context, before the refusal is returned (for an audit record).
	OnRefuse func(ctx context.Context, r Refusal)
}

// Manager asks the hook about every cell and exec before its inner
// manager runs them; every other method is the inner manager's.
type Manager struct {
	sandbox.Manager
	hook     hook
	log      *slog.Logger
	onRefuse func(context.Context, Refusal)
}

// New wraps inner. It fails if Options.Hook cannot be a hook (CheckHook).
func New(inner sandbox.Manager, o Options) (*Manager, error) {
	if err := CheckHook(o.Hook); err != nil {
		return nil, err
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("cell policy hook timeout %v is negative", o.Timeout)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	return &Manager{
		Manager:  inner,
		hook:     hook{path: o.Hook, timeout: o.Timeout, slots: make(chan struct{}, MaxConcurrent)},
		log:      ratelog.Wrap(o.Log),
		onRefuse: o.OnRefuse,
	}, nil
}

// RunCell runs the cell if the hook allows it, and otherwise answers with
// a PolicyRefused result without touching the sandbox.
func (m *Manager) RunCell(ctx context.Context, id string, c sandbox.Cell, onEvent func(cell.Event)) (cell.Result, error) {
	code, timeout := c.Code, c.Timeout
	if len(code) > sandbox.MaxCodeBytes {
		return cell.Result{}, fmt.Errorf("%w: code is %d bytes, at most %d", sandbox.ErrTooLarge, len(code), sandbox.MaxCodeBytes)
	}
	if timeout <= 0 {
		return cell.Result{}, fmt.Errorf("%w: timeout must be positive", sandbox.ErrInvalid)
	}
	if skip, err := m.unknown(ctx, id); err != nil || skip {
		if err != nil {
			return cell.Result{}, err
		}
		return m.Manager.RunCell(ctx, id, c, onEvent)
	}
	req := Request{Kind: KindCell, Language: "python", Code: &code}
	v, err := m.ask(ctx, id, req)
	if err != nil {
		return cell.Result{}, err
	}
	if v.allow {
		return m.Manager.RunCell(ctx, id, c, onEvent)
	}
	res := RefusedCell(v.reason)
	if onEvent != nil {
		onEvent(cell.Event{Type: cell.EventError, Error: res.Error})
		onEvent(cell.Event{Type: cell.EventEnd, End: &res})
	}
	return res, nil
}

// Exec runs the command if the hook allows it, and otherwise answers
// with a refused ExecResult (ExecExitCode) without touching the sandbox.
func (m *Manager) Exec(ctx context.Context, id string, r sandbox.ExecRequest) (cell.ExecResult, error) {
	if err := r.Validate(); err != nil {
		return cell.ExecResult{}, err
	}
	if skip, err := m.unknown(ctx, id); err != nil || skip {
		if err != nil {
			return cell.ExecResult{}, err
		}
		return m.Manager.Exec(ctx, id, r)
	}
	v, err := m.ask(ctx, id, Request{Kind: KindExec, Argv: r.Argv})
	if err != nil {
		return cell.ExecResult{}, err
	}
	if v.allow {
		return m.Manager.Exec(ctx, id, r)
	}
	return RefusedExec(v.reason), nil
}

// unknown looks the sandbox up first, so that a request about a missing
// sandbox gets its error and runs no hook. skip says the inner manager
// refuses it by itself (a lost sandbox: ErrLost).
func (m *Manager) unknown(ctx context.Context, id string) (skip bool, err error) {
	info, err := m.Manager.Get(ctx, id)
	if err != nil {
		return false, err
	}
	return info.State == sandbox.StateLost, nil
}

// ask runs the hook about req, fills in the caller and sandbox, and logs
// and reports a refusal.
func (m *Manager) ask(ctx context.Context, id string, req Request) (verdict, error) {
	if c, ok := sandbox.CallerFrom(ctx); ok {
		req.Tenant, req.Operator = c.Tenant, c.Operator
	}
	req.Sandbox = id
	input, err := json.Marshal(req)
	if err != nil {
		return verdict{}, fmt.Errorf("cell policy: encode the hook's input: %w", err)
	}
	v, err := m.hook.decide(ctx, append(input, '\n'))
	if err != nil || v.allow {
		return v, err
	}
	if v.failed {
		m.log.Warn("cell policy hook failed; refused", "kind", req.Kind, "sandbox", id, "tenant", req.Tenant, "reason", v.reason)
	} else {
		m.log.Info("refused by the cell policy hook", "kind", req.Kind, "sandbox", id, "tenant", req.Tenant, "reason", v.reason)
	}
	if m.onRefuse != nil {
		m.onRefuse(ctx, Refusal{Kind: req.Kind, Sandbox: id, Tenant: req.Tenant, Reason: v.reason, HookFailed: v.failed})
	}
	return v, nil
}

// RefusedCell is the result of a cell the policy refused.
func RefusedCell(reason string) cell.Result {
	return cell.Result{
		Status:    cell.StatusError,
		Error:     &cell.Error{Name: ErrorName, Value: reason, Traceback: []string{}},
		StateKept: true,
	}
}

// RefusedExec is the result of a command the policy refused.
func RefusedExec(reason string) cell.ExecResult {
	return cell.ExecResult{ExitCode: ExecExitCode, Stderr: ErrorName + ": " + reason + "\n"}
}

// IsRefusedCell reports whether res has the shape of a cell the policy
// refused: error PolicyRefused and no execution count (a cell that ran has
// one, so code raising its own PolicyRefused exception does not match).
// It is for display and tests; a record that must not be forged (the
// audit log) comes from Options.OnRefuse.
func IsRefusedCell(res cell.Result) bool {
	return res.Status == cell.StatusError && res.Error != nil && res.Error.Name == ErrorName && res.ExecutionCount == 0
}

// IsRefusedExec reports whether res has the shape of a command the policy
// refused. A command can imitate it (exit 126, the same stderr); a record
// that must not be forged comes from Options.OnRefuse.
func IsRefusedExec(res cell.ExecResult) bool {
	return res.ExitCode == ExecExitCode && strings.HasPrefix(res.Stderr, ErrorName+": ")
}

// Unwrap implements sandbox.Wrapper.
func (m *Manager) Unwrap() sandbox.Manager { return m.Manager }
