package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/vmm/snapshot"
)

// Durable images. A machine image (a snapshot's, a template's, a paused
// sandbox's) is two files the VMM writes and syncs, a record the daemon
// writes beside them (snapshot.json, template.json), and a directory
// renamed into place when all are complete. fsync of a file does not make
// its name durable, nor does rename: after a power cut the directory may
// hold the old names, or the new name with nothing in it. So the daemon
// syncs what it writes (writeFileSync), syncs a directory's entries before
// renaming it, and the parent after (renameDurable), as ext4 and xfs need.
//
// The bytes are checked too: the VMM sums the memory file as it writes it
// and keeps the sum in the state file (vmm/snapshot's memdigest.go); before
// a VMM restores an image, the daemon sums the memory file it hands over
// (the very descriptor) and refuses an image whose sum differs (verifyImage),
// rather than start a guest on garbage. Summing reads the file's data, not
// its holes, at the CRC's speed from the page cache (6.3 GiB/s on the
// 2-core development VM, BenchmarkSumFile; the same as crc32c alone, so
// 512 MiB of a guest's touched memory costs about 80 ms), and the save
// sums as it writes at the same speed.
//
// What the digest guards against is an image torn by a crash or power cut
// (the daemon restarts after either) or rotten on disk between daemon
// runs. So an image is checked once per identity (device, inode, size and
// change times: any write to either file changes them), and an image this
// daemon's own VMM just wrote and synced is trusted as written
// (trustImage): a resume after a pause, and the forks of a snapshot or a
// template, pay nothing in the daemon that made them; after a restart,
// the first restore of each image pays the check.

// errImageCorrupt is wrapped by a restore refused because its memory file
// does not match its state file's digest (or the state file's header is
// cut short): the image is damaged for good, unlike a restore that failed
// for want of memory or time.
var errImageCorrupt = errors.New("machine image is damaged")

// syncDir makes dir's entries (names made, renamed or removed in it)
// durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// writeFileSync is os.WriteFile that makes the contents durable before it
// returns (the name is the directory's sync: renameDurable).
func writeFileSync(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// renameDurable renames from to to durably: a directory's own entries are
// synced first (so that to, once it exists, holds them), and the parent
// directories after. It fails, changing nothing, when the rename cannot
// be made durable or is refused; once the rename is made it succeeds, and
// a parent that fails its sync is logged: the name is in place, and a
// caller told otherwise would clean up after an image that is there.
func renameDurable(from, to string) error {
	if fi, err := os.Stat(from); err == nil && fi.IsDir() {
		if err := syncDir(from); err != nil {
			return err
		}
	}
	if err := os.Rename(from, to); err != nil {
		return err
	}
	parents := []string{filepath.Dir(to)}
	if filepath.Dir(from) != filepath.Dir(to) {
		parents = append(parents, filepath.Dir(from))
	}
	for _, p := range parents {
		if err := syncDir(p); err != nil {
			imageChecks.logger().Warn("a rename may not survive a crash: its directory did not sync", "to", to, "error", err)
		}
	}
	return nil
}

// imageChecks is the daemon's record of the images verified.
var imageChecks = &imageChecker{ok: map[imageID]struct{}{}}

// maxImageChecks bounds imageChecker's record; past it, it starts afresh.
const maxImageChecks = 1024

// imageChecker verifies images (verifyImage) and remembers which it has.
type imageChecker struct {
	log atomic.Pointer[slog.Logger]
	mu  sync.Mutex
	ok  map[imageID]struct{}
}

// imageID names one version of an image: its two files' identities and
// change times.
type imageID struct{ state, mem fileID }

type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

func fileIDOf(f *os.File) (fileID, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return fileID{}, err
	}
	return fileIDOfStat(&st), nil
}

func fileIDOfStat(st *syscall.Stat_t) fileID {
	return fileID{dev: uint64(st.Dev), ino: st.Ino, size: st.Size,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// setLog is where the checker logs (the manager's logger).
func (c *imageChecker) setLog(l *slog.Logger) {
	if l != nil {
		c.log.Store(l)
	}
}

func (c *imageChecker) logger() *slog.Logger {
	if l := c.log.Load(); l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}

// verifyImage checks the memory file mem against the digest in the state
// file state, both as opened for the VMM: nil when they match (or were
// found to match before), an error wrapping errImageCorrupt when not. A
// state file with no digest (an older cellvm's) or one that is no state
// file at all is left to the VMM, which refuses what it cannot read.
func verifyImage(state, mem *os.File) error {
	return imageChecks.verify(state, mem)
}

// verifyImageDir checks the image in dir (its state and memory files) as
// a restore does (verifyImage), for a caller that must tell a damaged
// image (errImageCorrupt, or a file gone) from a restore that failed for
// another reason: a template is dropped for the first, kept for the other.
func verifyImageDir(dir string) error {
	state, err := os.Open(filepath.Join(dir, snapStateFile))
	if err != nil {
		return fmt.Errorf("machine image: %w", err)
	}
	defer state.Close()
	mem, err := os.Open(filepath.Join(dir, snapMemFile))
	if err != nil {
		return fmt.Errorf("machine image: %w", err)
	}
	defer mem.Close()
	return verifyImage(state, mem)
}

// trustImage records the image in dir, just written and synced by this
// daemon's VMM (and renamed into place), as good: its restores in this
// daemon's life skip the sum unless its files change. An image that
// cannot be read is left to be checked.
func trustImage(dir string) {
	var id imageID
	for _, f := range []struct {
		name string
		id   *fileID
	}{{snapStateFile, &id.state}, {snapMemFile, &id.mem}} {
		fi, err := os.Stat(filepath.Join(dir, f.name))
		if err != nil {
			return
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return
		}
		*f.id = fileIDOfStat(st)
	}
	imageChecks.remember(id)
}

func (c *imageChecker) verify(state, mem *os.File) error {
	if state == nil || mem == nil {
		return nil
	}
	sid, err := fileIDOf(state)
	if err != nil {
		return fmt.Errorf("machine image: %w", err)
	}
	mid, err := fileIDOf(mem)
	if err != nil {
		return fmt.Errorf("machine image: %w", err)
	}
	id := imageID{sid, mid}
	c.mu.Lock()
	_, done := c.ok[id]
	c.mu.Unlock()
	if done {
		return nil
	}
	start := time.Now()
	err = snapshot.VerifyMemory(state, mem)
	took := time.Since(start)
	switch {
	case errors.Is(err, snapshot.ErrNoMemorySum):
		c.logger().Warn("machine image has no memory digest (written by an older cellvm); restored unchecked", "state", state.Name())
		c.remember(id)
		return nil
	case errors.Is(err, snapshot.ErrNotStateFile), errors.Is(err, snapshot.ErrVersion):
		return nil // the VMM says what is wrong with it
	case errors.Is(err, snapshot.ErrMemoryCorrupt), errors.Is(err, snapshot.ErrCorrupt):
		c.logger().Error("machine image refused: it is damaged", "state", state.Name(), "error", err)
		return fmt.Errorf("%w: %w", errImageCorrupt, err)
	case err != nil:
		return fmt.Errorf("machine image: %w", err) // could not read it
	}
	c.logger().Info("machine image verified", "memory", mem.Name(), "memory_mib", mid.size>>20, "took_ms", took.Milliseconds())
	c.remember(id)
	return nil
}

func (c *imageChecker) remember(id imageID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ok) >= maxImageChecks {
		clear(c.ok)
	}
	c.ok[id] = struct{}{}
}
