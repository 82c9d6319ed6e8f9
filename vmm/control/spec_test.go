package control

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/jail"
)

// goodSpec is a spec of every part: a booted machine with a passed disk,
// vsock, a NIC and a jail.
func goodSpec() Spec {
	return Spec{
		Kernel: "/kernel", Cmdline: "console=ttyS0", VCPUs: 2, MemoryMiB: 512,
		Disks: []Disk{{Path: "/rootfs.ext4", ReadOnly: true}, {Path: "workspace notes", Passed: true}},
		Vsock: &Vsock{CID: 3, UDS: "/run/vsock.sock"}, Net: &Net{MAC: "06:00:ac:10:00:02"},
		LogLevel: "debug", Control: "/run/control.sock",
		Jail: &jail.Spec{Root: "/srv/jail", UID: 1000, GID: 1000, Limits: jail.Rlimits{NoFile: 1, NProc: 1, FSize: 1}},
	}
}

// TestSpecValidate: each kind of mistake is refused with a message that
// names it, before anything is done with the spec.
func TestSpecValidate(t *testing.T) {
	if err := goodSpec().Validate(); err != nil {
		t.Fatalf("a good spec: %v", err)
	}
	restore := Spec{Restore: &Restore{}}
	if err := restore.Validate(); err != nil {
		t.Fatalf("a restore needs no kernel: %v", err)
	}
	for name, c := range map[string]struct {
		edit func(*Spec)
		want string
	}{
		"no kernel":       {func(s *Spec) { s.Kernel = "" }, "no kernel"},
		"negative vcpus":  {func(s *Spec) { s.VCPUs = -1 }, "vCPUs"},
		"huge memory":     {func(s *Spec) { s.MemoryMiB = 1<<20 + 1 }, "1 TiB"},
		"unnamed disk":    {func(s *Spec) { s.Disks[1].Path = "" }, "disk 1"},
		"host CID":        {func(s *Spec) { s.Vsock.CID = 2 }, "CID"},
		"wide CID":        {func(s *Spec) { s.Vsock.CID = 1 << 32 }, "CID"},
		"no vsock socket": {func(s *Spec) { s.Vsock.UDS = "" }, "socket path"},
		"bad MAC":         {func(s *Spec) { s.Net.MAC = "06:00:ac" }, "MAC"},
		"long MAC":        {func(s *Spec) { s.Net.MAC = "00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01" }, "MAC"},
		"log level":       {func(s *Spec) { s.LogLevel = "loud" }, "log level"},
		"console cap":     {func(s *Spec) { s.ConsoleMaxBytes = -1 }, "console cap"},
		"root jail":       {func(s *Spec) { s.Jail.UID = 0 }, "unprivileged"},
		"stdio slot":      {func(s *Spec) { s.Files = map[string]int{SlotTAP: 1} }, "descriptor 1"},
		"shared fd":       {func(s *Spec) { s.Files = map[string]int{SlotTAP: 3, DiskSlot(1): 3} }, "share descriptor 3"},
		"unknown slot":    {func(s *Spec) { s.Files = map[string]int{"keys": 3} }, `"keys"`},
		"unpassed disk":   {func(s *Spec) { s.Files = map[string]int{DiskSlot(0): 3} }, `"disk.0"`},
		"restore slot":    {func(s *Spec) { s.Files = map[string]int{SlotRestoreState: 3} }, `"restore.state"`},
	} {
		s := goodSpec()
		c.edit(&s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate = %v, want an error saying %q", name, err, c.want)
		}
	}
}

// TestSlots: a spec needs the slots of what it has, and Pass gives each
// file a descriptor from 3 in the order of the list it returns.
func TestSlots(t *testing.T) {
	s := goodSpec()
	s.Restore = &Restore{}
	want := []string{"disk.1", "restore.memory", "restore.state", "tap"}
	if got := s.Slots(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Slots = %v, want %v", got, want)
	}
	files := Files{}
	for _, slot := range append(want, SlotEnd) {
		files[slot] = os.NewFile(uintptr(100+len(files)), slot) // never used as a descriptor
	}
	extra, err := s.Pass(files)
	if err != nil {
		t.Fatal(err)
	}
	if len(extra) != len(files) || len(s.Files) != len(files) {
		t.Fatalf("Pass: %d files, %d slots recorded, want %d", len(extra), len(s.Files), len(files))
	}
	for slot, fd := range s.Files {
		if extra[fd-3] != files[slot] {
			t.Errorf("slot %s got descriptor %d, which is another slot's file", slot, fd)
		}
	}
	if err := s.Validate(); err != nil {
		t.Errorf("the passed spec: %v", err)
	}
	delete(files, SlotTAP)
	if _, err := s.Pass(files); err == nil || !strings.Contains(err.Error(), "slot tap has no file") {
		t.Errorf("Pass without the TAP: %v", err)
	}
	files["disk.0"] = files["disk.1"]
	files[SlotTAP] = files["disk.1"]
	if _, err := s.Pass(files); err == nil || !strings.Contains(err.Error(), `"disk.0"`) {
		t.Errorf("Pass with a file for an unpassed disk: %v", err)
	}
}

// writeSpec writes s (as a launcher does) and returns its path.
func writeSpec(t *testing.T, s Spec) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vmm.json")
	if err := WriteSpec(p, s); err != nil {
		t.Fatal(err)
	}
	return p
}

// dup is a descriptor of f's file that Load may take over. One that a
// failing Load leaves is left open: closing it later could close a
// descriptor the number was reused for.
func dup(t *testing.T, f *os.File) int {
	t.Helper()
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestLoadTakesSlots: Load gives each slot's descriptor as an open file,
// a disk named by its path; a descriptor that is closed, or not of its
// slot's kind, is refused with a message naming the slot.
func TestLoadTakesSlots(t *testing.T) {
	disk, err := os.Create(filepath.Join(t.TempDir(), "ws.ext4"))
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()

	s := goodSpec()
	s.Jail = nil
	s.Files = map[string]int{DiskSlot(1): dup(t, disk), SlotTAP: dup(t, null)}
	got, files, err := Load(writeSpec(t, s))
	if err != nil {
		t.Fatal(err)
	}
	defer files.Close()
	if len(files) != 2 || files[DiskSlot(1)].Name() != "workspace notes" || files[SlotTAP] == nil || got.Disks[1].Path != "workspace notes" {
		t.Fatalf("Load = %+v, files %v", got, files)
	}
	var a, b unix.Stat_t
	unix.Fstat(int(disk.Fd()), &a)
	unix.Fstat(int(files[DiskSlot(1)].Fd()), &b)
	if a.Ino != b.Ino || a.Dev != b.Dev {
		t.Error("the disk's slot holds another file")
	}

	for name, c := range map[string]struct {
		files map[string]int
		want  string
	}{
		"a pipe as a disk":    {map[string]int{DiskSlot(1): dup(t, r), SlotTAP: dup(t, null)}, "slot disk.1: descriptor"},
		"a file as the TAP":   {map[string]int{DiskSlot(1): dup(t, disk), SlotTAP: dup(t, disk)}, "not a character device"},
		"a closed descriptor": {map[string]int{DiskSlot(1): 1000, SlotTAP: dup(t, null)}, "not open"},
		"no TAP":              {map[string]int{DiskSlot(1): dup(t, disk)}, "slot tap has no file"},
	} {
		s.Files = c.files
		if _, files, err := Load(writeSpec(t, s)); err == nil || !strings.Contains(err.Error(), c.want) {
			files.Close()
			t.Errorf("%s: Load = %v, want an error saying %q", name, err, c.want)
		}
	}
}

// TestLoadIsStrict: a field the VMM does not know, or a spec that is not
// one, is an error; ReadSpec (the daemon's look) lets the unknown field by.
func TestLoadIsStrict(t *testing.T) {
	p := filepath.Join(t.TempDir(), "vmm.json")
	os.WriteFile(p, []byte(`{"kernel": "/k", "tap_fd": 4}`), 0o600)
	if _, _, err := Load(p); err == nil || !strings.Contains(err.Error(), "tap_fd") {
		t.Errorf("Load of an unknown field: %v", err)
	}
	if s, err := ReadSpec(p); err != nil || s.Kernel != "/k" {
		t.Errorf("ReadSpec = %+v, %v", s, err)
	}
	os.WriteFile(p, []byte(`{"kernel": "/k", "vsock": {"CID": 7, "UDS": "/v"}}`), 0o600)
	if s, err := ReadSpec(p); err != nil || s.Vsock == nil || s.Vsock.CID != 7 || s.Vsock.UDS != "/v" {
		t.Errorf("ReadSpec of an earlier daemon's vsock = %+v, %v", s.Vsock, err)
	}
	big, _ := json.Marshal(Spec{Kernel: strings.Repeat("k", maxSpecBytes)})
	os.WriteFile(p, big, 0o600)
	if _, _, err := Load(p); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load of a huge spec: %v", err)
	}
}

// TestArgs: the VMM's command line parses back to its spec's path, and a
// process's cmdline is recognised as that VMM's only when it is.
func TestArgs(t *testing.T) {
	args := Args("/state/sb-1/vmm.json")
	if p, err := ConfigPath(args[1:]); err != nil || p != "/state/sb-1/vmm.json" || args[0] != Command {
		t.Fatalf("Args = %q; ConfigPath = %q, %v", args, p, err)
	}
	for _, bad := range [][]string{nil, {"--config"}, {"--config", ""}, {"--cfg", "x"}, {"--config", "x", "y"}} {
		if _, err := ConfigPath(bad); err == nil {
			t.Errorf("ConfigPath(%q) = nil error", bad)
		}
	}
	cmdline := []byte("/usr/bin/cellvm\x00vmm\x00--config\x00/state/sb-1/vmm.json\x00")
	if !IsVMM(cmdline, "/state/sb-1/vmm.json") {
		t.Error("IsVMM does not know its own process")
	}
	for _, other := range []string{
		"/usr/bin/cellvm\x00vmm\x00--config\x00/state/sb-2/vmm.json\x00",
		"/usr/bin/cellvm\x00serve\x00--config\x00/state/sb-1/vmm.json\x00",
		"/usr/bin/cellvm\x00vmm\x00--config\x00/state/sb-1/vmm.json\x00extra\x00",
		"",
	} {
		if IsVMM([]byte(other), "/state/sb-1/vmm.json") {
			t.Errorf("IsVMM(%q) = true", other)
		}
	}
}
