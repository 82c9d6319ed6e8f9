package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/vmm"
	"github.com/cellvm/cellvm/vmm/consolelog"
	"golang.org/x/sys/unix"
)

// VMMConfig is what the daemon hands a `cellvm vmm` process: one machine.
// It travels as a JSON file so that nothing about the VM depends on the
// daemon's memory once the process runs.
type VMMConfig struct {
	Kernel    string     `json:"kernel"`
	Initrd    string     `json:"initrd,omitempty"`
	Cmdline   string     `json:"cmdline,omitempty"`
	VCPUs     int        `json:"vcpus"`
	MemoryMiB uint64     `json:"memory_mib"`
	Disks     []VMMDisk  `json:"disks,omitempty"`
	Vsock     *vmm.Vsock `json:"vsock,omitempty"`
	TAP       string     `json:"tap,omitempty"`
	MAC       [6]byte    `json:"mac,omitempty"`
	// TAPFD is the descriptor number of an open TAP the daemon passed
	// (it takes the place of TAP; 0: none).
	TAPFD    int    `json:"tap_fd,omitempty"`
	LogLevel string `json:"log_level,omitempty"`
	// Jail confines this process (see package jail); its paths above are
	// then the jail's.
	Jail *jail.Spec `json:"jail,omitempty"`
	// TestHooks makes SIGUSR2 issue a system call the jail forbids: the
	// trigger of the test that a seccomp violation kills the VMM. The daemon
	// sets it only when it runs with CELLVM_TEST_HOOKS=1.
	TestHooks bool `json:"test_hooks,omitempty"`
	// ConsoleMaxBytes caps the console log on stdout (0: no cap).
	ConsoleMaxBytes int64 `json:"console_max_bytes,omitempty"`
	// Control is the path of the VMM's control socket (package
	// vmm/control), on which it takes snapshots; none when empty.
	Control string `json:"control,omitempty"`
	// Restore starts the VM from a snapshot instead of booting Kernel;
	// the devices above must have the snapshot's shape.
	Restore *SnapshotFiles `json:"restore,omitempty"`
}

// VMMDisk is one disk of VMMConfig: a file by path, or by the descriptor
// number (FD, above 2) of a file the daemon opened and passed, which a
// jailed VMM needs for a writable disk (a workspace).
type VMMDisk struct {
	Path     string
	ReadOnly bool
	FD       int `json:",omitempty"`
}

// vmmDisks turns the config's disks into the VMM's, taking over the
// passed descriptors.
func vmmDisks(ds []VMMDisk) ([]vmm.Disk, error) {
	out := make([]vmm.Disk, len(ds))
	for i, d := range ds {
		out[i] = vmm.Disk{Path: d.Path, ReadOnly: d.ReadOnly}
		if d.FD == 0 {
			continue
		}
		if d.FD < 3 {
			return nil, fmt.Errorf("disk %d: descriptor %d is not one the daemon passed", i, d.FD)
		}
		var st unix.Stat_t
		if err := unix.Fstat(d.FD, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil, fmt.Errorf("disk %d: descriptor %d from the daemon is not an open file (%v)", i, d.FD, err)
		}
		out[i].File = os.NewFile(uintptr(d.FD), d.Path)
	}
	return out, nil
}

// vmmCommand is `cellvm vmm --config FILE`, the process the daemon starts
// per VM. Its argv shape is fixed: the daemon finds its VMMs by it
// (sandbox.isVMMFor), so it parses its own arguments.
func (a *app) vmmCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "vmm --config FILE",
		Short:              "run one VM from a JSON config (started by the daemon)",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
				return cmd.Help()
			}
			return cmdVMM(args, a.stdout, a.stderr)
		},
	}
}

// cmdVMM runs one VM in this process until the guest ends or the process
// gets SIGTERM/SIGINT. The console goes to stdout, the VMM's log to stderr.
func cmdVMM(args []string, stdout, stderr io.Writer) error {
	if len(args) != 2 || args[0] != "--config" {
		return usageError{fmt.Errorf("usage: cellvm vmm --config FILE")}
	}
	b, err := os.ReadFile(args[1])
	if err != nil {
		return fmt.Errorf("read vmm config: %w", err)
	}
	var c VMMConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("parse vmm config %s: %w", args[1], err)
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	log, err := newLogger(stderr, c.LogLevel)
	if err != nil {
		return err
	}
	// The page map lets a save skip the pages the guest never touched; the
	// jail has no /proc, so it is opened first. Without it saves read
	// every page.
	pagemap, err := os.Open("/proc/self/pagemap")
	if err != nil {
		log.Debug("no page map: a snapshot will read every page of guest memory", "err", err)
		pagemap = nil
	}
	if c.Jail != nil {
		if err := jail.Enter(*c.Jail); err != nil {
			return err
		}
	}
	var tap *os.File
	if c.TAPFD > 0 {
		if err := unix.SetNonblock(c.TAPFD, true); err != nil {
			return fmt.Errorf("TAP descriptor %d from the daemon: %w", c.TAPFD, err)
		}
		tap = os.NewFile(uintptr(c.TAPFD), "tap")
	}
	disks, err := vmmDisks(c.Disks)
	if err != nil {
		return err
	}
	var beforeGuest func() error
	if c.Jail != nil {
		spec := *c.Jail
		beforeGuest = func() error {
			if err := jail.Drop(spec); err != nil {
				return err
			}
			if err := jail.Install(); err != nil {
				return err
			}
			log.Info("vmm jailed", "uid", spec.UID, "root", spec.Root, "cgroup", spec.Cgroup, "seccomp", "on")
			return nil
		}
	}
	if c.TestHooks {
		hook := make(chan os.Signal, 1)
		signal.Notify(hook, syscall.SIGUSR2)
		go func() {
			<-hook
			log.Warn("test hook: making a forbidden system call")
			log.Error("test hook", "error", jail.ForbiddenSyscall())
		}()
	}
	console, err := cappedConsole(stdout, c.ConsoleMaxBytes)
	if err != nil {
		return err
	}
	m, err := newMachine(vmm.Config{
		Kernel: c.Kernel, Initrd: c.Initrd, Cmdline: c.Cmdline, VCPUs: c.VCPUs, MemoryMiB: c.MemoryMiB,
		Console: console, Log: log, Disks: disks, Vsock: c.Vsock, TAP: c.TAP, TAPFile: tap, MAC: c.MAC,
		BeforeGuest: beforeGuest, Pagemap: pagemap,
	}, c.Restore)
	if err != nil {
		return err
	}
	defer m.Close()
	stopControl, err := serveControl(m, c.Control, log)
	if err != nil {
		return err
	}
	defer stopControl()
	defer dumpVCPUsOnSIGUSR1(m)()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	go func() {
		if s, ok := <-sigs; ok {
			log.Info("stopping on signal", "signal", s.String())
			m.Stop()
		}
	}()
	return m.Run()
}

// cappedConsole returns stdout capped at max bytes (vmm/consolelog); max 0
// means no cap. A cap needs stdout to be a file open read-write, as the
// daemon opens console.log.
func cappedConsole(stdout io.Writer, max int64) (io.Writer, error) {
	if max == 0 {
		return stdout, nil
	}
	f, ok := stdout.(*os.File)
	if !ok {
		return nil, fmt.Errorf("console cap of %d bytes: the console is not a file", max)
	}
	return consolelog.New(f, max)
}
