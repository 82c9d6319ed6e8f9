package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cellvm/cellvm/guestinit/proto"
	"github.com/cellvm/cellvm/sandbox"
)

// File operations beyond upload and download, done by the guest's agent
// with the credentials of the cells' user (root only in a Config.Root
// sandbox). The host checks the path (sandbox.GuestPath), the user and
// the depth before the guest sees the request, and checks the answer
// against its bounds (proto.FileReply.Validate) as it decodes.

// fileOp validates req and turns it into the agent's op for sandbox s.
func fileOp(s *vmSandbox, kind string, req sandbox.FileRequest) (proto.FileOp, error) {
	if err := req.Validate(); err != nil {
		return proto.FileOp{}, err
	}
	p, _ := sandbox.GuestPath(req.Path)
	if req.User == sandbox.GuestUserRoot && !s.cfg.Root {
		return proto.FileOp{}, fmt.Errorf("%w: user root needs a sandbox created with root", sandbox.ErrForbidden)
	}
	op := proto.FileOp{Kind: kind, Path: p, Root: req.User == sandbox.GuestUserRoot}
	switch kind {
	case proto.FileList:
		op.Depth = max(req.Depth, 1)
	case proto.FileWatch:
		op.Recursive = req.Recursive
	}
	return op, nil
}

// doFile runs a short file op in sandbox id.
func (m *VMManager) doFile(ctx context.Context, id, kind string, req sandbox.FileRequest, to string) (proto.FileReply, error) {
	s, err := m.get(id)
	if err != nil {
		return proto.FileReply{}, err
	}
	op, err := fileOp(s, kind, req)
	if err != nil {
		return proto.FileReply{}, err
	}
	if kind == proto.FileMove {
		if op.To, err = sandbox.GuestPath(to); err != nil {
			return proto.FileReply{}, err
		}
	}
	s, release, err := m.readyHeld(id)
	if err != nil {
		return proto.FileReply{}, err
	}
	defer release()
	r, err := s.agent.FileOp(ctx, op)
	if err != nil {
		return proto.FileReply{}, m.fileErr(s, err)
	}
	return r, nil
}

// fileErr maps the agent's file errors onto the Manager's.
func (m *VMManager) fileErr(s *vmSandbox, err error) error {
	var pe *proto.Error
	if errors.As(err, &pe) {
		switch pe.Code {
		case proto.CodeForbidden:
			return fmt.Errorf("%w: %s", sandbox.ErrForbidden, pe.Message)
		case proto.CodeExists:
			return fmt.Errorf("%w: %s", sandbox.ErrInvalid, pe.Message)
		case proto.CodeTooLarge:
			return fmt.Errorf("%w: %s (at most %d entries, %d watched directories)", sandbox.ErrTooLarge, pe.Message, sandbox.MaxListEntries, maxWatchDirs)
		case proto.CodePortClosed:
			return fmt.Errorf("%w: %s", sandbox.ErrPortClosed, pe.Message)
		}
	}
	return m.agentErr(s, err)
}

// maxWatchDirs is the agent's bound on one recursive watch's directories
// (agent.MaxWatchDirs), named in errors.
const maxWatchDirs = 1024

func entryOf(e proto.FileEntry) sandbox.FileEntry {
	return sandbox.FileEntry{
		Name: e.Name, Path: e.Path, Type: e.Type, Size: e.Size, Mode: e.Mode,
		Owner: e.Owner, Group: e.Group, ModTime: time.Unix(0, e.ModTimeNS).UTC(),
		SymlinkTarget: e.SymlinkTarget,
	}
}

// ListDir implements Manager.
func (m *VMManager) ListDir(ctx context.Context, id string, req sandbox.FileRequest) ([]sandbox.FileEntry, error) {
	r, err := m.doFile(ctx, id, proto.FileList, req, "")
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.FileEntry, 0, len(r.Entries))
	for _, e := range r.Entries {
		out = append(out, entryOf(e))
	}
	return out, nil
}

// StatPath implements Manager.
func (m *VMManager) StatPath(ctx context.Context, id string, req sandbox.FileRequest) (sandbox.FileEntry, error) {
	r, err := m.doFile(ctx, id, proto.FileStat, req, "")
	if err != nil {
		return sandbox.FileEntry{}, err
	}
	if r.Entry == nil {
		return sandbox.FileEntry{}, fmt.Errorf("%w: the guest answered a stat without an entry", sandbox.ErrLost)
	}
	return entryOf(*r.Entry), nil
}

// MakeDir implements Manager.
func (m *VMManager) MakeDir(ctx context.Context, id string, req sandbox.FileRequest) (bool, error) {
	r, err := m.doFile(ctx, id, proto.FileMkdir, req, "")
	if err != nil {
		return false, err
	}
	return r.Created != nil && *r.Created, nil
}

// MovePath implements Manager.
func (m *VMManager) MovePath(ctx context.Context, id string, from sandbox.FileRequest, to string) (sandbox.FileEntry, error) {
	r, err := m.doFile(ctx, id, proto.FileMove, from, to)
	if err != nil {
		return sandbox.FileEntry{}, err
	}
	if r.Entry == nil {
		return sandbox.FileEntry{}, fmt.Errorf("%w: the guest answered a move without an entry", sandbox.ErrLost)
	}
	return entryOf(*r.Entry), nil
}

// RemovePath implements Manager.
func (m *VMManager) RemovePath(ctx context.Context, id string, req sandbox.FileRequest) error {
	_, err := m.doFile(ctx, id, proto.FileRemove, req, "")
	return err
}

// watches counts each sandbox's running WatchDir calls (MaxWatches).
var watches = struct {
	sync.Mutex
	n map[*vmSandbox]int
}{n: map[*vmSandbox]int{}}

func takeWatch(s *vmSandbox) (release func(), ok bool) {
	watches.Lock()
	defer watches.Unlock()
	if watches.n[s] >= sandbox.MaxWatches {
		return nil, false
	}
	watches.n[s]++
	return func() {
		watches.Lock()
		defer watches.Unlock()
		if watches.n[s]--; watches.n[s] <= 0 {
			delete(watches.n, s)
		}
	}, true
}

// WatchDir implements Manager. The sandbox is held (no pause, no
// snapshot) only while the watch is set up; a watch of a sandbox paused
// later ends then, as its VM's connections do.
func (m *VMManager) WatchDir(ctx context.Context, id string, req sandbox.FileRequest, onEvent func(sandbox.FileEvent) error) error {
	s, err := m.get(id)
	if err != nil {
		return err
	}
	op, err := fileOp(s, proto.FileWatch, req)
	if err != nil {
		return err
	}
	s, release, err := m.readyHeld(id)
	if err != nil {
		return err
	}
	held := true
	defer func() {
		if held {
			release()
		}
	}()
	done, ok := takeWatch(s)
	if !ok {
		return fmt.Errorf("%w: sandbox %s has %d watches running, the most it may", sandbox.ErrFull, id, sandbox.MaxWatches)
	}
	defer done()
	var cbErr error
	err = s.agent.Watch(ctx, op, func() {
		held = false
		release()
		cbErr = onEvent(sandbox.FileEvent{})
	}, func(batch []proto.FileEvent) error {
		if cbErr != nil {
			return cbErr
		}
		for _, e := range batch {
			if err := onEvent(sandbox.FileEvent{Name: e.Name, Op: e.Op}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return m.fileErr(s, err)
	}
	return cbErr
}
