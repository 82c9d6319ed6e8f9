package engine

import (
	"fmt"
	"os"

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
// The file belongs to the daemon (a snapshot, a paused image), so the
// daemon allocates it (a tmpfs's; an overlay's too, whose upper layer may
// be a tmpfs, as in the nested rig and many containers): it sizes and fallocates the fresh file before the
// VMM gets it, which charges the pages to the daemon. The VMM then writes
// into pages that exist (no new charge) and punches the holes it leaves
// (vmm/memfile.go), which frees them: the file ends as sparse as before.

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
