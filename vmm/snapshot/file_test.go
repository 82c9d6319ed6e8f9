package snapshot

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/virtio/block"
	"github.com/cellvm/cellvm/virtio/mmio"
	vnet "github.com/cellvm/cellvm/virtio/net"
	"github.com/cellvm/cellvm/virtio/queue"
	"github.com/cellvm/cellvm/virtio/rng"
	"github.com/cellvm/cellvm/virtio/vsock"
	"github.com/cellvm/cellvm/vmm/uart"
)

// sample is a plausible state of a two-vCPU machine with every device kind.
func sample() *State {
	st := &State{
		VMMVersion: "cellvm test",
		Machine:    Machine{VCPUs: 2, MemoryMiB: 256, Memory: MemoryLayout(256)},
		VM: VM{
			PIT:    kvm.PITState2{Flags: 1},
			Clock:  kvm.ClockData{Clock: 123456789, Flags: kvm.ClockTSCStable},
			TSCKHz: 2_000_000,
		},
		UART:       uart.State{IER: 1, LCR: 3, MCR: 8, RX: []byte("x")},
		BootMarker: BootMarker{ElapsedNS: 42_000_000},
	}
	for id := range 3 {
		st.VM.IRQChips = append(st.VM.IRQChips, IRQChip{ChipID: uint32(id), Data: bytes.Repeat([]byte{byte(id + 1)}, kvm.IRQChipSize)})
	}
	for i := range 2 {
		c := VCPU{
			ID:      i,
			CPUID:   []kvm.CPUIDEntry{{Function: 0, EAX: 0xd}, {Function: 1, EBX: uint32(i) << 24}},
			MPState: kvm.MPStateRunnable,
			Regs:    kvm.Regs{RIP: 0xffffffff81000000 + uint64(i), RFLAGS: 2},
			XSAVE:   bytes.Repeat([]byte{0xa5}, kvm.XSAVESize),
			XCRs:    []kvm.XCR{{Index: 0, Value: 7}},
			LAPIC:   bytes.Repeat([]byte{byte(i)}, 1024),
			MSRs:    []kvm.MSR{{Index: 0x10, Data: 1 << 40}, {Index: 0x6e0, Data: 1<<40 + 5}},
		}
		c.Sregs.CR0 = 0x80050033
		c.Sregs.CS.Selector = 0x10
		c.DebugRegs.DR7 = 0x400
		c.Events.NMI.Masked = 1
		st.VCPUs = append(st.VCPUs, c)
	}
	q := &queue.State{Config: queue.Config{Size: 256, DescAddr: 0x1000, DriverAddr: 0x2000, DeviceAddr: 0x3000, EventIdx: true}, LastAvail: 9, UsedIdx: 9, Signalled: 8}
	tr := func(typ uint32, n int) mmio.State {
		s := mmio.State{DeviceType: typ, Status: 15, DrvFeatures: 1 << 32, Active: true}
		for range n {
			s.Queues = append(s.Queues, mmio.QueueRegs{Num: 256, Ready: true, Desc: 0x1000, Driver: 0x2000, Device: 0x3000})
			s.Live = append(s.Live, q)
		}
		return s
	}
	st.Devices = []Device{
		{Kind: KindRNG, MMIOBase: 0xd0000000, IRQ: 5, Transport: tr(4, 1), RNG: &rng.State{}},
		{Kind: KindBlock, MMIOBase: 0xd0001000, IRQ: 6, Transport: tr(2, 1), Block: &block.State{Sectors: 1 << 20, ReadOnly: true, ID: "cellvm-disk-0"}},
		{Kind: KindVsock, MMIOBase: 0xd0002000, IRQ: 7, Transport: tr(19, 3), Vsock: &vsock.State{CID: 3, ResetPending: true, ResetAvail: 8, NextPort: 1<<30 + 4}},
		{Kind: KindNet, MMIOBase: 0xd0003000, IRQ: 8, Transport: tr(1, 2), Net: &vnet.State{MAC: [6]byte{6, 0xce, 0x11, 0, 0, 1}}},
	}
	return st
}

func encode(t testing.TB, st *State) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Encode(&b, st); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// withBody is a state file around body, with a correct header.
func withBody(version uint32, body []byte) []byte {
	h := make([]byte, headerSize)
	copy(h, Magic)
	binary.LittleEndian.PutUint32(h[8:], version)
	binary.LittleEndian.PutUint64(h[16:], uint64(len(body)))
	binary.LittleEndian.PutUint32(h[24:], crc32.Checksum(body, castagnoli))
	return append(h, body...)
}

func TestRoundTrip(t *testing.T) {
	st := sample()
	got, err := Decode(bytes.NewReader(encode(t, st)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Fatalf("decoded state differs:\n%+v\nwant\n%+v", got, st)
	}
}

func TestRefusesAnotherVersion(t *testing.T) {
	b := encode(t, sample())
	for _, v := range []uint32{0, LayeredFormatVersion + 1, 1 << 31} {
		binary.LittleEndian.PutUint32(b[8:], v)
		_, err := Decode(bytes.NewReader(b))
		if !errors.Is(err, ErrVersion) {
			t.Fatalf("version %d: %v, want ErrVersion", v, err)
		}
		for _, want := range []string{"format version", "reads versions 1 and 2", "take the snapshot again"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("version %d: %q does not say %q", v, err, want)
			}
		}
	}
}

func TestRefusesTruncated(t *testing.T) {
	b := encode(t, sample())
	for n := 0; n < len(b); n += 1 + n/16 {
		_, err := Decode(bytes.NewReader(b[:n]))
		switch {
		case n < len(Magic) && !errors.Is(err, ErrNotStateFile):
			t.Fatalf("%d of %d bytes: %v, want ErrNotStateFile", n, len(b), err)
		case n >= len(Magic) && !errors.Is(err, ErrCorrupt):
			t.Fatalf("%d of %d bytes: %v, want ErrCorrupt", n, len(b), err)
		}
	}
	_, err := Decode(bytes.NewReader(b[:len(b)-1]))
	if err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("one byte short: %v, want it to say truncated", err)
	}
}

func TestRefusesGarbage(t *testing.T) {
	good := encode(t, sample())
	body := good[headerSize:]
	flipped := append([]byte(nil), good...)
	flipped[headerSize+100] ^= 1
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	m["Extra"] = 1
	unknown, _ := json.Marshal(m)
	huge := append([]byte(nil), good[:headerSize]...)
	binary.LittleEndian.PutUint64(huge[16:], MaxBody+1)
	for _, c := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrNotStateFile},
		{"an ELF file", append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 100)...), ErrNotStateFile},
		{"a JSON state without the header", body, ErrNotStateFile},
		{"a flipped bit", flipped, ErrCorrupt},
		{"JSON garbage", withBody(FormatVersion, []byte(`{"Machine": [1, 2`)), ErrCorrupt},
		{"not JSON", withBody(FormatVersion, bytes.Repeat([]byte{0xff}, 300)), ErrCorrupt},
		{"an unknown field", withBody(FormatVersion, unknown), ErrCorrupt},
		{"two states", withBody(FormatVersion, append(append([]byte(nil), body...), body...)), ErrCorrupt},
		{"a huge body", huge, ErrCorrupt},
		{"an empty state", withBody(FormatVersion, []byte(`{}`)), ErrInvalid},
	} {
		if _, err := Decode(bytes.NewReader(c.data)); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*State)
	}{
		{"no vCPUs", func(s *State) { s.Machine.VCPUs = 0 }},
		{"too many vCPUs", func(s *State) { s.Machine.VCPUs = 33 }},
		{"vCPU count differs", func(s *State) { s.VCPUs = s.VCPUs[:1] }},
		{"vCPUs out of order", func(s *State) { s.VCPUs[0].ID, s.VCPUs[1].ID = 1, 0 }},
		{"tiny memory", func(s *State) { s.Machine.MemoryMiB = 1; s.Machine.Memory = MemoryLayout(1) }},
		{"memory layout differs", func(s *State) { s.Machine.Memory[0].FileOffset = 4096 }},
		{"memory size differs", func(s *State) { s.Machine.MemoryMiB = 512 }},
		{"short LAPIC", func(s *State) { s.VCPUs[1].LAPIC = s.VCPUs[1].LAPIC[:1000] }},
		{"short XSAVE", func(s *State) { s.VCPUs[0].XSAVE = s.VCPUs[0].XSAVE[:512] }},
		{"no CPUID", func(s *State) { s.VCPUs[0].CPUID = nil }},
		{"too many XCRs", func(s *State) { s.VCPUs[0].XCRs = make([]kvm.XCR, 17) }},
		{"bad MP state", func(s *State) { s.VCPUs[0].MPState = 99 }},
		{"two irqchips", func(s *State) { s.VM.IRQChips = s.VM.IRQChips[:2] }},
		{"irqchips swapped", func(s *State) { s.VM.IRQChips[0], s.VM.IRQChips[1] = s.VM.IRQChips[1], s.VM.IRQChips[0] }},
		{"short irqchip", func(s *State) { s.VM.IRQChips[2].Data = s.VM.IRQChips[2].Data[:216] }},
		{"UART FIFO overfull", func(s *State) { s.UART.RX = make([]byte, uart.FIFOSize+1) }},
		{"unknown device", func(s *State) { s.Devices[0].Kind = "gpu" }},
		{"device without its state", func(s *State) { s.Devices[1].Block = nil }},
		{"device with another's state", func(s *State) { s.Devices[0].Net = s.Devices[3].Net }},
		{"too many devices", func(s *State) { s.Devices = make([]Device, MaxDevices+1) }},
		{"too many queues", func(s *State) { s.Devices[0].Transport.Queues = make([]mmio.QueueRegs, 17) }},
	} {
		st := sample()
		c.change(st)
		if err := st.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		}
		if err := Encode(new(bytes.Buffer), st); err == nil {
			t.Errorf("%s: encoded", c.name)
		}
	}
	if err := sample().Validate(); err != nil {
		t.Fatalf("the sample state is invalid: %v", err)
	}
}

func TestMemoryLayout(t *testing.T) {
	small := MemoryLayout(256)
	if len(small) != 1 || small[0] != (MemoryRegion{GuestAddr: 0, Size: 256 << 20, FileOffset: 0}) {
		t.Errorf("256 MiB: %+v", small)
	}
	big := MemoryLayout(4096) // above the 3 GiB MMIO gap
	if len(big) != 2 || big[1].GuestAddr != 4<<30 || big[1].FileOffset != big[0].Size || big[0].Size+big[1].Size != 4<<30 {
		t.Errorf("4 GiB: %+v", big)
	}
}
