package control

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// The slots a VMM's files come in. A spec says which it needs (Slots);
// the launcher fills Spec.Files with the descriptor each has (Pass), and
// the VMM takes them by name (Load), never by a descriptor number
// computed at a call site.
const (
	// SlotTAP is the NIC's TAP (Spec.Net), opened and attached by the
	// launcher.
	SlotTAP = "tap"
	// SlotRestoreState and SlotRestoreMemory are the snapshot's files
	// (Spec.Restore), open for reading.
	SlotRestoreState  = "restore.state"
	SlotRestoreMemory = "restore.memory"
	// SlotEnd is where the VMM writes its End report as it exits (end.go);
	// optional. A jailed VMM cannot open a file, so it is handed one.
	SlotEnd = "end"
)

// LayerSlot is the slot of memory file i under a restored snapshot's own
// (Restore.Layers), base first.
func LayerSlot(i int) string { return "restore.layer." + strconv.Itoa(i) }

// DiskSlot is the slot of disk i of Spec.Disks, when it is Passed.
func DiskSlot(i int) string { return "disk." + strconv.Itoa(i) }

// Files are a VMM's open files by slot. Whoever builds the machine owns
// them; Close closes those it did not hand on.
type Files map[string]*os.File

// Close closes every file and empties f.
func (f Files) Close() {
	for slot, file := range f {
		file.Close()
		delete(f, slot)
	}
}

// Slots are the slots s needs filled, sorted: a Passed disk's, the TAP
// for a NIC, the snapshot's two for a restore. SlotEnd may be filled too.
func (s Spec) Slots() []string {
	var out []string
	for i, d := range s.Disks {
		if d.Passed {
			out = append(out, DiskSlot(i))
		}
	}
	if s.Net != nil {
		out = append(out, SlotTAP)
	}
	if s.Restore != nil {
		out = append(out, SlotRestoreState, SlotRestoreMemory)
		for i := range max(s.Restore.Layers, 0) {
			out = append(out, LayerSlot(i))
		}
	}
	slices.Sort(out)
	return out
}

// knownSlot reports whether slot is one s needs, or SlotEnd.
func (s Spec) knownSlot(slot string) bool {
	return slot == SlotEnd || slices.Contains(s.Slots(), slot)
}

// CheckFiles checks that files fill exactly the slots s needs, and maybe
// SlotEnd.
func (s Spec) CheckFiles(files Files) error {
	for _, slot := range s.Slots() {
		if files[slot] == nil {
			return fmt.Errorf("vmm spec: slot %s has no file", slot)
		}
	}
	for slot := range files {
		if !s.knownSlot(slot) {
			return fmt.Errorf("vmm spec: a file in slot %q, which this spec does not have", slot)
		}
	}
	return nil
}

// Pass is the launcher's side: it gives each file the descriptor it will
// have in the VMM process (3, 4, ... in the order of the returned list,
// which is exec.Cmd.ExtraFiles) and records them in s.Files. The files
// stay the caller's, to close once the process has started.
func (s *Spec) Pass(files Files) ([]*os.File, error) {
	if err := s.CheckFiles(files); err != nil {
		return nil, err
	}
	slots := make([]string, 0, len(files))
	for slot := range files {
		slots = append(slots, slot)
	}
	slices.Sort(slots)
	s.Files = make(map[string]int, len(slots))
	extra := make([]*os.File, len(slots))
	for i, slot := range slots {
		s.Files[slot] = 3 + i
		extra[i] = files[slot]
	}
	return extra, nil
}

// inherit takes over the descriptors s.Files names: each must be open and
// of its slot's kind (checkSlotFD).
func (s Spec) inherit() (Files, error) {
	files := Files{}
	slots := make([]string, 0, len(s.Files))
	for slot := range s.Files {
		slots = append(slots, slot)
	}
	slices.Sort(slots)
	for _, slot := range slots {
		fd := s.Files[slot]
		if err := s.checkSlotFD(slot, fd); err != nil {
			files.Close()
			return nil, err
		}
		files[slot] = os.NewFile(uintptr(fd), s.slotName(slot))
	}
	return files, nil
}

// checkSlotFD checks that descriptor fd is open and of slot's kind (a
// regular file, or a character device for the TAP). The TAP is made
// non-blocking before it becomes an *os.File, so that Go's poller serves
// it and Close interrupts a read.
func (s Spec) checkSlotFD(slot string, fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("vmm spec: slot %s: descriptor %d is not open (%v)", slot, fd, err)
	}
	want, kind := uint32(unix.S_IFREG), "a regular file"
	if slot == SlotTAP {
		want, kind = unix.S_IFCHR, "a character device"
	}
	if st.Mode&unix.S_IFMT != want {
		return fmt.Errorf("vmm spec: slot %s: descriptor %d is not %s", slot, fd, kind)
	}
	if slot == SlotTAP {
		if err := unix.SetNonblock(fd, true); err != nil {
			return fmt.Errorf("vmm spec: slot %s: %w", slot, err)
		}
	}
	return nil
}

// slotName names a slot's file in messages: a disk by its Path.
func (s Spec) slotName(slot string) string {
	for i, d := range s.Disks {
		if DiskSlot(i) == slot {
			return d.Path
		}
	}
	return slot
}

// The VMM process's command line is `cellvm-vmm vmm --config FILE` (or
// cellvm's own binary in cellvm-vmm's place). A
// restarted daemon does not find its VMMs by it (a VMM can rewrite its
// own argv) but by what it recorded of them: pid, start time, cgroup.
// IsVMM is for tests and tools that look at a process.
const (
	// Command is the cellvm subcommand that runs a VMM process.
	Command   = "vmm"
	configArg = "--config"
)

// Args are the arguments after the binary of the VMM process for the
// spec at path.
func Args(path string) []string { return []string{Command, configArg, path} }

// ConfigPath parses the VMM command's arguments after Command.
func ConfigPath(args []string) (string, error) {
	if len(args) != 2 || args[0] != configArg || args[1] == "" {
		return "", errors.New("usage: cellvm vmm --config FILE")
	}
	return args[1], nil
}

// IsVMM reports whether cmdline (a /proc/PID/cmdline: NUL-separated, the
// binary first) is that of the VMM process for the spec at path.
func IsVMM(cmdline []byte, path string) bool {
	args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
	return len(args) == 4 && string(args[1]) == Command && string(args[2]) == configArg && string(args[3]) == path
}
