package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/cellvm/cellvm/vmm"
	"github.com/cellvm/cellvm/vmm/control"
)

// SnapshotFiles are the two files of a snapshot to start a VM from instead
// of a kernel: paths, or descriptors the VMM inherited (a jailed VMM's
// uid could not open the daemon's snapshot files, and the descriptors of
// one file shared by many forks are what lets them share its pages).
type SnapshotFiles struct {
	State    string `json:"state,omitempty"`
	Memory   string `json:"memory,omitempty"`
	StateFD  int    `json:"state_fd,omitempty"`
	MemoryFD int    `json:"memory_fd,omitempty"`
}

// open opens the two files.
func (s *SnapshotFiles) open() (state, memory *os.File, err error) {
	get := func(path string, fd int, what string) (*os.File, error) {
		switch {
		case fd > 0 && path == "":
			return os.NewFile(uintptr(fd), what), nil
		case fd == 0 && path != "":
			f, err := os.Open(path)
			if err != nil {
				return nil, fmt.Errorf("snapshot %s: %w", what, err)
			}
			return f, nil
		}
		return nil, fmt.Errorf("a snapshot to start from needs its %s as a path or a descriptor (one of them)", what)
	}
	if state, err = get(s.State, s.StateFD, "state file"); err != nil {
		return nil, nil, err
	}
	if memory, err = get(s.Memory, s.MemoryFD, "memory file"); err != nil {
		state.Close()
		return nil, nil, err
	}
	return state, memory, nil
}

// newMachine is vmm.New, or vmm.Restore when from is set.
func newMachine(cfg vmm.Config, from *SnapshotFiles) (*vmm.Machine, error) {
	if from == nil {
		return vmm.New(cfg)
	}
	state, memory, err := from.open()
	if err != nil {
		return nil, err
	}
	defer state.Close()
	defer memory.Close()
	return vmm.Restore(cfg, state, memory)
}

// serveControl opens the VMM's control socket at path ("" for none) and
// takes snapshots of m on the requests that come to it: pause, save, then
// resume or (once the reply is sent) stop the VM; a snapshot that fails
// leaves the VM running. It must be called before the jail's seccomp
// filter is installed, which forbids creating sockets. stop closes the
// socket.
func serveControl(m *vmm.Machine, path string, log *slog.Logger) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	go control.Serve(ln, func(state, memory *os.File, then control.Then) error {
		if err := m.Pause(); err != nil {
			return err
		}
		if err := m.Save(state, memory); err != nil {
			if rerr := m.Resume(); rerr != nil {
				log.Error("resume after a failed snapshot", "err", rerr)
			}
			return err
		}
		if then == control.ThenStop {
			return nil // paused until Serve has replied and stops it
		}
		return m.Resume()
	}, m.Stop, log)
	return func() { ln.Close() }, nil
}
