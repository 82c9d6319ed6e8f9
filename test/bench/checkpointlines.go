package main

// The checkpoints bench's lines (issue 29), made from its samples by
// functions of their own, so that host tests cover them without KVM: what
// a checkpoint after every cell costs against the cell itself, and the
// ratio lines of restores and branches against what a user would do
// without checkpoints.

import (
	"errors"
	"fmt"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// cellCheckpoint is one cell of a sandbox with every_cell checkpoints:
// the client's wall time around RunCell, the cell's own duration (its
// result's duration_ms) and the checkpoint recorded after it.
type cellCheckpoint struct {
	wall, cell time.Duration
	ck         sandbox.CheckpointInfo
}

// minCell is the least duration a cell counts for in a ratio: results
// count whole milliseconds, and a cell of 0 ms would make any pause an
// infinite ratio.
const minCell = time.Millisecond

func (c cellCheckpoint) pause() time.Duration { return time.Duration(c.ck.PauseMS) * time.Millisecond }

// pauseLine is the checkpoint's pause (the daemon's pause_ms) against the
// cell's own duration: p50 and p90 of the ratio of each cell, with those
// of the pauses and of the cells. missed is the cells after which no
// checkpoint was recorded.
func pauseLine(cs []cellCheckpoint, missed int) string {
	const what = ckPauseWhat
	if len(cs) == 0 {
		return what + ": not measured (no cell recorded a checkpoint)"
	}
	var rs []float64
	var pauses, cells []time.Duration
	for _, c := range cs {
		rs = append(rs, ratio(c.pause(), max(c.cell, minCell)))
		pauses = append(pauses, c.pause())
		cells = append(cells, c.cell)
	}
	return fmt.Sprintf("%s: p50 %.3f, p90 %.3f (per cell, over %d%s; pause p50 %v, p90 %v; cell p50 %v, p90 %v)",
		what, percentile(rs, 50), percentile(rs, 90), len(cs), missedNote(missed),
		dur(percentile(pauses, 50)), dur(percentile(pauses, 90)), dur(percentile(cells, 50)), dur(percentile(cells, 90)))
}

// wallLine is the same ratio from the client's side: a cell's wall time
// less its own duration, less the median of the same on a sandbox without
// checkpoints running the same cells (plain: each cell's wall time less
// its duration there), against the cell's duration. It counts what the
// pause_ms leaves out (draining devices, writing the layer's files, the
// daemon's bookkeeping) and can come out below 0 by noise.
func wallLine(cs []cellCheckpoint, plain []time.Duration) string {
	const what = "checkpoint cost from wall time / the cell's own duration, every cell"
	if len(cs) == 0 || len(plain) == 0 {
		return what + ": not measured (no cells on both sandboxes)"
	}
	base := percentile(plain, 50)
	var rs []float64
	var extra []time.Duration
	for _, c := range cs {
		e := c.wall - c.cell - base
		extra = append(extra, e)
		rs = append(rs, float64(e)/float64(max(c.cell, minCell)))
	}
	return fmt.Sprintf("%s: p50 %.3f, p90 %.3f (per cell, over %d; a cell's wall time less its duration, less %v for the same without checkpoints: p50 %v, p90 %v)",
		what, percentile(rs, 50), percentile(rs, 90), len(cs), dur(base), dur(percentile(extra, 50)), dur(percentile(extra, 90)))
}

// layersLine is what the checkpoints after the cells hold on disk, and
// the first checkpoint apart (a whole image, for a machine booted cold).
func layersLine(first sandbox.CheckpointInfo, cs []cellCheckpoint) string {
	const what = "checkpoint sizes"
	if len(cs) == 0 {
		return what + ": not measured (no cell recorded a checkpoint)"
	}
	var sizes []int64
	var total int64
	depth := 0
	for _, c := range cs {
		sizes = append(sizes, c.ck.SizeBytes)
		total += c.ck.SizeBytes
		depth = max(depth, c.ck.Depth)
	}
	return fmt.Sprintf("%s: each cell's layer p50 %s, p90 %s, largest %s, %s for %d (depth up to %d); the first checkpoint (depth %d): %s, pause %d ms",
		what, size(percentile(sizes, 50)), size(percentile(sizes, 90)), size(percentile(sizes, 100)), size(total), len(cs), depth,
		first.Depth, size(first.SizeBytes), first.PauseMS)
}

// againstLine is the median of a against the median of base, with both.
func againstLine(what, baseWhat string, a, base []time.Duration) string {
	if len(a) == 0 || len(base) == 0 {
		return fmt.Sprintf("%s / %s: not measured (no samples)", what, baseWhat)
	}
	m, mb := percentile(a, 50), percentile(base, 50)
	return fmt.Sprintf("%s / %s: %.3f (%v vs %v, medians of %d and %d)", what, baseWhat, ratio(m, mb), dur(m), dur(mb), len(a), len(base))
}

// size is a byte count for a line: KiB below a MiB, MiB above.
func size(b int64) string {
	if b < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", mib(b))
}

func missedNote(missed int) string {
	if missed == 0 {
		return ""
	}
	return fmt.Sprintf("; %d cells recorded none", missed)
}

// unsupported says whether err is the daemon saying it has no
// checkpoints: not supported (501), or invalid (400), which a daemon
// that does not know the fields answers for a sandbox it made without
// them.
func unsupported(err error) bool {
	return errors.Is(err, sandbox.ErrNotSupported) || errors.Is(err, sandbox.ErrInvalid)
}

// notMeasured is the line of a measure that failed.
func notMeasured(what string, err error) string {
	if unsupported(err) {
		return fmt.Sprintf("%s: not measured, the daemon refused checkpoints: %v", what, err)
	}
	return fmt.Sprintf("%s: not measured: %v", what, err)
}
