package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/sandbox"
)

// The VMM pool (issue 28: "a pool of ready VMM processes") keeps a few VMM
// processes started ahead of the sandboxes that will need them: cloned
// into the jail's namespaces, their Go runtime up, each waiting on a
// socket for its claim (control.PoolFD). A start that finds one ready
// hands it the spec and its files (claim, vmmpool_proc.go) instead of
// cloning and executing a process of its own: it skips the clone with its
// five namespaces, the exec, and the runtime's start (70-90 ms of a
// fork's second under the nested rig; docs/benchmarks.md). A start that
// finds the pool empty starts its process as before; it never waits for
// the pool.
//
// With the jail's cgroups, each process is started for a sandbox id of
// its own and born in that id's cgroup (CLONE_INTO_CGROUP), idle limits
// on it. A create whose slot to start in is free at once takes a ready
// process when it reserves its sandbox and takes its id with it
// (claimNamed), so the cgroup the process was born in is its VM's: the
// VM's limits are written there and the process never moves. Moving a
// process between cgroups waits for an RCU grace period (15-30 ms in the
// rig, 5-19 ms on a plain VM) and making a cgroup takes up to 65 ms under
// the rig's emulation; both now happen before the create. A create that
// must wait for its slot (admit.go) takes no process while it waits: in
// a burst the line would hold the ready processes idle, and each create
// refused or given up in it would end one, whose replacement then starts
// while the burst's VMs boot. Once admitted it claims by kind, as a
// resume (whose sandbox and cgroup name exist already) does, and moves
// the process it claims into its VM's cgroup, removing the one the
// process leaves.
//
// The pool refills in the background, one process at a time, after each
// claim. It is counted in the daemon's capacity (/v1/capacity's vmm_pool:
// the processes and the memory they hold), and it gives way under memory
// pressure: while the host's (or the VMs' cgroup parent's) memory
// pressure is at or above shrinkAt, its idle processes are ended and none
// is started, until the pressure falls below growBelow. A process that
// dies while it waits is replaced, and one that fails to start is retried
// with a backoff that grows from a second to a minute.
//
// Idle processes hold no VM and no guest memory: each is a few MiB of Go
// runtime. When the daemon goes, they go too: each reads end of file on
// its socket and exits, and a later daemon of the same state directory
// kills and removes the cgroups of those its pool's directory names
// before it starts its own (sweepPool).

// pooledVMM is one VMM process in the pool: waiting for its claim while it
// is in the pool's ready list, a sandbox's VMM once claimed.
type pooledVMM struct {
	pid int
	// done is closed when the process has exited; err is its wait
	// status then.
	done chan struct{}
	err  error
	// claimer is the process's side for a claim (vmmpool_proc.go); nil in
	// the pool's unit tests.
	claimer *poolProc
	// end ends an idle process and waits for it (the pool's Close, a
	// shrink).
	end func()
	// rss is the memory the process holds, in bytes (0: unknown).
	rss func() int64
	// id is the sandbox id the process was started for, and cgroupPath
	// the cgroup it was born in, named after it: a start that takes
	// the process by its id (claimNamed) makes that cgroup its VM's, and
	// the process never moves. Both are "" in a pool without cgroups.
	id, cgroupPath string
	// cgroup is that cgroup while the process owns it: end removes it.
	// A start that takes it for its VM (takeCgroup) owns it from then;
	// a claim that moves the process out removes it.
	cgroup *jail.Cgroup
}

// takeCgroup hands the process's cgroup to the start that claimed it by
// its id, which owns it from then (nil: none).
func (v *pooledVMM) takeCgroup() *jail.Cgroup {
	cg := v.cgroup
	v.cgroup = nil
	return cg
}

// exited reports whether the process has exited.
func (v *pooledVMM) exited() bool { return isClosed(v.done) }

// Pressure thresholds: the "some avg10" of a memory.pressure file, the
// share of the last ten seconds in which some task waited for memory.
const (
	poolShrinkAt  = 10.0
	poolGrowBelow = 2.0
	// poolLook is how often the pool looks at the memory pressure.
	poolLook = 2 * time.Second
	// poolBackoffMax bounds the wait after failed starts.
	poolBackoffMax = time.Minute
)

// DefaultVMMPool is a pool sized to the host (serve --vmm-pool -1): one
// ready process per two CPUs, at least one and at most four. A burst larger than
// the pool starts the rest as before.
func DefaultVMMPool() int { return min(max(runtime.NumCPU()/2, 1), 4) }

// vmmPool is the pool. Its zero value is not usable; a nil *vmmPool is
// a pool that is off: claim finds nothing, info is nil, close does
// nothing.
type vmmPool struct {
	size int
	// jailed says its processes are in the jail's namespaces
	// (jail.Cloneflags); only a jailed spec is handed to one, and only
	// an unjailed spec to one that is not.
	jailed bool
	// named says each process is born in a cgroup named after the
	// sandbox id it was started for (pooledVMM.id), so that a start
	// can take it by that id (claimNamed).
	named    bool
	spawn    func() (*pooledVMM, error)
	pressure func() (float64, error)
	log      *slog.Logger
	look     time.Duration // poolLook; tests shorten it

	mu     sync.Mutex
	ready  []*pooledVMM
	shrunk bool // memory pressure: the pool holds none
	closed bool
	stats  sandbox.VMMPoolInfo // its counters (info fills the rest)
	// failures counts the starts that failed in a row (the backoff's).
	failures int

	wake     chan struct{} // a claim or a death: refill (buffered, 1)
	stop     chan struct{}
	loopDone chan struct{}
}

// newVMMPool returns a pool of size processes started by spawn, which
// shrinks while pressure (the memory pressure's "some avg10"; an error:
// unknown, no shrink) is high; nil when size is 0 or less. It starts
// filling at once.
func newVMMPool(size int, spawn func() (*pooledVMM, error), pressure func() (float64, error), log *slog.Logger) *vmmPool {
	if size <= 0 {
		return nil
	}
	p := &vmmPool{size: size, spawn: spawn, pressure: pressure, log: log, look: poolLook,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), loopDone: make(chan struct{})}
	p.stats.Size = size
	return p
}

// start starts the pool's loop: filling, replacing, watching pressure.
func (p *vmmPool) start() {
	if p != nil {
		go p.loop()
	}
}

// claim takes a ready process out of the pool (nil: none ready, or the
// pool is off) and has the pool start its replacement.
func (p *vmmPool) claim() *pooledVMM {
	return p.take(true)
}

// claimNamed is claim for a start that names its sandbox after the
// process it takes (pooledVMM.id), whose cgroup becomes its VM's: nil
// unless the pool's processes are born in cgroups of their own. A miss
// is not counted: the start claims again by kind when it spawns
// (claimFor), and counts there.
func (p *vmmPool) claimNamed() *pooledVMM {
	if p == nil || !p.named {
		return nil
	}
	return p.take(false)
}

// take takes a ready process out of the pool, counting a miss when there
// is none and countMiss says so.
func (p *vmmPool) take(countMiss bool) *pooledVMM {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.poke()
	for len(p.ready) > 0 {
		v := p.ready[len(p.ready)-1]
		p.ready = p.ready[:len(p.ready)-1]
		if v.exited() {
			p.stats.DiedIdle++ // its watch has not seen it yet
			continue
		}
		p.stats.Claimed++
		return v
	}
	if !p.closed && countMiss {
		p.stats.Missed++
	}
	return nil
}

// claimFor is claim for a spec that is jailed or not: nil, and nothing
// taken, when the pool's processes are not of that kind.
func (p *vmmPool) claimFor(jailed bool) *pooledVMM {
	if p == nil || p.jailed != jailed {
		return nil
	}
	return p.claim()
}

// poke wakes the loop, without waiting.
func (p *vmmPool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// info is the pool's state for /v1/capacity; nil when the pool is off.
func (p *vmmPool) info() *sandbox.VMMPoolInfo {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	i := p.stats
	i.Ready = len(p.ready)
	i.Shrunk = p.shrunk
	var rss int64
	for _, v := range p.ready {
		if v.rss != nil {
			rss += v.rss()
		}
	}
	p.mu.Unlock()
	i.MemoryMiB = (rss + 1<<20 - 1) >> 20
	return &i
}

// close ends the pool: its loop stops and its idle processes are ended.
// It is idempotent.
func (p *vmmPool) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.loopDone
		return
	}
	p.closed = true
	idle := p.ready
	p.ready = nil
	p.mu.Unlock()
	close(p.stop)
	<-p.loopDone
	endAll(idle)
}

// endAll ends idle processes, at once.
func endAll(vs []*pooledVMM) {
	var wg sync.WaitGroup
	for _, v := range vs {
		wg.Go(v.end)
	}
	wg.Wait()
}

// loop keeps the pool full while there is no memory pressure.
func (p *vmmPool) loop() {
	defer close(p.loopDone)
	tick := time.NewTicker(p.look)
	defer tick.Stop()
	for {
		p.lookAtPressure()
		if backoff := p.fill(); backoff > 0 {
			// After a failed start, neither a claim nor a look cuts
			// the wait short.
			select {
			case <-p.stop:
				return
			case <-time.After(backoff):
			}
			continue
		}
		select {
		case <-p.stop:
			return
		case <-p.wake:
		case <-tick.C:
		}
	}
}

// fill starts processes until the pool holds size, one at a time; it
// returns how long to wait before the next try after a failed start (0:
// none failed).
func (p *vmmPool) fill() time.Duration {
	for {
		p.mu.Lock()
		want := !p.closed && !p.shrunk && len(p.ready) < p.size
		p.mu.Unlock()
		if !want {
			return 0
		}
		v, err := p.spawn()
		p.mu.Lock()
		if err != nil {
			p.failures++
			p.stats.SpawnFailures++
			backoff := min(time.Second<<min(p.failures-1, 6), poolBackoffMax)
			p.mu.Unlock()
			p.log.Warn("vmm pool: could not start a ready VMM process; starts spawn their own meanwhile", "err", err, "retry_in", backoff)
			return backoff
		}
		p.failures = 0
		p.stats.Spawned++
		if p.closed || p.shrunk {
			p.mu.Unlock()
			v.end()
			continue
		}
		p.ready = append(p.ready, v)
		p.mu.Unlock()
		go p.watch(v)
	}
}

// watch replaces v if it dies while it waits in the pool.
func (p *vmmPool) watch(v *pooledVMM) {
	<-v.done
	p.mu.Lock()
	i := slices.Index(p.ready, v)
	if i >= 0 {
		p.ready = slices.Delete(p.ready, i, i+1)
		p.stats.DiedIdle++
	}
	p.mu.Unlock()
	if i >= 0 {
		p.log.Warn("vmm pool: a ready VMM process exited before it was claimed; starting another", "pid", v.pid, "err", v.err, "log", v.claimer.logTail())
		p.poke()
	}
}

// lookAtPressure shrinks the pool to nothing while memory pressure is
// high, and lets it grow again once it has fallen.
func (p *vmmPool) lookAtPressure() {
	if p.pressure == nil {
		return
	}
	v, err := p.pressure()
	if err != nil {
		return // unknown: the pool keeps its size
	}
	p.mu.Lock()
	var idle []*pooledVMM
	switch {
	case !p.shrunk && v >= poolShrinkAt:
		p.shrunk = true
		p.stats.Shrinks++
		idle, p.ready = p.ready, nil
		p.mu.Unlock()
		p.log.Warn("vmm pool: memory pressure; ending the ready VMM processes and starting none until it falls", "some_avg10", v, "ended", len(idle))
		endAll(idle)
		return
	case p.shrunk && v < poolGrowBelow:
		p.shrunk = false
		p.mu.Unlock()
		p.log.Info("vmm pool: memory pressure has fallen; refilling", "some_avg10", v)
		return
	}
	p.mu.Unlock()
}

// memoryPressure reads the "some avg10" of a cgroup v2 or /proc/pressure
// memory.pressure file.
func memoryPressure(path string) (float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return parsePressure(b)
}

// parsePressure is the "some avg10" of a memory.pressure file's text.
func parsePressure(b []byte) (float64, error) {
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "some" {
			continue
		}
		for _, kv := range f[1:] {
			if v, ok := strings.CutPrefix(kv, "avg10="); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil || !(x >= 0 && x <= 100) {
					return 0, fmt.Errorf("memory pressure: avg10 %q is not a share of time", v)
				}
				return x, nil
			}
		}
	}
	return 0, errors.New("memory pressure: no \"some avg10\" line")
}
