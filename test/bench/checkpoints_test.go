package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

func TestPauseLine(t *testing.T) {
	var cs []cellCheckpoint
	for i := 1; i <= 10; i++ { // pauses 1..10 ms against cells of 20 ms
		cs = append(cs, cellCheckpoint{cell: 20 * time.Millisecond, ck: sandbox.CheckpointInfo{N: i, PauseMS: int64(i)}})
	}
	got := pauseLine(cs, 0)
	for _, want := range []string{"p50 0.250, p90 0.450", "over 10;", "pause p50 5ms, p90 9ms", "cell p50 20ms, p90 20ms"} {
		if !strings.Contains(got, want) {
			t.Errorf("pauseLine = %q, want %q in it", got, want)
		}
	}
	if got := pauseLine(cs[:1], 2); !strings.Contains(got, "over 1; 2 cells recorded none") {
		t.Errorf("pauseLine with cells that recorded none = %q", got)
	}
	// A cell of 0 ms counts as 1 ms, not an infinite ratio.
	zero := []cellCheckpoint{{ck: sandbox.CheckpointInfo{PauseMS: 3}}}
	if got := pauseLine(zero, 0); !strings.Contains(got, "p50 3.000, p90 3.000") {
		t.Errorf("pauseLine of a 0 ms cell = %q", got)
	}
	if got := pauseLine(nil, 3); !strings.Contains(got, "not measured") {
		t.Errorf("pauseLine of nothing = %q", got)
	}
}

func TestWallLine(t *testing.T) {
	// Each cell: 100 ms, wall 100 + 5 (the API, as without checkpoints) + 10*i ms.
	var cs []cellCheckpoint
	for i := 1; i <= 4; i++ {
		cs = append(cs, cellCheckpoint{cell: 100 * time.Millisecond, wall: time.Duration(105+10*i) * time.Millisecond})
	}
	plain := []time.Duration{4 * time.Millisecond, 5 * time.Millisecond, 6 * time.Millisecond}
	got := wallLine(cs, plain)
	for _, want := range []string{"p50 0.200, p90 0.400", "over 4;", "less 5ms for the same without checkpoints", "p50 20ms, p90 40ms"} {
		if !strings.Contains(got, want) {
			t.Errorf("wallLine = %q, want %q in it", got, want)
		}
	}
	if got := wallLine(cs, nil); !strings.Contains(got, "not measured") {
		t.Errorf("wallLine without a plain sandbox = %q", got)
	}
}

func TestLayersLine(t *testing.T) {
	first := sandbox.CheckpointInfo{N: 1, Depth: 1, SizeBytes: 160 << 20, PauseMS: 900}
	var cs []cellCheckpoint
	for i, kib := range []int64{8, 4, 2048, 16} {
		cs = append(cs, cellCheckpoint{ck: sandbox.CheckpointInfo{N: i + 2, Depth: i + 2, SizeBytes: kib << 10}})
	}
	got := layersLine(first, cs)
	for _, want := range []string{"p50 8.0 KiB", "p90 2.0 MiB", "largest 2.0 MiB", "2.0 MiB for 4", "depth up to 5",
		"the first checkpoint (depth 1): 160.0 MiB, pause 900 ms"} {
		if !strings.Contains(got, want) {
			t.Errorf("layersLine = %q, want %q in it", got, want)
		}
	}
}

func TestAgainstLine(t *testing.T) {
	a := []time.Duration{3 * time.Second, 1 * time.Second, 2 * time.Second}
	base := []time.Duration{40 * time.Second, 20 * time.Second, 30 * time.Second}
	want := "restore / cold: 0.067 (2s vs 30s, medians of 3 and 3)"
	if got := againstLine("restore", "cold", a, base); got != want {
		t.Errorf("againstLine = %q, want %q", got, want)
	}
	if got := againstLine("restore", "cold", a, nil); !strings.Contains(got, "not measured") {
		t.Errorf("againstLine without a baseline = %q", got)
	}
}

func TestUnsupported(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&api.Error{Status: 501, Code: api.CodeNotSupported}, true},
		{&api.Error{Status: 400, Code: api.CodeInvalid, Message: "unknown field \"checkpoints\""}, true},
		{fmt.Errorf("cell 0: %w", sandbox.ErrNotSupported), true},
		{&api.Error{Status: 404, Code: api.CodeNotFound}, false},
		{&api.Error{Status: 500, Code: api.CodeInternal}, false},
		{errors.New("the rig fell over"), false},
	} {
		if got := unsupported(c.err); got != c.want {
			t.Errorf("unsupported(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if got := notMeasured("x", sandbox.ErrNotSupported); !strings.Contains(got, "x: not measured, the daemon refused checkpoints") {
		t.Errorf("notMeasured of not supported = %q", got)
	}
	if got := notMeasured("x", errors.New("boom")); got != "x: not measured: boom" {
		t.Errorf("notMeasured of another error = %q", got)
	}
}

func TestSelectCheckpoints(t *testing.T) {
	parts, err := selectParts("checkpoints")
	if err != nil || len(parts) != 1 || !parts["checkpoints"] {
		t.Errorf("-only checkpoints = %v, %v", parts, err)
	}
	if all, _ := selectParts(""); !all["checkpoints"] {
		t.Errorf("all benches leave out checkpoints: %v", all)
	}
}

func TestCkCell(t *testing.T) {
	for i := range 2 * len(ckWork) {
		code, want := ckCell(i)
		lines := strings.Split(code, "\n")
		if n := len(lines); n != 3 || lines[1] != fmt.Sprintf("x = %d", i) || lines[2] != "print(x)" || want != fmt.Sprintf("%d\n", i) {
			t.Errorf("cell %d = %q, want %q: its work, x = %d, print(x)", i, code, want, i)
		}
	}
}

// ckFake is a manager with checkpoints over the fake: its Script keeps
// each sandbox's x (the only state the bench's cells check), and a
// checkpoint keeps what x was. none makes it a daemon without
// checkpoints (ErrNotSupported).
type ckFake struct {
	*sandboxtest.Manager
	none bool

	mu    sync.Mutex
	x     map[string]int
	every map[string]bool
	cks   map[string][]ckSaved
	snapX map[string]int
	// branched counts the creates from a checkpoint.
	branched int
}

type ckSaved struct {
	info sandbox.CheckpointInfo
	x    int
}

var assignX = regexp.MustCompile(`(?m)^x = (-?\d+)$`)

func newCkFake(none bool) *ckFake {
	f := &ckFake{Manager: sandboxtest.New(), none: none, x: map[string]int{}, every: map[string]bool{}, cks: map[string][]ckSaved{}, snapX: map[string]int{}}
	f.Script = func(ctx context.Context, c *sandboxtest.Cell) (cell.Result, error) {
		res := cell.Result{Status: cell.StatusOK, StateKept: true, DurationMS: 20}
		if c.Code == trivialCell {
			res.Results = []cell.Display{{Main: true, Data: map[string]string{cell.MIMEText: "2"}}}
			return res, nil
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if m := assignX.FindStringSubmatch(c.Code); m != nil {
			f.x[c.Sandbox], _ = strconv.Atoi(m[1])
		}
		if strings.HasSuffix(c.Code, "print(x)") {
			x, ok := f.x[c.Sandbox]
			if !ok {
				res.Status, res.Error = cell.StatusError, &cell.Error{Name: "NameError", Value: "name 'x' is not defined"}
				return res, nil
			}
			res.Stdout = fmt.Sprintf("%d\n", x)
		}
		return res, nil
	}
	return f
}

func (f *ckFake) Create(ctx context.Context, cfg sandbox.Config) (sandbox.Info, error) {
	every, ref := cfg.Checkpoints != nil && cfg.Checkpoints.EveryCell, cfg.Checkpoint
	cfg.Checkpoints, cfg.Checkpoint = nil, nil
	f.mu.Lock()
	x, haveX := 0, false
	if ref != nil {
		for _, s := range f.cks[ref.Sandbox] {
			if s.info.N == ref.N {
				x, haveX = s.x, true
			}
		}
		if !haveX {
			f.mu.Unlock()
			return sandbox.Info{}, fmt.Errorf("%w: no checkpoint %d of %s", sandbox.ErrNotFound, ref.N, ref.Sandbox)
		}
		f.branched++
	}
	if cfg.Snapshot != "" {
		x, haveX = f.snapX[cfg.Snapshot]
	}
	f.mu.Unlock()
	info, err := f.Manager.Create(ctx, cfg)
	if err != nil {
		return info, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.every[info.ID] = every && !f.none
	if haveX {
		f.x[info.ID] = x
	}
	return info, nil
}

func (f *ckFake) RunCell(ctx context.Context, id string, spec sandbox.Cell, onEvent func(cell.Event)) (cell.Result, error) {
	r, err := f.Manager.RunCell(ctx, id, spec, onEvent)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && f.every[id] {
		cks := f.cks[id]
		n := 1
		if len(cks) > 0 {
			n = cks[len(cks)-1].info.N + 1
		}
		// Checkpoint n pauses n ms and holds n KiB (the first, 1 MiB).
		info := sandbox.CheckpointInfo{N: n, Kind: sandbox.CheckpointCell, Depth: n, PauseMS: int64(n), SizeBytes: int64(n) << 10}
		if n == 1 {
			info.SizeBytes = 1 << 20
		}
		f.cks[id] = append(cks, ckSaved{info, f.x[id]})
	}
	return r, err
}

func (f *ckFake) Snapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	s, err := f.Manager.Snapshot(ctx, id)
	if err == nil {
		f.mu.Lock()
		f.snapX[s.ID] = f.x[id]
		f.mu.Unlock()
	}
	return s, err
}

func (f *ckFake) Checkpoints(ctx context.Context, id string) ([]sandbox.CheckpointInfo, error) {
	if f.none {
		return nil, fmt.Errorf("%w: checkpoints", sandbox.ErrNotSupported)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var infos []sandbox.CheckpointInfo
	for _, s := range f.cks[id] {
		infos = append(infos, s.info)
	}
	return infos, nil
}

func (f *ckFake) RestoreCheckpoint(ctx context.Context, id string, n int) (sandbox.CheckpointInfo, error) {
	if f.none {
		return sandbox.CheckpointInfo{}, fmt.Errorf("%w: checkpoints", sandbox.ErrNotSupported)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range f.cks[id] {
		if s.info.N == n {
			f.x[id] = s.x
			f.cks[id] = f.cks[id][:i+1]
			return s.info, nil
		}
	}
	return sandbox.CheckpointInfo{}, fmt.Errorf("%w: checkpoint %d", sandbox.ErrNotFound, n)
}

// TestBenchOverFake runs the whole bench on the fake with checkpoints:
// every measure's line, with the numbers the fake's checkpoints give,
// and nothing left behind.
func TestBenchOverFake(t *testing.T) {
	f := newCkFake(false)
	lines := runCk(t, f, 10, 5) // pause, wall, sizes, restore, branch
	// Cell 0's checkpoint is 1; cells 1..10 record 2..11, pausing as many
	// ms against cells of 20 ms: p50 the 5th (6 ms), p90 the 9th (10 ms).
	for i, want := range []string{
		"checkpoint pause (pause_ms) / the cell's own duration, every cell: p50 0.300, p90 0.500 (per cell, over 10;",
		"checkpoint cost from wall time / the cell's own duration, every cell: p50 ",
		"checkpoint sizes: each cell's layer p50 6.0 KiB, p90 10.0 KiB, largest 11.0 KiB, 65.0 KiB for 10 (depth up to 11); the first checkpoint (depth 1): 1.0 MiB, pause 1 ms",
		ckRestoreWhat + " / " + ckColdWhat + ": ",
		ckBranchWhat + " / " + ckForkWhat + ": ",
	} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d = %q, want it to start %q", i+1, lines[i], want)
		}
	}
	if !strings.Contains(lines[3], "medians of 3 and 3") || !strings.Contains(lines[4], "checkpoint 11 composes 11 files") {
		t.Errorf("restore and branch lines: %q, %q", lines[3], lines[4])
	}
	if f.branched != checkpointRounds {
		t.Errorf("%d branches, want %d", f.branched, checkpointRounds)
	}
	nothingLeft(t, f)
}

// runCk runs the bench with n cells on m, and returns its lines, of
// which there must be want.
func runCk(t *testing.T, m sandbox.Manager, n, want int) []string {
	t.Helper()
	ctx := context.Background()
	b := newCkBench(m)
	b.run(ctx, n)
	b.cleanup(ctx)
	if len(b.lines) != want {
		t.Fatalf("%d lines, want %d:\n%s", len(b.lines), want, strings.Join(b.lines, "\n"))
	}
	return b.lines
}

// nothingLeft checks that the bench deleted all it made on f.
func nothingLeft(t *testing.T, f *ckFake) {
	t.Helper()
	ctx := context.Background()
	if left, _ := f.List(ctx); len(left) != 0 {
		t.Errorf("the bench left %d sandboxes", len(left))
	}
	if left, _ := f.ListSnapshots(ctx); len(left) != 0 {
		t.Errorf("the bench left %d snapshots", len(left))
	}
}

// TestBenchNoCheckpoints runs the bench through the API's client and
// server against a daemon without checkpoints: each measure's line says
// so, and the bench goes on to the end.
func TestBenchNoCheckpoints(t *testing.T) {
	f := newCkFake(true)
	c, stop, err := serveBench(f)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, l := range runCk(t, c, 3, 3) {
		if !strings.Contains(l, "not measured, the daemon refused checkpoints") {
			t.Errorf("line %q does not say the daemon has no checkpoints", l)
		}
	}
	nothingLeft(t, f)
}
