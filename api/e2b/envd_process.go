package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// process.Process: the SDK's commands.run/start/connect/list/kill/
// sendStdin/closeStdin and pty.create/connect/sendInput/resize/kill,
// mapped onto the Manager's processes. A command is `/bin/bash -l -c
// CMD` (the SDK builds that argv); Connect-Timeout-Ms, the SDK's
// timeoutMs, is the process's timeout, as envd ends a command then.

// Messages of envd's process.proto, in proto3 JSON.
type (
	procConfig struct {
		Cmd  string            `json:"cmd"`
		Args []string          `json:"args,omitempty"`
		Envs map[string]string `json:"envs,omitempty"`
		Cwd  *string           `json:"cwd,omitempty"`
	}
	procPTY struct {
		Size *struct {
			Cols uint32 `json:"cols"`
			Rows uint32 `json:"rows"`
		} `json:"size"`
	}
	procSelector struct {
		PID *uint32 `json:"pid,omitempty"`
		Tag *string `json:"tag,omitempty"`
	}
	procStartRequest struct {
		Process *procConfig `json:"process"`
		PTY     *procPTY    `json:"pty"`
		Tag     *string     `json:"tag"`
		Stdin   *bool       `json:"stdin"`
	}
	procSelectRequest struct {
		Process *procSelector `json:"process"`
	}
	procUpdateRequest struct {
		Process *procSelector `json:"process"`
		PTY     *procPTY      `json:"pty"`
	}
	procInput struct {
		Stdin []byte `json:"stdin"`
		PTY   []byte `json:"pty"`
	}
	procSendInputRequest struct {
		Process *procSelector `json:"process"`
		Input   *procInput    `json:"input"`
	}
	procSendSignalRequest struct {
		Process *procSelector `json:"process"`
		Signal  procSignal    `json:"signal"`
	}
	procInfo struct {
		Config procConfig `json:"config"`
		PID    int        `json:"pid"`
		Tag    string     `json:"tag,omitempty"`
	}

	// procEventMsg is StartResponse and ConnectResponse: {"event":{...}}.
	procEventMsg struct {
		Event procEvent `json:"event"`
	}
	procEvent struct {
		Start     *procStartEvent `json:"start,omitempty"`
		Data      *procDataEvent  `json:"data,omitempty"`
		End       *procEndEvent   `json:"end,omitempty"`
		Keepalive *struct{}       `json:"keepalive,omitempty"`
	}
	procStartEvent struct {
		PID int `json:"pid"`
	}
	procDataEvent struct {
		Stdout []byte `json:"stdout,omitempty"`
		Stderr []byte `json:"stderr,omitempty"`
		PTY    []byte `json:"pty,omitempty"`
	}
	procEndEvent struct {
		ExitCode int     `json:"exitCode"`
		Exited   bool    `json:"exited"`
		Status   string  `json:"status"`
		Error    *string `json:"error,omitempty"`
	}
)

// procSignal is the Signal enum: its name or its number.
type procSignal string

func (p *procSignal) UnmarshalJSON(b []byte) error {
	var n int
	if json.Unmarshal(b, &n) == nil {
		switch n {
		case 9:
			*p = sandbox.SignalKill
		case 15:
			*p = sandbox.SignalTerm
		case 2:
			*p = sandbox.SignalInt
		case 1:
			*p = sandbox.SignalHup
		default:
			*p = ""
		}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("signal is neither a name nor a number")
	}
	switch s {
	case "SIGNAL_SIGKILL":
		*p = sandbox.SignalKill
	case "SIGNAL_SIGTERM":
		*p = sandbox.SignalTerm
	default:
		*p = ""
	}
	return nil
}

var procKeepalive = procEventMsg{Event: procEvent{Keepalive: &struct{}{}}}

func envdProcess(s scope, w http.ResponseWriter, r *http.Request, method string) {
	switch method {
	case "Start":
		connectServerStream(w, r, procKeepalive, func(ctx context.Context, req *procStartRequest, st *connectStream) error {
			return procStart(ctx, s, r, req, st)
		})
	case "Connect":
		connectServerStream(w, r, procKeepalive, func(ctx context.Context, req *procSelectRequest, st *connectStream) error {
			pid, err := procResolve(ctx, s, req.Process)
			if err != nil {
				return err
			}
			return procWatch(st, pid, func(on func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
				return s.m.AttachProcess(ctx, s.id, pid, on)
			})
		})
	case "List":
		connectUnary(w, r, func(ctx context.Context, _ *struct{}) (any, error) {
			ps, err := s.m.ListProcesses(ctx, s.id)
			if err != nil {
				return nil, err
			}
			out := make([]procInfo, 0, len(ps))
			for _, p := range ps {
				pi := procInfo{PID: p.PID, Tag: p.Tag, Config: procConfig{Envs: map[string]string{}}}
				if len(p.Argv) > 0 {
					pi.Config.Cmd, pi.Config.Args = p.Argv[0], p.Argv[1:]
				}
				if p.Cwd != "" {
					cwd := p.Cwd
					pi.Config.Cwd = &cwd
				}
				out = append(out, pi)
			}
			sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
			return map[string]any{"processes": out}, nil
		})
	case "SendInput":
		connectUnary(w, r, func(ctx context.Context, req *procSendInputRequest) (any, error) {
			pid, err := procResolve(ctx, s, req.Process)
			if err != nil {
				return nil, err
			}
			if req.Input == nil {
				return nil, connectErrorf(codeInvalidArgument, "input is missing")
			}
			data := req.Input.Stdin
			if data == nil {
				data = req.Input.PTY
			}
			return struct{}{}, s.m.SendInput(ctx, s.id, pid, data, false)
		})
	case "CloseStdin":
		connectUnary(w, r, func(ctx context.Context, req *procSelectRequest) (any, error) {
			pid, err := procResolve(ctx, s, req.Process)
			if err != nil {
				return nil, err
			}
			return struct{}{}, s.m.SendInput(ctx, s.id, pid, nil, true)
		})
	case "SendSignal":
		connectUnary(w, r, func(ctx context.Context, req *procSendSignalRequest) (any, error) {
			if req.Signal == "" {
				return nil, connectErrorf(codeInvalidArgument, "signal: use SIGNAL_SIGKILL (9) or SIGNAL_SIGTERM (15)")
			}
			pid, err := procResolve(ctx, s, req.Process)
			if err != nil {
				return nil, err
			}
			return struct{}{}, s.m.SignalProcess(ctx, s.id, pid, string(req.Signal))
		})
	case "Update":
		connectUnary(w, r, func(ctx context.Context, req *procUpdateRequest) (any, error) {
			pid, err := procResolve(ctx, s, req.Process)
			if err != nil {
				return nil, err
			}
			if req.PTY == nil || req.PTY.Size == nil {
				return struct{}{}, nil
			}
			size := sandbox.PTYSize{Cols: int(req.PTY.Size.Cols), Rows: int(req.PTY.Size.Rows)}
			return struct{}{}, s.m.ResizePTY(ctx, s.id, pid, size)
		})
	case "StreamInput":
		// A client stream: fetch-based clients cannot send one, and the
		// SDK does not; SendInput keeps the order one caller sends in.
		connectWriteUnaryError(w, connectErrorf(codeUnimplemented, "StreamInput is not supported by cellvm: use SendInput"))
	default:
		connectWriteUnaryError(w, connectErrorf(codeUnimplemented, "process.Process/%s is not a method", clipCaller(method)))
	}
}

// procStart starts the process and streams its events.
func procStart(ctx context.Context, s scope, r *http.Request, req *procStartRequest, st *connectStream) error {
	if req.Process == nil || req.Process.Cmd == "" {
		return connectErrorf(codeInvalidArgument, "process.cmd is missing")
	}
	user, err := envdUser(r)
	if err != nil {
		return err
	}
	pr := sandbox.ProcessRequest{
		Argv:  append([]string{req.Process.Cmd}, req.Process.Args...),
		Env:   req.Process.Envs,
		User:  user,
		Stdin: req.Stdin == nil || *req.Stdin, // envd's default is true
	}
	if req.Process.Cwd != nil && *req.Process.Cwd != "" {
		pr.Cwd = envdPath(*req.Process.Cwd, user)
	}
	if req.Tag != nil {
		pr.Tag = *req.Tag
	}
	if req.PTY != nil {
		if req.PTY.Size == nil {
			return connectErrorf(codeInvalidArgument, "pty.size is missing")
		}
		pr.PTY = &sandbox.PTYSize{Cols: int(req.PTY.Size.Cols), Rows: int(req.PTY.Size.Rows)}
		pr.Stdin = false
	}
	// The SDK's timeoutMs ends the command, as envd does. The stream's
	// context ending only stops the watching: the Manager lets the
	// process go on (a background command outlives its stream).
	if pr.Timeout, err = connectTimeoutErr(r); err != nil {
		return err
	}
	if err := pr.Validate(); err != nil {
		return err
	}
	return procWatch(st, 0, func(on func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
		return s.m.StartProcess(ctx, s.id, pr, on)
	})
}

// connectTimeoutErr is connectTimeout with a plain error.
func connectTimeoutErr(r *http.Request) (time.Duration, error) {
	d, err := connectTimeout(r)
	if err != nil {
		return 0, err
	}
	return d, nil
}

// procWatch runs watch (StartProcess or AttachProcess) and turns its
// events into envd's: one start event first (pid, when known, is sent
// before watching: Connect's caller knows it), the output, and the end.
func procWatch(st *connectStream, pid int, watch func(on func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error)) error {
	started := false
	if pid > 0 {
		if err := st.Send(procEventMsg{Event: procEvent{Start: &procStartEvent{PID: pid}}}); err != nil {
			return err
		}
		started = true
	}
	ended := false
	on := func(ev sandbox.ProcessEvent) error {
		var e procEvent
		switch ev.Kind {
		case sandbox.ProcessStart:
			if started {
				return nil
			}
			started = true
			e.Start = &procStartEvent{PID: ev.PID}
		case sandbox.ProcessStdout:
			e.Data = &procDataEvent{Stdout: ev.Data}
		case sandbox.ProcessStderr:
			e.Data = &procDataEvent{Stderr: ev.Data}
		case sandbox.ProcessPTY:
			e.Data = &procDataEvent{PTY: ev.Data}
		case sandbox.ProcessEnd:
			if ev.Exit == nil {
				return nil
			}
			if !started {
				// It never ran (no such program, a bad cwd): envd's
				// answer is an error, which the SDK raises.
				return connectErrorf(codeInvalidArgument, "the process could not start: %s", procExitError(*ev.Exit))
			}
			ended = true
			e.End = procEnd(*ev.Exit)
		default:
			return nil
		}
		if e.Data != nil && len(ev.Data) == 0 {
			return nil
		}
		return st.Send(procEventMsg{Event: e})
	}
	exit, err := watch(on)
	if err != nil {
		return err
	}
	if !ended {
		if !started {
			return connectErrorf(codeInvalidArgument, "the process could not start: %s", procExitError(exit))
		}
		return st.Send(procEventMsg{Event: procEvent{End: procEnd(exit)}})
	}
	return nil
}

func procExitError(x sandbox.ProcessExit) string {
	if x.Error != "" {
		return x.Error
	}
	return fmt.Sprintf("exit code %d", x.ExitCode)
}

// procEnd is envd's end event: exited is false when a signal ended it,
// status reads as Go's ProcessState does ("exit status 1", "signal:
// killed"), and error says what the SDK's CommandExitError shows.
func procEnd(x sandbox.ProcessExit) *procEndEvent {
	e := &procEndEvent{ExitCode: x.ExitCode, Exited: x.Signal == "", Status: fmt.Sprintf("exit status %d", x.ExitCode)}
	if x.Signal != "" {
		e.Status = "signal: " + procSignalWords[x.Signal]
		if e.Status == "signal: " {
			e.Status += x.Signal
		}
		if e.ExitCode == 0 {
			e.ExitCode = -1
		}
	}
	msg := ""
	switch {
	case x.Error != "":
		msg = x.Error
	case x.TimedOut:
		msg = "the command ran past its timeout and was killed"
	case x.Signal != "" || x.ExitCode != 0:
		msg = e.Status
	}
	if msg != "" {
		e.Error = &msg
	}
	return e
}

var procSignalWords = map[string]string{
	sandbox.SignalKill: "killed", sandbox.SignalTerm: "terminated",
	sandbox.SignalInt: "interrupt", sandbox.SignalHup: "hangup",
}

// procResolve finds a selector's pid: a tag is looked up among the
// running processes.
func procResolve(ctx context.Context, s scope, sel *procSelector) (int, error) {
	switch {
	case sel == nil || (sel.PID == nil && sel.Tag == nil):
		return 0, connectErrorf(codeInvalidArgument, "process: give a pid or a tag")
	case sel.PID != nil:
		if *sel.PID == 0 {
			return 0, connectErrorf(codeInvalidArgument, "process: pid 0")
		}
		return int(*sel.PID), nil
	}
	ps, err := s.m.ListProcesses(ctx, s.id)
	if err != nil {
		return 0, err
	}
	for _, p := range ps {
		if p.Tag == *sel.Tag {
			return p.PID, nil
		}
	}
	return 0, connectErrorf(codeNotFound, "no process has tag %q", clipCaller(*sel.Tag))
}
