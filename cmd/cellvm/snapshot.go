package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/cellvm/cellvm/vmm"
	"github.com/cellvm/cellvm/vmm/control"
)

// SnapshotFiles are the two files of a snapshot to start a VM from instead
// of a kernel.
type SnapshotFiles struct {
	State  string `json:"state"`
	Memory string `json:"memory"`
}

// newMachine is vmm.New, or vmm.Restore when from is set.
func newMachine(cfg vmm.Config, from *SnapshotFiles) (*vmm.Machine, error) {
	if from == nil {
		return vmm.New(cfg)
	}
	if from.State == "" || from.Memory == "" {
		return nil, errors.New("a snapshot to start from needs both its state file and its memory file")
	}
	return vmm.Restore(cfg, from.State, from.Memory)
}

// listenControl opens the VMM's control socket at path. It must be called
// before the jail's seccomp filter is installed, which forbids creating
// sockets; serveControl then answers on it.
func listenControl(path string) (*net.UnixListener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return ln, nil
}

// serveControl takes snapshots of m on the requests that come to ln: pause,
// save, then resume or stop the VM. A snapshot that fails leaves the VM
// running.
func serveControl(m *vmm.Machine, ln *net.UnixListener, log *slog.Logger) {
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
			m.Stop()
			return nil
		}
		return m.Resume()
	}, log)
}
