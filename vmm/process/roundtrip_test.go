package process

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/vmm"
	"github.com/cellvm/cellvm/vmm/control"
)

// The test binary is also a stand-in VMM process: run as `vmm --config
// FILE` with planRole set, it does what a VMM does with its command line
// (control.ConfigPath, control.Load, NewPlan) and prints the plan it
// would build a machine from, instead of building it (no KVM needed).
const planRole = "CELLVM_TEST_VMM_PLAN"

func TestMain(m *testing.M) {
	if os.Getenv(planRole) == "1" {
		os.Exit(printPlan(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// planView is a Plan as the test compares it: the machine's
// configuration, each file by its identity.
type planView struct {
	Kernel, Initrd, Cmdline string
	VCPUs                   int
	MemoryMiB               uint64
	Disks                   []diskView
	Vsock                   *vmm.Vsock
	MAC                     [6]byte
	TAP, State, Memory      fileID
	IsVMM                   bool // its own /proc/self/cmdline is the VMM's of its spec
	Checkpoints             bool
}

type diskView struct {
	Path     string
	ReadOnly bool
	File     fileID
}

// fileID names an open file: device and inode (zero for none).
type fileID struct{ Dev, Ino uint64 }

func idOf(f *os.File) fileID {
	if f == nil {
		return fileID{}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileID{Dev: ^uint64(0)}
	}
	return fileID{st.Dev, st.Ino}
}

func viewOf(p Plan) planView {
	c := p.Config
	v := planView{Kernel: c.Kernel, Initrd: c.Initrd, Cmdline: c.Cmdline, VCPUs: c.VCPUs, MemoryMiB: c.MemoryMiB,
		Vsock: c.Vsock, MAC: c.MAC, TAP: idOf(c.TAP), State: idOf(p.State), Memory: idOf(p.Memory), Checkpoints: c.Checkpoints}
	for _, d := range c.Disks {
		v.Disks = append(v.Disks, diskView{d.Path, d.ReadOnly, idOf(d.File)})
	}
	return v
}

func printPlan(args []string) int {
	if len(args) < 1 || args[0] != control.Command {
		fmt.Fprintf(os.Stderr, "stand-in VMM: arguments %q\n", args)
		return 2
	}
	path, err := control.ConfigPath(args[1:])
	if err == nil {
		var spec control.Spec
		var files control.Files
		if spec, files, err = control.Load(path); err == nil {
			var p Plan
			if p, err = NewPlan(spec, files); err == nil {
				v := viewOf(p)
				cmdline, _ := os.ReadFile("/proc/self/cmdline")
				v.IsVMM = control.IsVMM(cmdline, path)
				err = json.NewEncoder(os.Stdout).Encode(v)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "stand-in VMM:", err)
		return 1
	}
	return 0
}

// launch does what a launcher does with spec and its files (Pass,
// WriteSpec, the VMM's argv with the files as ExtraFiles) with the
// stand-in VMM, and returns the plan the VMM built.
func launch(t *testing.T, spec control.Spec, files control.Files) planView {
	t.Helper()
	extra, err := spec.Pass(files)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "vmm.json")
	if err := control.WriteSpec(path, spec); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], control.Args(path)...)
	cmd.Env = append(os.Environ(), planRole+"=1")
	cmd.ExtraFiles = extra
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("stand-in VMM: %v", err)
	}
	var v planView
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("stand-in VMM's plan %q: %v", out, err)
	}
	return v
}

// open opens (creating) a file in dir for a slot.
func open(t *testing.T, dir, name string) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestSpecRoundTrip: the Spec of a boot, a restore (a paused sandbox's
// resume) and a fork, as the daemon builds them, goes through the
// launcher's slots, the VMM's command line and its descriptors, and
// comes out as the machine the spec describes, each passed file where its
// slot says.
func TestSpecRoundTrip(t *testing.T) {
	dir := t.TempDir()
	workspace := open(t, dir, "workspace.ext4")
	end := open(t, dir, "end.json")
	// A TAP's stand-in: the slot takes a character device.
	tap, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	paused := [2]*os.File{open(t, dir, "paused-vm.state"), open(t, dir, "paused-vm.mem")}
	snap := [2]*os.File{open(t, dir, "snap-vm.state"), open(t, dir, "snap-vm.mem")}

	boot := control.Spec{
		Kernel: "/kernel", Initrd: "/initrd", Cmdline: "console=ttyS0 cellvm.workspace=vdb",
		VCPUs: 2, MemoryMiB: 512, ImageUUID: "0b5e...",
		Disks: []control.Disk{{Path: "/rootfs.ext4", ReadOnly: true}, {Path: "workspace notes", Passed: true}},
		Vsock: &control.Vsock{CID: 7, UDS: "/run/vsock.sock"}, Net: &control.Net{MAC: "06:00:ac:10:00:06"},
		LogLevel: "info", ConsoleMaxBytes: 1 << 20, Control: "/run/control.sock", TestHooks: true,
	}
	want := planView{
		Kernel: "/kernel", Initrd: "/initrd", Cmdline: "console=ttyS0 cellvm.workspace=vdb", VCPUs: 2, MemoryMiB: 512,
		Disks: []diskView{{Path: "/rootfs.ext4", ReadOnly: true}, {Path: "workspace notes", File: idOf(workspace)}},
		Vsock: &vmm.Vsock{CID: 7, UDS: "/run/vsock.sock"}, MAC: [6]byte{0x06, 0, 0xac, 0x10, 0, 0x06},
		TAP: idOf(tap), IsVMM: true,
	}
	got := launch(t, boot, control.Files{control.DiskSlot(1): workspace, control.SlotTAP: tap, control.SlotEnd: end})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("boot:\n got %+v\nwant %+v", got, want)
	}

	// A resume restores the paused image into the same machine: its
	// workspace and TAP passed again.
	resume := boot
	resume.Restore = &control.Restore{}
	got = launch(t, resume, control.Files{control.DiskSlot(1): workspace, control.SlotTAP: tap,
		control.SlotRestoreState: paused[0], control.SlotRestoreMemory: paused[1], control.SlotEnd: end})
	want.State, want.Memory = idOf(paused[0]), idOf(paused[1])
	if !reflect.DeepEqual(got, want) {
		t.Errorf("resume:\n got %+v\nwant %+v", got, want)
	}

	// A fork restores a snapshot's files, shared with its siblings, into
	// a machine of its own: its CID, sockets and TAP; the snapshot's NIC
	// address and shape.
	fork := control.Spec{
		Kernel: "/kernel", Cmdline: "console=ttyS0", VCPUs: 1, MemoryMiB: 256,
		Disks: []control.Disk{{Path: "/rootfs.ext4", ReadOnly: true}},
		Vsock: &control.Vsock{CID: 9, UDS: "/run/vsock.sock"}, Net: &control.Net{MAC: "06:00:ac:10:00:06"},
		Control: "/run/control.sock", Restore: &control.Restore{}, Checkpoints: true,
	}
	got = launch(t, fork, control.Files{control.SlotTAP: tap, control.SlotRestoreState: snap[0], control.SlotRestoreMemory: snap[1]})
	want = planView{Kernel: "/kernel", Cmdline: "console=ttyS0", VCPUs: 1, MemoryMiB: 256,
		Disks: []diskView{{Path: "/rootfs.ext4", ReadOnly: true}}, Vsock: &vmm.Vsock{CID: 9, UDS: "/run/vsock.sock"},
		MAC: [6]byte{0x06, 0, 0xac, 0x10, 0, 0x06}, TAP: idOf(tap), State: idOf(snap[0]), Memory: idOf(snap[1]), IsVMM: true,
		Checkpoints: true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("fork:\n got %+v\nwant %+v", got, want)
	}
}
