package e2b

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// envdFake is sandboxtest's manager with the process and file calls
// envd needs played by the test (the procs and files helpers build the
// real ones): commands by their last argument, files by their path.
type envdFake struct {
	*sandboxtest.Manager

	mu      sync.Mutex
	reqs    []sandbox.ProcessRequest
	files   []sandbox.FileRequest
	inputs  []string
	signals []string
	resized []sandbox.PTYSize
	running map[int]chan sandbox.ProcessExit // the "sleep" command
}

func newEnvdFake() *envdFake {
	return &envdFake{Manager: sandboxtest.New(), running: map[int]chan sandbox.ProcessExit{}}
}

func (f *envdFake) StartProcess(ctx context.Context, id string, req sandbox.ProcessRequest, on func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	if _, err := f.Get(ctx, id); err != nil {
		return sandbox.ProcessExit{}, err
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	emit := func(evs ...sandbox.ProcessEvent) error {
		for _, ev := range evs {
			if err := on(ev); err != nil {
				return err
			}
		}
		return nil
	}
	end := func(x sandbox.ProcessExit) (sandbox.ProcessExit, error) {
		return x, emit(sandbox.ProcessEvent{Kind: sandbox.ProcessEnd, Exit: &x})
	}
	switch cmd := req.Argv[len(req.Argv)-1]; cmd {
	case "echo hi":
		if err := emit(sandbox.ProcessEvent{Kind: sandbox.ProcessStart, PID: 7},
			sandbox.ProcessEvent{Kind: sandbox.ProcessStdout, Data: []byte("hi\n")},
			sandbox.ProcessEvent{Kind: sandbox.ProcessStderr, Data: []byte("warn\n")}); err != nil {
			return sandbox.ProcessExit{}, err
		}
		return end(sandbox.ProcessExit{ExitCode: 0})
	case "exit 2":
		if err := emit(sandbox.ProcessEvent{Kind: sandbox.ProcessStart, PID: 9}); err != nil {
			return sandbox.ProcessExit{}, err
		}
		return end(sandbox.ProcessExit{ExitCode: 2})
	case "nosuch":
		return end(sandbox.ProcessExit{ExitCode: 127, Error: "no such program: nosuch"})
	case "sleep":
		ch := make(chan sandbox.ProcessExit, 1)
		f.mu.Lock()
		f.running[8] = ch
		f.mu.Unlock()
		if err := emit(sandbox.ProcessEvent{Kind: sandbox.ProcessStart, PID: 8}); err != nil {
			return sandbox.ProcessExit{}, err
		}
		select {
		case <-ctx.Done(): // the process goes on
			return sandbox.ProcessExit{}, ctx.Err()
		case x := <-ch:
			return end(x)
		}
	}
	return sandbox.ProcessExit{}, fmt.Errorf("%w: the fake has no command %q", sandbox.ErrInvalid, req.Argv)
}

func (f *envdFake) proc(pid int) (chan sandbox.ProcessExit, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, ok := f.running[pid]
	if !ok {
		return nil, fmt.Errorf("%w: no process %d", sandbox.ErrNotFound, pid)
	}
	return ch, nil
}

func (f *envdFake) AttachProcess(ctx context.Context, id string, pid int, on func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	ch, err := f.proc(pid)
	if err != nil {
		return sandbox.ProcessExit{}, err
	}
	if err := on(sandbox.ProcessEvent{Kind: sandbox.ProcessStart, PID: pid}); err != nil {
		return sandbox.ProcessExit{}, err
	}
	if err := on(sandbox.ProcessEvent{Kind: sandbox.ProcessStdout, Data: []byte("backlog\n")}); err != nil {
		return sandbox.ProcessExit{}, err
	}
	select {
	case <-ctx.Done():
		return sandbox.ProcessExit{}, ctx.Err()
	case x := <-ch:
		return x, on(sandbox.ProcessEvent{Kind: sandbox.ProcessEnd, Exit: &x})
	}
}

func (f *envdFake) ListProcesses(ctx context.Context, id string) ([]sandbox.ProcessInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.ProcessInfo
	for pid := range f.running {
		out = append(out, sandbox.ProcessInfo{PID: pid, Argv: []string{"/bin/bash", "-l", "-c", "sleep"}, Tag: "napper", Cwd: "/home/user", StartedAt: time.Unix(0, 0)})
	}
	return out, nil
}

func (f *envdFake) SendInput(ctx context.Context, id string, pid int, data []byte, eof bool) error {
	if _, err := f.proc(pid); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inputs = append(f.inputs, fmt.Sprintf("%q eof=%v", data, eof))
	return nil
}

func (f *envdFake) SignalProcess(ctx context.Context, id string, pid int, sig string) error {
	ch, err := f.proc(pid)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.signals = append(f.signals, sig)
	delete(f.running, pid)
	f.mu.Unlock()
	ch <- sandbox.ProcessExit{ExitCode: -1, Signal: sig}
	return nil
}

func (f *envdFake) ResizePTY(ctx context.Context, id string, pid int, size sandbox.PTYSize) error {
	if _, err := f.proc(pid); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resized = append(f.resized, size)
	return nil
}

var envdFakeTime = time.Date(2024, 5, 6, 7, 8, 9, 500, time.UTC)

func (f *envdFake) noteFile(req sandbox.FileRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files = append(f.files, req)
	if req.Path == "/home/user/secret" {
		return fmt.Errorf("%w: permission denied", sandbox.ErrForbidden)
	}
	return nil
}

func (f *envdFake) StatPath(ctx context.Context, id string, req sandbox.FileRequest) (sandbox.FileEntry, error) {
	if err := f.noteFile(req); err != nil {
		return sandbox.FileEntry{}, err
	}
	switch req.Path {
	case "/home/user/a.txt":
		return sandbox.FileEntry{Name: "a.txt", Path: req.Path, Type: sandbox.FileTypeFile, Size: 5, Mode: 0o644, Owner: "user", Group: "user", ModTime: envdFakeTime}, nil
	case "/home/user/new", "/home/user/dir":
		return sandbox.FileEntry{Name: "new", Path: req.Path, Type: sandbox.FileTypeDir, Mode: 0o755, ModTime: envdFakeTime}, nil
	}
	return sandbox.FileEntry{}, fmt.Errorf("%w: %s", sandbox.ErrNotFound, req.Path)
}

func (f *envdFake) ListDir(ctx context.Context, id string, req sandbox.FileRequest) ([]sandbox.FileEntry, error) {
	if err := f.noteFile(req); err != nil {
		return nil, err
	}
	return []sandbox.FileEntry{
		{Name: "a.txt", Path: req.Path + "/a.txt", Type: sandbox.FileTypeFile, Size: 5, Mode: 0o644, ModTime: envdFakeTime},
		{Name: "l", Path: req.Path + "/l", Type: sandbox.FileTypeSymlink, SymlinkTarget: "a.txt", Mode: 0o777},
		{Name: "fifo", Path: req.Path + "/fifo", Type: sandbox.FileTypeOther},
	}, nil
}

func (f *envdFake) MakeDir(ctx context.Context, id string, req sandbox.FileRequest) (bool, error) {
	if err := f.noteFile(req); err != nil {
		return false, err
	}
	return req.Path == "/home/user/new", nil
}

func (f *envdFake) MovePath(ctx context.Context, id string, from sandbox.FileRequest, to string) (sandbox.FileEntry, error) {
	if err := f.noteFile(from); err != nil {
		return sandbox.FileEntry{}, err
	}
	return sandbox.FileEntry{Name: "b.txt", Path: to, Type: sandbox.FileTypeFile, Size: 5}, nil
}

func (f *envdFake) RemovePath(ctx context.Context, id string, req sandbox.FileRequest) error {
	return f.noteFile(req)
}

func (f *envdFake) WatchDir(ctx context.Context, id string, req sandbox.FileRequest, on func(sandbox.FileEvent) error) error {
	if err := f.noteFile(req); err != nil {
		return err
	}
	if err := on(sandbox.FileEvent{}); err != nil {
		return err
	}
	if err := on(sandbox.FileEvent{Name: "a.txt", Op: sandbox.FileCreate}); err != nil {
		return err
	}
	if err := on(sandbox.FileEvent{Name: "gone", Op: sandbox.FileRemove}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}
