package vmm

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// A save that writes only what changed (the format: vmm/snapshot's
// layers.go). A machine restored from its own pause image may save its
// memory as a layer over the files it was restored from: only the pages
// the guest wrote since, which the page map tells without reading a page
// (untouched.go: a private copy is present and not a file page, or
// swapped). Whoever asks for the save says whether the files it was
// restored from are its own to keep (SaveLayer); this package cannot
// know. A restore composes the chain: each region maps the base private,
// then each layer's extents over it, bottom to top, with MAP_FIXED, so
// that the guest sees the top-most copy of each page and KVM's memory
// slots point at the composed mapping.

// srcLayer is one layer of a chain, open: its file and its extents, and
// where each extent's bytes start in the file.
type srcLayer struct {
	file *os.File
	ext  []snapshot.Extent
	at   []int64
}

func newSrcLayer(f *os.File, ext []snapshot.Extent) srcLayer {
	l := srcLayer{file: f, ext: ext, at: make([]int64, len(ext))}
	var at int64
	for i, e := range ext {
		l.at[i] = at
		at += int64(e.Len)
	}
	return l
}

// find says where the image's byte at off is in the layer's file, if the
// layer holds it.
func (l *srcLayer) find(off int64) (int64, bool) {
	i := sort.Search(len(l.ext), func(i int) bool { return int64(l.ext[i].Off+l.ext[i].Len) > off })
	if i == len(l.ext) || int64(l.ext[i].Off) > off {
		return 0, false
	}
	return l.at[i] + off - int64(l.ext[i].Off), true
}

// checkChainFiles checks that the files of a restore are those st names,
// by count and size (their sums are the daemon's to check before it
// starts the VMM: snapshot.VerifyChain reads them all): mem, the
// snapshot's own memory file, and layers, the files under it, base first.
func checkChainFiles(st *snapshot.State, mem *os.File, layers []*os.File) error {
	m := &st.Machine
	if len(layers) != len(m.Layers) {
		return fmt.Errorf("the snapshot's memory is a chain of %d files, %d were given", len(m.Layers)+1, len(layers)+1)
	}
	check := func(what string, f *os.File, want int64) error {
		fi, err := f.Stat()
		if err != nil {
			return fmt.Errorf("%s %s: %w", what, f.Name(), err)
		}
		if fi.Size() != want {
			return fmt.Errorf("%s %s holds %d bytes, the snapshot says %d: the chain is broken or out of order", what, f.Name(), fi.Size(), want)
		}
		return nil
	}
	for i, f := range layers {
		if err := check(fmt.Sprintf("memory layer %d", i), f, m.Layers[i].Size); err != nil {
			return err
		}
	}
	return check("memory file", mem, m.MemoryFileSize())
}

// newChainSource is the memory source of a restore of st: mem is the
// snapshot's own memory file, layers the files under it (checked by
// checkChainFiles). memSum is mem's sum from the state file's header, and
// hasSum false for one without: no layer may then be written over it
// (nothing would name it). The source keeps descriptors of its own.
func newChainSource(st *snapshot.State, mem *os.File, layers []*os.File, memSum uint32, hasSum bool) (_ *memSource, err error) {
	m := &st.Machine
	files := append(append([]*os.File(nil), layers...), mem)
	src, err := newMemSource(files[0], m.Memory)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			src.close()
		}
	}()
	for i, f := range files[1:] {
		dup, err := dupFile(f)
		if err != nil {
			return nil, err
		}
		ext := m.Extents
		if i+1 < len(m.Layers) {
			ext = m.Layers[i+1].Extents
		}
		src.layers = append(src.layers, newSrcLayer(dup, ext))
	}
	if hasSum {
		own := snapshot.Layer{Size: m.MemoryFileSize(), CRC32C: memSum, Extents: m.Extents}
		src.chain = append(append([]snapshot.Layer(nil), m.Layers...), own)
	}
	return src, nil
}

// mapGuestMemoryChain maps src's chain as guest RAM (mapMemoryChain) and
// registers each region as a KVM memory slot, with flags.
func mapGuestMemoryChain(vm *kvm.VM, src *memSource, layout []snapshot.MemoryRegion, flags uint32) (*guestmem.Regions, func(), error) {
	mem, unmap, err := mapMemoryChain(src, layout)
	if err != nil {
		return nil, nil, err
	}
	for i, r := range mem.List() {
		if err := vm.SetUserMemoryRegion(kvm.UserspaceMemoryRegion{
			Slot: uint32(i), Flags: flags, GuestPhysAddr: r.GuestAddr, MemorySize: uint64(len(r.Data)), UserspaceAddr: uint64(uintptrOf(r.Data)),
		}); err != nil {
			unmap()
			return nil, nil, fmt.Errorf("memory slot %d: %w", i, err)
		}
	}
	return mem, unmap, nil
}

// mapMemoryChain maps src's base as guest RAM (mapMemoryFile), then each
// layer's extents over it, private and copy-on-write as the base is, in
// their place: bottom to top, so a page shows its top-most copy.
func mapMemoryChain(src *memSource, layout []snapshot.MemoryRegion) (*guestmem.Regions, func(), error) {
	mem, unmap, err := mapMemoryFile(src.file, layout)
	if err != nil {
		return nil, nil, err
	}
	regs := mem.List()
	for li, l := range src.layers {
		for i, e := range l.ext {
			data, err := extentData(regs, layout, e)
			if err != nil { // snapshot.Validate refuses it; never map outside a region
				unmap()
				return nil, nil, fmt.Errorf("memory layer %d: %w", li, err)
			}
			addr := unsafe.Pointer(&data[0])
			if _, err := unix.MmapPtr(int(l.file.Fd()), l.at[i], addr, uintptr(e.Len),
				unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED|unix.MAP_NORESERVE); err != nil {
				unmap()
				return nil, nil, fmt.Errorf("map memory layer %d's extent %#x+%#x: %w", li, e.Off, e.Len, err)
			}
		}
	}
	return mem, unmap, nil
}

// errScattered: the guest's changes are in more extents than a layer may
// have.
var errScattered = errors.New("the changed pages are too scattered for a layer")

// changed reports whether a page map entry says the guest wrote the page
// of a private file mapping: a private copy, present (not a file page) or
// swapped out. A read page is the file's (or a layer's) and is not.
func changed(flags uint64) bool {
	return flags&pagemapSwapped != 0 || flags&(pagemapPresent|pagemapFile) == pagemapPresent
}

// layerExtents lists, from the page map, the extents of the pages the
// guest changed in mem (laid out as layout says), adjacent pages in one
// extent and none across regions; errScattered when they are more than
// maxExtents.
func layerExtents(mem *guestmem.Regions, layout []snapshot.MemoryRegion, pagemap io.ReaderAt, maxExtents int) ([]snapshot.Extent, error) {
	return pageExtents(mem, layout, pagemap, changed, maxExtents)
}

// pageExtents lists the extents of the pages of mem (laid out as layout
// says) whose page map entries pick picks, adjacent pages in one extent
// and none across regions; errScattered when they are more than
// maxExtents.
func pageExtents(mem *guestmem.Regions, layout []snapshot.MemoryRegion, pagemap io.ReaderAt, pick func(uint64) bool, maxExtents int) ([]snapshot.Extent, error) {
	regs := mem.List()
	if len(regs) != len(layout) {
		return nil, fmt.Errorf("memory layer: %d regions, the layout has %d", len(regs), len(layout))
	}
	flags := make([]uint64, writeRun/pageSize)
	var out []snapshot.Extent
	for i, r := range regs {
		if uint64(len(r.Data)) != layout[i].Size || len(r.Data)%pageSize != 0 {
			return nil, fmt.Errorf("memory layer: region %d is %#x bytes, the layout says %#x", i, len(r.Data), layout[i].Size)
		}
		inRun := false
		for chunk := 0; chunk < len(r.Data); chunk += writeRun {
			n := (min(chunk+writeRun, len(r.Data)) - chunk) / pageSize
			if err := pageFlags(pagemap, uintptrOf(r.Data[chunk:]), n, flags); err != nil {
				return nil, err
			}
			for p := 0; p < n; p++ {
				if !pick(flags[p]) {
					inRun = false
					continue
				}
				if inRun {
					out[len(out)-1].Len += pageSize
					continue
				}
				if len(out) == maxExtents {
					return nil, errScattered
				}
				out = append(out, snapshot.Extent{Off: layout[i].FileOffset + uint64(chunk+p*pageSize), Len: pageSize})
				inRun = true
			}
		}
	}
	return out, nil
}

// writeLayer writes the extents ext of guest memory into f, emptied
// first, one after the other, and sums them.
func writeLayer(f *os.File, mem *guestmem.Regions, layout []snapshot.MemoryRegion, ext []snapshot.Extent) (memWriteStats, error) {
	var stats memWriteStats
	if err := f.Truncate(0); err != nil {
		return stats, fmt.Errorf("memory layer: %w", err)
	}
	regs := mem.List()
	var sum snapshot.MemoryHash
	var at int64
	for _, e := range ext {
		data, err := extentData(regs, layout, e)
		if err != nil {
			return stats, fmt.Errorf("memory layer: %w", err)
		}
		if _, err := f.WriteAt(data, at); err != nil {
			return stats, fmt.Errorf("write memory layer: %w", err)
		}
		sum.Write(data)
		at += int64(len(data))
	}
	stats.FromMemory, stats.UsedPagemap, stats.Sum = at, true, sum.Sum32()
	return stats, nil
}

// extentData is the guest memory extent e of the image covers, in the
// region regs[i] that layout[i] places it in.
func extentData(regs []guestmem.Region, layout []snapshot.MemoryRegion, e snapshot.Extent) ([]byte, error) {
	for i, l := range layout {
		if i < len(regs) && e.Len > 0 && e.Off >= l.FileOffset && e.Off-l.FileOffset < l.Size && e.Len <= l.Size-(e.Off-l.FileOffset) {
			return regs[i].Data[e.Off-l.FileOffset : e.Off-l.FileOffset+e.Len], nil
		}
	}
	return nil, fmt.Errorf("extent %#x+%#x is not inside one region", e.Off, e.Len)
}
