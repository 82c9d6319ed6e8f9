package net

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenTAP attaches to (or creates) the TAP interface name as a virtio-net
// backend: IFF_TAP|IFF_NO_PI|IFF_VNET_HDR with a 12-byte vnet header. The
// file is non-blocking under the Go poller, so Close interrupts a Read.
func OpenTAP(name string) (*os.File, error) {
	f, err := os.OpenFile("/dev/net/tun", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("TAP name %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	var ioErr error
	err = rc.Control(func(fd uintptr) {
		if ioErr = unix.IoctlIfreq(int(fd), unix.TUNSETIFF, ifr); ioErr != nil {
			ioErr = fmt.Errorf("TUNSETIFF %s: %w", name, ioErr)
			return
		}
		if ioErr = unix.IoctlSetPointerInt(int(fd), unix.TUNSETVNETHDRSZ, HeaderLen); ioErr != nil {
			ioErr = fmt.Errorf("TUNSETVNETHDRSZ: %w", ioErr)
		}
	})
	if err == nil {
		err = ioErr
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
