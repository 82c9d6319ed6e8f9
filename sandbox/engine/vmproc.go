package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/jail"
)

// VMSpec is the machine a sandbox runs on; it is written to the sandbox's
// directory as vmm.json for its `cellvm vmm` process.
type VMSpec struct {
	Kernel    string   `json:"kernel"`
	Initrd    string   `json:"initrd,omitempty"`
	Cmdline   string   `json:"cmdline,omitempty"`
	VCPUs     int      `json:"vcpus"`
	MemoryMiB uint64   `json:"memory_mib"`
	Disks     []VMDisk `json:"disks,omitempty"`
	// ImageUUID is the root image's ext4 UUID when the machine booted
	// ("" if it has none to read): each image build has its own, and a
	// machine whose memory caches one image's files must not resume or
	// fork over another's.
	ImageUUID string   `json:"image_uuid,omitempty"`
	Vsock     *VMVsock `json:"vsock,omitempty"`
	TAP       string   `json:"tap,omitempty"`
	MAC       [6]byte  `json:"mac,omitempty"`
	TAPFD     int      `json:"tap_fd,omitempty"`
	LogLevel  string   `json:"log_level,omitempty"`
	// Jail, when set, confines the VMM (its paths above are then the
	// jail's); TestHooks arms its test-only seccomp trigger (SIGUSR2).
	Jail      *jail.Spec `json:"jail,omitempty"`
	TestHooks bool       `json:"test_hooks,omitempty"`
	// ConsoleMaxBytes caps console.log (see vmm/consolelog); 0: no cap.
	ConsoleMaxBytes int64 `json:"console_max_bytes,omitempty"`
	// Control is the VMM's control socket, on which the daemon asks for
	// snapshots (package vmm/control).
	Control string `json:"control,omitempty"`
	// Restore starts the VM from a snapshot whose files the VMM inherits.
	Restore *VMRestore `json:"restore,omitempty"`
}

// VMRestore mirrors the VMM's snapshot files by descriptor.
type VMRestore struct {
	StateFD  int `json:"state_fd"`
	MemoryFD int `json:"memory_fd"`
}

// VMDisk and VMVsock mirror vmm.Disk and vmm.Vsock's JSON.
type VMDisk struct {
	Path     string `json:"Path"`
	ReadOnly bool   `json:"ReadOnly"`
	// FD is the descriptor number of the disk the daemon opened and
	// passed (a workspace); Path then only names it.
	FD int `json:"FD,omitempty"`
}

type VMVsock struct {
	CID uint64 `json:"CID"`
	UDS string `json:"UDS"`
}

// vmLaunch is what startVM needs beyond the spec: descriptors to hand the
// VMM (ExtraFiles: the first is fd 3) and the cgroup to start it in.
type vmLaunch struct {
	files  []*os.File
	cgroup *jail.Cgroup
	// keepLogs appends to the console and VMM logs (a resumed VM's)
	// instead of starting them afresh.
	keepLogs bool
}

// vmProc is a running `cellvm vmm` process. It runs in its own session so
// that it outlives a daemon crash (a restarted daemon takes it back), and a
// signal to the daemon's process group does not reach it.
type vmProc struct {
	pid  int
	dir  string
	cmd  *exec.Cmd // nil when adopted from an earlier daemon
	done chan struct{}
	err  error // valid after done
	// ended says the daemon ended the process on purpose, keeping the VM
	// (a pause to disk): its exit does not make the sandbox lost.
	ended atomic.Bool
	// exitSeen is markLost's: the process's own exit is handled once.
	exitSeen sync.Once
}

const (
	specFile    = "vmm.json"
	configFile  = "sandbox.json"
	pidFile     = "vmm.pid"
	consoleFile = "console.log"
	vmmLogFile  = "vmm.log"
	vsockFile   = "vsock.sock"
	controlFile = "control.sock"
	// startedFromFile holds Info.StartedFrom, for a daemon that takes the
	// sandbox back.
	startedFromFile = "started_from"
)

// startVM writes spec into dir and starts exe (the cellvm binary) as the
// VMM process for it.
func startVM(exe, dir string, spec VMSpec, l vmLaunch) (*vmProc, error) {
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, specFile)
	if err := os.WriteFile(cfg, b, 0o600); err != nil {
		return nil, fmt.Errorf("write vmm config: %w", err)
	}
	// Read-write, not append: the VMM compacts its capped console log in
	// place through this descriptor (vmm/consolelog).
	fresh := os.O_TRUNC
	if l.keepLogs {
		fresh = 0
	}
	console, err := os.OpenFile(filepath.Join(dir, consoleFile), os.O_CREATE|os.O_RDWR|fresh, 0o600)
	if err != nil {
		return nil, err
	}
	defer console.Close()
	if _, err := console.Seek(0, io.SeekEnd); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(dir, vmmLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND|fresh, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(exe, "vmm", "--config", cfg)
	cmd.Stdout, cmd.Stderr = console, logf
	cmd.ExtraFiles = l.files
	// The Go runtime's periodic look at its cgroup's CPU limit would only
	// meet the jail's seccomp filter (EACCES).
	cmd.Env = append(os.Environ(), "GODEBUG=updatemaxprocs=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: 0}
	if spec.Jail != nil {
		cmd.SysProcAttr.Cloneflags = jail.Cloneflags
	}
	if l.cgroup != nil {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = l.cgroup.FD()
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start vmm process: %w", err)
	}
	p := &vmProc{pid: cmd.Process.Pid, dir: dir, cmd: cmd, done: make(chan struct{})}
	if err := os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(p.pid)), 0o600); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// adoptVM finds the VMM process an earlier daemon started for dir, if it is
// still alive and still that process.
func adoptVM(dir string) (*vmProc, error) {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return nil, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return nil, fmt.Errorf("bad pid file in %s", dir)
	}
	if !isVMMFor(pid, filepath.Join(dir, specFile)) {
		return nil, fmt.Errorf("vmm process %d of %s is gone", pid, dir)
	}
	p := &vmProc{pid: pid, dir: dir, done: make(chan struct{})}
	go p.pollExit()
	return p, nil
}

// isVMMFor reports whether pid is a `cellvm vmm --config cfg` process.
func isVMMFor(pid int, cfg string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
	return len(args) >= 4 && string(args[1]) == "vmm" && string(args[3]) == cfg
}

// pollExit watches an adopted process, which is not our child and so
// cannot be waited for.
func (p *vmProc) pollExit() {
	cfg := filepath.Join(p.dir, specFile)
	for isVMMFor(p.pid, cfg) {
		time.Sleep(200 * time.Millisecond)
	}
	p.err = errors.New("vmm process exited")
	close(p.done)
}

// alive reports whether the process still runs.
func (p *vmProc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop asks the VMM to end the VM (SIGTERM), then kills it after grace.
func (p *vmProc) stop(grace time.Duration) {
	if !p.alive() {
		return
	}
	syscall.Kill(p.pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		syscall.Kill(p.pid, syscall.SIGKILL)
		<-p.done
	}
}

// consoleTail returns the last n bytes of the VM's console, for errors.
func consoleTail(dir string, n int64) string {
	return readTail(filepath.Join(dir, consoleFile), n)
}
