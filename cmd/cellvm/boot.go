package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/netpolicy"
	"github.com/cellvm/cellvm/vmm"
	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/process"
)

func (a *app) bootCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "boot",
		Short: "boot a kernel with the serial console on stdin/stdout",
		Args:  noArgs,
	}
	fs := cmd.Flags()
	b := &bootArgs{}
	fs.StringVar(&b.kernel, "kernel", "", "ELF vmlinux or bzImage (default: the project's build/kernel/vmlinux, or $CELLVM_KERNEL)")
	fs.StringVar(&b.initrd, "initrd", "", "initramfs to load")
	fs.StringVar(&b.cmdline, "cmdline", "", "kernel command line (default: "+vmm.DefaultCmdline+")")
	fs.IntVar(&b.vcpus, "vcpus", 1, "number of vCPUs")
	fs.Uint64Var(&b.memory, "memory", 256, "guest memory in MiB")
	fs.StringVar(&b.logLevel, "log-level", "info", "log level for the VMM's log on stderr")
	fs.Var(&b.disks, "disk", "`PATH[,ro]` file-backed virtio-blk disk (repeatable; /dev/vda, /dev/vdb, ...)")
	fs.StringVar(&b.vsock, "vsock", "", "`CID,UDS` virtio-vsock with guest context ID CID and host Unix socket UDS")
	fs.StringVar(&b.tap, "net", "", "`TAP` host TAP device for a virtio-net NIC")
	fs.StringVar(&b.control, "control", "", "`SOCKET` control socket on which the VMM takes snapshots (package vmm/control)")
	fs.StringVar(&b.restoreState, "restore-state", "", "start from the snapshot with this state `FILE` (and --restore-memory) instead of booting a kernel")
	fs.StringVar(&b.restoreMemory, "restore-memory", "", "the memory `FILE` of the snapshot to start from")
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		// A restored machine has the snapshot's shape unless asked for
		// one (which must then be the snapshot's).
		b.shapeSet = c.Flags().Changed("vcpus") || c.Flags().Changed("memory")
		return boot(b, a.stdin, a.stdout, a.stderr)
	}
	return cmd
}

// bootArgs are boot's flags.
type bootArgs struct {
	kernel, initrd, cmdline string
	vcpus                   int
	memory                  uint64
	logLevel                string
	disks                   diskFlags
	vsock, tap              string
	control                 string
	// restoreState and restoreMemory are --restore-state and
	// --restore-memory.
	restoreState, restoreMemory string
	shapeSet                    bool // --vcpus or --memory given
}

// bootMAC is the NIC's address under `cellvm boot --net`.
const bootMAC = "06:ce:11:00:00:01"

// boot runs the machine of b's flags in this process: the Spec a daemon's
// VMM gets, with the files it would be handed opened here (the TAP, a
// snapshot's).
func boot(b *bootArgs, stdin io.Reader, stdout, stderr io.Writer) error {
	restore := b.restoreState != "" || b.restoreMemory != ""
	if restore && !b.shapeSet {
		b.vcpus, b.memory = 0, 0 // the snapshot's
	} else {
		if b.vcpus < 1 {
			return usageError{fmt.Errorf("--vcpus must be at least 1, got %d", b.vcpus)}
		}
		if b.memory == 0 {
			return usageError{fmt.Errorf("--memory must be positive")}
		}
	}
	spec := control.Spec{
		Initrd: b.initrd, Cmdline: b.cmdline, VCPUs: b.vcpus, MemoryMiB: b.memory,
		Disks: b.disks, LogLevel: b.logLevel, Control: b.control,
	}
	if b.vsock != "" {
		v, err := parseVsock(b.vsock)
		if err != nil {
			return usageError{err}
		}
		spec.Vsock = v
	}
	log, err := newLogger(stderr, b.logLevel)
	if err != nil {
		return err
	}
	if b.kernel == "" {
		b.kernel = os.Getenv("CELLVM_KERNEL")
	}
	if b.kernel == "" && !restore {
		b.kernel = findBuildFile("kernel/vmlinux")
		if b.kernel == "" {
			return fmt.Errorf("no kernel: pass --kernel, set CELLVM_KERNEL, or build the project's kernel with 'make kernel'")
		}
	}
	spec.Kernel = b.kernel
	// The KVM probe (a tiny guest) runs while the machine is built, and
	// the guest's first instruction waits for its verdict: the probe
	// costs a boot nothing where KVM works. Where it does not, its
	// verdict is the error, whatever failed first.
	kvmOK := startKVMCheck()
	files, err := bootFiles(b, &spec)
	if err != nil {
		if kerr := kvmOK(); kerr != nil {
			return kerr
		}
		return err
	}
	err = process.Run(spec, files, process.Options{Stdin: stdin, Stdout: stdout, Stderr: stderr, Log: log, HostCheck: kvmOK})
	if err != nil {
		if kerr := kvmOK(); kerr != nil {
			return kerr
		}
	}
	return err
}

// startKVMCheck starts requireKVM and returns its result's waiter, which
// may be called any number of times.
func startKVMCheck() func() error {
	done := make(chan error, 1)
	go func() { done <- requireKVM() }()
	return sync.OnceValue(func() error { return <-done })
}

// bootFiles opens the files the machine of b is handed (a snapshot's, the
// TAP) and points spec at them.
func bootFiles(b *bootArgs, spec *control.Spec) (_ control.Files, err error) {
	files := control.Files{}
	defer func() {
		if err != nil {
			files.Close()
		}
	}()
	if b.restoreState != "" || b.restoreMemory != "" {
		spec.Restore = &control.Restore{}
		for _, f := range []struct{ slot, path, what string }{
			{control.SlotRestoreState, b.restoreState, "state file"},
			{control.SlotRestoreMemory, b.restoreMemory, "memory file"},
		} {
			if f.path == "" {
				return nil, fmt.Errorf("a snapshot to start from needs its %s (--restore-state and --restore-memory)", f.what)
			}
			file, err := os.Open(f.path)
			if err != nil {
				return nil, fmt.Errorf("snapshot %s: %w", f.what, err)
			}
			files[f.slot] = file
		}
	}
	if b.tap != "" {
		tap, err := netpolicy.OpenTAP(b.tap)
		if err != nil {
			return nil, err
		}
		files[control.SlotTAP] = tap
		spec.Net = &control.Net{MAC: bootMAC}
	}
	return files, nil
}

// diskFlags collects --disk PATH[,ro].
type diskFlags []control.Disk

func (d *diskFlags) String() string { return fmt.Sprint(*d) }

func (d *diskFlags) Type() string { return "PATH[,ro]" }

func (d *diskFlags) Set(v string) error {
	path, opt, _ := strings.Cut(v, ",")
	if path == "" {
		return fmt.Errorf("--disk wants PATH[,ro], got %q", v)
	}
	disk := control.Disk{Path: path}
	switch opt {
	case "":
	case "ro":
		disk.ReadOnly = true
	case "rw":
	default:
		return fmt.Errorf("--disk %q: unknown option %q (ro or rw)", v, opt)
	}
	*d = append(*d, disk)
	return nil
}

func parseVsock(s string) (*control.Vsock, error) {
	c, uds, ok := strings.Cut(s, ",")
	if !ok || uds == "" {
		return nil, fmt.Errorf("--vsock wants CID,UDS, got %q", s)
	}
	cid, err := strconv.ParseUint(c, 10, 32)
	if err != nil || cid < 3 {
		return nil, fmt.Errorf("--vsock: guest CID %q must be a number >= 3", c)
	}
	return &control.Vsock{CID: cid, UDS: uds}, nil
}
