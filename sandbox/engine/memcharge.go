package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/vmm/snapshot"
)

// A memory file on a tmpfs is RAM, and the kernel charges a tmpfs page to
// the memory cgroup of the process that first allocates it. The VMM
// writes its memory file itself, so on a tmpfs state directory a save
// would charge a second copy of the guest's touched memory to the VMM's
// cgroup (the guest's size plus a small overhead): a guest that touched
// most of its memory (a memory bomb it survived, a large DataFrame) had
// its VMM killed by its own cgroup mid-save, and the sandbox lost, where
// the same save on a disk's page cache is merely reclaimed.
//
// The file belongs to the daemon (a snapshot, a paused image), so, where
// the VMM's cgroup could not pay for it (needPrealloc), the daemon
// allocates it (a tmpfs's; an overlay's too, whose upper layer may be a
// tmpfs, as in the nested rig and many containers): it sizes and
// fallocates the fresh file before the VMM gets it, which charges the
// pages to the daemon. The VMM then writes into pages that exist (no new
// charge) and punches the holes it leaves (vmm/memfile.go), which frees
// them: the file ends as sparse as before.

// overlayfsMagic is an overlay file system's statfs type. What it stores
// lives on its upper layer, which statfs does not name: a container's
// root, or the rig's, whose upper layer is a tmpfs.
const overlayfsMagic = 0x794c7630

// preallocateMemory fallocates mem, a fresh memory file for a guest of
// memMiB, when it may live in RAM (a tmpfs, or an overlay, whose upper
// layer may be one), and reports whether it did. On a disk it does
// nothing: page cache is reclaimable, and preallocating blocks would cost
// disk for nothing. (On an overlay over a disk it costs the file's blocks
// until the VMM punches its holes.)
func preallocateMemory(mem *os.File, memMiB int) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(mem.Fd()), &st); err != nil {
		return false, fmt.Errorf("statfs the memory file: %w", err)
	}
	if t := uint32(st.Type); t != tmpfsMagic && t != overlayfsMagic {
		return false, nil
	}
	var size int64
	for _, r := range snapshot.MemoryLayout(uint64(memMiB)) {
		size += int64(r.Size)
	}
	if err := unix.Fallocate(int(mem.Fd()), 0, 0, size); err != nil {
		return false, fmt.Errorf("fallocate the memory file (%d MiB) on the tmpfs: %w", size>>20, err)
	}
	return true, nil
}

// needPrealloc says whether a save of the VMM in cgroupDir (its memory
// cgroup; "" when it has none) should have its memory file preallocated.
// Preallocating a tmpfs file zeroes every page of the guest's size, most
// of which the VMM then punches out again: seconds under nested
// emulation, so it is done only where it is needed.
//   - A save after which the VM goes on (a snapshot) always: the file's
//     pages would stay charged to the running VM's cgroup, and the guest
//     would lose that much of its room.
//   - A pause (the VMM exits after its save, and its charges go to the
//     parent cgroup) only when the cgroup cannot hold a second copy of
//     what it holds now: the file is at most the guest's touched pages.
func needPrealloc(cgroupDir string, vmGoesOn bool) bool {
	if cgroupDir == "" {
		return false // no cgroup, no limit to meet
	}
	if vmGoesOn {
		return true
	}
	current, err1 := readCgroupInt(filepath.Join(cgroupDir, "memory.current"))
	limit, err2 := readCgroupInt(filepath.Join(cgroupDir, "memory.max"))
	if err1 != nil || err2 != nil {
		return true // unknown: the safe side
	}
	if limit < 0 {
		return false // "max": no limit
	}
	return 2*current > limit
}

// readCgroupInt reads a cgroup file holding one number, or "max" (-1).
func readCgroupInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v := strings.TrimSpace(string(b))
	if v == "max" {
		return -1, nil
	}
	return strconv.ParseInt(v, 10, 64)
}
