package engine

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/sandbox"
)

// countingResident is a residentOS that counts what it is asked, by file
// name, and locks nothing (a lock is a slice of the file's size).
type countingResident struct {
	mu       sync.Mutex
	advised  map[string]int
	locks    map[string]int
	unlocked int64
	failLock error
}

func newCountingResident() *countingResident {
	return &countingResident{advised: map[string]int{}, locks: map[string]int{}}
}

func (c *countingResident) WillNeed(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.advised[name]
}

func (c *countingResident) Locks(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.locks[name]
}

func (c *countingResident) willNeed(f *os.File, size int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advised[f.Name()]++
	return nil
}

func (c *countingResident) lock(f *os.File, size int64) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failLock != nil {
		return nil, c.failLock
	}
	c.locks[f.Name()]++
	return make([]byte, size), nil
}

func (c *countingResident) unlock(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unlocked += int64(len(b))
	return nil
}

func sizedFile(t *testing.T, dir, name string, size int64) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
	return p
}

// Lock mode locks templates within its budget and caches the one that
// would pass it (or that the host refuses to lock); a drop gives its
// bytes back, a template is counted once however often it is kept, and
// close lets go of all and keeps nothing after.
func TestResidentLockBudget(t *testing.T) {
	dir := t.TempDir()
	a, b := sizedFile(t, dir, "a", 8<<10), sizedFile(t, dir, "b", 4<<10)
	cr := newCountingResident()
	r := newResidency(ResidentLock, 10<<10, slog.New(slog.DiscardHandler))
	r.os = cr
	r.keep("a", a)
	r.keep("a", a)
	if got := r.lockedBytes(); got != 8<<10 || cr.Locks(a) != 1 {
		t.Fatalf("locked %d bytes in %d locks, want 8 KiB in one", got, cr.Locks(a))
	}
	r.keep("b", b) // 12 KiB > 10 KiB: cached
	if got := r.lockedBytes(); got != 8<<10 || cr.Locks(b) != 0 || cr.WillNeed(b) != 1 {
		t.Fatalf("over the budget: locked %d bytes, b locked %d times and read ahead %d", got, cr.Locks(b), cr.WillNeed(b))
	}
	r.drop("a")
	r.drop("a")
	if got := r.lockedBytes(); got != 0 || cr.unlocked != 8<<10 {
		t.Fatalf("after the drop: locked %d, unlocked %d", got, cr.unlocked)
	}
	r.keep("b", b)
	if got := r.lockedBytes(); got != 4<<10 || cr.Locks(b) != 1 {
		t.Fatalf("b within the budget: locked %d in %d locks", got, cr.Locks(b))
	}
	cr.failLock = unix.EPERM
	r.keep("a", a)
	if got := r.lockedBytes(); got != 4<<10 || cr.WillNeed(a) != 1 {
		t.Fatalf("a lock the host refused: locked %d, a read ahead %d times", got, cr.WillNeed(a))
	}
	r.close()
	r.close()
	if got := r.lockedBytes(); got != 0 || cr.unlocked != 12<<10 {
		t.Fatalf("after close: locked %d, unlocked %d", got, cr.unlocked)
	}
	cr.failLock = nil
	r.keep("a", a)
	if r.lockedBytes() != 0 || cr.Locks(a) != 1 {
		t.Error("a keep after close locked")
	}
}

// Cache mode reads templates ahead and locks nothing, and its refresh is
// due once per residentRefresh; off does nothing; a bad mode is refused.
func TestResidentCacheAndOff(t *testing.T) {
	dir := t.TempDir()
	a := sizedFile(t, dir, "a", 4<<10)
	cr := newCountingResident()
	r := newResidency(ResidentCache, 0, slog.New(slog.DiscardHandler))
	r.os = cr
	r.keep("a", a)
	r.keep("a", a)
	if cr.WillNeed(a) != 2 || cr.Locks(a) != 0 || r.lockedBytes() != 0 {
		t.Errorf("cache mode: read ahead %d, locked %d", cr.WillNeed(a), cr.Locks(a))
	}
	now := time.Now()
	if !r.due(now) || r.due(now.Add(time.Minute)) || !r.due(now.Add(residentRefresh)) {
		t.Error("cache mode's refresh is not due once per period")
	}
	off := newResidency(ResidentOff, 1<<30, slog.New(slog.DiscardHandler))
	off.os = cr
	off.keep("a", a)
	if cr.WillNeed(a) != 2 || off.due(now) {
		t.Error("off mode read a template ahead")
	}
	if _, err := ParseResidentMode("pin"); err == nil {
		t.Error("mode pin accepted")
	}
}

// On the host's kernel: a read-ahead works, and a lock of a page either
// works and unmaps or is refused by the host's limit.
func TestResidentKernel(t *testing.T) {
	p := sizedFile(t, t.TempDir(), "mem", 4096)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	k := kernelResident{}
	if err := k.willNeed(f, 4096); err != nil {
		t.Errorf("WILLNEED: %v", err)
	}
	b, err := k.lock(f, 4096)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EAGAIN) {
		t.Skipf("the host refuses to lock a page: %v", err)
	}
	if err != nil || len(b) != 4096 {
		t.Fatalf("lock: %d bytes, %v", len(b), err)
	}
	if err := k.unlock(b); err != nil {
		t.Error(err)
	}
}

// A template built with lock mode is locked and counted in Capacity; one
// rebuilt for new files lets go of the old one's memory.
func TestTemplateLockedResident(t *testing.T) {
	cr := newCountingResident()
	residentKernel = cr
	defer func() { residentKernel = kernelResident{} }()
	var rootfs string
	m, state, _ := newTemplateManager(t, func(o *Options) {
		rootfs = o.RootFS
		o.Templates.Resident, o.Templates.ResidentBytes = ResidentLock, 1<<30
	})
	old := waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateReady, "")
	mem := filepath.Join(state, "templates", old.Key, snapMemFile)
	c, _ := m.Capacity(context.Background())
	if cr.Locks(mem) != 1 || c.TemplateLockedMiB <= 0 {
		t.Fatalf("a ready template: locked %d times, capacity says %d MiB locked", cr.Locks(mem), c.TemplateLockedMiB)
	}
	if err := os.WriteFile(rootfs, []byte("a new image"), 0o600); err != nil {
		t.Fatal(err)
	}
	createFrom(t, m, sandbox.Config{}, sandbox.StartedFromBoot)
	fresh := waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateReady, old.Key)
	if cr.Locks(filepath.Join(state, "templates", fresh.Key, snapMemFile)) != 1 {
		t.Error("the rebuilt template was not locked")
	}
	cr.mu.Lock()
	unlocked := cr.unlocked
	cr.mu.Unlock()
	if unlocked == 0 {
		t.Error("the stale template's memory was not let go")
	}
	m.Close()
	if c, _ := m.Capacity(context.Background()); c.TemplateLockedMiB != 0 {
		t.Errorf("after Close, %d MiB locked", c.TemplateLockedMiB)
	}
}
