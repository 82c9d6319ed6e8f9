package boot

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/guestmem"
)

func read(t *testing.T, m guestmem.Memory, addr, n uint64) []byte {
	t.Helper()
	b := make([]byte, n)
	if err := m.ReadAt(b, addr); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMemoryMapSplitsAroundGap(t *testing.T) {
	small := MemoryMap(256 << 20)
	want := []E820Entry{{0, 0x9fc00, E820RAM}, {0x9fc00, 0x400, E820Reserved}, {0x100000, 256<<20 - 0x100000, E820RAM}}
	if len(small) != len(want) {
		t.Fatalf("map %v", small)
	}
	for i := range want {
		if small[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, small[i], want[i])
		}
	}
	big := MemoryMap(5 << 30)
	last := big[len(big)-1]
	if last.Addr != 4<<30 || last.Size != 2<<30 {
		t.Errorf("above-4G entry %+v, want 2 GiB at 4 GiB", last)
	}
	var ram uint64
	for _, e := range big {
		if e.Type == E820RAM {
			ram += e.Size
		}
		if e.Addr < MMIOGapEnd && e.Addr+e.Size > MMIOGapStart {
			t.Errorf("entry %+v overlaps the MMIO gap", e)
		}
	}
	if ram != 5<<30-0x400-0x60000 {
		t.Errorf("RAM in map = %#x", ram)
	}
}

func TestZeroPage(t *testing.T) {
	mem := guestmem.New(64 << 20)
	p := Params{Cmdline: "console=ttyS0 reboot=k", InitrdAddr: 0x3000000, InitrdSize: 12345, MemSize: 64 << 20}
	if err := WriteZeroPage(mem, p); err != nil {
		t.Fatal(err)
	}
	zp := read(t, mem, ZeroPageAddr, ZeroPageSize)
	le := binary.LittleEndian
	if le.Uint16(zp[offBootFlag:]) != BootFlagMagic || le.Uint32(zp[offHeader:]) != HeaderMagic {
		t.Error("boot flag or HdrS missing for an ELF kernel")
	}
	if zp[offTypeOfLoader] != 0xff {
		t.Error("type_of_loader not set")
	}
	if got := le.Uint32(zp[offCmdLinePtr:]); got != CmdlineAddr {
		t.Errorf("cmd_line_ptr %#x", got)
	}
	cmd := read(t, mem, CmdlineAddr, uint64(len(p.Cmdline)+1))
	if string(cmd[:len(cmd)-1]) != p.Cmdline || cmd[len(cmd)-1] != 0 {
		t.Errorf("command line %q", cmd)
	}
	if le.Uint32(zp[offRamdiskImage:]) != 0x3000000 || le.Uint32(zp[offRamdiskSize:]) != 12345 {
		t.Error("initrd fields wrong")
	}
	n := int(zp[offE820Entries])
	if n != 3 {
		t.Fatalf("e820 entries = %d", n)
	}
	e := zp[offE820Table+20*2:]
	if le.Uint64(e) != 0x100000 || le.Uint64(e[8:]) != 63<<20 || le.Uint32(e[16:]) != E820RAM {
		t.Errorf("third e820 entry wrong: %x", e[:20])
	}
}

func TestZeroPageKeepsBzImageHeader(t *testing.T) {
	mem := guestmem.New(32 << 20)
	hdr := make([]byte, 0x268-SetupHeaderOffset)
	binary.LittleEndian.PutUint32(hdr[offHeader-SetupHeaderOffset:], HeaderMagic)
	binary.LittleEndian.PutUint32(hdr[offCmdlineSize-SetupHeaderOffset:], 10)
	hdr[offSetupSects-SetupHeaderOffset] = 27
	if err := WriteZeroPage(mem, Params{SetupHeader: hdr, Cmdline: "short", MemSize: 32 << 20}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, mem, offSetupSects+ZeroPageAddr, 1)[0]; got != 27 {
		t.Errorf("setup_sects not copied: %d", got)
	}
	err := WriteZeroPage(mem, Params{SetupHeader: hdr, Cmdline: "much too long a line", MemSize: 32 << 20})
	if err == nil || !strings.Contains(err.Error(), "at most 10") {
		t.Errorf("overlong command line: %v", err)
	}
}

// translate walks the page tables the way the MMU does for a 2 MiB page.
func translate(t *testing.T, mem guestmem.Memory, va uint64) (uint64, bool) {
	le := binary.LittleEndian
	pml4e := le.Uint64(read(t, mem, PML4Addr+8*((va>>39)&511), 8))
	if pml4e&ptePresent == 0 {
		return 0, false
	}
	pdpte := le.Uint64(read(t, mem, (pml4e&^0xfff)+8*((va>>30)&511), 8))
	if pdpte&ptePresent == 0 {
		return 0, false
	}
	pde := le.Uint64(read(t, mem, (pdpte&^0xfff)+8*((va>>21)&511), 8))
	if pde&ptePresent == 0 || pde&pteHuge == 0 {
		return 0, false
	}
	return pde&^0x1fffff | va&0x1fffff, true
}

func TestPageTablesIdentityMap(t *testing.T) {
	mem := guestmem.New(1 << 20)
	if err := WritePageTables(mem); err != nil {
		t.Fatal(err)
	}
	for _, va := range []uint64{0, 0x1000000, 0x3fffffff, 0x40000000, 0xfee00000, 0xffffffff} {
		pa, ok := translate(t, mem, va)
		if !ok || pa != va {
			t.Errorf("va %#x -> %#x (mapped %v), want identity", va, pa, ok)
		}
	}
	if _, ok := translate(t, mem, 4<<30); ok {
		t.Error("4 GiB is mapped; only the first 4 GiB should be")
	}
}

func TestGDT(t *testing.T) {
	mem := guestmem.New(1 << 20)
	limit, err := WriteGDT(mem)
	if err != nil {
		t.Fatal(err)
	}
	if int(limit)+1 < BootTR+8 {
		t.Fatalf("GDT limit %d does not cover the TR selector", limit)
	}
	cs := binary.LittleEndian.Uint64(read(t, mem, GDTAddr+BootCS, 8))
	if cs>>53&1 != 1 || cs>>47&1 != 1 || cs>>43&1 != 1 {
		t.Errorf("BootCS %#x is not a present 64-bit code segment", cs)
	}
}

func TestMPTable(t *testing.T) {
	mem := guestmem.New(1 << 20)
	for _, n := range []int{1, 2, MaxVCPUs} {
		if err := WriteMPTable(mem, n); err != nil {
			t.Fatalf("%d vCPUs: %v", n, err)
		}
		fl := read(t, mem, MPTableAddr, mpFloatSize)
		if string(fl[:4]) != "_MP_" || checksum(fl) != 0 {
			t.Fatalf("floating pointer bad: %x", fl)
		}
		cfgAddr := uint64(binary.LittleEndian.Uint32(fl[4:]))
		hdr := read(t, mem, cfgAddr, mpHeaderSize)
		size := uint64(binary.LittleEndian.Uint16(hdr[4:]))
		cfg := read(t, mem, cfgAddr, size)
		if string(cfg[:4]) != "PCMP" || checksum(cfg) != 0 {
			t.Fatalf("config table bad")
		}
		// Walk the entries as Linux's smp_read_mpc does.
		cpus, bsp, ioapics, ints := 0, 0, 0, 0
		e := cfg[mpHeaderSize:]
		for i := 0; i < int(binary.LittleEndian.Uint16(cfg[34:])); i++ {
			switch e[0] {
			case mpProcessor:
				if e[3]&cpuEnabled != 0 {
					cpus++
				}
				if e[3]&cpuBootProcessor != 0 {
					bsp++
				}
				e = e[mpCPUSize:]
				continue
			case mpIOAPIC:
				ioapics++
				if binary.LittleEndian.Uint32(e[4:]) != IOAPICAddr {
					t.Error("IOAPIC address wrong")
				}
			case mpIntSrc:
				ints++
			case mpBus, mpLIntSrc:
			default:
				t.Fatalf("unknown entry type %d", e[0])
			}
			e = e[mpSmallEntry:]
		}
		if len(e) != 0 {
			t.Errorf("%d bytes after the last entry", len(e))
		}
		if cpus != n || bsp != 1 || ioapics != 1 || ints != IOAPICPins {
			t.Errorf("n=%d: cpus %d bsp %d ioapics %d ints %d", n, cpus, bsp, ioapics, ints)
		}
	}
	if err := WriteMPTable(mem, MaxVCPUs+1); err == nil {
		t.Error("too many vCPUs accepted")
	}
	if err := WriteMPTable(mem, 0); err == nil {
		t.Error("zero vCPUs accepted")
	}
}
