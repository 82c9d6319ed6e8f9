package engine

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cellvm/cellvm/sandbox"
)

// The snapshot disk cap (Options.MaxImageBytes) bounds what machine images
// take on the host's disk: snapshots, the images of paused sandboxes, and
// the images resumed VMMs still map. A snapshot or a pause reserves the
// most its image can take (the guest's memory and a margin for the state
// file) before anything is written, so one that would pass the cap is
// refused with ErrFull and writes nothing; what is on disk is measured
// (memory files have holes), not estimated.

// stateFileMargin bounds a state file (vCPUs, interrupt controllers,
// devices): a few KiB per vCPU.
const stateFileMargin = 1 << 20

// imageBound is the most an image of a machine with memMiB of memory
// takes on disk.
func imageBound(memMiB int) int64 { return int64(memMiB)<<20 + stateFileMargin }

// diskCap holds the bytes reserved by images being written.
type diskCap struct {
	mu       sync.Mutex
	reserved int64
}

// reserve claims n bytes under the cap for what (a "snapshot" or a
// "pause") of sandbox id; release gives them back once the image is
// written (and so measured) or abandoned.
func (d *diskCap) reserve(m *VMManager, what, id string, n int64) (release func(), err error) {
	max := m.opt.MaxImageBytes
	if max <= 0 {
		return func() {}, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	used := m.imageDiskUse() + d.reserved
	if used+n > max {
		return nil, fmt.Errorf("%w: a %s of sandbox %s could take %d MiB of disk, and machine images use %d MiB of the %d MiB cap "+
			"(serve --snapshot-max-mib); delete snapshots or paused sandboxes", sandbox.ErrFull, what, id, mib(n), mib(used), mib(max))
	}
	d.reserved += n
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			d.reserved -= n
			d.mu.Unlock()
		})
	}, nil
}

func mib(n int64) int64 { return (n + 1<<20 - 1) >> 20 }

// imageDiskUse is what complete machine images take on disk now; images
// being written are counted by their reservations.
func (m *VMManager) imageDiskUse() int64 { return imageDiskUseIn(m.opt.StateDir) }

// imageDiskUseIn is what complete machine images take on disk in the
// state directory stateDir.
func imageDiskUseIn(stateDir string) int64 {
	var dirs []string
	snapshots := snapshotsDirIn(stateDir)
	if ents, err := os.ReadDir(snapshots); err == nil {
		for _, e := range ents {
			if e.IsDir() && !strings.HasSuffix(e.Name(), partialSuffix) {
				dirs = append(dirs, filepath.Join(snapshots, e.Name()))
			}
		}
	}
	for _, name := range []string{pausedDir, backingDir} {
		d, _ := filepath.Glob(filepath.Join(stateDir, "sandboxes", "sb-*", name))
		dirs = append(dirs, d...)
	}
	var n int64
	for _, d := range dirs {
		n += dirUsage(d)
	}
	return n
}

// dirUsage is the bytes the files under dir take on disk.
func dirUsage(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			n += diskUsage(p)
		}
		return nil
	})
	return n
}

// sweepPartialSnapshots removes snapshots an earlier daemon left half
// written.
func (m *VMManager) sweepPartialSnapshots() {
	d, _ := filepath.Glob(filepath.Join(m.snapshotsDir(), "*"+partialSuffix))
	for _, p := range d {
		m.log.Warn("removing a snapshot an earlier daemon left half written", "dir", p)
		os.RemoveAll(p)
	}
}
