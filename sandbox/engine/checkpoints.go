package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// Checkpoints (time travel; sandbox/checkpoints.go says what they are to
// callers). The VMM of a sandbox created with Config.Checkpoints logs the
// pages its guest and devices write (control.Spec.Checkpoints), and each
// checkpoint (control.Checkpoint) writes a memory file and a state file:
// a whole image, or a layer of the pages written since the checkpoint
// before. The VMM records only that one layer's extents; the chain is
// the daemon's, kept here, per sandbox, in memory:
//
//	<dir>/base.mem    the whole image under the first layer when it is
//	                  not a checkpoint: the memory file a template start
//	                  or a fork was restored from, hard-linked here
//	<dir>/N.state     checkpoint N's state file (as the VMM wrote it)
//	<dir>/N.mem       its memory file
//	<dir>/N.partial.* one being written, removed on failure
//
// <dir> is the sandbox's checkpoints/ directory, or one under
// Options.CheckpointDir. The daemon computes each memory file's size and
// CRC-32C itself and checks the extents the VMM says it wrote (a
// compromised VMM could lie), so a restore composes only what the daemon
// measured (checkpointstate.go). A restart of the daemon drops every
// checkpoint (recorded nowhere but here) and their files.
//
// Bounds: past Config.Checkpoints.Keep checkpoints, past
// Options.CheckpointMaxBytes on disk, or when the newest one's chain
// passes maxCheckpointChain files or maxChainExtents extents, the oldest
// is dropped: what lies under the one after it is folded into a new base
// (dropOldest). Every file here is the daemon's own: a fold writes a new
// file and never one a VMM may have mapped.

// Chain bounds (vmm/snapshot's layers.go and checkpoint.go; a restore's
// VMM checks them again).
const (
	// maxCheckpointChain is the most memory files a restore composes.
	maxCheckpointChain = snapshot.MaxCheckpointChain
	// maxChainExtents bounds the extents of a composed chain in all: each
	// is a mapping in the restored VMM (vm.max_map_count).
	maxChainExtents = snapshot.MaxChainExtents
	// maxCheckpointExtents bounds one checkpoint's layer: the VMM
	// coalesces its extents to this many.
	maxCheckpointExtents = snapshot.MaxCheckpointExtents
)

// ckFile is one memory file of a chain, as the daemon measured it.
type ckFile struct {
	path string
	size int64
	crc  uint32
	// ext are a layer's extents; nil for a whole image.
	ext []snapshot.Extent
}

func (f *ckFile) whole() bool { return f.ext == nil }

func (f *ckFile) layer() snapshot.Layer {
	return snapshot.Layer{Size: f.size, CRC32C: f.crc, Extents: f.ext}
}

// ckPoint is one kept checkpoint.
type ckPoint struct {
	info  sandbox.CheckpointInfo
	state string // its state file
	mem   ckFile
}

// ckChain is a sandbox's checkpoints. mu serialises records, restores
// and drops; a restore holds the sandbox's life lock first.
type ckChain struct {
	mu       sync.Mutex
	dir      string
	cfg      sandbox.CheckpointConfig
	maxBytes int64 // 0: no budget
	// base is the whole image under the first checkpoint when it is a
	// layer and not over a checkpoint; nil when there is none.
	base   *ckFile
	points []*ckPoint
	next   int // the next checkpoint's number
	// full asks the next checkpoint for a whole image: the VMM's log of
	// written pages is not relative to a kept checkpoint (a failed
	// record, a resume, no base).
	full bool
	// resumed says the VMM was restored from a pause since the last
	// record (resumeLocked): its log is relative to the resume, so the
	// next record is a whole image.
	resumed atomic.Bool
	closed  bool
	// trims are the drops past the bounds running in the background
	// (trimLater); close ends them (stopTrims).
	trims     sync.WaitGroup
	trimCtx   context.Context
	stopTrims context.CancelFunc
}

func newCkChain(dir string, cfg sandbox.CheckpointConfig, maxBytes int64) *ckChain {
	c := &ckChain{dir: dir, cfg: cfg.WithDefaults(), maxBytes: maxBytes, next: 1, full: true}
	c.trimCtx, c.stopTrims = context.WithCancel(context.Background())
	return c
}

// checkpointDir is where the checkpoints of the sandbox in sdir go.
func (m *VMManager) checkpointDir(id, sdir string) string {
	if m.opt.CheckpointDir != "" {
		return filepath.Join(m.opt.CheckpointDir, id)
	}
	return filepath.Join(sdir, "checkpoints")
}

func (c *ckChain) statePath(n int) string { return filepath.Join(c.dir, strconv.Itoa(n)+".state") }
func (c *ckChain) memPath(n int) string   { return filepath.Join(c.dir, strconv.Itoa(n)+".mem") }

// find returns the index of checkpoint n, or -1.
func (c *ckChain) find(n int) int {
	for i, p := range c.points {
		if p.info.N == n {
			return i
		}
	}
	return -1
}

// chain returns the memory files a restore of points[i] composes, base
// first, its own last: from the newest whole image at or under it (or
// the base) up. It is an error when nothing whole lies under it.
func (c *ckChain) chain(i int) ([]*ckFile, error) {
	var files []*ckFile
	for j := i; j >= 0; j-- {
		files = append(files, &c.points[j].mem)
		if c.points[j].mem.whole() {
			return reverse(files), nil
		}
	}
	if c.base == nil {
		return nil, fmt.Errorf("checkpoint %d is a layer with no whole image under it", c.points[i].info.N)
	}
	return reverse(append(files, c.base)), nil
}

func reverse(fs []*ckFile) []*ckFile {
	for i, j := 0, len(fs)-1; i < j; i, j = i+1, j-1 {
		fs[i], fs[j] = fs[j], fs[i]
	}
	return fs
}

// chainBounds reports the files and extents a restore of points[i]
// composes; it is an error when there is no whole image under it.
func (c *ckChain) chainBounds(i int) (files, extents int, err error) {
	ch, err := c.chain(i)
	if err != nil {
		return 0, 0, err
	}
	for _, f := range ch {
		extents += len(f.ext)
	}
	return len(ch), extents, nil
}

// bytes is what the chain holds on disk.
func (c *ckChain) bytes() int64 {
	var n int64
	if c.base != nil {
		n += diskUsage(c.base.path)
	}
	for _, p := range c.points {
		n += c.pointBytes(p)
	}
	return n
}

func (c *ckChain) pointBytes(p *ckPoint) int64 {
	return diskUsage(p.mem.path) + diskUsage(p.state)
}

// infos lists the kept checkpoints, oldest first.
func (c *ckChain) infos() []sandbox.CheckpointInfo {
	out := make([]sandbox.CheckpointInfo, 0, len(c.points))
	for i := range c.points {
		out = append(out, c.infoAt(i))
	}
	return out
}

func (c *ckChain) infoAt(i int) sandbox.CheckpointInfo {
	p := c.points[i]
	in := p.info
	in.SizeBytes = c.pointBytes(p)
	if i == 0 && c.base != nil {
		in.SizeBytes += diskUsage(c.base.path)
	}
	if files, _, err := c.chainBounds(i); err == nil {
		in.Depth = files
	}
	return in
}

// removePoint removes p's files.
func removePoint(p *ckPoint) {
	os.Remove(p.state)
	os.Remove(p.mem.path)
}

// dropAfter drops the checkpoints after index i.
func (c *ckChain) dropAfter(i int) {
	for _, p := range c.points[i+1:] {
		removePoint(p)
	}
	c.points = c.points[:i+1]
}

// close drops every checkpoint and the directory; a record after it fails.
func (c *ckChain) close() {
	c.mu.Lock()
	c.closed = true // no record starts a trim from here
	c.mu.Unlock()
	c.stopTrims()
	c.trims.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.points, c.base = nil, nil
	os.RemoveAll(c.dir)
}

// linkOrCopy makes dst the file src: a hard link, or where src is on
// another file system a copy (sparse where the source reads as holes is
// not kept: a copy is the fallback).
func linkOrCopy(src, dst string) error {
	err := os.Link(src, dst)
	if err == nil {
		return nil
	}
	var le *os.LinkError
	if !errors.As(err, &le) || le.Err != syscall.EXDEV {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := out.ReadFrom(in); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	if err := out.Close(); err != nil {
		os.Remove(dst)
		return err
	}
	return nil
}

// restartCheckpoints gives the sandboxes an earlier daemon left (recover)
// empty chains: their checkpoints were recorded in that daemon's memory
// only, so they are dropped, files and all, and said so. Whatever else
// lies in Options.CheckpointDir is no live sandbox's and goes too.
func (m *VMManager) restartCheckpoints() {
	live := map[string]bool{}
	for _, s := range m.sandboxes {
		if s.internal || s.cfg.Checkpoints == nil {
			continue
		}
		dir := m.checkpointDir(s.id, s.dir)
		if _, err := os.Stat(dir); err == nil {
			m.log.Warn("a daemon restart drops a sandbox's checkpoints; its next one is a whole image", "id", s.id)
		}
		os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			m.log.Error("checkpoint directory", "id", s.id, "error", err)
		}
		s.ck = newCkChain(dir, *s.cfg.Checkpoints, m.opt.CheckpointMaxBytes)
		live[s.id] = true
	}
	if m.opt.CheckpointDir == "" {
		return
	}
	ents, _ := os.ReadDir(m.opt.CheckpointDir)
	for _, e := range ents {
		if !live[e.Name()] {
			os.RemoveAll(filepath.Join(m.opt.CheckpointDir, e.Name()))
		}
	}
}
