package vmm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// BenchmarkWriteMemory is a save's memory file write of a guest that
// touched all of its 256 MiB (no page map, no sync), the digest summed as
// it goes: go test ./vmm -run X -bench WriteMemory -benchtime 5x.
func BenchmarkWriteMemory(b *testing.B) {
	const mib = 256
	mem := guestmem.New(mib << 20)
	data := mem.List()[0].Data
	for i := range data {
		data[i] = byte(i*13 + 1)
	}
	layout := []snapshot.MemoryRegion{{GuestAddr: 0, Size: mib << 20}}
	f, err := os.Create(filepath.Join(b.TempDir(), "mem"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.SetBytes(mib << 20)
	b.ResetTimer()
	for range b.N {
		if _, err := writeMemory(f, mem, layout, nil, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}
