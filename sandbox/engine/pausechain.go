package engine

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// A pause chain (vmm/snapshot's layers.go). A sandbox resumed from its
// own pause image maps that image's memory copy-on-write, and its next
// pause need write only the pages the guest wrote since: the VMM writes
// them as a layer over the files it was restored from (SnapshotLayer),
// and the new image keeps those files under its own memory file:
//
//	paused/vm.state   names the chain: layer.0 (the base), layer.1, ...,
//	                  each with its size and sum, then vm.mem's extents
//	paused/vm.mem     the layer of this pause (or a whole image)
//	paused/layer.N    the files under it, base first
//
// The files under it are hard links to the backing image's (the last
// resume's), made before the save, so that nothing can fail after the VMM
// ended: a save that wrote a whole image (the VMM decides: at
// snapshot.MaxLayers files it flattens the chain, and a booted or
// template-started machine has no chain of its own) just removes them.
//
// Only a sandbox's own pause image is ever a chain's file. A snapshot of a
// paused sandbox resumes it first and is written whole (control.Snapshot,
// copying the untouched pages from the chain), and a fork or template
// start restores from such a whole image and never layers over it: forks
// and templates share their files, and nothing here writes to, or depends
// on, a file another sandbox uses. A delete removes the sandbox's
// directory, chain and all.

// chainFile is the name of file i under an image's memory file.
func chainFile(i int) string { return "layer." + strconv.Itoa(i) }

// imageChain is how many files lie under the memory file of the image in
// dir, as its state file says: 0 for a whole image, and for a state file
// that cannot be read (the VMM that restores it says what is wrong).
func imageChain(dir string) int {
	st, err := snapshot.ReadFile(filepath.Join(dir, snapStateFile))
	if err != nil {
		return 0
	}
	return len(st.Machine.Layers)
}

// linkChain links into tmp, as layer.0 ... layer.k, the chain the backing
// image of the sandbox in dir would be under a layer written over it: its
// own files under its memory file, then its memory file. It reports
// whether it did; a sandbox with no backing image of its own (booted,
// started from a template or a snapshot) has none, and its pause writes
// a whole image.
func linkChain(dir, tmp string) (bool, error) {
	backing := filepath.Join(dir, backingDir)
	if _, err := os.Stat(filepath.Join(backing, snapMemFile)); err != nil {
		return false, nil
	}
	k := imageChain(backing)
	names := make([]string, 0, k+1)
	for i := range k {
		names = append(names, chainFile(i))
	}
	names = append(names, snapMemFile)
	for i, name := range names {
		if err := os.Link(filepath.Join(backing, name), filepath.Join(tmp, chainFile(i))); err != nil {
			return false, fmt.Errorf("keep the pause chain: %w", err)
		}
	}
	return true, nil
}

// settleChain makes the image in tmp, just saved, hold the chain its state
// file names and no other file: the links linkChain made are removed for
// a whole image, and a layer over another chain than the one linked is an
// error (the image cannot be restored).
func settleChain(tmp string, linked bool) error {
	n := imageChain(tmp)
	if n > 0 && !linked {
		return fmt.Errorf("the VMM wrote a layer over %d files, and none were kept for it", n)
	}
	for i := n; ; i++ {
		err := os.Remove(filepath.Join(tmp, chainFile(i)))
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			return fmt.Errorf("pause chain: %w", err)
		}
	}
	for i := range n {
		if _, err := os.Stat(filepath.Join(tmp, chainFile(i))); err != nil {
			return fmt.Errorf("the VMM wrote a layer over %d files, the image holds fewer: %w", n, err)
		}
	}
	return nil
}

// openChain opens the files under the memory file of the image in dir
// into st's layer slots, as its state file (already open in st) names
// them, and checks them against it (verifyChain).
func openChain(dir string, st *vmStart) error {
	state := st.files[control.SlotRestoreState]
	img, err := snapshot.Decode(io.NewSectionReader(state, 0, math.MaxInt64))
	if err != nil {
		return nil // the VMM says what is wrong with it
	}
	var files []*os.File
	for i := range img.Machine.Layers {
		f, err := os.Open(filepath.Join(dir, chainFile(i)))
		if err != nil {
			return fmt.Errorf("machine image: its memory is a chain of %d files: %w", len(img.Machine.Layers)+1, err)
		}
		st.files[control.LayerSlot(i)] = f
		files = append(files, f)
	}
	if err := layerChecks.verify(img, files); err != nil {
		return err
	}
	st.spec.Restore.Layers = len(files)
	return nil
}

// layerChecks remembers the chain files verified, by identity and sum, so
// that a resume sums only the files it has not seen: a pause's layer is
// small, but the base is a whole image.
var layerChecks = &layerChecker{ok: map[layerKey]struct{}{}}

type layerChecker struct {
	mu sync.Mutex
	ok map[layerKey]struct{}
}

// layerKey is a chain file's identity and the sum it was found to have.
// Its change time is left out: linking a file into the next image
// changes it, and the threat is a torn or rotten file (which changes its
// size or modification time when written), not a forger.
type layerKey struct {
	dev, ino    uint64
	size, mtime int64
	sum         uint32
}

func layerKeyOf(f *os.File, sum uint32) (layerKey, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return layerKey{}, err
	}
	return layerKey{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), sum: sum}, nil
}

// remember records f as verified to sum to sum.
func (c *layerChecker) remember(f *os.File, sum uint32) {
	k, err := layerKeyOf(f, sum)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ok) >= maxImageChecks {
		clear(c.ok)
	}
	c.ok[k] = struct{}{}
}

// verify checks the chain files under img's memory file: each of the size
// and sum img names, in order (snapshot.VerifyChain), but for those seen
// before.
func (c *layerChecker) verify(img *snapshot.State, files []*os.File) error {
	var unseen []int
	for i, f := range files {
		k, err := layerKeyOf(f, img.Machine.Layers[i].CRC32C)
		if err != nil {
			return fmt.Errorf("machine image: %w", err)
		}
		c.mu.Lock()
		_, seen := c.ok[k]
		c.mu.Unlock()
		if !seen || k.size != img.Machine.Layers[i].Size {
			unseen = append(unseen, i)
		}
	}
	if len(unseen) == 0 {
		return nil
	}
	if err := snapshot.VerifyChain(img, files); err != nil {
		return fmt.Errorf("%w: %w", errImageCorrupt, err)
	}
	for i, f := range files {
		c.remember(f, img.Machine.Layers[i].CRC32C)
	}
	return nil
}
