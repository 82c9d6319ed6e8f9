package agent

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// openPTY opens a terminal pair of the given size. The peer is opened
// from the master (TIOCGPTPEER), not by its /dev/pts path: in the guest
// devpts is a new instance, and a path could name another one's.
func openPTY(size proto.PTYSize) (master, slave *os.File, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if mfd, err = unix.Open("/dev/pts/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0); err != nil {
			return nil, nil, fmt.Errorf("open a terminal: %w", err)
		}
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(mfd)
		return nil, nil, fmt.Errorf("unlock the terminal: %w", err)
	}
	sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		unix.Close(mfd)
		return nil, nil, fmt.Errorf("open the terminal's peer: %w", errno)
	}
	if err := setWinsize(mfd, size); err != nil {
		unix.Close(mfd)
		unix.Close(int(sfd))
		return nil, nil, err
	}
	// The master is non-blocking, so os.NewFile puts it in the poller:
	// reads and writes then honour deadlines.
	return os.NewFile(uintptr(mfd), "ptmx"), os.NewFile(sfd, "pts"), nil
}

func setWinsize(fd int, size proto.PTYSize) error {
	ws := &unix.Winsize{Row: uint16(size.Rows), Col: uint16(size.Cols)}
	if err := unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, ws); err != nil {
		return fmt.Errorf("set the terminal's size: %w", err)
	}
	return nil
}

// resize sets the terminal's size; the kernel sends the foreground group
// SIGWINCH.
func (p *gproc) resize(size proto.PTYSize) error {
	if p.pty == nil {
		return errProcNoPTY
	}
	rc, err := p.pty.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = setWinsize(int(fd), size) }); err != nil {
		return err
	}
	return serr
}
