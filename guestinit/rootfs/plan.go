// Package rootfs is the guest's file system layout: the mount plan, kept
// as data so it can be checked without mounting anything, and the code
// that carries it out as PID 1.
//
// The root image is a read-only ext4 file system shared by every VM; each
// VM gets its own writable layer, a tmpfs, joined to it by overlayfs, so a
// sandbox can change anything while the image stays pristine. The init
// starts in the initramfs, where pivot_root is not allowed (the rootfs
// cannot be unmounted), so it switches root the way switch_root does:
// move the new root's mount onto "/" and chroot into it.
package rootfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// Where the pieces of the root are mounted inside the initramfs before
// the switch.
const (
	Stage     = "/cellvm"
	LowerDir  = Stage + "/lower" // the read-only image
	RWDir     = Stage + "/rw"    // the tmpfs holding upper and work
	UpperDir  = RWDir + "/upper"
	WorkDir   = RWDir + "/work"
	NewRoot   = Stage + "/root" // the overlay
	Workspace = "/workspace"
)

// Mount is one mount(2) call.
type Mount struct {
	Source, Target, FSType string
	Flags                  uintptr
	Data                   string
	// Mode is the mode of Target when it has to be created (and of the
	// mount's root for tmpfs, through Data).
	Mode os.FileMode
	// Optional mounts are logged when they fail; the others stop the plan.
	Optional bool
	// AllowBusy treats EBUSY (already mounted, as devtmpfs may be) as
	// success.
	AllowBusy bool
}

// Dir is a directory to create in the final root.
type Dir struct {
	Path string
	Mode os.FileMode
}

// Plan is the whole layout, in order.
type Plan struct {
	// Early mounts are made in the initramfs: the kernel interfaces, which
	// the root switch then moves into the new root.
	Early []Mount
	// Root mounts build the new root: the image, the tmpfs for the
	// writable layer, the overlay. Empty when the initramfs stays root.
	Root []Mount
	// Dirs are created between Root and the overlay mount (upper, work).
	StageDirs []Dir
	// Move lists the Early mount points moved into the new root.
	Move []string
	// Late mounts are made in the final root.
	Late []Mount
	// Dirs are created in the final root.
	Dirs []Dir
}

const (
	nosuidNodevNoexec = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
)

// Sizes of the tmpfs mounts. Every tmpfs is sized (its default is half the
// memory, each): a cell that fills one gets ENOSPC there instead of
// pressing on the memory the init and the agent need, and /run, which
// only root writes (the interpreter's driver lives there), cannot be
// filled by a cell at all. The guest's memory cgroup charges what a cell
// writes to it as well, so together they stay within the cells' budget.
const (
	SizeRW  = "50%" // the overlay's writable layer: /workspace, /home, /var
	SizeTmp = "25%"
	SizeShm = "25%"
	SizeRun = "16m"
)

// WithWorkspace returns p with the persistent volume on device dev
// mounted at /workspace, after /run and /tmp. Not optional: a sandbox
// asked for its files, so a volume that does not mount (one a guest
// damaged) stops the boot, and the create says why, rather than a
// sandbox whose /workspace is silently empty. Its root's owner is set
// afterwards, like the directory's (celluser.Ensure).
func (p Plan) WithWorkspace(dev string) Plan {
	p.Late = append(append([]Mount(nil), p.Late...), Mount{
		Source: dev, Target: Workspace, FSType: "ext4", Flags: unix.MS_NOSUID | unix.MS_NODEV, Mode: 0o755,
	})
	return p
}

// NewPlan returns the plan for a root image on device rootDev, or for
// staying in the initramfs when rootDev is "none".
func NewPlan(rootDev string) Plan {
	p := Plan{
		Early: []Mount{
			{Source: "proc", Target: "/proc", FSType: "proc", Flags: nosuidNodevNoexec, Mode: 0o555},
			{Source: "sysfs", Target: "/sys", FSType: "sysfs", Flags: nosuidNodevNoexec, Mode: 0o555},
			{Source: "devtmpfs", Target: "/dev", FSType: "devtmpfs", Flags: unix.MS_NOSUID, Data: "mode=0755", Mode: 0o755, AllowBusy: true},
			{Source: "devpts", Target: "/dev/pts", FSType: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC, Data: "newinstance,ptmxmode=0666,mode=0620", Mode: 0o755, Optional: true},
			{Source: "shm", Target: "/dev/shm", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=1777,size=" + SizeShm, Mode: 0o1777, Optional: true},
			{Source: "cgroup2", Target: "/sys/fs/cgroup", FSType: "cgroup2", Flags: nosuidNodevNoexec, Mode: 0o555, Optional: true},
		},
		Late: []Mount{
			{Source: "run", Target: "/run", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=0755,size=" + SizeRun, Mode: 0o755},
			{Source: "tmp", Target: "/tmp", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=1777,size=" + SizeTmp, Mode: 0o1777},
		},
		Dirs: []Dir{{Path: Workspace, Mode: 0o755}},
	}
	if rootDev == "none" {
		return p
	}
	p.Root = []Mount{
		{Source: rootDev, Target: LowerDir, FSType: "ext4", Flags: unix.MS_RDONLY | unix.MS_NODEV, Data: "noload", Mode: 0o755},
		{Source: "cellvm-rw", Target: RWDir, FSType: "tmpfs", Flags: unix.MS_NODEV, Data: "mode=0755,size=" + SizeRW, Mode: 0o755},
		{Source: "overlay", Target: NewRoot, FSType: "overlay", Flags: unix.MS_NODEV,
			Data: "lowerdir=" + LowerDir + ",upperdir=" + UpperDir + ",workdir=" + WorkDir, Mode: 0o755},
	}
	p.StageDirs = []Dir{{Path: UpperDir, Mode: 0o755}, {Path: WorkDir, Mode: 0o755}}
	p.Move = []string{"/dev", "/proc", "/sys"}
	return p
}
