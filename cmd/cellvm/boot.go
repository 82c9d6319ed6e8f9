package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/vmm"
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
	fs.StringVar(&b.from.State, "restore-state", "", "start from the snapshot with this state `FILE` (and --restore-memory) instead of booting a kernel")
	fs.StringVar(&b.from.Memory, "restore-memory", "", "the memory `FILE` of the snapshot to start from")
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
	from                    SnapshotFiles // --restore-state, --restore-memory
	shapeSet                bool          // --vcpus or --memory given
}

func boot(b *bootArgs, stdin io.Reader, stdout, stderr io.Writer) error {
	var restore *SnapshotFiles
	if b.from.State != "" || b.from.Memory != "" {
		restore = &b.from
	}
	if restore != nil && !b.shapeSet {
		b.vcpus, b.memory = 0, 0 // the snapshot's
	} else {
		if b.vcpus < 1 {
			return usageError{fmt.Errorf("--vcpus must be at least 1, got %d", b.vcpus)}
		}
		if b.memory == 0 {
			return usageError{fmt.Errorf("--memory must be positive")}
		}
	}
	var vs *vmm.Vsock
	if b.vsock != "" {
		v, err := parseVsock(b.vsock)
		if err != nil {
			return usageError{err}
		}
		vs = v
	}
	log, err := newLogger(stderr, b.logLevel)
	if err != nil {
		return err
	}
	if b.kernel == "" {
		b.kernel = os.Getenv("CELLVM_KERNEL")
	}
	if b.kernel == "" && restore == nil {
		b.kernel = findBuildFile("kernel/vmlinux")
		if b.kernel == "" {
			return fmt.Errorf("no kernel: pass --kernel, set CELLVM_KERNEL, or build the project's kernel with 'make kernel'")
		}
	}
	if err := requireKVM(); err != nil {
		return err
	}
	m, err := newMachine(vmm.Config{
		Kernel:       b.kernel,
		Initrd:       b.initrd,
		Cmdline:      b.cmdline,
		VCPUs:        b.vcpus,
		MemoryMiB:    b.memory,
		Console:      stdout,
		ConsoleInput: stdin,
		Log:          log,
		Disks:        b.disks,
		Vsock:        vs,
		TAP:          b.tap,
		MAC:          [6]byte{0x06, 0xce, 0x11, 0x00, 0x00, 0x01},
	}, restore)
	if err != nil {
		return err
	}
	defer m.Close()
	stopControl, err := serveControl(m, b.control, log)
	if err != nil {
		return err
	}
	defer stopControl()
	defer dumpVCPUsOnSIGUSR1(m)()
	return m.Run()
}

// diskFlags collects --disk PATH[,ro].
type diskFlags []vmm.Disk

func (d *diskFlags) String() string { return fmt.Sprint(*d) }

func (d *diskFlags) Type() string { return "PATH[,ro]" }

func (d *diskFlags) Set(v string) error {
	path, opt, _ := strings.Cut(v, ",")
	if path == "" {
		return fmt.Errorf("--disk wants PATH[,ro], got %q", v)
	}
	disk := vmm.Disk{Path: path}
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

func parseVsock(s string) (*vmm.Vsock, error) {
	c, uds, ok := strings.Cut(s, ",")
	if !ok || uds == "" {
		return nil, fmt.Errorf("--vsock wants CID,UDS, got %q", s)
	}
	cid, err := strconv.ParseUint(c, 10, 32)
	if err != nil || cid < 3 {
		return nil, fmt.Errorf("--vsock: guest CID %q must be a number >= 3", c)
	}
	return &vmm.Vsock{CID: cid, UDS: uds}, nil
}
