package main

// Helpers the "starts" bench's lines are made of (and the checkpoints
// bench's): the lines kept for a summary, percentiles of a set of
// samples, a ratio against a goal, and a VMM's memory read from procfs.
// They are separate from the bench so that unit tests cover them without
// KVM.

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// percentile is the nearest-rank p-th percentile of ds (0 < p <= 100):
// the smallest sample with at least p percent of the samples at or below
// it. Over 20 samples p50 is the 10th and p99 the 20th (the worst). An
// empty set is 0. Samples are durations, byte counts or ratios.
func percentile[T cmp.Ordered](ds []T, p float64) T {
	if len(ds) == 0 {
		var zero T
		return zero
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// measureLines keeps a bench's measures' lines as it prints them, to
// print them again together at its end (summary), so that a run that
// failed halfway still shows what it measured.
type measureLines struct {
	bench string
	lines []string
}

// line prints a measure's line and keeps it for the summary.
func (m *measureLines) line(format string, args ...any) {
	l := fmt.Sprintf(format, args...)
	m.lines = append(m.lines, l)
	fmt.Println(l)
}

func (m *measureLines) summary() {
	fmt.Printf("\n%s: summary\n", m.bench)
	for _, l := range m.lines {
		fmt.Println("  " + l)
	}
}

// ratio is a over b, 0 when b is.
func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// verdict says whether v meets the goal v <= goal and, if not, by how
// much it misses: "goal <= 0.02: met", "goal <= 0.02: MISSED, 3.10x the
// goal".
func verdict(v, goal float64, unit string) string {
	g := strconv.FormatFloat(goal, 'g', -1, 64) + unit
	if v <= goal {
		return "goal <= " + g + ": met"
	}
	if goal <= 0 {
		return "goal <= " + g + ": MISSED"
	}
	return fmt.Sprintf("goal <= %s: MISSED, %.2fx the goal", g, v/goal)
}

// dur rounds a duration for a line: milliseconds, or microseconds below
// ten milliseconds (forks on real KVM).
func dur(d time.Duration) time.Duration {
	if d < 10*time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(time.Millisecond)
}

// rollupField reads a "Name:  N kB" field of /proc/PID/smaps_rollup, in
// bytes.
func rollupField(smapsRollup []byte, name string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(smapsRollup))
	for sc.Scan() {
		if kb, ok := kbField(sc.Text(), name); ok {
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s line in smaps_rollup", name)
}

// kbField parses line as "name: N kB".
func kbField(line, name string) (int64, bool) {
	v, ok := strings.CutPrefix(line, name+":")
	if !ok {
		return 0, false
	}
	f := strings.Fields(v)
	if len(f) != 2 || f[1] != "kB" {
		return 0, false
	}
	kb, err := strconv.ParseInt(f[0], 10, 64)
	return kb, err == nil && kb >= 0
}

// smapsHeader is the first line of a mapping in /proc/PID/smaps.
var smapsHeader = regexp.MustCompile(`^[0-9a-f]+-[0-9a-f]+ [-rwxps]{4} `)

// guestMemory sums the guest memory's mappings in /proc/PID/smaps of a
// VMM: their size and their resident bytes. The VMM maps guest memory,
// and only it, with MAP_NORESERVE (anonymous for a boot, the memory file
// or its layers for a restore), which smaps shows as "nr" in VmFlags;
// the Go runtime never asks for it (glibc's malloc arenas do, but the VMM
// is built without cgo; their reserve is not writable, and is skipped).
// The VMM's overhead is its RSS less the guest's resident bytes.
func guestMemory(smaps []byte) (size, rss int64, err error) {
	var curSize, curRSS int64
	var inMapping, writable, found bool
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if smapsHeader.MatchString(line) {
			inMapping, curSize, curRSS = true, 0, 0
			_, perms, _ := strings.Cut(line, " ")
			writable = strings.HasPrefix(perms, "rw")
			continue
		}
		if !inMapping {
			continue
		}
		if kb, ok := kbField(line, "Size"); ok {
			curSize = kb << 10
		} else if kb, ok := kbField(line, "Rss"); ok {
			curRSS = kb << 10
		} else if flags, ok := strings.CutPrefix(line, "VmFlags:"); ok {
			if writable && slices.Contains(strings.Fields(flags), "nr") {
				size += curSize
				rss += curRSS
				found = true
			}
			inMapping = false
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if !found {
		return 0, 0, fmt.Errorf("no guest memory mapping (VmFlags nr) in smaps")
	}
	return size, rss, nil
}

// overheadParts splits a VMM's resident bytes outside guest memory (see
// guestMemory) by what holds them, from /proc/PID/smaps: "file" (the
// cellvm binary's text and data, and any other file mapped), "anon" (the
// Go heap, goroutine stacks and device buffers), "stack" (the threads'
// own stacks) and "kvm" (the run structures KVM maps for each vCPU).
func overheadParts(smaps []byte) (map[string]int64, error) {
	parts := map[string]int64{}
	var kind string
	var rss int64
	var inMapping, writable bool
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if smapsHeader.MatchString(line) {
			inMapping, rss = true, 0
			f := strings.Fields(line)
			writable = strings.HasPrefix(f[1], "rw")
			path := ""
			if len(f) >= 6 {
				path = strings.Join(f[5:], " ")
			}
			switch {
			case path == "" || strings.HasPrefix(path, "[heap]") || strings.HasPrefix(path, "[anon"):
				kind = "anon"
			case strings.HasPrefix(path, "[stack"):
				kind = "stack"
			case strings.HasPrefix(path, "anon_inode:kvm"):
				kind = "kvm"
			case strings.HasPrefix(path, "["):
				kind = "other"
			default:
				kind = "file"
			}
			continue
		}
		if !inMapping {
			continue
		}
		if kb, ok := kbField(line, "Rss"); ok {
			rss = kb << 10
		} else if flags, ok := strings.CutPrefix(line, "VmFlags:"); ok {
			if !(writable && slices.Contains(strings.Fields(flags), "nr")) {
				parts[kind] += rss
			}
			inMapping = false
		}
	}
	return parts, sc.Err()
}
