package main

// The starts bench prints the numbers users compare cellvm by (issue 28,
// item 7), one line per measure, each a ratio or a goal with its absolute
// value, all from one run on one machine shape (1 vCPU, 512 MiB):
//
//   - create to the first result of `1 + 1`, p50 and p99 over -starts-n
//     creates each, for a cold boot, a template start and a fork; the
//     template and the fork against the cold boot. This is the metric the
//     hosted services' independent benchmarks use, with the code result
//     they omit; the trivial cell keeps the data-stack imports out of the
//     cold baseline, which would flatter the template;
//   - cells per second on one sandbox (trivial cells in a row);
//   - the VMM's overhead: its RSS less the guest memory's resident pages,
//     for a booted, a template-started and a forked VM;
//   - the PSS of several forks alive at once against one cold VM's;
//   - the jail: create to agent up, jailed against unjailed (root only);
//   - template readiness: from the manager's start to its template's
//     ready_after_ms;
//   - pause: each later pause of one sandbox against its first.
//
// Progress lines come as the bench goes; the lines of the measures are
// printed again together at the end, so that a run that failed halfway
// still shows what it measured.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/engine"
)

var (
	startsN      = flag.Int("starts-n", 20, "creates of each kind (cold boot, template start, fork) in the starts bench")
	startsCells  = flag.Int("starts-cells", 100, "trivial cells in a row for the starts bench's cells per second")
	startsJail   = flag.Int("starts-jail", 5, "jailed and unjailed cold creates each, alternating, for the starts bench's jail ratio (root only)")
	startsPool   = flag.Int("starts-pool", engine.DefaultVMMPool(), "VMM processes kept started ahead in each manager of the starts and jail benches (serve --vmm-pool; 0: none)")
	startsPauses = flag.Int("starts-pauses", 3, "pauses of one sandbox in a row in the starts bench, each resumed and given a cell (the first is the baseline)")
)

// The goals.
const (
	startGoal       = 0.02 // template start and fork against a cold boot
	jailGoal        = 1.05 // jailed against unjailed create to agent up
	overheadGoalMiB = 8.0  // VMM RSS less the guest's resident pages
	pauseGoal       = 1.2  // a later pause against the first
)

// readyGoal is the goal for the template's readiness.
const readyGoal = 3 * time.Minute

const (
	// trivialCell is the cell whose first result a start is timed to.
	trivialCell = "1 + 1"
	// pauseCell runs between pauses: the user's next cell.
	pauseCell, pauseWant = "n = sum(range(100000)); print(n)", "4999950000\n"
)

// startsBench is one run of the starts bench; its snapBench holds what it
// made, for cleanup.
type startsBench struct {
	*snapBench
	measureLines
	cellvm, build string
	// steps are each kind of start's breakdowns (startBreakdown).
	steps map[string][]map[string]int64
}

func benchStarts(cellvm, build string) error {
	n := max(*startsN, 1)
	fmt.Printf("\nstarts: the numbers users compare (1 vCPU, %d MiB, unjailed VMMs unless said; %d creates of each kind), nested rig %s\n",
		snapShape.MemoryMiB, n, time.Now().Format("2006-01-02"))
	fmt.Println(serviceCgroup())
	ctx := context.Background()
	started := time.Now()
	m, done, err := newBenchManager(cellvm, build, nil, engine.TemplateOptions{Enabled: true, BuildTimeout: templateWait}, withPool)
	if err != nil {
		return err
	}
	defer done()
	s := &startsBench{snapBench: &snapBench{m: m}, measureLines: measureLines{bench: "starts"}, cellvm: cellvm, build: build}
	defer s.summary()
	defer s.cleanup(ctx)
	return s.run(ctx, started, n)
}

func (s *startsBench) run(ctx context.Context, started time.Time, n int) error {
	if err := s.readiness(ctx, started); err != nil {
		return err // no template: neither template starts nor a fair cold baseline
	}
	coldCfg := snapShape
	coldCfg.Start = sandbox.StartCold
	cold, coldIDs, err := s.starts(ctx, "cold boot", n, 1, sandbox.StartedFromBoot, func() (sandbox.Info, error) { return s.create(ctx, coldCfg) })
	if err != nil {
		return err
	}
	s.line("create -> first result of %s, cold boot (the baseline): p50 %v, p99 %v (over %d); median ms: %s", trivialCell,
		dur(percentile(cold, 50)), dur(percentile(cold, 99)), len(cold), formatBreakdown(medianBreakdown(s.steps["cold boot"])))
	coldPSS, err := vmmPSS(coldIDs[0])
	if err != nil {
		return fmt.Errorf("cold VM's PSS: %w", err)
	}
	s.overhead("cold boot", coldIDs[0])
	s.delete(ctx, coldIDs[0])

	tpl, tplIDs, err := s.starts(ctx, "template start", n, 1, sandbox.StartedFromTemplate, func() (sandbox.Info, error) { return s.create(ctx, snapShape) })
	if err != nil {
		return err
	}
	s.against("template start", tpl, cold)
	kept := tplIDs[0]
	s.overhead("template start", kept)
	if err := s.cellsPerSecond(ctx, kept); err != nil {
		return err
	}

	snap, err := s.m.Snapshot(ctx, kept)
	if err != nil {
		return fmt.Errorf("snapshot of a template-started sandbox: %w", err)
	}
	s.snapshots = append(s.snapshots, snap.ID)
	forks, forkIDs, err := s.starts(ctx, "fork", n, memoryForks, sandbox.StartedFromSnapshot, func() (sandbox.Info, error) {
		return s.create(ctx, sandbox.Config{Snapshot: snap.ID})
	})
	if err != nil {
		return err
	}
	s.against("fork", forks, cold)
	s.pool(ctx)
	s.overhead("fork", forkIDs[0])
	if err := s.forksPSS(forkIDs, coldPSS); err != nil {
		return err
	}
	for _, id := range forkIDs {
		s.delete(ctx, id)
	}

	if err := s.pauses(ctx, kept); err != nil {
		return err
	}
	s.delete(ctx, kept)
	return s.jail(ctx, coldCfg)
}

// readiness waits for the manager's template (its build starts with the
// manager) and prints what the manager says of its readiness.
func (s *startsBench) readiness(ctx context.Context, started time.Time) error {
	t, err := waitShapeTemplate(ctx, s.m, started)
	if err != nil {
		return err
	}
	seen := time.Since(started)
	if t.ReadyAfterMS == nil {
		return fmt.Errorf("the ready template has no ready_after_ms: %+v", t)
	}
	after := time.Duration(*t.ReadyAfterMS) * time.Millisecond
	s.line("template readiness: ready_after_ms %d (%v after the manager's start; seen ready at %v; %d failed builds before it); %s",
		*t.ReadyAfterMS, after.Round(time.Second), seen.Round(time.Second), t.Failures,
		verdict(after.Minutes(), readyGoal.Minutes(), " min"))
	return nil
}

// starts creates n sandboxes with create, one at a time, each to the
// result of trivialCell, and checks how each started. It deletes them
// as it goes but for the last keep, whose ids it returns.
func (s *startsBench) starts(ctx context.Context, kind string, n, keep int, from string, create func() (sandbox.Info, error)) ([]time.Duration, []string, error) {
	var ds []time.Duration
	var ids []string
	for i := range n {
		start := time.Now()
		info, err := create()
		if err != nil {
			return nil, nil, fmt.Errorf("%s %d: %w", kind, i+1, err)
		}
		up := time.Since(start)
		if info.StartedFrom != from {
			s.delete(ctx, info.ID)
			return nil, nil, fmt.Errorf("%s %d started from %q, not %q", kind, i+1, info.StartedFrom, from)
		}
		if err := runTrivial(ctx, s.m, info.ID); err != nil {
			s.delete(ctx, info.ID)
			return nil, nil, fmt.Errorf("%s %d: %w", kind, i+1, err)
		}
		d := time.Since(start)
		ds = append(ds, d)
		steps := startBreakdown(info.ID, (d - up).Milliseconds())
		if s.steps == nil {
			s.steps = map[string][]map[string]int64{}
		}
		s.steps[kind] = append(s.steps[kind], steps)
		fmt.Printf("%s %d/%d: agent up in %v (queued %d ms), first result in %v (ms: %s)\n", kind, i+1, n, dur(up), info.QueuedMS, dur(d), formatBreakdown(steps))
		if i < n-keep {
			s.delete(ctx, info.ID)
		} else {
			ids = append(ids, info.ID)
		}
	}
	return ds, ids, nil
}

// against prints a kind of start's p50 and p99 against the cold boot's.
func (s *startsBench) against(kind string, ds, cold []time.Duration) {
	p50, p99 := percentile(ds, 50), percentile(ds, 99)
	c50, c99 := percentile(cold, 50), percentile(cold, 99)
	r50, r99 := ratio(p50, c50), ratio(p99, c99)
	s.line("create -> first result of %s, %s / cold boot: p50 %.4f (%v vs %v), p99 %.4f (%v vs %v), over %d; %s; median ms: %s",
		trivialCell, kind, r50, dur(p50), dur(c50), r99, dur(p99), dur(c99), len(ds), verdict(max(r50, r99), startGoal, ""),
		formatBreakdown(medianBreakdown(s.steps[kind])))
}

// pool prints how the starts found the VMM pool (vmm_pool in capacity).
func (s *startsBench) pool(ctx context.Context) {
	c, err := s.m.Capacity(ctx)
	if err != nil || c.VMMPool == nil {
		s.line("VMM pool: none (-starts-pool %d)", *startsPool)
		return
	}
	s.line("%s", poolLine(c.VMMPool))
}

// poolLine says how starts found a VMM pool, from its counters.
func poolLine(p *sandbox.VMMPoolInfo) string {
	return fmt.Sprintf("VMM pool of %d: %d starts took a ready process, %d found none (%d started, %d failed, %d died idle); %d ready holding %d MiB",
		p.Size, p.Claimed, p.Missed, p.Spawned, p.SpawnFailures, p.DiedIdle, p.Ready, p.MemoryMiB)
}

// overhead prints the VMM's RSS less the guest memory's resident pages.
func (s *startsBench) overhead(kind, id string) {
	u, err := vmmMemoryOf(id)
	if err != nil {
		s.line("VMM overhead, %s: not measured: %v", kind, err)
		return
	}
	over := mib(u.rss - u.guestRSS)
	note := ""
	if u.guestSize != int64(snapShape.MemoryMiB)<<20 {
		note = fmt.Sprintf(" (the guest mappings found span %.1f MiB, not %d: this line may be wrong)", mib(u.guestSize), snapShape.MemoryMiB)
	}
	s.line("VMM overhead (RSS less the guest's resident pages), %s: %.1f MiB (RSS %.1f MiB, guest resident %.1f of %.0f MiB; the rest: file %.1f, anon %.1f, stacks %.1f, kvm %.1f MiB); %s%s",
		kind, over, mib(u.rss), mib(u.guestRSS), mib(u.guestSize), mib(u.parts["file"]), mib(u.parts["anon"]), mib(u.parts["stack"]), mib(u.parts["kvm"]),
		verdict(over, overheadGoalMiB, " MiB"), note)
}

// cellsPerSecond runs *startsCells trivial cells in a row on one sandbox.
func (s *startsBench) cellsPerSecond(ctx context.Context, id string) error {
	n := max(*startsCells, 1)
	start := time.Now()
	for i := range n {
		if err := runTrivial(ctx, s.m, id); err != nil {
			return fmt.Errorf("cell %d in a row: %w", i+1, err)
		}
	}
	d := time.Since(start)
	s.line("cells per second on one sandbox: %.1f (%d cells of %s in %v, %v each)", float64(n)/d.Seconds(), n, trivialCell,
		dur(d), dur(d/time.Duration(n)))
	return nil
}

// forksPSS prints the forks' PSS together against one cold VM's.
func (s *startsBench) forksPSS(ids []string, coldPSS int64) error {
	var sum int64
	for _, id := range ids {
		p, err := vmmPSS(id)
		if err != nil {
			return fmt.Errorf("fork's PSS: %w", err)
		}
		sum += p
	}
	r := float64(sum) / float64(coldPSS)
	s.line("PSS of %d forks alive at once / one cold VM's: %.2f (%.1f MiB vs %.1f MiB); %s", len(ids), r, mib(sum), mib(coldPSS),
		verdict(r, pssGoal, ""))
	return nil
}

// pauses pauses id *startsPauses times, resuming it and running a cell
// after each, and prints each later pause against the first.
func (s *startsBench) pauses(ctx context.Context, id string) error {
	var ds []time.Duration
	for i := range max(*startsPauses, 2) {
		start := time.Now()
		if err := s.m.Pause(ctx, id); err != nil {
			return fmt.Errorf("pause %d: %w", i+1, err)
		}
		d := time.Since(start)
		ds = append(ds, d)
		fmt.Printf("pause %d: %v\n", i+1, dur(d))
		s.printSaveStats(ctx, id)
		if err := s.m.Resume(ctx, id); err != nil {
			return fmt.Errorf("resume %d: %w", i+1, err)
		}
		if err := runCell(ctx, s.m, id, pauseCell, pauseWant); err != nil {
			return fmt.Errorf("cell after resume %d: %w", i+1, err)
		}
	}
	for i, d := range ds[1:] {
		r := ratio(d, ds[0])
		s.line("pause %d / pause 1 of a template-started sandbox: %.2f (%v vs %v); %s", i+2, r, dur(d), dur(ds[0]), verdict(r, pauseGoal, ""))
	}
	return nil
}

// jail alternates cold creates on the unjailed manager and on jailed
// ones, and prints the median create to agent up of each: the whole jail,
// and (with a cgroup) the jail without its cgroup, which tells the
// namespaces, pivot_root and seccomp from the cgroup's limits. Each jailed
// VM's cpu.stat says how long its cgroup's CPU quota held it back.
func (s *startsBench) jail(ctx context.Context, coldCfg sandbox.Config) error {
	j := benchJail()
	if j == nil {
		s.line("create -> agent up, jailed / unjailed: not measured (the jail needs root)")
		return nil
	}
	type arm struct {
		name string
		b    *snapBench
		j    *engine.JailOptions
		took []time.Duration
		// steps are each create's breakdown (startBreakdown).
		steps []map[string]int64
	}
	arms := []*arm{{name: "unjailed", b: s.snapBench}}
	jails := []*engine.JailOptions{j}
	if j.CgroupParent != "" {
		jails = append(jails, &engine.JailOptions{UIDBase: j.UIDBase})
	}
	for _, jo := range jails {
		jm, done, err := newBenchManager(s.cellvm, s.build, jo, engine.TemplateOptions{}, withPool)
		if err != nil {
			return err
		}
		defer done()
		b := &snapBench{m: jm}
		defer b.cleanup(ctx)
		name := "jailed"
		if jo.CgroupParent == "" && j.CgroupParent != "" {
			name = "jailed without a cgroup"
		}
		arms = append(arms, &arm{name: name, b: b, j: jo})
	}
	for i := range max(*startsJail, 1) {
		line := fmt.Sprintf("jail round %d:", i+1)
		// Each round starts with the next arm, so that no arm always
		// boots first, on the memory the last round's VM freed.
		for k := range arms {
			a := arms[(i+k)%len(arms)]
			start := time.Now()
			info, err := a.b.create(ctx, coldCfg)
			if err != nil {
				return fmt.Errorf("jail round %d, %s: %w", i+1, a.name, err)
			}
			d := time.Since(start)
			a.took = append(a.took, d)
			a.steps = append(a.steps, startBreakdown(info.ID, 0))
			line += fmt.Sprintf(" %s %v", a.name, dur(d))
			if a.j != nil && a.j.CgroupParent != "" {
				cg := filepath.Join(a.j.CgroupParent, info.ID)
				line += " (" + throttled(cg) + "; " + memoryEvents(cg) + ")"
			}
			if i == 0 && s.bench == "jail" {
				s.overhead("cold boot, "+a.name, info.ID)
			}
			a.b.delete(ctx, info.ID)
		}
		fmt.Println(line)
	}
	pOff := percentile(arms[0].took, 50)
	for _, a := range arms[1:] {
		pOn := percentile(a.took, 50)
		r := ratio(pOn, pOff)
		goal := verdict(r, jailGoal, "")
		if a.name != "jailed" {
			goal = "(a breakdown)"
		}
		s.line("create -> agent up (cold boot), %s / unjailed: %.3f (%v vs %v, medians of %d; the rounds' own ratios: median %.3f; each arm with a VMM pool of %d); %s",
			a.name, r, dur(pOn), dur(pOff), len(a.took), pairedRatio(a.took, arms[0].took), *startsPool, goal)
	}
	// Where each arm's time goes, step by step (medians, ms): the
	// steps that differ are the jail's cost.
	for _, a := range arms {
		b := medianBreakdown(a.steps)
		delete(b, "cell")
		fmt.Printf("jail: the %s arm's steps (medians, ms): %s\n", a.name, formatBreakdown(b))
	}
	for _, a := range arms {
		if c, err := a.b.m.Capacity(ctx); err == nil && c.VMMPool != nil {
			fmt.Printf("jail: the %s arm's VMM pool: %d starts took a ready process, %d found none\n", a.name, c.VMMPool.Claimed, c.VMMPool.Missed)
		}
	}
	return nil
}

// throttled is what a cgroup's cpu.stat says of its CPU quota: how often
// and how long it held the cgroup's threads back.
func throttled(cg string) string {
	b, err := os.ReadFile(filepath.Join(cg, "cpu.stat"))
	if err != nil {
		return "no cpu.stat: " + err.Error()
	}
	v := map[string]string{}
	for line := range strings.Lines(string(b)) {
		if k, val, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			v[k] = val
		}
	}
	return fmt.Sprintf("cpu %s us, throttled %s times for %s us", v["usage_usec"], v["nr_throttled"], v["throttled_usec"])
}

// pairedRatio is the median of on[i]/off[i], each round's own ratio: the
// rig's speed drifts over a run by more than the jail costs, and a
// round's arms run within seconds of each other.
func pairedRatio(on, off []time.Duration) float64 {
	var rs []float64
	for i := range min(len(on), len(off)) {
		if off[i] > 0 {
			rs = append(rs, float64(on[i])/float64(off[i]))
		}
	}
	if len(rs) == 0 {
		return 0
	}
	slices.Sort(rs)
	if len(rs)%2 == 1 {
		return rs[len(rs)/2]
	}
	return (rs[len(rs)/2-1] + rs[len(rs)/2]) / 2
}

// memoryEvents is what a cgroup's memory.events and memory.stat say of
// its memory limit: whether it reached it, and how many pages reclaim
// scanned and faults took.
func memoryEvents(cg string) string {
	v := map[string]string{}
	for _, f := range []string{"memory.events", "memory.stat"} {
		b, err := os.ReadFile(filepath.Join(cg, f))
		if err != nil {
			return "no " + f + ": " + err.Error()
		}
		for line := range strings.Lines(string(b)) {
			if k, val, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
				v[k] = val
			}
		}
	}
	return fmt.Sprintf("memory: max %s, high %s times; pgscan %s, pgfault %s, pgmajfault %s, anon %s, file %s bytes",
		v["max"], v["high"], v["pgscan"], v["pgfault"], v["pgmajfault"], v["anon"], v["file"])
}

// withPool gives a bench manager the VMM pool of -starts-pool, as serve's
// default gives the daemon one: every arm of the starts and jail benches
// has the same.
func withPool(o *engine.Options) { o.VMMPool = *startsPool }

// benchJailOnly is the jail part of the starts bench alone (-only jail):
// no template, only the jail's cold creates.
func benchJailOnly(cellvm, build string) error {
	fmt.Printf("\njail: create -> agent up, jailed against unjailed (1 vCPU, %d MiB, %d creates each), nested rig %s\n",
		snapShape.MemoryMiB, max(*startsJail, 1), time.Now().Format("2006-01-02"))
	fmt.Println(serviceCgroup())
	m, done, err := newBenchManager(cellvm, build, nil, engine.TemplateOptions{}, withPool)
	if err != nil {
		return err
	}
	defer done()
	ctx := context.Background()
	s := &startsBench{snapBench: &snapBench{m: m}, measureLines: measureLines{bench: "jail"}, cellvm: cellvm, build: build}
	defer s.summary()
	defer s.cleanup(ctx)
	cfg := snapShape
	cfg.Start = sandbox.StartCold
	return s.jail(ctx, cfg)
}

// runTrivial runs trivialCell and checks that its result is 2.
func runTrivial(ctx context.Context, m sandbox.Manager, id string) error {
	r, err := m.RunCell(ctx, id, sandbox.Cell{Code: trivialCell, Timeout: cellTimeout}, nil)
	if err != nil {
		return err
	}
	if main := r.MainResult(); r.Status != cell.StatusOK || main == nil || main.Data[cell.MIMEText] != "2" {
		return fmt.Errorf("cell %q: %+v, want status ok and the result 2", trivialCell, r)
	}
	return nil
}

// vmmMemory is what a VMM process holds: its RSS, and of it the guest
// memory's mappings (their span and their resident bytes).
type vmmMemory struct {
	rss, guestSize, guestRSS int64
	// parts splits the rest by what holds it (overheadParts).
	parts map[string]int64
}

func vmmMemoryOf(id string) (vmmMemory, error) {
	pid, err := vmmPID(id)
	if err != nil {
		return vmmMemory{}, err
	}
	rollup, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return vmmMemory{}, err
	}
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return vmmMemory{}, err
	}
	var u vmmMemory
	if u.rss, err = rollupField(rollup, "Rss"); err != nil {
		return vmmMemory{}, err
	}
	if u.guestSize, u.guestRSS, err = guestMemory(smaps); err != nil {
		return vmmMemory{}, err
	}
	if u.parts, err = overheadParts(smaps); err != nil {
		return vmmMemory{}, err
	}
	return u, nil
}
