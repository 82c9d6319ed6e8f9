package engine

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// fakePool is a pool whose processes are fakes: spawn makes one that
// "runs" until it is ended or killed (die), and pressure is whatever the
// test sets.
type fakePool struct {
	*vmmPool
	mu       sync.Mutex
	members  []*pooledVMM
	ended    int
	pressure atomic.Value // float64
	failing  atomic.Bool
	spawns   atomic.Int64
}

func newFakePool(t *testing.T, size int) *fakePool {
	t.Helper()
	f := &fakePool{}
	f.pressure.Store(0.0)
	spawn := func() (*pooledVMM, error) {
		f.spawns.Add(1)
		if f.failing.Load() {
			return nil, errors.New("clone: resource temporarily unavailable")
		}
		v := &pooledVMM{pid: int(f.spawns.Load()), done: make(chan struct{}), rss: func() int64 { return 3 << 20 }}
		var once sync.Once
		v.end = func() {
			once.Do(func() {
				f.mu.Lock()
				f.ended++
				f.mu.Unlock()
				close(v.done)
			})
		}
		f.mu.Lock()
		f.members = append(f.members, v)
		f.mu.Unlock()
		return v, nil
	}
	f.vmmPool = newVMMPool(size, spawn, func() (float64, error) { return f.pressure.Load().(float64), nil }, slog.New(slog.DiscardHandler))
	f.look = 10 * time.Millisecond
	f.start()
	t.Cleanup(f.close)
	return f
}

// waitPool waits until the pool's info satisfies ok.
func waitPool(t *testing.T, p *vmmPool, what string, ok func(sandbox.VMMPoolInfo) bool) sandbox.VMMPoolInfo {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		i := p.info()
		if ok(*i) {
			return *i
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool never got to %s: %+v", what, *i)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestVMMPoolFillsAndCounts: the pool fills to its size, a claim takes a
// ready process and the pool starts its replacement, and a claim of an
// empty pool is counted as missed. Its memory is what its idle processes
// hold.
func TestVMMPoolFillsAndCounts(t *testing.T) {
	p := newFakePool(t, 2)
	i := waitPool(t, p.vmmPool, "full", func(i sandbox.VMMPoolInfo) bool { return i.Ready == 2 })
	if i.Size != 2 || i.Spawned != 2 || i.MemoryMiB != 6 || i.Claimed != 0 {
		t.Errorf("a full pool of 2: %+v; want 2 spawned, 6 MiB", i)
	}
	v := p.claim()
	if v == nil || v.exited() {
		t.Fatalf("claim of a full pool: %v", v)
	}
	i = waitPool(t, p.vmmPool, "refilled", func(i sandbox.VMMPoolInfo) bool { return i.Ready == 2 })
	if i.Claimed != 1 || i.Spawned != 3 || i.Missed != 0 {
		t.Errorf("after one claim: %+v; want 1 claimed, 3 spawned", i)
	}
	// A claimed process is no longer the pool's: its exit is not a death
	// in the pool, and the pool does not end it.
	v.end()
	time.Sleep(30 * time.Millisecond)
	if i := p.info(); i.DiedIdle != 0 || i.Ready != 2 {
		t.Errorf("after a claimed process exited: %+v; want no idle deaths", *i)
	}

	// Starts that fail leave the pool empty: claims miss.
	p.failing.Store(true)
	for range 2 {
		if p.claim() == nil {
			t.Fatal("claim of a pool with processes ready found none")
		}
	}
	if v := p.claim(); v != nil {
		t.Errorf("claim of an empty pool whose starts fail: %v", v)
	}
	i = waitPool(t, p.vmmPool, "failing", func(i sandbox.VMMPoolInfo) bool { return i.SpawnFailures >= 1 })
	if i.Missed != 1 || i.Claimed != 3 || i.Ready != 0 {
		t.Errorf("after an empty pool's claim: %+v; want 1 missed, 3 claimed", i)
	}
}

// TestVMMPoolBacksOff: a start that fails is retried after a second, not
// in a loop, and the pool fills again once starts succeed.
func TestVMMPoolBacksOff(t *testing.T) {
	p := newFakePool(t, 1)
	p.failing.Store(true)
	// Make the pool want one: it is full already, or about to be.
	waitPool(t, p.vmmPool, "started", func(i sandbox.VMMPoolInfo) bool { return i.Ready == 1 || i.SpawnFailures > 0 })
	p.claim()
	waitPool(t, p.vmmPool, "failing", func(i sandbox.VMMPoolInfo) bool { return i.SpawnFailures >= 1 })
	time.Sleep(500 * time.Millisecond)
	// Claims and looks (every 10 ms here) do not cut the backoff short.
	p.claim()
	p.claim()
	if i := p.info(); i.SpawnFailures != 1 {
		t.Errorf("%d failed starts within half a second: the pool does not back off", i.SpawnFailures)
	}
	p.failing.Store(false)
	i := waitPool(t, p.vmmPool, "refilled after the backoff", func(i sandbox.VMMPoolInfo) bool { return i.Ready == 1 })
	if i.SpawnFailures < 1 || i.SpawnFailures > 2 {
		t.Errorf("failed starts over about a second: %d; want 1 or 2", i.SpawnFailures)
	}
}

// TestVMMPoolShrinksUnderPressure: at high memory pressure the pool ends
// its idle processes and starts none; claims miss. Once the pressure has
// fallen below the lower mark (not merely below the upper one), it
// refills.
func TestVMMPoolShrinksUnderPressure(t *testing.T) {
	p := newFakePool(t, 3)
	waitPool(t, p.vmmPool, "full", func(i sandbox.VMMPoolInfo) bool { return i.Ready == 3 })
	p.pressure.Store(poolShrinkAt + 5)
	i := waitPool(t, p.vmmPool, "shrunk", func(i sandbox.VMMPoolInfo) bool { return i.Shrunk })
	if i.Ready != 0 || i.MemoryMiB != 0 || i.Shrinks != 1 {
		t.Errorf("a pool under pressure: %+v; want none ready, one shrink", i)
	}
	p.mu.Lock()
	ended := p.ended
	p.mu.Unlock()
	if ended != 3 {
		t.Errorf("%d of 3 idle processes ended under pressure", ended)
	}
	if v := p.claim(); v != nil {
		t.Error("claim of a shrunk pool found a process")
	}
	spawned := p.info().Spawned
	p.pressure.Store((poolShrinkAt + poolGrowBelow) / 2) // between the marks
	time.Sleep(100 * time.Millisecond)
	if i := p.info(); !i.Shrunk || i.Spawned != spawned {
		t.Errorf("between the marks: %+v; want still shrunk, nothing started", *i)
	}
	p.pressure.Store(0.5)
	i = waitPool(t, p.vmmPool, "refilled", func(i sandbox.VMMPoolInfo) bool { return i.Ready == 3 })
	if i.Shrunk || i.Shrinks != 1 || i.Missed != 1 {
		t.Errorf("after the pressure fell: %+v", i)
	}
}

// TestVMMPoolReplacesTheDead: a process that dies while it waits leaves
// the pool and is replaced; one found dead by a claim is skipped.
func TestVMMPoolReplacesTheDead(t *testing.T) {
	p := newFakePool(t, 1)
	waitPool(t, p.vmmPool, "full", func(i sandbox.VMMPoolInfo) bool { return i.Ready == 1 })
	p.mu.Lock()
	first := p.members[0]
	p.mu.Unlock()
	first.end() // it dies idle
	i := waitPool(t, p.vmmPool, "replaced", func(i sandbox.VMMPoolInfo) bool { return i.Spawned == 2 && i.Ready == 1 })
	if i.DiedIdle != 1 {
		t.Errorf("after an idle death: %+v; want died_idle 1", i)
	}
	if v := p.claim(); v == nil || v == first {
		t.Errorf("claim after an idle death: %v (the dead one: %v)", v, first)
	}
}

// TestVMMPoolClaimsOnlyItsKind: a pool of unjailed processes is never
// claimed for a jailed spec, nor a jailed one for an unjailed spec, and
// such a start takes nothing from it.
func TestVMMPoolClaimsOnlyItsKind(t *testing.T) {
	p := newFakePool(t, 1)
	waitPool(t, p.vmmPool, "full", func(i sandbox.VMMPoolInfo) bool { return i.Ready == 1 })
	if v := p.claimFor(true); v != nil {
		t.Fatal("an unjailed pool's process was claimed for a jailed spec")
	}
	p.jailed = true
	if v := p.claimFor(false); v != nil {
		t.Fatal("a jailed pool's process was claimed for an unjailed spec")
	}
	if i := p.info(); i.Ready != 1 || i.Claimed != 0 || i.Missed != 0 {
		t.Errorf("after claims of the other kind: %+v; want the pool untouched", *i)
	}
	if v := p.claimFor(true); v == nil {
		t.Error("a jailed pool's process was not claimed for a jailed spec")
	}
}

// TestVMMPoolClaimNamed: only a pool whose processes are born in cgroups
// named after their ids gives one to a start by id; a miss there is not
// counted (the start's spawn claims again, and counts), a take is.
func TestVMMPoolClaimNamed(t *testing.T) {
	p := newFakePool(t, 1)
	waitPool(t, p.vmmPool, "full", func(i sandbox.VMMPoolInfo) bool { return i.Ready == 1 })
	if v := p.claimNamed(); v != nil {
		t.Fatal("a pool without cgroups gave a process by its id")
	}
	if i := p.info(); i.Ready != 1 || i.Claimed != 0 || i.Missed != 0 {
		t.Errorf("after a named claim of a pool without cgroups: %+v; want it untouched", *i)
	}
	p.named = true
	if v := p.claimNamed(); v == nil {
		t.Fatal("a named pool with a process ready gave none")
	}
	p.failing.Store(true) // it stays empty
	if v := p.claimNamed(); v != nil {
		t.Fatal("an empty pool gave a process")
	}
	if i := p.info(); i.Claimed != 1 || i.Missed != 0 {
		t.Errorf("after a take and a named miss: %+v; want 1 claimed, 0 missed", *i)
	}
	if v := p.claimFor(false); v != nil {
		t.Fatal("an empty pool gave a process")
	}
	if i := p.info(); i.Missed != 1 {
		t.Errorf("after the spawn's own claim missed too: %+v; want 1 missed", *i)
	}
	var nilPool *vmmPool
	if nilPool.claimNamed() != nil {
		t.Error("a pool that is off gave a process")
	}
}

// TestVMMPoolClose: Close ends every idle process, starts none after, and
// is idempotent; a nil pool (off) claims nothing and reports nothing.
func TestVMMPoolClose(t *testing.T) {
	p := newFakePool(t, 2)
	waitPool(t, p.vmmPool, "full", func(i sandbox.VMMPoolInfo) bool { return i.Ready == 2 })
	p.close()
	p.close()
	p.mu.Lock()
	ended, n := p.ended, len(p.members)
	p.mu.Unlock()
	if ended != n || n != 2 {
		t.Errorf("close ended %d of %d processes", ended, n)
	}
	if v := p.claim(); v != nil {
		t.Error("claim of a closed pool found a process")
	}
	time.Sleep(50 * time.Millisecond)
	if got := p.spawns.Load(); got != 2 {
		t.Errorf("%d processes started by a pool closed after 2", got)
	}

	var off *vmmPool
	if off.claim() != nil || off.info() != nil {
		t.Error("a nil pool is not off")
	}
	off.start()
	off.close()
	if newVMMPool(0, nil, nil, nil) != nil {
		t.Error("a pool of 0 is not off")
	}
}

// TestParsePressure: the "some avg10" of a memory.pressure file; a file
// without one, or with a value that is not a share, is an error (the pool
// then keeps its size).
func TestParsePressure(t *testing.T) {
	good := "some avg10=12.50 avg60=3.00 avg300=0.50 total=123456\nfull avg10=1.00 avg60=0.00 avg300=0.00 total=100\n"
	if v, err := parsePressure([]byte(good)); err != nil || v != 12.5 {
		t.Errorf("parsePressure = %v, %v; want 12.5", v, err)
	}
	for _, bad := range []string{"", "full avg10=50.00\n", "some avg10=abc\n", "some avg10=-1\n", "some avg10=NaN\n", "some avg10=101\n", "some\n"} {
		if v, err := parsePressure([]byte(bad)); err == nil {
			t.Errorf("parsePressure(%q) = %v, want an error", bad, v)
		}
	}
}

// FuzzParsePressure: no text makes the parser panic or return a value
// outside 0-100.
func FuzzParsePressure(f *testing.F) {
	f.Add([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"))
	f.Add([]byte("some avg10=1e2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parsePressure(b)
		if err == nil && !(v >= 0 && v <= 100) {
			t.Fatalf("parsePressure(%q) = %v", b, v)
		}
	})
}
