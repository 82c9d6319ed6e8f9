package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrPoolFull is returned by Attach when every /30 of the pool is in use.
var ErrPoolFull = errors.New("netpolicy: address pool exhausted")

// allocator hands out the /30 links of a pool. Slot i is the i-th /30:
// network, gateway (host side), guest, broadcast.
type allocator struct {
	pool  netip.Prefix
	slots int
	used  map[int]string // slot -> tag
	byTag map[string]int
}

func newAllocator(pool netip.Prefix) (*allocator, error) {
	if !pool.IsValid() || !pool.Addr().Is4() || pool.Bits() > 30 || pool.Bits() < 8 {
		return nil, fmt.Errorf("pool %v: want an IPv4 prefix between /8 and /30", pool)
	}
	if pool != pool.Masked() {
		return nil, fmt.Errorf("pool %v: host bits set", pool)
	}
	if !privatePool(pool) {
		// The pool is refused to every guest by its own rule, but its
		// addresses must also not be anyone's real destinations.
		return nil, fmt.Errorf("pool %v: %w", pool, errNotPrivatePool)
	}
	return &allocator{
		pool:  pool,
		slots: 1 << (30 - pool.Bits()),
		used:  map[int]string{},
		byTag: map[string]int{},
	}, nil
}

// slotAddrs returns the gateway and guest addresses of slot i.
func (a *allocator) slotAddrs(i int) linkAddrs {
	b := a.pool.Addr().As4()
	n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	n += uint32(i) * 4
	at := func(off uint32) netip.Addr {
		v := n + off
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	return linkAddrs{Gateway: at(1), Guest: at(2), Pool: a.pool}
}

// slotOf returns the slot whose gateway is gw, or -1.
func (a *allocator) slotOf(gw netip.Addr) int {
	if !a.pool.Contains(gw) {
		return -1
	}
	p, b := a.pool.Addr().As4(), gw.As4()
	off := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) -
		(uint32(p[0])<<24 | uint32(p[1])<<16 | uint32(p[2])<<8 | uint32(p[3]))
	if off%4 != 1 {
		return -1
	}
	return int(off / 4)
}

// allocate gives tag the lowest free slot.
func (a *allocator) allocate(tag string) (int, error) {
	if _, ok := a.byTag[tag]; ok {
		return 0, fmt.Errorf("tag %s already has a link", tag)
	}
	for i := 0; i < a.slots; i++ {
		if _, ok := a.used[i]; !ok {
			a.used[i] = tag
			a.byTag[tag] = i
			return i, nil
		}
	}
	return 0, ErrPoolFull
}

// reserve marks slot i as tag's (a link that survived a daemon restart).
func (a *allocator) reserve(tag string, i int) error {
	if i < 0 || i >= a.slots {
		return fmt.Errorf("slot %d outside the pool", i)
	}
	if t, ok := a.used[i]; ok && t != tag {
		return fmt.Errorf("slot %d already used by %s", i, t)
	}
	a.used[i] = tag
	a.byTag[tag] = i
	return nil
}

func (a *allocator) release(tag string) {
	if i, ok := a.byTag[tag]; ok {
		delete(a.used, i)
		delete(a.byTag, tag)
	}
}
