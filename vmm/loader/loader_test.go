package loader

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/vmm/boot"
)

// makeELF builds a minimal x86-64 ELF executable with one PT_LOAD segment
// of code at paddr, bss of extra bytes, entry at paddr+entryOff.
func makeELF(paddr uint64, code []byte, bss uint64, entryOff uint64) []byte {
	le := binary.LittleEndian
	b := make([]byte, elfHeaderSize+elfPhdrSize)
	copy(b, "\x7fELF")
	b[4], b[5], b[6] = elfClass64, elfDataLSB, 1
	le.PutUint16(b[16:], elfTypeExec)
	le.PutUint16(b[18:], elfMachineX8664)
	le.PutUint64(b[24:], paddr+entryOff)
	le.PutUint64(b[32:], elfHeaderSize)
	le.PutUint16(b[54:], elfPhdrSize)
	le.PutUint16(b[56:], 1)
	p := b[elfHeaderSize:]
	le.PutUint32(p, ptLoad)
	le.PutUint64(p[8:], uint64(len(b)))
	le.PutUint64(p[16:], 0xffffffff80000000+paddr)
	le.PutUint64(p[24:], paddr)
	le.PutUint64(p[32:], uint64(len(code)))
	le.PutUint64(p[40:], uint64(len(code))+bss)
	return append(b, code...)
}

func TestLoadELF(t *testing.T) {
	mem := guestmem.New(32 << 20)
	dirty, _ := mem.Slice(0x1000000+4, 8)
	for i := range dirty {
		dirty[i] = 0xaa
	}
	img := makeELF(0x1000000, []byte{1, 2, 3, 4}, 8, 2)
	k, err := LoadKernel(mem, bytes.NewReader(img), int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	if k.Format != "elf" || k.Entry != 0x1000002 || k.End != 0x100000c {
		t.Errorf("kernel %+v", k)
	}
	got, _ := mem.Slice(0x1000000, 12)
	if !bytes.Equal(got, []byte{1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0}) {
		t.Errorf("segment not loaded with zeroed bss: %v", got)
	}
}

func TestLoadELFRejectsBadFiles(t *testing.T) {
	mem := guestmem.New(32 << 20)
	good := makeELF(0x1000000, make([]byte, 64), 0, 0)
	le := binary.LittleEndian
	cases := map[string]func([]byte) []byte{
		"truncated header":   func(b []byte) []byte { return b[:40] },
		"truncated segment":  func(b []byte) []byte { return b[:len(b)-10] },
		"32-bit":             func(b []byte) []byte { b[4] = 1; return b },
		"not x86-64":         func(b []byte) []byte { le.PutUint16(b[18:], 183); return b },
		"phdrs outside file": func(b []byte) []byte { le.PutUint64(b[32:], 1<<40); return b },
		"too many phdrs":     func(b []byte) []byte { le.PutUint16(b[56:], 5000); return b },
		"below 1 MiB": func(b []byte) []byte {
			le.PutUint64(b[elfHeaderSize+24:], 0x1000)
			le.PutUint64(b[24:], 0x1000)
			return b
		},
		"beyond memory": func(b []byte) []byte {
			le.PutUint64(b[elfHeaderSize+24:], 64<<20)
			le.PutUint64(b[24:], 64<<20)
			return b
		},
		"huge memsz":      func(b []byte) []byte { le.PutUint64(b[elfHeaderSize+40:], ^uint64(0)); return b },
		"filesz > memsz":  func(b []byte) []byte { le.PutUint64(b[elfHeaderSize+40:], 1); return b },
		"offset overflow": func(b []byte) []byte { le.PutUint64(b[elfHeaderSize+8:], ^uint64(0)-2); return b },
		"entry outside":   func(b []byte) []byte { le.PutUint64(b[24:], 0x5000000); return b },
	}
	for name, mut := range cases {
		img := mut(append([]byte(nil), good...))
		if _, err := LoadKernel(mem, bytes.NewReader(img), int64(len(img))); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// makeBzImage builds a bzImage-shaped file: setup sectors with a header and
// a protected-mode part of kern bytes.
func makeBzImage(kern []byte, initSize uint32) []byte {
	le := binary.LittleEndian
	b := make([]byte, 5*512)
	b[0x1f1] = 4
	le.PutUint32(b[0x1f4:], uint32((len(kern)+15)/16))
	le.PutUint16(b[0x1fe:], boot.BootFlagMagic)
	b[0x201] = 0x66
	le.PutUint32(b[0x202:], boot.HeaderMagic)
	le.PutUint16(b[0x206:], 0x020f)
	le.PutUint32(b[0x214:], 0x100000)
	b[0x236] = boot.XLFKernel64
	le.PutUint32(b[0x238:], 2047)
	le.PutUint32(b[0x260:], initSize)
	return append(b, kern...)
}

func TestLoadBzImage(t *testing.T) {
	mem := guestmem.New(32 << 20)
	kern := bytes.Repeat([]byte{0xcc}, 4096)
	img := makeBzImage(kern, 8<<20)
	k, err := LoadKernel(mem, bytes.NewReader(img), int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	if k.Format != "bzImage" || k.Entry != 0x100200 || k.End != 0x100000+8<<20 {
		t.Errorf("kernel %+v", k)
	}
	if len(k.SetupHeader) < 0x268-boot.SetupHeaderOffset || k.SetupHeader[0] != 4 {
		t.Errorf("setup header not kept: %d bytes", len(k.SetupHeader))
	}
	got, _ := mem.Slice(0x100000, 4096)
	if !bytes.Equal(got, kern) {
		t.Error("protected-mode kernel not at 1 MiB")
	}

	bad := map[string][]byte{
		"truncated kernel":  makeBzImage(kern, 0)[:5*512+100],
		"truncated header":  img[:0x100],
		"no 64-bit entry":   func() []byte { b := append([]byte(nil), img...); b[0x236] = 0; return b }(),
		"old protocol":      func() []byte { b := append([]byte(nil), img...); b[0x206] = 0x02; return b }(),
		"init_size too big": makeBzImage(kern, 64<<20),
	}
	for name, b := range bad {
		if _, err := LoadKernel(mem, bytes.NewReader(b), int64(len(b))); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestUnknownFormat(t *testing.T) {
	mem := guestmem.New(32 << 20)
	for _, b := range [][]byte{nil, []byte("MZ"), bytes.Repeat([]byte("garbage!"), 200)} {
		if _, err := LoadKernel(mem, bytes.NewReader(b), int64(len(b))); err == nil {
			t.Errorf("%q accepted", b[:min(len(b), 8)])
		}
	}
}

func TestLoadInitrd(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "initrd")
	data := bytes.Repeat([]byte("initrd"), 1000)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	mem := guestmem.New(32 << 20)
	addr, size, err := LoadInitrd(mem, 32<<20, path, Kernel{End: 0x200000}, 0x7fffffff)
	if err != nil {
		t.Fatal(err)
	}
	if size != uint64(len(data)) || addr%4096 != 0 || addr+size > 32<<20 || addr < 0x200000 {
		t.Errorf("initrd at %#x size %d", addr, size)
	}
	got, _ := mem.Slice(addr, size)
	if !bytes.Equal(got, data) {
		t.Error("initrd bytes differ")
	}
	_, _, err = LoadInitrd(mem, 32<<20, path, Kernel{End: 32 << 20}, 0)
	if err == nil || !strings.Contains(err.Error(), "more memory") {
		t.Errorf("initrd over the kernel: %v", err)
	}
}

// The host's own Debian kernel is a real bzImage; load it when present.
func TestLoadHostKernel(t *testing.T) {
	matches, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(matches) == 0 {
		t.Skip("no /boot/vmlinuz-* on this host")
	}
	mem := guestmem.New(256 << 20)
	k, err := LoadKernelFile(mem, matches[0])
	if err != nil {
		t.Fatal(err)
	}
	if k.Format != "bzImage" || k.Entry != 0x100200 {
		t.Errorf("%s: %+v", matches[0], k)
	}
}

func FuzzLoadKernel(f *testing.F) {
	f.Add(makeELF(0x1000000, []byte{1, 2, 3}, 4, 0))
	f.Add(makeBzImage(make([]byte, 600), 4096))
	f.Add([]byte("\x7fELF"))
	f.Fuzz(func(t *testing.T, b []byte) {
		mem := guestmem.New(4 << 20)
		LoadKernel(mem, bytes.NewReader(b), int64(len(b)))
	})
}
