package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cellvm/cellvm/sandbox/engine"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// benchSnapshots measures what snapshots buy a user, each against a cold
// boot measured in the same run on the same machine shape (1 vCPU,
// 512 MiB, unjailed VMMs):
//
//   - cold: create with start "cold" to the first result of a cell that
//     imports the data stack (boot, interpreter, imports); the baseline;
//   - fork: create from a snapshot of a sandbox that imported the stack
//     and set a variable, to its agent up and to a cell printing it;
//   - pause and resume (to disk and back) of that sandbox, and resume to
//     its next cell's result;
//   - memory: the PSS of four forks' VMM processes, alive at once,
//     against one cold VM's after its imports;
//   - template: a plain create from the manager's template for the shape
//     to the same import cell's result.
//
// Cold runs twice and the faster run is the baseline, so a first boot
// that fills caches does not flatter the ratios.
func benchSnapshots(cellvm, build string) error {
	fmt.Printf("\nsnapshots: templates, forks, pause and resume against a cold boot (1 vCPU, %d MiB, unjailed VMMs), nested rig %s\n",
		snapShape.MemoryMiB, time.Now().Format("2006-01-02"))
	ctx := context.Background()
	coldFirst, err := benchForks(ctx, cellvm, build)
	if coldFirst == 0 {
		return err // no baseline to compare with
	}
	if err != nil {
		fmt.Println("bench: snapshots:", err)
	}
	return benchTemplate(ctx, cellvm, build, coldFirst)
}

// benchForks runs the cold baseline, the snapshot, pause and resume and the
// forks on a manager without templates, and returns the cold baseline.
func benchForks(ctx context.Context, cellvm, build string) (time.Duration, error) {
	m, done, err := newBenchManager(cellvm, build, nil, engine.TemplateOptions{})
	if err != nil {
		return 0, err
	}
	defer done()
	b := &snapBench{m: m}
	defer b.cleanup(ctx)
	coldFirst, err := b.cold(ctx)
	if err != nil {
		return 0, err
	}
	return coldFirst, b.forksAndPause(ctx, coldFirst)
}

// snapShape is the machine every sandbox of this bench has.
var snapShape = sandbox.Config{VCPUs: 1, MemoryMiB: 512}

const (
	importCell   = "import numpy, pandas, matplotlib; print('ok')"
	coldRuns     = 2
	pauseRounds  = 2
	memoryForks  = 4
	cellTimeout  = 10 * time.Minute
	templateWait = 10 * time.Minute
	// pssGoal is the goal for four forks' PSS against one cold VM's.
	pssGoal = 2.0
	// templateGoal is its goal for a template start's first result.
	templateGoal = 0.1
)

// snapBench holds what the bench made, so that all of it is deleted
// however it ends.
type snapBench struct {
	m         sandbox.Manager
	sandboxes []string
	snapshots []string
	// kept is the cold sandbox that imported the stack and set x.
	kept string
}

// printSaveStats prints what the VMM said of the memory file it wrote
// last: how much came from guest memory, from the machine's old memory
// file, and was left as holes, and the write and sync times.
func (b *snapBench) printSaveStats(ctx context.Context, id string) {
	var last string
	b.m.Logs(ctx, id, sandbox.LogRequest{Source: sandbox.LogVMM, Tail: 50}, func(l sandbox.LogLine) error {
		if strings.Contains(l.Text, "snapshot memory written") {
			last = l.Text
		}
		return nil
	})
	if _, stats, ok := strings.Cut(last, "snapshot memory written"); ok {
		fmt.Printf("  the VMM: %s\n", stats)
	}
}

func (b *snapBench) create(ctx context.Context, cfg sandbox.Config) (sandbox.Info, error) {
	info, err := b.m.Create(ctx, cfg)
	if err == nil {
		b.sandboxes = append(b.sandboxes, info.ID)
	}
	return info, err
}

func (b *snapBench) delete(ctx context.Context, id string) {
	b.m.Delete(ctx, id)
	for i, s := range b.sandboxes {
		if s == id {
			b.sandboxes = append(b.sandboxes[:i], b.sandboxes[i+1:]...)
			break
		}
	}
}

func (b *snapBench) cleanup(ctx context.Context) {
	for _, id := range b.sandboxes {
		b.m.Delete(ctx, id)
	}
	b.sandboxes = nil
	for _, id := range b.snapshots {
		b.m.DeleteSnapshot(ctx, id)
	}
	b.snapshots = nil
}

// cold boots coldRuns sandboxes to their import cell's result, keeps the
// last (its PSS measured, x set) and returns the faster time.
func (b *snapBench) cold(ctx context.Context) (time.Duration, error) {
	var firsts []time.Duration
	for i := range coldRuns {
		cfg := snapShape
		cfg.Start = sandbox.StartCold
		start := time.Now()
		info, err := b.create(ctx, cfg)
		if err != nil {
			return 0, fmt.Errorf("cold create: %w", err)
		}
		up := time.Since(start)
		if info.StartedFrom != sandbox.StartedFromBoot {
			return 0, fmt.Errorf("cold create started from %q, not %q", info.StartedFrom, sandbox.StartedFromBoot)
		}
		if err := runCell(ctx, b.m, info.ID, importCell, "ok\n"); err != nil {
			return 0, fmt.Errorf("cold first cell: %w", err)
		}
		first := time.Since(start)
		firsts = append(firsts, first)
		fmt.Printf("cold %d: agent up in %v, first cell result (the data-stack imports) in %v\n", i+1, up.Round(time.Millisecond), first.Round(time.Millisecond))
		if i < coldRuns-1 {
			b.delete(ctx, info.ID)
		} else {
			b.kept = info.ID
		}
	}
	return minDur(firsts), nil
}

// forksAndPause snapshots the kept cold sandbox, pauses and resumes it,
// then runs memoryForks forks of the snapshot at once.
func (b *snapBench) forksAndPause(ctx context.Context, coldFirst time.Duration) error {
	m := b.m
	coldPSS, err := vmmPSS(b.kept)
	if err != nil {
		return fmt.Errorf("cold VM's PSS: %w", err)
	}
	fmt.Printf("cold VM's VMM PSS after the imports: %.1f MiB\n", mib(coldPSS))
	if err := runCell(ctx, m, b.kept, "x = 42", ""); err != nil {
		return fmt.Errorf("set x: %w", err)
	}
	start := time.Now()
	snap, err := m.Snapshot(ctx, b.kept)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	b.snapshots = append(b.snapshots, snap.ID)
	fmt.Printf("snapshot of the running sandbox: %v, %.1f MiB on disk\n", time.Since(start).Round(time.Millisecond), mib(snap.SizeBytes))

	var pauses, resumes, resumeFirsts []time.Duration
	for i := range pauseRounds {
		start := time.Now()
		if err := m.Pause(ctx, b.kept); err != nil {
			return fmt.Errorf("pause %d: %w", i+1, err)
		}
		pauses = append(pauses, time.Since(start))
		b.printSaveStats(ctx, b.kept)
		start = time.Now()
		if err := m.Resume(ctx, b.kept); err != nil {
			return fmt.Errorf("resume %d: %w", i+1, err)
		}
		resumes = append(resumes, time.Since(start))
		if err := runCell(ctx, m, b.kept, "print(x)", "42\n"); err != nil {
			return fmt.Errorf("first cell after resume %d: %w", i+1, err)
		}
		resumeFirsts = append(resumeFirsts, time.Since(start))
		fmt.Printf("pause %d: %v; resume: %v, to the first cell result (x kept) %v\n", i+1,
			pauses[i].Round(time.Millisecond), resumes[i].Round(time.Millisecond), resumeFirsts[i].Round(time.Millisecond))
	}
	b.delete(ctx, b.kept)

	var ups, firsts []time.Duration
	var forks []string
	for i := range memoryForks {
		start := time.Now()
		info, err := b.create(ctx, sandbox.Config{Snapshot: snap.ID})
		if err != nil {
			return fmt.Errorf("fork %d: %w", i+1, err)
		}
		ups = append(ups, time.Since(start))
		if info.StartedFrom != sandbox.StartedFromSnapshot {
			return fmt.Errorf("fork %d started from %q, not %q", i+1, info.StartedFrom, sandbox.StartedFromSnapshot)
		}
		if err := runCell(ctx, m, info.ID, "print(x)", "42\n"); err != nil {
			return fmt.Errorf("fork %d first cell: %w", i+1, err)
		}
		firsts = append(firsts, time.Since(start))
		forks = append(forks, info.ID)
		fmt.Printf("fork %d (%d alive): agent up in %v, first cell result (x kept) in %v\n", i+1, i+1,
			ups[i].Round(time.Millisecond), firsts[i].Round(time.Millisecond))
	}
	var sum int64
	var each []string
	for _, id := range forks {
		p, err := vmmPSS(id)
		if err != nil {
			return fmt.Errorf("fork's PSS: %w", err)
		}
		sum += p
		each = append(each, fmt.Sprintf("%.1f", mib(p)))
	}
	fmt.Printf("%d forks' VMM PSS, alive at once: %.1f MiB (%s MiB each)\n", memoryForks, mib(sum), strings.Join(each, " + "))

	cold := ms(coldFirst)
	fmt.Printf("ratio fork / cold: create to agent up %.3f, create to first cell result %.3f (%v, %v vs %v, medians of %d forks)\n",
		ms(medianDur(ups))/cold, ms(medianDur(firsts))/cold, medianDur(ups).Round(time.Millisecond),
		medianDur(firsts).Round(time.Millisecond), coldFirst.Round(time.Millisecond), memoryForks)
	fmt.Printf("ratio pause / cold: %.3f (%v vs %v, upper median of %d)\n", ms(medianDur(pauses))/cold,
		medianDur(pauses).Round(time.Millisecond), coldFirst.Round(time.Millisecond), pauseRounds)
	fmt.Printf("ratio resume / cold: resume %.3f, resume to first cell result %.3f (%v, %v vs %v, upper medians of %d)\n",
		ms(medianDur(resumes))/cold, ms(medianDur(resumeFirsts))/cold, medianDur(resumes).Round(time.Millisecond),
		medianDur(resumeFirsts).Round(time.Millisecond), coldFirst.Round(time.Millisecond), pauseRounds)
	fmt.Printf("ratio %d forks' PSS / one cold VM's PSS: %.2f (%.1f MiB vs %.1f MiB; goal < %.0f)\n", memoryForks,
		float64(sum)/float64(coldPSS), mib(sum), mib(coldPSS), pssGoal)
	for _, id := range forks {
		b.delete(ctx, id)
	}
	return nil
}

// benchTemplate runs a manager with templates on, waits for the shape's
// template and times plain creates from it to the import cell's result.
func benchTemplate(ctx context.Context, cellvm, build string, coldFirst time.Duration) error {
	m, done, err := newBenchManager(cellvm, build, nil, engine.TemplateOptions{Enabled: true, BuildTimeout: templateWait})
	if err != nil {
		return err
	}
	defer done()
	start := time.Now()
	t, err := waitShapeTemplate(ctx, m, start)
	if err != nil {
		return err
	}
	fmt.Printf("template for the shape ready %v after its manager started (a boot, the imports, a snapshot), %.1f MiB on disk\n",
		time.Since(start).Round(time.Second), mib(t.SizeBytes))
	b := &snapBench{m: m}
	defer b.cleanup(ctx)
	const rounds = 3
	var firsts []time.Duration
	for i := range rounds {
		start := time.Now()
		info, err := b.create(ctx, snapShape)
		if err != nil {
			return fmt.Errorf("template create %d: %w", i+1, err)
		}
		up := time.Since(start)
		if info.StartedFrom != sandbox.StartedFromTemplate {
			return fmt.Errorf("TEMPLATE NOT USED: plain create %d with a ready template started from %q, not %q", i+1, info.StartedFrom, sandbox.StartedFromTemplate)
		}
		if err := runCell(ctx, m, info.ID, importCell, "ok\n"); err != nil {
			return fmt.Errorf("template first cell %d: %w", i+1, err)
		}
		first := time.Since(start)
		firsts = append(firsts, first)
		fmt.Printf("template start %d: agent up in %v, first cell result (the data-stack imports) in %v\n", i+1, up.Round(time.Millisecond), first.Round(time.Millisecond))
		b.delete(ctx, info.ID)
	}
	med := medianDur(firsts)
	fmt.Printf("ratio template / cold: create to first cell result %.3f (%v vs %v, median of %d; goal <= %.1f)\n",
		ms(med)/ms(coldFirst), med.Round(time.Millisecond), coldFirst.Round(time.Millisecond), rounds, templateGoal)
	return nil
}

// waitShapeTemplate waits for the template of snapShape to be ready on m,
// started at start, and returns it with the most builds that had failed
// in a row while it waited.
func waitShapeTemplate(ctx context.Context, m sandbox.Manager, start time.Time) (sandbox.TemplateInfo, error) {
	said := start
	failures := 0
	for {
		c, err := m.Capacity(ctx)
		if err != nil {
			return sandbox.TemplateInfo{}, err
		}
		t, found := templateFor(c.Templates)
		if found && t.State == sandbox.TemplateReady {
			t.Failures = failures
			return t, nil
		}
		if found && t.State == sandbox.TemplateFailed && t.Failures > failures {
			failures = t.Failures
			fmt.Printf("template: build %d failed after %v (retry in %v): %s\n", failures, time.Since(start).Round(time.Second),
				time.Duration(t.RetryInMS)*time.Millisecond, t.Error)
		}
		if time.Since(start) > templateWait {
			return sandbox.TemplateInfo{}, fmt.Errorf("the template for 1 vCPU, %d MiB was not ready after %v: %+v", snapShape.MemoryMiB, templateWait, c.Templates)
		}
		if time.Since(said) >= time.Minute {
			state := "not listed"
			if found {
				state = string(t.State)
			}
			fmt.Printf("template: %s after %v\n", state, time.Since(start).Round(time.Second))
			said = time.Now()
		}
		time.Sleep(time.Second)
	}
}

// templateFor finds the template of snapShape (not root).
func templateFor(ts []sandbox.TemplateInfo) (sandbox.TemplateInfo, bool) {
	for _, t := range ts {
		if t.VCPUs == snapShape.VCPUs && t.MemoryMiB == snapShape.MemoryMiB && !t.Root {
			return t, true
		}
	}
	return sandbox.TemplateInfo{}, false
}

// runCell runs code and checks that it ended well with stdout want.
func runCell(ctx context.Context, m sandbox.Manager, id, code, want string) error {
	r, err := m.RunCell(ctx, id, sandbox.Cell{Code: code, Timeout: cellTimeout}, nil)
	if err != nil {
		return err
	}
	if r.Status != cell.StatusOK || r.Stdout != want {
		return fmt.Errorf("cell %q: %+v, want status ok and stdout %q", code, r, want)
	}
	return nil
}

// vmmPSS is the proportional set size of the VMM process running sandbox
// id: the `cellvm vmm` process whose command line names the sandbox's
// directory, or, for a pooled one, whose stdout or stderr does (logNames).
func vmmPSS(id string) (int64, error) {
	pid, err := vmmPID(id)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	return rollupField(b, "Pss")
}

func vmmPID(id string) (int, error) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var found []int
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
		if len(args) < 2 || string(args[1]) != "vmm" {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte(id)) || logNames(pid, id) {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("sandbox %s: %d VMM processes name it (%v), want 1", id, len(found), found)
	}
	return found[0], nil
}

// logNames reports whether process pid's stdout or stderr is a file in
// sandbox id's directory. A pooled VMM (serve --vmm-pool) was started
// before its sandbox existed, so its command line is `vmm --pooled`; its
// claim gave it the sandbox's console and log as fds 1 and 2.
func logNames(pid int, id string) bool {
	for _, fd := range []int{1, 2} {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
		if err == nil && strings.Contains(l, "/"+id+"/") {
			return true
		}
	}
	return false
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func minDur(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds[1:] {
		m = min(m, d)
	}
	return m
}
