package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// Spec is one VMM process: the machine it runs and the files it is
// handed. The daemon writes it as JSON (vmm.json in the sandbox's
// directory) and starts `cellvm-vmm vmm --config FILE` on it (or `cellvm
// vmm`: cmd/cellvm's vmmBinary says which); `cellvm boot`
// builds the same Spec from its flags and runs it in its own process.
// Nothing about the VM depends on the daemon's memory once the process
// runs.
//
// Paths are the VMM's: the jail's when Jail is set. Files the VMM cannot
// or must not open itself (a writable disk, the TAP, a snapshot to restore,
// the End report) come open, each in a named slot (Files, slots.go).
type Spec struct {
	// Kernel is the ELF vmlinux or bzImage to boot; a restore needs none.
	Kernel string `json:"kernel,omitempty"`
	// Initrd is the initramfs to load ("" for none).
	Initrd string `json:"initrd,omitempty"`
	// Cmdline is the kernel command line (vmm.DefaultCmdline when empty).
	Cmdline string `json:"cmdline,omitempty"`
	// VCPUs and MemoryMiB are the machine's shape; 0 is the default (1
	// vCPU, 256 MiB), or for a restore the snapshot's.
	VCPUs     int    `json:"vcpus"`
	MemoryMiB uint64 `json:"memory_mib"`
	// Disks are the virtio-blk disks, /dev/vda, /dev/vdb, ... in order.
	Disks []Disk `json:"disks,omitempty"`
	// ImageUUID is the root image's ext4 UUID when the machine booted
	// ("" if it has none to read). The VMM does not use it: it is the
	// daemon's record that each image build has its own, and a machine
	// whose memory caches one image's files must not resume or fork over
	// another's.
	ImageUUID string `json:"image_uuid,omitempty"`
	// Vsock is the virtio-vsock device; none when nil.
	Vsock *Vsock `json:"vsock,omitempty"`
	// Net is the virtio-net NIC; none when nil. Its TAP comes open in
	// SlotTAP: the VMM needs neither /dev/net/tun nor CAP_NET_ADMIN.
	Net *Net `json:"net,omitempty"`
	// LogLevel is the level of the VMM's log on stderr (debug, info, warn,
	// error; "" is info).
	LogLevel string `json:"log_level,omitempty"`
	// Jail confines the process (package jail): Enter before the machine
	// is built, Drop and the seccomp filter before the guest runs.
	Jail *jail.Spec `json:"jail,omitempty"`
	// TestHooks makes SIGUSR2 issue a system call the jail forbids: the
	// trigger of the test that a seccomp violation kills the VMM. The
	// daemon sets it only when it runs with CELLVM_TEST_HOOKS=1.
	TestHooks bool `json:"test_hooks,omitempty"`
	// ConsoleMaxBytes caps the console log on stdout (vmm/consolelog); 0:
	// no cap.
	ConsoleMaxBytes int64 `json:"console_max_bytes,omitempty"`
	// Control is the path of the control socket on which the VMM takes
	// snapshots (control.go); none when empty.
	Control string `json:"control,omitempty"`
	// Restore starts the VM from a snapshot instead of booting Kernel; the
	// devices above must have the snapshot's shape.
	Restore *Restore `json:"restore,omitempty"`
	// Checkpoints makes the VMM log the pages the guest and its devices
	// write (KVM's dirty-page log on every memory slot, and the devices'
	// own writes), so that OpCheckpoint writes only those. Off, nothing
	// is logged and nothing is paid.
	Checkpoints bool `json:"checkpoints,omitempty"`
	// Files maps each slot to the descriptor number its file has in the
	// VMM process. The launcher fills it (Pass); nothing else writes
	// descriptor numbers.
	Files map[string]int `json:"files,omitempty"`
}

// Disk is one virtio-blk disk.
type Disk struct {
	// Path is the file the VMM opens; for a disk passed open, only its
	// name in messages.
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
	// Passed says the disk comes open in slot DiskSlot(i), i its index: a
	// jailed VMM cannot open a writable disk (a workspace) by its path.
	Passed bool `json:"passed,omitempty"`
}

// Vsock is the virtio-vsock device: the guest's context ID and the host
// Unix socket speaking Firecracker's protocol.
type Vsock struct {
	CID uint64 `json:"cid"`
	UDS string `json:"uds"`
}

// Net is the virtio-net NIC.
type Net struct {
	// MAC is the guest NIC's address, aa:bb:cc:dd:ee:ff. A restored NIC
	// keeps the snapshot's: the guest's driver read it at boot.
	MAC string `json:"mac"`
}

// Restore says the VM starts from a snapshot. Its state and memory files
// come open in SlotRestoreState and SlotRestoreMemory (a jailed VMM's uid
// could not open the daemon's snapshot files, and the descriptors of one
// file shared by many forks are what lets them share its pages); the
// machine's shape is in the state file.
type Restore struct {
	// Layers is how many memory files lie under the snapshot's own when
	// its memory is a chain (vmm/snapshot's layers.go): they come open in
	// LayerSlot(0), ... base first, as its state file names them. At most
	// snapshot.MaxCheckpointChain-1 (a checkpoint chain; a pause chain
	// is at most snapshot.MaxLayers files).
	Layers int `json:"layers,omitempty"`
	// Prefetch is the snapshot's recorded working set (vmm/snapshot's
	// workingset.go), which the daemon checked is its memory file's: the
	// VMM reads those extents of the image ahead before the first vCPU
	// runs.
	Prefetch []snapshot.Extent `json:"prefetch,omitempty"`
}

// maxSpecBytes bounds a spec file.
const maxSpecBytes = 1 << 20

// Validate checks a spec before anything is done with it: a kernel or a
// snapshot to start from, a sane shape, devices that name what they need,
// a known log level, a valid jail, and descriptors that can be ones a
// launcher passed (above stdio, each once, in known slots).
func (s Spec) Validate() error {
	if s.Kernel == "" && s.Restore == nil {
		return errors.New("vmm spec: no kernel to boot and no snapshot to restore")
	}
	if s.VCPUs < 0 {
		return fmt.Errorf("vmm spec: %d vCPUs", s.VCPUs)
	}
	if s.MemoryMiB > 1<<20 {
		return fmt.Errorf("vmm spec: %d MiB of memory: at most 1 TiB", s.MemoryMiB)
	}
	for i, d := range s.Disks {
		if d.Path == "" {
			return fmt.Errorf("vmm spec: disk %d has no path or name", i)
		}
	}
	if v := s.Vsock; v != nil && (v.CID < 3 || v.CID > 0xffffffff || v.UDS == "") {
		return fmt.Errorf("vmm spec: vsock CID %d on %q: want a CID from 3 to 2^32-1 and a socket path", v.CID, v.UDS)
	}
	if s.Net != nil {
		if _, err := s.Net.HardwareAddr(); err != nil {
			return fmt.Errorf("vmm spec: %w", err)
		}
	}
	if _, err := s.Level(); err != nil {
		return fmt.Errorf("vmm spec: %w", err)
	}
	if r := s.Restore; r != nil && (r.Layers < 0 || r.Layers >= snapshot.MaxCheckpointChain) {
		return fmt.Errorf("vmm spec: a snapshot's memory in %d layers over a base: at most %d files in all", r.Layers, snapshot.MaxCheckpointChain)
	}
	if r := s.Restore; r != nil {
		// The machine's size is the state file's: bound by the largest.
		if err := snapshot.ValidateExtents(r.Prefetch, 1<<40); err != nil {
			return fmt.Errorf("vmm spec: prefetch: %w", err)
		}
	}
	if s.ConsoleMaxBytes < 0 {
		return fmt.Errorf("vmm spec: console cap of %d bytes", s.ConsoleMaxBytes)
	}
	if s.Jail != nil {
		if err := s.Jail.Validate(); err != nil {
			return fmt.Errorf("vmm spec: %w", err)
		}
	}
	seen := map[int]string{}
	for slot, fd := range s.Files {
		if !s.knownSlot(slot) {
			return fmt.Errorf("vmm spec: file slot %q is not one this spec has", slot)
		}
		if fd < 3 {
			return fmt.Errorf("vmm spec: slot %s: descriptor %d is not one a launcher passes (3 and up)", slot, fd)
		}
		if other, dup := seen[fd]; dup {
			return fmt.Errorf("vmm spec: slots %s and %s share descriptor %d", other, slot, fd)
		}
		seen[fd] = slot
	}
	return nil
}

// HardwareAddr is the NIC's MAC address.
func (n Net) HardwareAddr() ([6]byte, error) {
	var mac [6]byte
	a, err := net.ParseMAC(n.MAC)
	if err != nil || len(a) != 6 {
		return mac, fmt.Errorf("NIC MAC %q: want six bytes, aa:bb:cc:dd:ee:ff", n.MAC)
	}
	copy(mac[:], a)
	return mac, nil
}

// Level is the spec's log level.
func (s Spec) Level() (slog.Level, error) {
	var l slog.Level
	if s.LogLevel == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(strings.ToUpper(s.LogLevel))); err != nil {
		return l, fmt.Errorf("log level %q: want debug, info, warn or error", s.LogLevel)
	}
	return l, nil
}

// WriteSpec writes s to path as the VMM reads it (Load).
func WriteSpec(path string, s Spec) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write vmm spec: %w", err)
	}
	return nil
}

// ReadSpec reads the spec at path as written, without checking it: the
// daemon's look at a VMM it started (or an earlier daemon did), whose
// spec may have fields this one does not know.
func ReadSpec(path string) (Spec, error) {
	var s Spec
	b, err := readBounded(path, maxSpecBytes)
	if err != nil {
		return s, fmt.Errorf("read vmm spec: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("parse vmm spec %s: %w", path, err)
	}
	return s, nil
}

// Load is the VMM process's side: it reads the spec at path strictly (a
// field it does not know is an error), validates it, and takes over the
// files its launcher passed in its slots. Nothing else happens before it.
func Load(path string) (Spec, Files, error) {
	var s Spec
	b, err := readBounded(path, maxSpecBytes)
	if err != nil {
		return s, nil, fmt.Errorf("read vmm spec: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&s); err != nil {
		return s, nil, fmt.Errorf("parse vmm spec %s: %w", path, err)
	}
	if err := s.Validate(); err != nil {
		return s, nil, err
	}
	files, err := s.inherit()
	if err != nil {
		return s, nil, err
	}
	if err := s.CheckFiles(files); err != nil {
		files.Close()
		return s, nil, err
	}
	return s, files, nil
}

// readBounded reads a file of at most max bytes.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return b, nil
}
