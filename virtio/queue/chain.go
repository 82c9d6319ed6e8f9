package queue

import (
	"encoding/binary"
	"fmt"

	"github.com/cellvm/cellvm/guestmem"
)

// Buffer is one guest buffer of a chain: Len bytes at guest address Addr,
// already checked to lie inside guest memory.
type Buffer struct {
	Addr uint64
	Len  uint32
}

// Chain is a descriptor chain, flattened: indirect tables are followed and
// zero-length buffers dropped. The device-readable buffers come first, as the
// spec requires of the driver.
type Chain struct {
	Head        uint16
	Readable    []Buffer
	Writable    []Buffer
	ReadableLen uint32 // total bytes the device may read
	WritableLen uint32 // total bytes the device may write

	inline [4]Buffer // backs Readable and Writable for short chains
}

type desc struct {
	addr  uint64
	len   uint32
	flags uint16
	next  uint16
}

// readDesc reads descriptor i of the table once, through Slice (which is
// what ReadAt does, without the copy escaping to the heap).
func readDesc(mem guestmem.Memory, table uint64, i uint16) (desc, error) {
	b, err := mem.Slice(table+DescSize*uint64(i), DescSize)
	if err != nil {
		return desc{}, err
	}
	return desc{
		addr:  binary.LittleEndian.Uint64(b[0:]),
		len:   binary.LittleEndian.Uint32(b[8:]),
		flags: binary.LittleEndian.Uint16(b[12:]),
		next:  binary.LittleEndian.Uint16(b[14:]),
	}, nil
}

// ReadChain walks the chain starting at descriptor head of the queue cfg
// describes. It is bounded: a direct chain may have at most cfg.Size
// descriptors and an indirect table at most cfg.Size entries, each visited at
// most once, so a loop is an error rather than a hang. Every buffer must lie
// in guest memory and the totals must fit in 32 bits.
func ReadChain(mem guestmem.Memory, cfg Config, head uint16) (*Chain, error) {
	if head >= cfg.Size {
		return nil, fmt.Errorf("%w: chain head %d >= queue size %d", ErrMalformed, head, cfg.Size)
	}
	c := &Chain{Head: head}
	// Readable buffers come before writable ones, so both are slices of
	// one list, which starts in the chain itself: a short chain (a vsock
	// packet, a small block request) costs one allocation.
	all := c.inline[:0]
	nr := 0
	var readable, writable uint64
	add := func(d desc) error {
		if d.len == 0 {
			return nil
		}
		if _, err := mem.Slice(d.addr, uint64(d.len)); err != nil {
			return fmt.Errorf("%w: buffer: %w", ErrMalformed, err)
		}
		b := Buffer{Addr: d.addr, Len: d.len}
		if d.flags&DescFlagWrite != 0 {
			writable += uint64(d.len)
		} else {
			if len(all) != nr {
				return fmt.Errorf("%w: readable buffer after a writable one", ErrMalformed)
			}
			readable += uint64(d.len)
			nr++
		}
		all = append(all, b)
		if readable > maxChainBytes || writable > maxChainBytes {
			return fmt.Errorf("%w: chain longer than 4 GiB", ErrMalformed)
		}
		return nil
	}

	i := head
	for steps := uint32(0); ; steps++ {
		if steps >= uint32(cfg.Size) {
			return nil, fmt.Errorf("%w: chain from head %d longer than queue size %d (loop?)", ErrMalformed, head, cfg.Size)
		}
		d, err := readDesc(mem, cfg.DescAddr, i)
		if err != nil {
			return nil, fmt.Errorf("%w: descriptor %d: %w", ErrMalformed, i, err)
		}
		if d.flags&DescFlagIndirect != 0 {
			if err := walkIndirect(mem, cfg, d, add); err != nil {
				return nil, err
			}
			break
		}
		if err := add(d); err != nil {
			return nil, err
		}
		if d.flags&DescFlagNext == 0 {
			break
		}
		if d.next >= cfg.Size {
			return nil, fmt.Errorf("%w: descriptor %d: next %d >= queue size %d", ErrMalformed, i, d.next, cfg.Size)
		}
		i = d.next
	}
	c.ReadableLen, c.WritableLen = uint32(readable), uint32(writable)
	if nr > 0 {
		c.Readable = all[:nr:nr]
	}
	if len(all) > nr {
		c.Writable = all[nr:]
	}
	return c, nil
}

// walkIndirect follows the indirect table d points at. An indirect
// descriptor ends the chain (it may not have NEXT), its table holds whole
// descriptors, none of which may be indirect again.
func walkIndirect(mem guestmem.Memory, cfg Config, d desc, add func(desc) error) error {
	if !cfg.Indirect {
		return fmt.Errorf("%w: indirect descriptor without VIRTIO_F_INDIRECT_DESC", ErrMalformed)
	}
	if d.flags&DescFlagNext != 0 {
		return fmt.Errorf("%w: indirect descriptor with NEXT", ErrMalformed)
	}
	if d.len == 0 || d.len%DescSize != 0 {
		return fmt.Errorf("%w: indirect table length %d", ErrMalformed, d.len)
	}
	n := d.len / DescSize
	if n > uint32(cfg.Size) {
		return fmt.Errorf("%w: indirect table of %d entries exceeds queue size %d", ErrMalformed, n, cfg.Size)
	}
	if _, err := mem.Slice(d.addr, uint64(d.len)); err != nil {
		return fmt.Errorf("%w: indirect table: %w", ErrMalformed, err)
	}
	i := uint16(0)
	for steps := uint32(0); ; steps++ {
		if steps >= n {
			return fmt.Errorf("%w: indirect chain longer than its table of %d (loop?)", ErrMalformed, n)
		}
		e, err := readDesc(mem, d.addr, i)
		if err != nil {
			return fmt.Errorf("%w: indirect descriptor %d: %w", ErrMalformed, i, err)
		}
		if e.flags&DescFlagIndirect != 0 {
			return fmt.Errorf("%w: nested indirect descriptor", ErrMalformed)
		}
		if err := add(e); err != nil {
			return err
		}
		if e.flags&DescFlagNext == 0 {
			return nil
		}
		if uint32(e.next) >= n {
			return fmt.Errorf("%w: indirect descriptor %d: next %d >= table length %d", ErrMalformed, i, e.next, n)
		}
		i = e.next
	}
}
