package build

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The out disk: prepared (a copy of the base grown to the disk and given
// the plan's UUID, or a fresh ext4), mounted for the steps, then
// unmounted, checked and shrunk to its content. A regular file stands in
// for the disk in tests: it is mounted through a loop device that goes
// away with the mount (LO_FLAGS_AUTOCLEAR).

// toolPath is where the builder looks for its own tools (the VM's, not
// the image's).
var toolPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

func tool(name string) (string, error) {
	for _, d := range toolPath {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("the builder needs %s (e2fsprogs), which this VM does not have", name)
}

// runTool runs one of the VM's tools, its output as progress lines; ok
// lists the exit codes that are success.
func runTool(p *progress, ok []int, name string, args ...string) error {
	path, err := tool(name)
	if err != nil {
		return err
	}
	w := &lineWriter{p: p}
	defer w.Close()
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.Env = []string{"PATH=" + strings.Join(toolPath, ":"), "LANG=C"}
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		for _, c := range ok {
			if ee.ExitCode() == c {
				return nil
			}
		}
		return fmt.Errorf("%s %s: exit status %d", name, strings.Join(args, " "), ee.ExitCode())
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// prepareDerive makes the copy of the base ready: checked, grown to the
// disk, with the build's UUID.
func prepareDerive(p *progress, dev, uuid string) error {
	if err := runTool(p, []int{1}, "e2fsck", "-fy", dev); err != nil {
		return fmt.Errorf("the base image's file system: %w", err)
	}
	if err := runTool(p, nil, "resize2fs", dev); err != nil {
		return fmt.Errorf("growing the base image to its disk: %w", err)
	}
	// With metadata_csum this rewrites every checksum (the fs was just
	// checked, as tune2fs wants).
	if err := runTool(p, nil, "tune2fs", "-U", uuid, dev); err != nil {
		return fmt.Errorf("setting the image's UUID: %w", err)
	}
	return nil
}

// prepareLayers makes a fresh ext4 for the layers.
func prepareLayers(p *progress, dev, uuid string) error {
	if err := runTool(p, nil, "mkfs.ext4", "-q", "-F", "-b", "4096", "-m", "0", "-O", "^has_journal",
		"-L", "cellvm-root", "-U", uuid, "-E", "root_owner=0:0", dev); err != nil {
		return fmt.Errorf("making the image's file system: %w", err)
	}
	return nil
}

// mounted is the out disk, mounted.
type mounted struct {
	dev, dir string
}

// mountOut mounts dev (a block device, or a regular file through a loop
// device) on dir.
func mountOut(dev, dir string) (*mounted, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	fi, err := os.Stat(dev)
	if err != nil {
		return nil, fmt.Errorf("the out disk: %w", err)
	}
	src := dev
	loopFd := -1
	if fi.Mode().IsRegular() {
		if src, loopFd, err = attachLoop(dev); err != nil {
			return nil, err
		}
		// Closed after the mount: the loop device then goes with it.
		defer unix.Close(loopFd)
	} else if fi.Mode()&os.ModeDevice == 0 {
		return nil, fmt.Errorf("the out disk %s is neither a block device nor a file", dev)
	}
	if err := unix.Mount(src, dir, "ext4", unix.MS_NODEV|unix.MS_NOATIME, ""); err != nil {
		return nil, fmt.Errorf("mounting the image (%s) on %s: %w", dev, dir, err)
	}
	return &mounted{dev: dev, dir: dir}, nil
}

// unmount syncs and unmounts; a busy mount is retried for a while (a
// step's processes are gone by then; the kernel may lag).
func (m *mounted) unmount() error {
	if m == nil {
		return nil
	}
	unix.Sync()
	var err error
	for i := 0; i < 50; i++ {
		if err = unix.Unmount(m.dir, 0); err == nil || err == unix.EINVAL {
			return nil
		}
		if err != unix.EBUSY {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("unmounting the image: %w", err)
}

// attachLoop attaches file to a free loop device that detaches itself
// when last closed.
func attachLoop(file string) (string, int, error) {
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, fmt.Errorf("loop devices: %w", err)
	}
	defer unix.Close(ctl)
	ffd, err := unix.Open(file, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, err
	}
	defer unix.Close(ffd)
	for i := 0; i < 16; i++ {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", -1, fmt.Errorf("a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		lfd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", -1, fmt.Errorf("%s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(ffd)}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		if err := unix.IoctlLoopConfigure(lfd, &cfg); err != nil {
			unix.Close(lfd)
			if err == unix.EBUSY {
				continue // taken meanwhile
			}
			return "", -1, fmt.Errorf("%s: %w", dev, err)
		}
		return dev, lfd, nil
	}
	return "", -1, errors.New("no free loop device")
}

// finalize checks the unmounted image and shrinks it to its content; it
// returns the file system's size in bytes.
func finalize(p *progress, dev, uuid string) (int64, error) {
	if err := runTool(p, []int{1}, "e2fsck", "-fy", dev); err != nil {
		return 0, fmt.Errorf("checking the image: %w", err)
	}
	if err := runTool(p, nil, "resize2fs", "-M", dev); err != nil {
		return 0, fmt.Errorf("shrinking the image: %w", err)
	}
	if err := runTool(p, []int{1}, "e2fsck", "-fy", dev); err != nil {
		return 0, fmt.Errorf("checking the shrunk image: %w", err)
	}
	sb, err := readSuper(dev)
	if err != nil {
		return 0, err
	}
	if sb.uuid != uuid {
		return 0, fmt.Errorf("the image's UUID is %s, not %s", sb.uuid, uuid)
	}
	return sb.size(), nil
}

// super is what the builder reads of an ext4 superblock.
type super struct {
	blocks    uint64
	blockSize uint64
	uuid      string
}

func (s super) size() int64 { return int64(s.blocks * s.blockSize) }

// readSuper reads the ext4 superblock of dev (at byte 1024).
func readSuper(dev string) (super, error) {
	var s super
	f, err := os.Open(dev)
	if err != nil {
		return s, err
	}
	defer f.Close()
	b := make([]byte, 1024)
	if _, err := f.ReadAt(b, 1024); err != nil {
		return s, fmt.Errorf("reading the image's superblock: %w", err)
	}
	return parseSuper(b)
}

func parseSuper(b []byte) (super, error) {
	var s super
	le := binary.LittleEndian
	if len(b) < 1024 || le.Uint16(b[0x38:]) != 0xef53 {
		return s, errors.New("the image has no ext4 superblock")
	}
	logBS := le.Uint32(b[0x18:])
	if logBS > 6 {
		return s, fmt.Errorf("ext4 block size 2^%d KiB", logBS)
	}
	s.blockSize = 1024 << logBS
	s.blocks = uint64(le.Uint32(b[0x4:]))
	if le.Uint32(b[0x60:])&0x80 != 0 { // INCOMPAT_64BIT
		s.blocks |= uint64(le.Uint32(b[0x150:])) << 32
	}
	u := b[0x68:0x78]
	s.uuid = fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	return s, nil
}
