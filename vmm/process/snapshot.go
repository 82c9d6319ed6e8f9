package process

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/cellvm/cellvm/vmm"
	"github.com/cellvm/cellvm/vmm/control"
)

// serveControl opens the VMM's control socket at path ("" for none) and
// takes snapshots of m on the requests that come to it: pause, save, then
// resume or (once the reply is sent) stop the VM; a snapshot that fails
// leaves the VM running. It must be called before the jail's seccomp
// filter is installed, which forbids creating sockets. stop closes the
// socket.
func serveControl(m *vmm.Machine, path string, ends *ending, log *slog.Logger) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	hs := control.Handlers{
		Snapshot: func(state, memory *os.File, req control.Request) error {
			return snapshot(m, state, memory, req, log)
		},
		WorkingSet: m.WorkingSet,
	}
	if m.TakesCheckpoints() {
		hs.Checkpoint = func(state, memory *os.File, full bool) (control.CheckpointStats, error) {
			return checkpoint(m, state, memory, full)
		}
	}
	go control.ServeHandlers(ln, hs, func() {
		ends.snapshotStop()
		m.Stop()
	}, log)
	return func() { ln.Close() }, nil
}

// checkpoint is the control socket's checkpoint handler: the machine
// pauses, writes its checkpoint and runs on (vmm.Machine.Checkpoint). A
// machine that ended answers not_running.
func checkpoint(m *vmm.Machine, state, memory *os.File, full bool) (control.CheckpointStats, error) {
	st, err := m.Checkpoint(state, memory, full)
	if errors.Is(err, vmm.ErrNotRunning) {
		return st, control.WithCode(control.CodeNotRunning, err)
	}
	return st, err
}

// snapshot is the control socket's handler: it pauses m, saves it into
// state and memory (as a layer where the request allows: SaveLayer), and
// resumes it unless the request says ThenStop (Serve stops it once the
// reply is sent). A machine that ended answers not_running.
func snapshot(m *vmm.Machine, state, memory *os.File, req control.Request, log *slog.Logger) error {
	if err := m.Pause(); err != nil {
		if errors.Is(err, vmm.ErrNotRunning) {
			return control.WithCode(control.CodeNotRunning, err)
		}
		return err
	}
	save := m.Save
	if req.Layer {
		save = m.SaveLayer
	}
	if err := save(state, memory); err != nil {
		if rerr := m.Resume(); rerr != nil {
			log.Error("resume after a failed snapshot", "err", rerr)
		}
		return err
	}
	if req.Then == control.ThenStop {
		return nil // paused until Serve has replied and stops it
	}
	return m.Resume()
}
