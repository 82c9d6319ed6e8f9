package main

// The checkpoints bench (issue 29, -only checkpoints) measures time travel
// through the daemon's API (the Go client, api.Client, on a Unix socket
// served in this process over a manager, as `cellvm serve` serves one),
// all on one machine shape (1 vCPU, 512 MiB, unjailed VMMs), one line per
// measure, each a ratio with its absolute times:
//
//   - the pause of a checkpoint after every cell against the cell's own
//     duration, over -checkpoint-cells cells of a sandbox created with
//     {"checkpoints": {"every_cell": true}}, p50 and p90: from the
//     daemon's pause_ms, and from the client's wall time (against a
//     sandbox without checkpoints running the same cells); and the
//     layers' sizes;
//   - a restore to a checkpoint to the first result after it (the undo of
//     a cell), against a cold boot to its first result, medians of 3;
//   - a branch from a checkpoint to its first result, against a fork of a
//     full snapshot of the same sandbox, medians of 3.
//
// A daemon without checkpoints (501, or 400 for the fields) gets its
// lines said so, and the bench goes on. The lines are printed again
// together at the end, as the starts bench's are.

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/engine"
	"github.com/cellvm/cellvm/sandbox/tenant"
)

var checkpointCells = flag.Int("checkpoint-cells", 10, "cells of a sandbox with every_cell checkpoints in the checkpoints bench, each timed with its checkpoint")

// checkpointRounds is how many restores, cold boots, branches and forks
// the ratio lines take the medians of.
const checkpointRounds = 3

// The measures' names, which their lines start with.
const (
	ckPauseWhat   = "checkpoint pause (pause_ms) / the cell's own duration, every cell"
	ckRestoreWhat = "restore to a checkpoint -> first result"
	ckColdWhat    = "cold boot -> first result"
	ckBranchWhat  = "branch from a checkpoint -> first result"
	ckForkWhat    = "fork of a full snapshot -> first result"
)

// ckWork is the cells' work, cycled: each dirties a different amount of
// guest memory (nothing, a few pages, 16 MiB, the data stack's imports),
// and one sleeps, so the pauses span what cells do.
var ckWork = []string{
	"",
	"import json; j = json.dumps(list(range(100_000)))",
	"buf = bytearray(16 << 20)",
	"s = sum(range(2_000_000))",
	"import numpy as np; a = np.random.rand(512, 512)",
	"d = {i: str(i) for i in range(200_000)}",
	"import time; time.sleep(0.2)",
	"import numpy as np; p = np.ones((256, 256)) @ np.ones((256, 256))",
	"l = [str(i) * 10 for i in range(100_000)]",
	"buf = None; d = None; l = None",
}

// ckCell is cell i: its work, then x = i, printed.
func ckCell(i int) (code, want string) {
	return fmt.Sprintf("%s\nx = %d\nprint(x)", ckWork[i%len(ckWork)], i), fmt.Sprintf("%d\n", i)
}

// ckBench is one run of the bench: its snapBench holds the manager it
// measures (the API's client; host tests give it a fake) and what it
// made, deleted however it ends.
type ckBench struct {
	*snapBench
	measureLines
}

// newCkBench is a run of the bench on m.
func newCkBench(m sandbox.Manager) *ckBench {
	return &ckBench{snapBench: &snapBench{m: m}, measureLines: measureLines{bench: "checkpoints"}}
}

func benchCheckpoints(cellvm, build string) error {
	n := max(*checkpointCells, 1)
	fmt.Printf("\ncheckpoints: time travel through the API (1 vCPU, %d MiB, unjailed VMMs; %d cells, medians of %d), nested rig %s\n",
		snapShape.MemoryMiB, n, checkpointRounds, time.Now().Format("2006-01-02"))
	inner, done, err := newBenchManager(cellvm, build, nil, engine.TemplateOptions{})
	if err != nil {
		return err
	}
	defer done()
	c, stop, err := serveBench(inner)
	if err != nil {
		return err
	}
	defer stop()
	ctx := context.Background()
	b := newCkBench(c)
	defer b.summary()
	defer b.cleanup(ctx)
	b.run(ctx, n)
	return nil
}

// serveBench serves the API over m on a Unix socket in a fresh directory,
// with the tenant layer over it as the daemon has, and returns a client
// of it and a function that stops it all.
func serveBench(m sandbox.Manager) (*api.Client, func(), error) {
	dir, err := os.MkdirTemp("", "cellvm-bench-api")
	if err != nil {
		return nil, nil, err
	}
	sock := filepath.Join(dir, "cellvm.sock")
	// Errors only: an internal error of the API says why here.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ln, err := api.ListenUnix(sock)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	srv := api.NewHTTPServer(api.NewServer(tenant.New(m, tenant.Options{Log: log}), log))
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			fmt.Println("bench: checkpoints: the API server:", err)
		}
	}()
	c := api.NewClient(sock)
	return c, func() { c.Close(); srv.Close(); os.RemoveAll(dir) }, nil
}

// run takes the three measures; each failure is its line's, and the
// restore and the branch need the first's sandbox and checkpoint.
func (b *ckBench) run(ctx context.Context, n int) {
	id, last, x, err := b.everyCell(ctx, n)
	if err != nil {
		b.line("%s", notMeasured(ckPauseWhat, err))
		if last.N == 0 {
			b.line("%s", notMeasured(ckRestoreWhat+" / "+ckColdWhat, err))
			b.line("%s", notMeasured(ckBranchWhat+" / "+ckForkWhat, err))
			return
		}
	}
	if err := b.restore(ctx, id, last.N, x); err != nil {
		b.line("%s", notMeasured(ckRestoreWhat+" / "+ckColdWhat, err))
	}
	if err := b.branch(ctx, id, last, x); err != nil {
		b.line("%s", notMeasured(ckBranchWhat+" / "+ckForkWhat, err))
	}
}

// everyCell runs cell 0 and then n measured cells on a sandbox with a
// checkpoint after every cell, each also on a sandbox without
// checkpoints, alternating, and prints the pause, wall and size lines. It
// returns the sandbox, the last checkpoint recorded (N 0 if none) and the
// x it holds (the number of the cell it was recorded after).
func (b *ckBench) everyCell(ctx context.Context, n int) (string, sandbox.CheckpointInfo, int, error) {
	var last sandbox.CheckpointInfo
	x := 0
	cfg := snapShape
	cfg.Checkpoints = &sandbox.CheckpointConfig{EveryCell: true}
	info, err := b.create(ctx, cfg)
	if err != nil {
		return "", last, x, fmt.Errorf("create with every_cell checkpoints: %w", err)
	}
	plain, err := b.create(ctx, snapShape)
	if err != nil {
		return "", last, x, fmt.Errorf("create without checkpoints: %w", err)
	}
	// Cell 0 starts Python's state on both; its checkpoint is the first
	// of a machine booted cold, a whole image, reported apart.
	first, ok, err := b.timedCell(ctx, info.ID, 0, 0)
	if err != nil {
		return info.ID, last, x, err
	}
	if !ok {
		return info.ID, last, x, fmt.Errorf("cell 0 recorded no checkpoint")
	}
	last = first.ck
	if _, err := b.timedPlain(ctx, plain.ID, 0); err != nil {
		return info.ID, last, x, err
	}
	fmt.Printf("cell 0: %v (wall %v), its checkpoint %d (depth %d, %s) paused %d ms\n", dur(first.cell), dur(first.wall),
		first.ck.N, first.ck.Depth, size(first.ck.SizeBytes), first.ck.PauseMS)
	var cs []cellCheckpoint
	var plainExtra []time.Duration
	missed := 0
	for i := 1; i <= n; i++ {
		c, ok, err := b.timedCell(ctx, info.ID, i, last.N)
		if err != nil {
			return info.ID, last, x, err
		}
		if !ok {
			missed++
			fmt.Printf("cell %d: %v (wall %v), no checkpoint\n", i, dur(c.cell), dur(c.wall))
		} else {
			cs = append(cs, c)
			last, x = c.ck, i
			fmt.Printf("cell %d: %v (wall %v), checkpoint %d (depth %d, %s) paused %d ms\n", i, dur(c.cell), dur(c.wall),
				c.ck.N, c.ck.Depth, size(c.ck.SizeBytes), c.ck.PauseMS)
		}
		e, err := b.timedPlain(ctx, plain.ID, i)
		if err != nil {
			return info.ID, last, x, err
		}
		plainExtra = append(plainExtra, e)
	}
	b.delete(ctx, plain.ID)
	b.line("%s", pauseLine(cs, missed))
	b.line("%s", wallLine(cs, plainExtra))
	b.line("%s", layersLine(first.ck, cs))
	return info.ID, last, x, nil
}

// timedCell runs cell i on id, a sandbox with every_cell checkpoints, and
// finds the checkpoint recorded after it: the last kept, if numbered
// after prev (ok false if none was).
func (b *ckBench) timedCell(ctx context.Context, id string, i, prev int) (cellCheckpoint, bool, error) {
	code, want := ckCell(i)
	start := time.Now()
	r, err := b.m.RunCell(ctx, id, sandbox.Cell{Code: code, Timeout: cellTimeout}, nil)
	wall := time.Since(start)
	if err != nil {
		return cellCheckpoint{}, false, fmt.Errorf("cell %d: %w", i, err)
	}
	if r.Stdout != want {
		return cellCheckpoint{}, false, fmt.Errorf("cell %d: %+v, want stdout %q", i, r, want)
	}
	c := cellCheckpoint{wall: wall, cell: time.Duration(r.DurationMS) * time.Millisecond}
	cks, err := b.m.Checkpoints(ctx, id)
	if err != nil {
		return c, false, fmt.Errorf("the checkpoints after cell %d: %w", i, err)
	}
	if len(cks) == 0 || cks[len(cks)-1].N <= prev {
		return c, false, nil
	}
	c.ck = cks[len(cks)-1]
	return c, true, nil
}

// timedPlain runs cell i on a sandbox without checkpoints and returns its
// wall time less its own duration.
func (b *ckBench) timedPlain(ctx context.Context, id string, i int) (time.Duration, error) {
	code, want := ckCell(i)
	start := time.Now()
	r, err := b.m.RunCell(ctx, id, sandbox.Cell{Code: code, Timeout: cellTimeout}, nil)
	wall := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("cell %d without checkpoints: %w", i, err)
	}
	if r.Stdout != want {
		return 0, fmt.Errorf("cell %d without checkpoints: %+v, want stdout %q", i, r, want)
	}
	return wall - time.Duration(r.DurationMS)*time.Millisecond, nil
}

// restore, each round: a cell that changes x (and records a checkpoint),
// a restore to checkpoint k, where x was x, and a cell printing it; then
// a cold boot to the result of trivialCell.
func (b *ckBench) restore(ctx context.Context, id string, k, x int) error {
	var restores, firsts, colds, pauses []time.Duration
	for i := range checkpointRounds {
		if err := runCell(ctx, b.m, id, "x = -1\nprint(x)", "-1\n"); err != nil {
			return fmt.Errorf("round %d, the cell to undo: %w", i+1, err)
		}
		start := time.Now()
		if _, err := b.m.RestoreCheckpoint(ctx, id, k); err != nil {
			return fmt.Errorf("round %d, restore checkpoint %d: %w", i+1, k, err)
		}
		restored := time.Since(start)
		if err := runCell(ctx, b.m, id, "print(x)", fmt.Sprintf("%d\n", x)); err != nil {
			return fmt.Errorf("round %d, the first cell after restoring checkpoint %d: %w", i+1, k, err)
		}
		first := time.Since(start)
		restores, firsts = append(restores, restored), append(firsts, first)
		// The first cell records its own checkpoint, inside the time.
		if cks, err := b.m.Checkpoints(ctx, id); err == nil && len(cks) > 0 && cks[len(cks)-1].N > k {
			pauses = append(pauses, time.Duration(cks[len(cks)-1].PauseMS)*time.Millisecond)
		}
		cold, err := b.coldFirst(ctx)
		if err != nil {
			return fmt.Errorf("round %d, cold boot: %w", i+1, err)
		}
		colds = append(colds, cold)
		fmt.Printf("restore %d: checkpoint %d restored in %v, first result (x back to %d) in %v; cold boot to first result in %v\n",
			i+1, k, dur(restored), x, dur(first), dur(cold))
	}
	b.line("%s; the restore alone %v, the first cell's own checkpoint paused %v of it (medians)",
		againstLine(ckRestoreWhat, ckColdWhat, firsts, colds), dur(percentile(restores, 50)), dur(percentile(pauses, 50)))
	return nil
}

// coldFirst boots a sandbox cold to the result of trivialCell, and
// deletes it.
func (b *ckBench) coldFirst(ctx context.Context) (time.Duration, error) {
	cfg := snapShape
	cfg.Start = sandbox.StartCold
	start := time.Now()
	info, err := b.create(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer b.delete(ctx, info.ID)
	if info.StartedFrom != sandbox.StartedFromBoot {
		return 0, fmt.Errorf("started from %q, not %q", info.StartedFrom, sandbox.StartedFromBoot)
	}
	if err := runTrivial(ctx, b.m, info.ID); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// branch sets x on id as checkpoint ck holds it, snapshots id, then each
// round times a branch from ck and a fork of the snapshot, each to a cell
// printing x.
func (b *ckBench) branch(ctx context.Context, id string, ck sandbox.CheckpointInfo, x int) error {
	want := fmt.Sprintf("%d\n", x)
	if err := runCell(ctx, b.m, id, fmt.Sprintf("x = %d\nprint(x)", x), want); err != nil {
		return fmt.Errorf("set x for the snapshot: %w", err)
	}
	snap, err := b.m.Snapshot(ctx, id)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	b.snapshots = append(b.snapshots, snap.ID)
	var branches, forks []time.Duration
	for i := range checkpointRounds {
		br, err := b.firstOf(ctx, sandbox.Config{Checkpoint: &sandbox.CheckpointRef{Sandbox: id, N: ck.N}}, want)
		if err != nil {
			return fmt.Errorf("round %d, branch from checkpoint %d: %w", i+1, ck.N, err)
		}
		fk, err := b.firstOf(ctx, sandbox.Config{Snapshot: snap.ID}, want)
		if err != nil {
			return fmt.Errorf("round %d, fork: %w", i+1, err)
		}
		branches, forks = append(branches, br), append(forks, fk)
		fmt.Printf("branch %d: first result in %v; fork: %v\n", i+1, dur(br), dur(fk))
	}
	b.line("%s; checkpoint %d composes %d files, the snapshot %s",
		againstLine(ckBranchWhat, ckForkWhat, branches, forks), ck.N, ck.Depth, size(snap.SizeBytes))
	return nil
}

// firstOf creates a sandbox with cfg to the result of a cell printing x,
// and deletes it.
func (b *ckBench) firstOf(ctx context.Context, cfg sandbox.Config, want string) (time.Duration, error) {
	start := time.Now()
	info, err := b.create(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer b.delete(ctx, info.ID)
	if err := runCell(ctx, b.m, info.ID, "print(x)", want); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}
