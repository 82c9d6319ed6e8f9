package sandboxtest

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// The guest's other doors: commands, files and the network policy.

// MaxUploadBytes is the most an Upload keeps; past it, ErrTooLarge.
const MaxUploadBytes = 64 << 20

// failMidway is the guest path whose download fails partway.
const failMidway = "/workspace/fail-midway"

func (m *Manager) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (cell.ExecResult, error) {
	if err := m.enter("Exec", id, fmt.Sprintf("%q", req.Argv)); err != nil {
		return cell.ExecResult{}, err
	}
	if err := req.Validate(); err != nil {
		return cell.ExecResult{}, err
	}
	var b *box
	if err := m.withBox(id, func(found *box) error { b = found; return nil }); err != nil {
		return cell.ExecResult{}, err
	}
	res := fakeCommand(req)
	m.mu.Lock()
	res.Checkpoint, res.CheckpointError = m.afterCell(b, sandbox.CheckpointExec, execCode(req.Argv))
	m.mu.Unlock()
	return res, nil
}

// fakeCommand runs the fake's commands.
func fakeCommand(req sandbox.ExecRequest) cell.ExecResult {
	argv, _ := json.Marshal(req.Argv)
	switch req.Argv[0] {
	case "echo":
		return cell.ExecResult{Stdout: strings.Join(req.Argv[1:], " ") + "\n"}
	case "cat":
		return cell.ExecResult{Stdout: string(req.Stdin)}
	case "hex":
		return cell.ExecResult{Stdout: hex.EncodeToString(req.Stdin)}
	case "argv":
		return cell.ExecResult{Stdout: string(argv), ExitCode: 3, Stderr: "to stderr\n"}
	case "sleep":
		return cell.ExecResult{ExitCode: 137, TimedOut: true, DurationMS: req.Timeout.Milliseconds()}
	}
	return cell.ExecResult{ExitCode: 127, Stdout: string(argv), Stderr: req.Argv[0] + ": not found\n"}
}

// Upload keeps the file; a read error or more than MaxUploadBytes keeps
// nothing.
func (m *Manager) Upload(ctx context.Context, id, guestPath string, r io.Reader) (int64, error) {
	if err := m.enter("Upload", id, guestPath); err != nil {
		return 0, err
	}
	if err := m.withBox(id, func(*box) error { return nil }); err != nil {
		return 0, err
	}
	data, err := io.ReadAll(io.LimitReader(r, MaxUploadBytes+1))
	if err != nil {
		return int64(len(data)), fmt.Errorf("writing %s: %w", guestPath, err)
	}
	if len(data) > MaxUploadBytes {
		return 0, fmt.Errorf("%w: %s is over %d bytes", sandbox.ErrTooLarge, guestPath, MaxUploadBytes)
	}
	return int64(len(data)), m.withBox(id, func(b *box) error {
		op := sandbox.FileWrite
		if _, ok := b.filesAt(guestPath)[guestPath]; !ok {
			op = sandbox.FileCreate
		}
		b.filesAt(guestPath)[guestPath] = data
		m.notify(b, guestPath, op) // a watch sees it (fileops.go)
		return nil
	})
}

func (m *Manager) Download(ctx context.Context, id, guestPath string, w io.Writer) (int64, error) {
	if err := m.enter("Download", id, guestPath); err != nil {
		return 0, err
	}
	var data []byte
	err := m.withBox(id, func(b *box) error {
		var ok bool
		if data, ok = b.filesAt(guestPath)[guestPath]; !ok && guestPath != failMidway {
			return fmt.Errorf("%w: %s", sandbox.ErrNotFound, guestPath)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if guestPath == failMidway {
		// More than a server buffers, so the 200 and part of the body
		// are on the wire when it fails.
		n, _ := w.Write(make([]byte, 100<<10))
		return int64(n), fmt.Errorf("%w: the VM exited during the copy", sandbox.ErrLost)
	}
	n, err := w.Write(data)
	return int64(n), err
}

func (m *Manager) SetNetwork(ctx context.Context, id string, p sandbox.NetworkPolicy) error {
	if err := m.enter("SetNetwork", id); err != nil {
		return err
	}
	if slices.Contains(p.Allow, notSupportedHost) {
		return fmt.Errorf("%w: this manager has no network policy support", sandbox.ErrNotSupported)
	}
	if err := p.Validate(); err != nil {
		return err
	}
	return m.withBox(id, func(b *box) error {
		pol := sandbox.NetworkPolicy{Allow: append([]string{}, p.Allow...)}
		b.info.Config.Network = &pol
		m.events.Publish(sandbox.Event{Type: sandbox.EventPolicyChanged, Sandbox: id, Network: &pol, Tenant: b.info.Config.Tenant})
		return nil
	})
}
