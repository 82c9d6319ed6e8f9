package rootfs

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"time"

	"golang.org/x/sys/unix"
)

// Sys is the system calls the plan needs; System is the real one, and
// tests record the calls instead.
type Sys interface {
	Mount(source, target, fstype string, flags uintptr, data string) error
	MkdirAll(path string, mode os.FileMode) error
	Chdir(path string) error
	Chroot(path string) error
	// WaitDevice waits until a block device node exists.
	WaitDevice(path string, timeout time.Duration) error
}

// System is Sys on the running kernel.
type System struct{}

func (System) Mount(source, target, fstype string, flags uintptr, data string) error {
	return unix.Mount(source, target, fstype, flags, data)
}
func (System) MkdirAll(p string, mode os.FileMode) error { return os.MkdirAll(p, mode) }
func (System) Chdir(p string) error                      { return unix.Chdir(p) }
func (System) Chroot(p string) error                     { return unix.Chroot(p) }
func (System) WaitDevice(p string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		_, err := os.Stat(p)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ErrNoRoot says the root image could not be mounted; the init then keeps
// the initramfs as its root.
var ErrNoRoot = errors.New("root image not mounted")

func mountOne(sys Sys, log *slog.Logger, m Mount) error {
	if err := sys.MkdirAll(m.Target, m.Mode|0o700); err != nil && !m.Optional {
		return fmt.Errorf("mkdir %s: %w", m.Target, err)
	}
	err := sys.Mount(m.Source, m.Target, m.FSType, m.Flags, m.Data)
	if err != nil && m.AllowBusy && errors.Is(err, unix.EBUSY) {
		err = nil
	}
	if err != nil {
		err = fmt.Errorf("mount %s (%s) on %s: %w", m.Source, m.FSType, m.Target, err)
		if m.Optional {
			log.Warn("optional mount failed", "err", err)
			return nil
		}
		return err
	}
	return nil
}

// ApplyEarly makes the Early mounts.
func (p Plan) ApplyEarly(sys Sys, log *slog.Logger) error {
	for _, m := range p.Early {
		if err := mountOne(sys, log, m); err != nil {
			return err
		}
	}
	return nil
}

// SwitchRoot builds the overlay root, moves the early mounts into it and
// makes it the root of the calling process (and its children). On failure
// before the switch it returns an error wrapping ErrNoRoot, and the
// initramfs stays root.
func (p Plan) SwitchRoot(sys Sys, log *slog.Logger) error {
	if len(p.Root) == 0 {
		return nil
	}
	if err := sys.WaitDevice(p.Root[0].Source, time.Second); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNoRoot, p.Root[0].Source, err)
	}
	for i, m := range p.Root {
		if i == len(p.Root)-1 {
			for _, d := range p.StageDirs {
				if err := sys.MkdirAll(d.Path, d.Mode); err != nil {
					return fmt.Errorf("%w: mkdir %s: %v", ErrNoRoot, d.Path, err)
				}
			}
		}
		if err := mountOne(sys, log, m); err != nil {
			return fmt.Errorf("%w: %v", ErrNoRoot, err)
		}
	}
	root := p.Root[len(p.Root)-1].Target
	for _, src := range p.Move {
		dst := path.Join(root, src)
		if err := sys.MkdirAll(dst, 0o755); err != nil {
			return fmt.Errorf("mkdir %s: %w", dst, err)
		}
		if err := sys.Mount(src, dst, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move %s to %s: %w", src, dst, err)
		}
	}
	// switch_root: the new root's mount replaces "/" for this process.
	if err := sys.Chdir(root); err != nil {
		return fmt.Errorf("chdir %s: %w", root, err)
	}
	if err := sys.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move %s to /: %w", root, err)
	}
	if err := sys.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	if err := sys.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	return nil
}

// ApplyLate makes the Late mounts and Dirs in the final root.
func (p Plan) ApplyLate(sys Sys, log *slog.Logger) error {
	for _, m := range p.Late {
		if err := mountOne(sys, log, m); err != nil {
			return err
		}
	}
	for _, d := range p.Dirs {
		if err := sys.MkdirAll(d.Path, d.Mode); err != nil {
			return fmt.Errorf("mkdir %s: %w", d.Path, err)
		}
	}
	return nil
}
