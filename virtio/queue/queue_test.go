package queue_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/virtio/queue"
	"github.com/cellvm/cellvm/virtio/virtiotest"
)

const memSize = 1 << 20

func setup(t *testing.T, size uint16, indirect, eventIdx bool) (*guestmem.Regions, *virtiotest.Driver, *queue.Queue) {
	t.Helper()
	mem := guestmem.New(memSize)
	heap := virtiotest.NewHeap(t, mem, 0x1000, memSize)
	d := virtiotest.NewDriver(t, heap, size)
	q, err := queue.New(mem, d.Config(indirect, eventIdx), 256)
	if err != nil {
		t.Fatalf("queue.New: %v", err)
	}
	return mem, d, q
}

func TestPopReadWritePush(t *testing.T) {
	mem, d, q := setup(t, 8, false, false)
	if c, err := q.Pop(mem); c != nil || err != nil {
		t.Fatalf("Pop on empty queue = %v, %v; want nil, nil", c, err)
	}
	head := d.Post(virtiotest.R([]byte("hello ")), virtiotest.R([]byte("world")), virtiotest.W(4), virtiotest.W(8))
	c, err := q.Pop(mem)
	if err != nil || c == nil {
		t.Fatalf("Pop = %v, %v", c, err)
	}
	if c.Head != head || len(c.Readable) != 2 || len(c.Writable) != 2 || c.ReadableLen != 11 || c.WritableLen != 12 {
		t.Fatalf("chain = %+v", c)
	}
	got, err := io.ReadAll(c.NewReader(mem))
	if err != nil || string(got) != "hello world" {
		t.Fatalf("read %q, %v", got, err)
	}
	w := c.NewWriter(mem)
	if n, err := w.Write([]byte("0123456789")); n != 10 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if n, err := w.Write([]byte("abc")); n != 2 || !errors.Is(err, queue.ErrChainFull) {
		t.Fatalf("Write past end = %d, %v; want 2, ErrChainFull", n, err)
	}
	if err := q.Push(mem, c.Head, w.Written()); err != nil {
		t.Fatal(err)
	}
	u, ok := d.Next()
	if !ok || u.ID != head || u.Len != 12 || string(u.Data) != "0123456789ab" {
		t.Fatalf("used = %+v, %v", u, ok)
	}
	if c, err := q.Pop(mem); c != nil || err != nil {
		t.Fatalf("Pop after draining = %v, %v", c, err)
	}
}

func TestIndexWrapAround(t *testing.T) {
	mem, d, q := setup(t, 4, false, false)
	buf := d.Heap.Alloc(4, 4)
	d.WriteDesc(d.Desc, 2, buf, 4, queue.DescFlagWrite, 0)
	// 70000 round trips take both 16-bit indices through 65535 -> 0.
	for i := range 70000 {
		d.Publish(2)
		c, err := q.Pop(mem)
		if err != nil || c == nil || c.Head != 2 {
			t.Fatalf("iteration %d: Pop = %+v, %v", i, c, err)
		}
		if err := q.Push(mem, 2, uint32(i%5)); err != nil {
			t.Fatal(err)
		}
		u, ok := d.Next()
		if !ok || u.ID != 2 || u.Len != uint32(i%5) {
			t.Fatalf("iteration %d: used = %+v, %v", i, u, ok)
		}
	}
	if got := d.UsedIdx(); got != uint16(70000%65536) {
		t.Fatalf("used idx = %d, want %d", got, 70000%65536)
	}
}

func TestBatchOfChainsInOrder(t *testing.T) {
	mem, d, q := setup(t, 4, false, false)
	var heads []uint16
	for i := range 4 {
		heads = append(heads, d.Post(virtiotest.R([]byte{byte(i)})))
	}
	if n, err := q.Available(mem); n != 4 || err != nil {
		t.Fatalf("Available = %d, %v", n, err)
	}
	for i, h := range heads {
		c, err := q.Pop(mem)
		if err != nil || c.Head != h {
			t.Fatalf("chain %d: %+v, %v", i, c, err)
		}
	}
}

func TestIndirect(t *testing.T) {
	mem, d, q := setup(t, 8, true, false)
	head := d.PostIndirect(virtiotest.R([]byte("abc")), virtiotest.W(2), virtiotest.W(3))
	c, err := q.Pop(mem)
	if err != nil {
		t.Fatal(err)
	}
	if c.Head != head || c.ReadableLen != 3 || c.WritableLen != 5 || len(c.Writable) != 2 {
		t.Fatalf("chain = %+v", c)
	}
	if _, err := c.NewWriter(mem).Write([]byte("vwxyz")); err != nil {
		t.Fatal(err)
	}
	if err := q.Push(mem, c.Head, 5); err != nil {
		t.Fatal(err)
	}
	if u, _ := d.Next(); string(u.Data) != "vwxyz" {
		t.Fatalf("used data %q", u.Data)
	}
}

func TestMalformedChains(t *testing.T) {
	cases := []struct {
		name     string
		indirect bool
		build    func(d *virtiotest.Driver)
	}{
		{"head out of range", false, func(d *virtiotest.Driver) { d.Publish(8) }},
		{"next out of range", false, func(d *virtiotest.Driver) {
			d.WriteDesc(d.Desc, 0, 0x1000, 4, queue.DescFlagNext, 9)
			d.Publish(0)
		}},
		{"loop", false, func(d *virtiotest.Driver) {
			d.WriteDesc(d.Desc, 0, 0x1000, 4, queue.DescFlagNext, 1)
			d.WriteDesc(d.Desc, 1, 0x1000, 4, queue.DescFlagNext, 0)
			d.Publish(0)
		}},
		{"self loop", false, func(d *virtiotest.Driver) {
			d.WriteDesc(d.Desc, 3, 0x1000, 4, queue.DescFlagNext, 3)
			d.Publish(3)
		}},
		{"buffer outside memory", false, func(d *virtiotest.Driver) {
			d.WriteDesc(d.Desc, 0, memSize-2, 4, 0, 0)
			d.Publish(0)
		}},
		{"buffer address wraps", false, func(d *virtiotest.Driver) {
			d.WriteDesc(d.Desc, 0, ^uint64(0)-1, 4, 0, 0)
			d.Publish(0)
		}},
		{"readable after writable", false, func(d *virtiotest.Driver) {
			d.WriteDesc(d.Desc, 0, 0x1000, 4, queue.DescFlagNext|queue.DescFlagWrite, 1)
			d.WriteDesc(d.Desc, 1, 0x1000, 4, 0, 0)
			d.Publish(0)
		}},
		{"indirect not negotiated", false, func(d *virtiotest.Driver) {
			d.WriteDesc(d.Desc, 0, 0x1000, 16, queue.DescFlagIndirect, 0)
			d.Publish(0)
		}},
		{"indirect with next", true, func(d *virtiotest.Driver) {
			d.WriteDesc(0x2000, 0, 0x1000, 4, 0, 0)
			d.WriteDesc(d.Desc, 0, 0x2000, 16, queue.DescFlagIndirect|queue.DescFlagNext, 1)
			d.Publish(0)
		}},
		{"indirect table length not a multiple of 16", true, func(d *virtiotest.Driver) {
			d.WriteDesc(d.Desc, 0, 0x2000, 24, queue.DescFlagIndirect, 0)
			d.Publish(0)
		}},
		{"indirect table empty", true, func(d *virtiotest.Driver) {
			d.WriteDesc(d.Desc, 0, 0x2000, 0, queue.DescFlagIndirect, 0)
			d.Publish(0)
		}},
		{"indirect table larger than queue", true, func(d *virtiotest.Driver) {
			d.WriteDesc(d.Desc, 0, 0x2000, 16*9, queue.DescFlagIndirect, 0)
			d.Publish(0)
		}},
		{"indirect table outside memory", true, func(d *virtiotest.Driver) {
			d.WriteDesc(d.Desc, 0, memSize-16, 32, queue.DescFlagIndirect, 0)
			d.Publish(0)
		}},
		{"indirect loop", true, func(d *virtiotest.Driver) {
			d.WriteDesc(0x2000, 0, 0x1000, 4, queue.DescFlagNext, 1)
			d.WriteDesc(0x2000, 1, 0x1000, 4, queue.DescFlagNext, 0)
			d.WriteDesc(d.Desc, 0, 0x2000, 32, queue.DescFlagIndirect, 0)
			d.Publish(0)
		}},
		{"indirect next out of table", true, func(d *virtiotest.Driver) {
			d.WriteDesc(0x2000, 0, 0x1000, 4, queue.DescFlagNext, 2)
			d.WriteDesc(0x2000, 1, 0x1000, 4, 0, 0)
			d.WriteDesc(d.Desc, 0, 0x2000, 32, queue.DescFlagIndirect, 0)
			d.Publish(0)
		}},
		{"nested indirect", true, func(d *virtiotest.Driver) {
			d.WriteDesc(0x2000, 0, 0x3000, 16, queue.DescFlagIndirect, 0)
			d.WriteDesc(0x3000, 0, 0x1000, 4, 0, 0)
			d.WriteDesc(d.Desc, 0, 0x2000, 16, queue.DescFlagIndirect, 0)
			d.Publish(0)
		}},
		{"avail idx too far ahead", false, func(d *virtiotest.Driver) {
			d.WriteDesc(d.Desc, 0, 0x1000, 4, 0, 0)
			d.SetAvailIdx(9)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mem, d, q := setup(t, 8, tc.indirect, false)
			tc.build(d)
			c, err := q.Pop(mem)
			if !errors.Is(err, queue.ErrMalformed) || c != nil {
				t.Fatalf("Pop = %+v, %v; want ErrMalformed", c, err)
			}
		})
	}
}

func TestChainTotalLengthOverflow(t *testing.T) {
	// The longest legal chain (32768 descriptors) of 128 KiB + 1 buffers,
	// all at the same address, passes 4 GiB in total.
	const size = queue.MaxQueueSize
	mem := guestmem.New(2 << 20)
	table, _ := mem.Slice(1<<20, 16*size)
	for i := range size {
		d := table[16*i:]
		binary.LittleEndian.PutUint64(d[0:], 0)
		binary.LittleEndian.PutUint32(d[8:], 128<<10+1)
		if i+1 < size {
			binary.LittleEndian.PutUint16(d[12:], queue.DescFlagNext)
			binary.LittleEndian.PutUint16(d[14:], uint16(i+1))
		}
	}
	cfg := queue.Config{Size: size, DescAddr: 1 << 20}
	if _, err := queue.ReadChain(mem, cfg, 0); !errors.Is(err, queue.ErrMalformed) {
		t.Fatalf("ReadChain = %v; want ErrMalformed", err)
	}
	// One descriptor fewer fits.
	binary.LittleEndian.PutUint16(table[16*(size-2)+12:], 0)
	c, err := queue.ReadChain(mem, cfg, 0)
	if err != nil || c.ReadableLen != (size-1)*(128<<10+1) {
		t.Fatalf("ReadChain = %+v, %v", c, err)
	}
}

func TestZeroLengthBuffersDropped(t *testing.T) {
	mem, d, q := setup(t, 8, false, false)
	d.Post(virtiotest.R(nil), virtiotest.R([]byte("x")), virtiotest.W(0))
	c, err := q.Pop(mem)
	if err != nil || len(c.Readable) != 1 || len(c.Writable) != 0 || c.ReadableLen != 1 {
		t.Fatalf("chain = %+v, %v", c, err)
	}
}

func TestValidate(t *testing.T) {
	mem := guestmem.New(0x10000)
	good := queue.Config{Size: 16, DescAddr: 0x1000, DriverAddr: 0x2000, DeviceAddr: 0x3000}
	if err := queue.Validate(mem, good, 256); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, mod := range map[string]func(c *queue.Config){
		"size zero":             func(c *queue.Config) { c.Size = 0 },
		"size not power of two": func(c *queue.Config) { c.Size = 12 },
		"size above max":        func(c *queue.Config) { c.Size = 512 },
		"desc misaligned":       func(c *queue.Config) { c.DescAddr = 0x1008 },
		"avail misaligned":      func(c *queue.Config) { c.DriverAddr = 0x2001 },
		"used misaligned":       func(c *queue.Config) { c.DeviceAddr = 0x3002 },
		"desc outside memory":   func(c *queue.Config) { c.DescAddr = 0xff80 },
		"used outside memory":   func(c *queue.Config) { c.DeviceAddr = 0xffc0 },
		"avail wraps":           func(c *queue.Config) { c.DriverAddr = ^uint64(0) - 1 },
	} {
		c := good
		mod(&c)
		if err := queue.Validate(mem, c, 256); !errors.Is(err, queue.ErrMalformed) {
			t.Errorf("%s: Validate = %v; want ErrMalformed", name, err)
		}
	}
}

func TestNoInterruptFlag(t *testing.T) {
	mem, d, q := setup(t, 8, false, false)
	if need, _ := q.NeedsInterrupt(mem); need {
		t.Fatal("interrupt with nothing used")
	}
	d.Post(virtiotest.W(1))
	c, _ := q.Pop(mem)
	_ = q.Push(mem, c.Head, 0)
	if need, err := q.NeedsInterrupt(mem); !need || err != nil {
		t.Fatalf("NeedsInterrupt = %v, %v; want true", need, err)
	}
	d.SetNoInterrupt(true)
	d.Post(virtiotest.W(1))
	c, _ = q.Pop(mem)
	_ = q.Push(mem, c.Head, 0)
	if need, _ := q.NeedsInterrupt(mem); need {
		t.Fatal("interrupt despite VIRTQ_AVAIL_F_NO_INTERRUPT")
	}
}

func TestEventIdx(t *testing.T) {
	mem, d, q := setup(t, 8, false, true)
	// Empty queue: the device asks to be notified at the next entry.
	if n, err := q.Available(mem); n != 0 || err != nil {
		t.Fatal(n, err)
	}
	if ev := d.AvailEvent(); ev != 0 {
		t.Fatalf("avail_event = %d, want 0", ev)
	}
	for range 3 {
		d.Post(virtiotest.W(1))
	}
	// The driver wants an interrupt once used idx passes 1 (used_event = 1).
	d.SetUsedEvent(1)
	push := func() {
		c, err := q.Pop(mem)
		if err != nil || c == nil {
			t.Fatalf("Pop: %v, %v", c, err)
		}
		if err := q.Push(mem, c.Head, 0); err != nil {
			t.Fatal(err)
		}
	}
	push() // used idx 1: event at 1 not yet crossed (needs idx to go past 1)
	if need, _ := q.NeedsInterrupt(mem); need {
		t.Fatal("interrupt before used idx passed used_event")
	}
	push() // used idx 2: crossed
	if need, _ := q.NeedsInterrupt(mem); !need {
		t.Fatal("no interrupt after used idx passed used_event")
	}
	push() // used idx 3: already signalled for event 1
	if need, _ := q.NeedsInterrupt(mem); need {
		t.Fatal("second interrupt for the same used_event")
	}
	if n, _ := q.Available(mem); n != 0 {
		t.Fatalf("available = %d", n)
	}
	if ev := d.AvailEvent(); ev != 3 {
		t.Fatalf("avail_event = %d after consuming 3, want 3", ev)
	}
}

func TestNeedEvent(t *testing.T) {
	for _, c := range []struct {
		event, cur, old uint16
		want            bool
	}{
		{0, 1, 0, true},
		{1, 1, 0, false},
		{1, 2, 0, true},
		{5, 10, 6, false},
		{65535, 0, 65535, true},  // wrap: crossed 65535
		{65535, 1, 65534, true},  // wrap over two
		{0, 65535, 65534, false}, // event far behind in the other direction
		{3, 3, 3, false},
	} {
		if got := queue.NeedEvent(c.event, c.cur, c.old); got != c.want {
			t.Errorf("NeedEvent(%d, %d, %d) = %v, want %v", c.event, c.cur, c.old, got, c.want)
		}
	}
}

func TestReaderNextZeroCopy(t *testing.T) {
	mem, d, q := setup(t, 8, false, false)
	d.Post(virtiotest.R([]byte("abcd")), virtiotest.R([]byte("ef")))
	c, _ := q.Pop(mem)
	r := c.NewReader(mem)
	var got [][]byte
	for {
		s, err := r.Next(3)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, append([]byte(nil), s...))
	}
	if want := [][]byte{[]byte("abc"), []byte("d"), []byte("ef")}; len(got) != 3 || !bytes.Equal(got[0], want[0]) || !bytes.Equal(got[1], want[1]) || !bytes.Equal(got[2], want[2]) {
		t.Fatalf("pieces %q", got)
	}
	if r.Remaining() != 0 {
		t.Fatalf("remaining %d", r.Remaining())
	}
}

// TestPopPushAllocations: taking a short chain and returning it costs one
// allocation (the Chain), not one per descriptor and ring access. A device
// does this for every packet; the allocations were the vsock rx path's
// largest host cost after the copies.
func TestPopPushAllocations(t *testing.T) {
	mem, d, q := setup(t, 256, false, true)
	buf := virtiotest.Buf{Addr: d.Heap.Alloc(4140, 8), Len: 4140, Write: true}
	hdr := virtiotest.Buf{Addr: d.Heap.Alloc(44, 8), Len: 44}
	for range 120 {
		d.PostBufs(hdr, buf)
	}
	allocs := testing.AllocsPerRun(100, func() {
		c, err := q.Pop(mem)
		if err != nil || c == nil || len(c.Readable) != 1 || len(c.Writable) != 1 || c.ReadableLen != 44 || c.WritableLen != 4140 {
			t.Fatalf("pop: %+v, %v", c, err)
		}
		if err := q.Push(mem, c.Head, 0); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("%.0f allocations per chain popped and pushed, want one", allocs)
	}
}
