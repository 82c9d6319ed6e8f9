// Package virtiotest plays the guest driver's side of virtio in tests: it
// lays out split virtqueues in a guestmem.New memory, posts descriptor
// chains, reads used entries back, and programs a virtio-mmio transport the
// way Linux's virtio_mmio driver does. Device tests then read as the driver
// would act.
package virtiotest

import (
	"encoding/binary"
	"sync"
	"testing"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/virtio/queue"
)

// Heap hands out guest memory for buffers and queues, bump-allocated.
type Heap struct {
	mu        sync.Mutex
	next, end uint64
	tb        testing.TB
	Mem       guestmem.Memory
}

// NewHeap allocates from [start, end) of mem.
func NewHeap(tb testing.TB, mem guestmem.Memory, start, end uint64) *Heap {
	return &Heap{tb: tb, Mem: mem, next: start, end: end}
}

// Alloc returns n bytes of guest memory aligned to align (a power of two).
func (h *Heap) Alloc(n, align uint64) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := (h.next + align - 1) &^ (align - 1)
	if a+n > h.end {
		h.tb.Fatalf("virtiotest heap exhausted (%d bytes wanted)", n)
	}
	h.next = a + n
	return a
}

// Seg is one buffer of a chain the driver posts: Data is device-readable,
// or, when Write is set, Len device-writable bytes.
type Seg struct {
	Data  []byte
	Len   uint32
	Write bool
}

// R is a device-readable buffer holding data.
func R(data []byte) Seg { return Seg{Data: data, Len: uint32(len(data))} }

// W is a device-writable buffer of n bytes.
func W(n uint32) Seg { return Seg{Len: n, Write: true} }

// Used is one used-ring entry, with the bytes the device wrote (the first
// Len bytes of the chain's writable buffers).
type Used struct {
	ID   uint16
	Len  uint32
	Data []byte
}

// Driver is the driver side of one split virtqueue.
type Driver struct {
	tb   testing.TB
	Heap *Heap
	Mem  guestmem.Memory
	Size uint16
	// Desc, Avail and Used are the guest addresses of the three areas.
	Desc, Avail, Used uint64

	free     []uint16
	availIdx uint16
	lastUsed uint16
	writable map[uint16][]queue.Buffer // head -> writable buffers
	descs    map[uint16][]uint16       // head -> descriptors to free
}

// NewDriver lays out a queue of size entries on heap.
func NewDriver(tb testing.TB, heap *Heap, size uint16) *Driver {
	n := uint64(size)
	d := &Driver{
		tb: tb, Heap: heap, Mem: heap.Mem, Size: size,
		Desc:     heap.Alloc(16*n, 16),
		Avail:    heap.Alloc(4+2*n+2+2, 4), // +2: keep used_event's word to ourselves
		Used:     heap.Alloc(4+8*n+2+2, 4),
		writable: map[uint16][]queue.Buffer{},
		descs:    map[uint16][]uint16{},
	}
	for i := range size {
		d.free = append(d.free, i)
	}
	return d
}

// Config is the queue configuration to hand a device (or program through
// the transport).
func (d *Driver) Config(indirect, eventIdx bool) queue.Config {
	return queue.Config{Size: d.Size, DescAddr: d.Desc, DriverAddr: d.Avail, DeviceAddr: d.Used, Indirect: indirect, EventIdx: eventIdx}
}

// WriteDesc writes descriptor i of the table at table (raw, for building
// malformed chains).
func (d *Driver) WriteDesc(table uint64, i uint16, addr uint64, n uint32, flags, next uint16) {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:], addr)
	binary.LittleEndian.PutUint32(b[8:], n)
	binary.LittleEndian.PutUint16(b[12:], flags)
	binary.LittleEndian.PutUint16(b[14:], next)
	if err := d.Mem.WriteAt(b[:], table+16*uint64(i)); err != nil {
		d.tb.Fatalf("write descriptor: %v", err)
	}
}

func (d *Driver) buffer(s Seg) (addr uint64, flags uint16) {
	addr = d.Heap.Alloc(uint64(s.Len), 8)
	if s.Write {
		return addr, queue.DescFlagWrite
	}
	if err := d.Mem.WriteAt(s.Data, addr); err != nil {
		d.tb.Fatalf("write buffer: %v", err)
	}
	return addr, 0
}

func (d *Driver) take() uint16 {
	if len(d.free) == 0 {
		d.tb.Fatalf("virtiotest: queue of %d descriptors is full", d.Size)
	}
	i := d.free[0]
	d.free = d.free[1:]
	return i
}

// Post builds a direct chain of segs, makes it available and returns its
// head.
func (d *Driver) Post(segs ...Seg) uint16 {
	bufs := make([]Buf, len(segs))
	for i, s := range segs {
		addr, _ := d.buffer(s)
		bufs[i] = Buf{Addr: addr, Len: s.Len, Write: s.Write}
	}
	return d.PostBufs(bufs...)
}

// PostIndirect builds segs in an indirect table referenced by one
// descriptor, makes it available and returns its head.
func (d *Driver) PostIndirect(segs ...Seg) uint16 {
	head := d.take()
	table := d.Heap.Alloc(16*uint64(len(segs)), 16)
	var wr []queue.Buffer
	for i, s := range segs {
		addr, flags := d.buffer(s)
		if s.Write {
			wr = append(wr, queue.Buffer{Addr: addr, Len: s.Len})
		}
		var next uint16
		if i+1 < len(segs) {
			flags |= queue.DescFlagNext
			next = uint16(i + 1)
		}
		d.WriteDesc(table, uint16(i), addr, s.Len, flags, next)
	}
	d.WriteDesc(d.Desc, head, table, uint32(16*len(segs)), queue.DescFlagIndirect, 0)
	d.writable[head] = wr
	d.descs[head] = []uint16{head}
	d.Publish(head)
	return head
}

// Publish puts head in the next available ring slot and then bumps the
// available index (release).
func (d *Driver) Publish(head uint16) {
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], head)
	if err := d.Mem.WriteAt(b[:], d.Avail+4+2*uint64(d.availIdx%d.Size)); err != nil {
		d.tb.Fatalf("write avail ring: %v", err)
	}
	d.availIdx++
	d.store16(d.Avail+2, d.availIdx)
}

// SetAvailIdx overwrites the published available index (for tests of a
// driver that lies).
func (d *Driver) SetAvailIdx(v uint16) {
	d.availIdx = v
	d.store16(d.Avail+2, v)
}

// SetNoInterrupt sets or clears VIRTQ_AVAIL_F_NO_INTERRUPT.
func (d *Driver) SetNoInterrupt(on bool) {
	var v uint16
	if on {
		v = queue.AvailFlagNoInterrupt
	}
	d.store16(d.Avail, v)
}

// SetUsedEvent writes used_event (EVENT_IDX).
func (d *Driver) SetUsedEvent(v uint16) { d.store16(d.Avail+4+2*uint64(d.Size), v) }

// AvailEvent reads avail_event (EVENT_IDX), which the device writes.
func (d *Driver) AvailEvent() uint16 { return d.load16(d.Used + 4 + 8*uint64(d.Size)) }

// UsedIdx reads the device's used index.
func (d *Driver) UsedIdx() uint16 { return d.load16(d.Used + 2) }

// Pending is the number of used entries not yet taken by Next.
func (d *Driver) Pending() uint16 { return d.UsedIdx() - d.lastUsed }

// Next takes the next used entry, if there is one, and frees its
// descriptors.
func (d *Driver) Next() (Used, bool) {
	id, n, wr, ok := d.reclaim()
	if !ok {
		return Used{}, false
	}
	u := Used{ID: id, Len: n, Data: []byte{}}
	left := n
	for _, b := range wr {
		k := min(left, b.Len)
		p := make([]byte, k)
		if err := d.Mem.ReadAt(p, b.Addr); err != nil {
			d.tb.Fatalf("read used buffer: %v", err)
		}
		u.Data = append(u.Data, p...)
		left -= k
	}
	return u, true
}

// reclaim takes the next used entry, if there is one, frees its
// descriptors and returns its writable buffers.
func (d *Driver) reclaim() (id uint16, n uint32, wr []queue.Buffer, ok bool) {
	if d.UsedIdx() == d.lastUsed {
		return 0, 0, nil, false
	}
	var e [8]byte
	if err := d.Mem.ReadAt(e[:], d.Used+4+8*uint64(d.lastUsed%d.Size)); err != nil {
		d.tb.Fatalf("read used ring: %v", err)
	}
	d.lastUsed++
	// Ask for an interrupt at the next used entry, as Linux's
	// virtqueue_enable_cb does (ignored without EVENT_IDX).
	d.SetUsedEvent(d.lastUsed)
	id = uint16(binary.LittleEndian.Uint32(e[0:]))
	wr = d.writable[id]
	d.free = append(d.free, d.descs[id]...)
	delete(d.descs, id)
	delete(d.writable, id)
	return id, binary.LittleEndian.Uint32(e[4:]), wr, true
}

func (d *Driver) store16(addr uint64, v uint16) {
	if err := queue.Store16(d.Mem, addr, v); err != nil {
		d.tb.Fatalf("store16 %#x: %v", addr, err)
	}
}

func (d *Driver) load16(addr uint64) uint16 {
	v, err := queue.Load16(d.Mem, addr)
	if err != nil {
		d.tb.Fatalf("load16 %#x: %v", addr, err)
	}
	return v
}

// Buf is a buffer the caller has already placed in guest memory, for a
// driver that posts the same buffers again and again (a benchmark), where
// Post would exhaust the heap.
type Buf struct {
	Addr  uint64
	Len   uint32
	Write bool
}

// PostBufs builds a direct chain over bufs, makes it available and returns
// its head. It allocates no guest memory.
func (d *Driver) PostBufs(bufs ...Buf) uint16 {
	ids := make([]uint16, len(bufs))
	for i := range bufs {
		ids[i] = d.take()
	}
	var wr []queue.Buffer
	for i, b := range bufs {
		var flags, next uint16
		if b.Write {
			flags = queue.DescFlagWrite
			wr = append(wr, queue.Buffer{Addr: b.Addr, Len: b.Len})
		}
		if i+1 < len(bufs) {
			flags |= queue.DescFlagNext
			next = ids[i+1]
		}
		d.WriteDesc(d.Desc, ids[i], b.Addr, b.Len, flags, next)
	}
	d.writable[ids[0]] = wr
	d.descs[ids[0]] = ids
	d.Publish(ids[0])
	return ids[0]
}

// Reclaim is Next without reading the written bytes back: it takes the
// next used entry, if there is one, and frees its descriptors.
func (d *Driver) Reclaim() (id uint16, n uint32, ok bool) {
	id, n, _, ok = d.reclaim()
	return id, n, ok
}
