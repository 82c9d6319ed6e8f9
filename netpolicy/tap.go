package netpolicy

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	vnet "github.com/cellvm/cellvm/virtio/net"
)

// OpenTAP attaches to (or creates) the TAP interface name as a virtio-net
// backend: IFF_TAP|IFF_NO_PI|IFF_VNET_HDR with the device's vnet header
// (virtio/net.HeaderLen). Whoever builds a machine with a NIC opens its
// TAP and hands it over: the daemon, which keeps the privilege, passes it
// to its VMM in a slot (vmm/control); `cellvm boot` opens its own.
//
// The descriptor is attached (TUNSETIFF) before it is handed to Go's
// poller. A tun descriptor polled before it is attached reports EPOLLERR
// without ever registering on the device's wait queue, so a poller that
// registered it at open time would never hear that a frame arrived: reads
// would block forever once the queue first ran dry. The file is
// non-blocking under the poller, so Close interrupts a Read.
func OpenTAP(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TAP name %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnet.HeaderLen); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETVNETHDRSZ: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TAP %s non-blocking: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}
