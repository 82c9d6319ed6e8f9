package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/vmm/snapshot"
)

// Folding a pause chain in the background. A pause of a sandbox resumed
// from its own image writes only what changed, as a layer over that image
// (pausechain.go). Left alone, the chain grows with each pause until it
// reaches snapshot.MaxLayers, and the pause at the bound writes a whole
// image: that pause cost twice the first. So while a sandbox stays paused
// the daemon folds its chain into one whole image, and the next pause
// writes a small layer again.
//
// The fold needs no VMM: the daemon reads the chain's files and the state
// file's extents, composes the image chunk by chunk (the base, then each
// layer's extents over it, bottom to top, as a restore maps them), and
// writes it into paused.fold/ beside the image with a state file that
// names no chain (format version 1) and the new file's sum. It checks
// every file of the chain against the sum the state file gives it as it
// reads it, so a fold never blesses a damaged chain with a fresh sum: a
// chain that does not add up is left for the resume to refuse. Once
// written and synced, paused.fold/ and paused/ swap in one atomic rename
// (RENAME_EXCHANGE; where the file system has none, two renames with
// paused.prefold/ between them, which a restarted daemon undoes), and the
// old chain goes.
//
// A resume stops the fold first (stopFold): it cancels it, or waits when
// it is almost done, and a delete cancels it. Either way a resume sees
// paused/ as it was or as folded, never half written. A daemon that dies
// mid-fold leaves paused.fold/ (or paused.prefold/), which recoverFold
// cleans up or undoes at start.

const (
	foldDir    = pausedDir + ".fold"
	prefoldDir = pausedDir + ".prefold"
	// foldChunk is how much of the image a fold composes at a time; a
	// cancel is seen between chunks.
	foldChunk = 1 << 20
	// foldAlmostDone: a resume waits for a fold this far through (in
	// per mille of the image) rather than throw it away.
	foldAlmostDone = 900
)

// folding is a fold in progress, owned by the sandbox it folds (its fold
// field, under netMu).
type folding struct {
	cancel context.CancelFunc
	done   chan struct{}
	// total and composed are the image's size and how much is written.
	total, composed atomic.Int64
}

func (f *folding) almostDone() bool {
	t := f.total.Load()
	return t > 0 && f.composed.Load()*1000 >= t*foldAlmostDone
}

// foldHook, when set (tests), is called by a fold after each chunk.
var foldHook func(composed int64)

// startFold folds the chain of s's pause image in the background, if it
// is one. The caller holds s.life and s has just paused.
func (m *VMManager) startFold(s *vmSandbox) {
	paused := filepath.Join(s.dir, pausedDir)
	if imageChain(paused) == 0 {
		return
	}
	release, err := m.disk.reserve(m, "fold of a pause chain", s.id, imageBound(s.cfg.MemoryMiB))
	if err != nil {
		m.log.Info("a pause chain is not folded: no room under the image disk cap", "id", s.id, "error", err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &folding{cancel: cancel, done: make(chan struct{})}
	s.netMu.Lock()
	s.fold = f
	s.netMu.Unlock()
	go func() {
		defer close(f.done)
		defer release()
		defer cancel()
		start := time.Now()
		folded, err := foldImage(ctx, s.dir, f)
		switch {
		case err != nil && ctx.Err() != nil:
			m.log.Info("a pause chain's fold was cancelled", "id", s.id, "composed_bytes", f.composed.Load())
		case err != nil:
			m.log.Warn("a pause chain could not be folded; the next pause writes a whole image at the bound", "id", s.id, "error", err)
		case folded:
			m.log.Info("pause chain folded into a whole image", "id", s.id, "took_ms", time.Since(start).Milliseconds(),
				"image_bytes", dirUsage(paused))
		}
	}()
}

// stopFold ends s's fold, if one runs, and returns once it has: it is
// cancelled unless it is almost done (then it is waited for).
func (s *vmSandbox) stopFold() {
	s.netMu.Lock()
	f := s.fold
	s.fold = nil
	s.netMu.Unlock()
	if f == nil {
		return
	}
	if !f.almostDone() {
		f.cancel()
	}
	<-f.done
}

// foldImage folds the chain of the pause image in dir/paused into a whole
// image, in place: it reports whether there was a chain to fold. On any
// error (or ctx's end) paused/ is as it was and paused.fold/ is gone.
func foldImage(ctx context.Context, dir string, prog *folding) (folded bool, err error) {
	src, dst := filepath.Join(dir, pausedDir), filepath.Join(dir, foldDir)
	stateFile, err := os.Open(filepath.Join(src, snapStateFile))
	if err != nil {
		return false, err
	}
	defer stateFile.Close()
	st, err := snapshot.Decode(stateFile)
	if err != nil {
		return false, err
	}
	if !st.Machine.Layered() {
		return false, nil
	}
	topSum, err := snapshot.MemorySum(stateFile)
	if err != nil {
		return false, fmt.Errorf("the pause image's state file: %w", err)
	}
	os.RemoveAll(dst)
	if err := os.Mkdir(dst, 0o700); err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dst)
		}
	}()
	// The chain, base first, and the sum and extents of each file.
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	want := append(append([]snapshot.Layer(nil), st.Machine.Layers...),
		snapshot.Layer{Size: st.Machine.MemoryFileSize(), CRC32C: topSum, Extents: st.Machine.Extents})
	for i := range want {
		name := snapMemFile
		if i < len(st.Machine.Layers) {
			name = chainFile(i)
		}
		f, err := os.Open(filepath.Join(src, name))
		if err != nil {
			return false, fmt.Errorf("the pause chain: %w", err)
		}
		files = append(files, f)
	}
	out, err := os.OpenFile(filepath.Join(dst, snapMemFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return false, err
	}
	defer out.Close()
	sum, err := composeChain(ctx, out, files, want, st.Machine.ImageSize(), prog)
	if err != nil {
		return false, err
	}
	if err := out.Sync(); err != nil {
		return false, fmt.Errorf("sync the folded memory file: %w", err)
	}
	whole := *st
	whole.Machine.Layers, whole.Machine.Extents = nil, nil
	var b bytes.Buffer
	if err := snapshot.EncodeWithMemory(&b, &whole, sum); err != nil {
		return false, err
	}
	if err := writeSynced(filepath.Join(dst, snapStateFile), b.Bytes()); err != nil {
		return false, err
	}
	// Whatever else the image holds (none today) goes with it.
	if err := linkOthers(src, dst); err != nil {
		return false, err
	}
	if err := syncDir(dst); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := swapFolded(dir); err != nil {
		return false, err
	}
	trustImage(src)
	os.RemoveAll(dst) // the old chain
	syncDir(dir)
	return true, nil
}

// composeChain writes into out the image of size bytes that the chain
// files compose (files[0] the base, each later one a layer of want[i]'s
// extents over those before), leaving holes for pages all zeros, and
// returns its sum. It checks each file against want as it reads it.
func composeChain(ctx context.Context, out *os.File, files []*os.File, want []snapshot.Layer, size int64, prog *folding) (uint32, error) {
	for i, f := range files {
		fi, err := f.Stat()
		if err != nil {
			return 0, err
		}
		if fi.Size() != want[i].Size {
			return 0, fmt.Errorf("%w: memory file %d of the chain holds %d bytes, the state file says %d", errImageCorrupt, i, fi.Size(), want[i].Size)
		}
	}
	if err := out.Truncate(size); err != nil {
		return 0, fmt.Errorf("folded memory file: %w", err)
	}
	prog.total.Store(size)
	sums := make([]snapshot.MemoryHash, len(files))
	next := make([]int, len(files)) // each layer's next extent
	at := make([]int64, len(files)) // where that extent starts in its file
	var sum snapshot.MemoryHash
	buf := make([]byte, foldChunk)
	for off := int64(0); off < size; off += foldChunk {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		end := min(off+foldChunk, size)
		chunk := buf[:end-off]
		if err := readBase(files[0], chunk, off, &sums[0]); err != nil {
			return 0, err
		}
		for li := 1; li < len(files); li++ {
			ext := want[li].Extents
			for next[li] < len(ext) {
				e := ext[next[li]]
				lo, hi := max(int64(e.Off), off), min(int64(e.Off+e.Len), end)
				if lo >= end {
					break
				}
				if hi > lo {
					p := chunk[lo-off : hi-off]
					if _, err := files[li].ReadAt(p, at[li]+lo-int64(e.Off)); err != nil {
						return 0, fmt.Errorf("read memory layer %d: %w", li, err)
					}
					sums[li].Write(p)
				}
				if int64(e.Off+e.Len) > end {
					break // the rest of it is in the next chunk
				}
				at[li] += int64(e.Len)
				next[li]++
			}
		}
		if err := writeNonZero(out, chunk, off); err != nil {
			return 0, err
		}
		sum.Write(chunk)
		prog.composed.Store(end)
		if foldHook != nil {
			foldHook(end)
		}
	}
	for i := range files {
		if sums[i].Len() != want[i].Size || sums[i].Sum32() != want[i].CRC32C {
			return 0, fmt.Errorf("%w: memory file %d of the chain sums to crc32c %08x, the state file says %08x", errImageCorrupt, i, sums[i].Sum32(), want[i].CRC32C)
		}
	}
	return sum.Sum32(), nil
}

// readBase reads the base's bytes at off into p, holes as zeros (found
// with SEEK_DATA, not read), and adds them to h.
func readBase(f *os.File, p []byte, off int64, h *snapshot.MemoryHash) error {
	data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	if err == nil && data >= off+int64(len(p)) || errors.Is(err, unix.ENXIO) {
		clear(p)
		h.Zeros(int64(len(p)))
		return nil
	}
	if n, err := f.ReadAt(p, off); n < len(p) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("read the chain's base at %#x: %w", off, err)
	}
	h.Write(p)
	return nil
}

var zeroPage [pageBytes]byte

const pageBytes = 4096

// writeNonZero writes p at off in f but for its pages of zeros, which
// stay holes (f was truncated to its size, empty).
func writeNonZero(f *os.File, p []byte, off int64) error {
	for i := 0; i < len(p); {
		for i < len(p) && bytes.Equal(p[i:min(i+pageBytes, len(p))], zeroPage[:min(pageBytes, len(p)-i)]) {
			i += pageBytes
		}
		j := i
		for j < len(p) && !bytes.Equal(p[j:min(j+pageBytes, len(p))], zeroPage[:min(pageBytes, len(p)-j)]) {
			j += pageBytes
		}
		if j > i {
			j = min(j, len(p))
			if _, err := f.WriteAt(p[i:j], off+int64(i)); err != nil {
				return fmt.Errorf("write the folded memory file: %w", err)
			}
		}
		i = j
	}
	return nil
}

// writeSynced writes b as the file path, synced.
func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// linkOthers links into dst the files of the image in src that are not
// its memory, its state or its chain.
func linkOthers(src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		n := e.Name()
		if n == snapStateFile || n == snapMemFile || strings.HasPrefix(n, "layer.") || !e.Type().IsRegular() {
			continue
		}
		if err := os.Link(filepath.Join(src, n), filepath.Join(dst, n)); err != nil {
			return err
		}
	}
	return nil
}

// swapFolded puts the folded image of dir in paused/'s place, atomically:
// the old one is in paused.fold/ afterwards.
func swapFolded(dir string) error {
	src, dst := filepath.Join(dir, pausedDir), filepath.Join(dir, foldDir)
	err := unix.Renameat2(unix.AT_FDCWD, dst, unix.AT_FDCWD, src, unix.RENAME_EXCHANGE)
	if err == nil || !(errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP)) {
		return err
	}
	// No exchange here: two renames, which recoverFold completes.
	pre := filepath.Join(dir, prefoldDir)
	if err := os.Rename(src, pre); err != nil {
		return err
	}
	if err := os.Rename(dst, src); err != nil {
		os.Rename(pre, src)
		return err
	}
	return os.Rename(pre, dst)
}

// recoverFold tidies what a fold cut short by the daemon's end left in
// the sandbox directory dir: paused/ put back if a fold without an
// atomic exchange had moved it aside, and the fold's directories
// removed.
func recoverFold(dir string) {
	paused, pre := filepath.Join(dir, pausedDir), filepath.Join(dir, prefoldDir)
	if _, err := os.Stat(paused); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(pre); err == nil {
			os.Rename(pre, paused)
		}
	}
	os.RemoveAll(pre)
	os.RemoveAll(filepath.Join(dir, foldDir))
}
