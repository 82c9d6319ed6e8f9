package engine

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Templates kept resident. A template start maps the template's memory
// file copy-on-write and faults its pages in as the guest touches them:
// from the page cache when they are there, from the disk when the host
// evicted them (a template unused for a while, a host under memory
// pressure), and a cold page cache costs a start an order of magnitude.
// The operator chooses how hard the daemon holds the templates' memory
// files (serve --template-resident):
//
//	off    the page cache keeps what it keeps
//	cache  the daemon asks the kernel to read each memory file into the
//	       page cache (posix_fadvise WILLNEED) after a build, at start
//	       and every residentRefresh after: cheap, and evictable
//	lock   the daemon maps each memory file and mlocks it, within a
//	       budget (--template-resident-mib): the pages cannot be evicted.
//	       A template that would pass the budget, or that the host
//	       refuses to lock (RLIMIT_MEMLOCK), is cached instead, and the
//	       log says so.
//
// Locked bytes are host memory no sandbox can use: Capacity reports them
// (template_locked_mib). A locked mapping is shared, read-only and the
// daemon's own; a fork's private copy-on-write mapping of the same file
// shares its page cache pages, so locking costs the file's size once.

// ResidentMode is how the daemon keeps templates' memory resident.
type ResidentMode string

// The modes of --template-resident.
const (
	ResidentOff   ResidentMode = "off"
	ResidentCache ResidentMode = "cache"
	ResidentLock  ResidentMode = "lock"
)

// ParseResidentMode checks a --template-resident value.
func ParseResidentMode(s string) (ResidentMode, error) {
	switch m := ResidentMode(s); m {
	case ResidentOff, ResidentCache, ResidentLock:
		return m, nil
	case "":
		return ResidentOff, nil
	}
	return "", fmt.Errorf("template residency %q: want off, cache or lock", s)
}

// residentRefresh is how often cache mode asks again for the templates'
// memory files to be read in.
const residentRefresh = 5 * time.Minute

// residentOS is what residency asks of the kernel; tests count the calls.
type residentOS interface {
	willNeed(f *os.File, size int64) error
	lock(f *os.File, size int64) ([]byte, error)
	unlock(b []byte) error
}

// residentKernel is the residentOS of new residencies (tests replace it).
var residentKernel residentOS = kernelResident{}

// residency holds the templates' memory files resident: one owner for
// every mapping it locked.
type residency struct {
	mode   ResidentMode
	budget int64 // bytes lock mode may lock
	os     residentOS
	log    *slog.Logger

	mu        sync.Mutex
	locked    map[string][]byte // template key → its locked mapping
	lockedSum int64
	refreshed time.Time
	closed    bool
}

func newResidency(mode ResidentMode, budget int64, log *slog.Logger) *residency {
	if mode == "" {
		mode = ResidentOff
	}
	return &residency{mode: mode, budget: budget, os: residentKernel, log: log, locked: map[string][]byte{}}
}

// keep makes the memory file path of template key resident as the mode
// says. It never fails: what it cannot do it logs.
func (r *residency) keep(key, path string) {
	if r == nil || r.mode == ResidentOff {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if _, ok := r.locked[key]; ok {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		r.log.Warn("a template's memory file cannot be kept resident", "key", key, "error", err)
		return
	}
	defer f.Close() // a mapping outlives its descriptor
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return
	}
	size := fi.Size()
	if r.mode == ResidentLock {
		if r.lockedSum+size > r.budget {
			r.log.Warn("a template's memory would pass the resident budget; it is cached, not locked", "key", key,
				"size_mib", mib(size), "locked_mib", mib(r.lockedSum), "budget_mib", mib(r.budget))
		} else if b, err := r.os.lock(f, size); err != nil {
			r.log.Warn("a template's memory cannot be locked; it is cached instead", "key", key, "error", err)
		} else {
			r.locked[key] = b
			r.lockedSum += size
			r.log.Info("template memory locked resident", "key", key, "size_mib", mib(size), "locked_mib", mib(r.lockedSum))
			return
		}
	}
	if err := r.os.willNeed(f, size); err != nil {
		r.log.Warn("a template's memory file cannot be read ahead", "key", key, "error", err)
	}
}

// drop lets go of template key's memory (its files are going).
func (r *residency) drop(key string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropLocked(key)
}

func (r *residency) dropLocked(key string) {
	b, ok := r.locked[key]
	if !ok {
		return
	}
	delete(r.locked, key)
	r.lockedSum -= int64(len(b))
	if err := r.os.unlock(b); err != nil {
		r.log.Warn("unmap a template's locked memory", "key", key, "error", err)
	}
}

// due reports whether cache mode's refresh is due at now, and marks it
// done.
func (r *residency) due(now time.Time) bool {
	if r == nil || r.mode != ResidentCache {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.refreshed) < residentRefresh {
		return false
	}
	r.refreshed = now
	return true
}

// lockedBytes is the memory locked for templates now.
func (r *residency) lockedBytes() int64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lockedSum
}

// close lets go of every locked mapping; keep does nothing after it.
// Idempotent.
func (r *residency) close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for key := range r.locked {
		r.dropLocked(key)
	}
}

// kernelResident is residentOS on the host's kernel.
type kernelResident struct{}

func (kernelResident) willNeed(f *os.File, size int64) error {
	return unix.Fadvise(int(f.Fd()), 0, size, unix.FADV_WILLNEED)
}

func (kernelResident) lock(f *os.File, size int64) ([]byte, error) {
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map: %w", err)
	}
	if err := unix.Mlock(b); err != nil {
		unix.Munmap(b)
		return nil, fmt.Errorf("mlock: %w", err)
	}
	return b, nil
}

func (kernelResident) unlock(b []byte) error { return unix.Munmap(b) }
