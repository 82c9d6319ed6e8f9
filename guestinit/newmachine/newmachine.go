// Package newmachine makes a guest restored from a snapshot a machine of
// its own. Every VM restored from one snapshot starts with the same memory:
// the same kernel CRNG state, the same clock, the same interpreter random
// state. Unless the host's fresh entropy is mixed into the kernel's pool and
// the CRNG reseeded at once, two forks hand out the same os.urandom bytes
// (until the kernel reseeds on its own, minutes later); unless the clock is
// stepped, the guest lives at the time of the snapshot.
package newmachine

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestinit/netcfg"
)

// poolInfo is struct rand_pool_info for RNDADDENTROPY: the entropy count in
// bits, the buffer size in bytes, then the bytes.
func poolInfo(entropy []byte) []byte {
	b := make([]byte, 8+len(entropy))
	binary.LittleEndian.PutUint32(b[0:], uint32(8*len(entropy)))
	binary.LittleEndian.PutUint32(b[4:], uint32(len(entropy)))
	copy(b[8:], entropy)
	return b
}

// Reseed mixes entropy into the kernel's pool, crediting it (the host drew
// it from its own CRNG), and forces the CRNG to reseed from the pool now, so
// that the next getrandom and /dev/urandom read already differ from every
// other fork's. It needs CAP_SYS_ADMIN.
func Reseed(entropy []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("reseed: %w", err)
	}
	defer f.Close()
	b := poolInfo(entropy)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&b[0]))); e != 0 {
		return fmt.Errorf("reseed: RNDADDENTROPY: %w", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDRESEEDCRNG, 0); e != 0 {
		return fmt.Errorf("reseed: RNDRESEEDCRNG: %w", e)
	}
	return nil
}

// SetClock steps the realtime clock to t.
func SetClock(t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
		return fmt.Errorf("set the clock: %w", err)
	}
	return nil
}

// SetNetwork gives eth0 its new address and default route (a fork's TAP)
// and rewrites /etc/resolv.conf for the new name servers.
func SetNetwork(addr netip.Prefix, gw netip.Addr, dns []netip.Addr) error {
	if err := netcfg.Reconfigure(netcfg.Config{Addr: addr, Gateway: gw}); err != nil {
		return fmt.Errorf("set the network: %w", err)
	}
	if err := netcfg.WriteResolvConf("/etc/resolv.conf", dns); err != nil {
		return fmt.Errorf("set the network: %w", err)
	}
	return nil
}
