package main

// The two guests' kernel logs side by side. The same kernel boots in both
// machines, so its messages come in (nearly) the same order; where the
// gap between their timestamps grows, the guest under cellvm spent longer
// on that step than the guest under QEMU, which points at what the
// machine offers there (CPUID, a timer, a device's probe).

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// dmesgLine is one kernel message: its timestamp (seconds of the kernel's
// clock) and its text.
type dmesgLine struct {
	ts   float64
	text string
}

var dmesgRE = regexp.MustCompile(`^\[\s*([0-9]+\.[0-9]+)\]\s?(.*)$`)

// parseDmesg reads `dmesg` lines; lines without a timestamp are skipped.
func parseDmesg(lines []string) []dmesgLine {
	var out []dmesgLine
	for _, l := range lines {
		m := dmesgRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		ts, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			continue
		}
		out = append(out, dmesgLine{ts, m[2]})
	}
	return out
}

// numbersRE matches what differs between two boots of one kernel in one
// message: addresses, sizes, counts, times.
var numbersRE = regexp.MustCompile(`0x[0-9a-fA-F]+|[0-9a-fA-F]{8,}|[0-9]+`)

func dmesgKey(text string) string { return numbersRE.ReplaceAllString(text, "#") }

// dmesgRow is one row of the comparison: a message of both guests, or of
// one (the other's index is -1).
type dmesgRow struct{ c, q int }

// alignDmesg pairs the messages of c and q with the same text (numbers
// aside), in order: for each of c's messages, the next of q's with its key
// within a window; q's messages it skips are q's alone.
func alignDmesg(c, q []dmesgLine) []dmesgRow {
	const window = 60
	var rows []dmesgRow
	j := 0
	for i := range c {
		key := dmesgKey(c[i].text)
		found := -1
		for k := j; k < len(q) && k < j+window; k++ {
			if dmesgKey(q[k].text) == key {
				found = k
				break
			}
		}
		if found < 0 {
			rows = append(rows, dmesgRow{i, -1})
			continue
		}
		for ; j < found; j++ {
			rows = append(rows, dmesgRow{-1, j})
		}
		rows = append(rows, dmesgRow{i, found})
		j = found + 1
	}
	for ; j < len(q); j++ {
		rows = append(rows, dmesgRow{-1, j})
	}
	return rows
}

// compareDmesg prints the guests' logs side by side, from n boots of each
// (pairs[i] is one cellvm boot's log and one QEMU boot's): for each message
// both print, the median step before it (the time since the previous
// shared message) in each guest, and their difference. A median over boots
// keeps a stall of the rig (the host descheduling a vCPU, which the
// guest's clock counts) from reading as a step of the boot. all prints
// every message; otherwise only those whose steps differ by 5 ms or more,
// and the messages of one guest alone (from the first pair).
func compareDmesg(pairs [][2][]dmesgLine, all bool) {
	type steps struct {
		c, q []float64
		ts   float64 // cellvm's timestamp in the first pair that has it
	}
	var order []string
	byKey := map[string]*steps{}
	for _, p := range pairs {
		c, q := p[0], p[1]
		seen := map[string]int{}
		prevC, prevQ := 0.0, 0.0
		for _, r := range alignDmesg(c, q) {
			if r.c < 0 || r.q < 0 {
				continue
			}
			k := dmesgKey(c[r.c].text)
			seen[k]++
			k = fmt.Sprintf("%s\x00%d", k, seen[k])
			st := byKey[k]
			if st == nil {
				st = &steps{ts: c[r.c].ts}
				byKey[k] = st
				order = append(order, k)
			}
			st.c = append(st.c, c[r.c].ts-prevC)
			st.q = append(st.q, q[r.q].ts-prevQ)
			prevC, prevQ = c[r.c].ts, q[r.q].ts
		}
	}
	fmt.Printf("\nthe guests' dmesg side by side (bzImage, quiet console, %d boots each): median step before each message, ms\n", len(pairs))
	fmt.Printf("%9s %9s %9s %9s  %s\n", "at", "cellvm", "qemu", "diff", "message")
	var sumC, sumQ float64
	shown := 0
	for _, k := range order {
		st := byKey[k]
		if len(st.c) < (len(pairs)+1)/2 {
			continue
		}
		mc, mq := medianF(st.c), medianF(st.q)
		sumC, sumQ = sumC+mc, sumQ+mq
		if d := mc - mq; all || d >= 0.005 || d <= -0.005 {
			text, _, _ := strings.Cut(k, "\x00")
			fmt.Printf("%9.3f %9.1f %9.1f %+9.1f  %s\n", st.ts, mc*1000, mq*1000, d*1000, clip(text))
			shown++
		}
	}
	fmt.Printf("(%d of %d shared messages shown; the medians' sums: cellvm %.3f s, qemu %.3f s)\n", shown, len(order), sumC, sumQ)
	if len(pairs) == 0 {
		return
	}
	c, q := pairs[0][0], pairs[0][1]
	for _, r := range alignDmesg(c, q) {
		switch {
		case r.c >= 0 && r.q < 0:
			fmt.Printf("%9.3f  cellvm only: %s\n", c[r.c].ts, clip(c[r.c].text))
		case r.q >= 0 && r.c < 0:
			fmt.Printf("%9.3f  qemu only: %s\n", q[r.q].ts, clip(q[r.q].text))
		}
	}
	for _, g := range []struct {
		name string
		l    []dmesgLine
	}{{"cellvm", c}, {"qemu", q}} {
		fmt.Printf("%s's largest steps (first boot):\n", g.name)
		for _, s := range largestSteps(g.l, 8) {
			fmt.Printf("  %7.3f s before [%9.3f] %s\n", s.ts, g.l[s.i].ts, clip(g.l[s.i].text))
		}
	}
}

func medianF(v []float64) float64 {
	v = slices.Clone(v)
	sort.Float64s(v)
	return v[len(v)/2]
}

type step struct {
	i  int
	ts float64
}

// largestSteps is the n messages of l with the longest time since the
// message before, longest first.
func largestSteps(l []dmesgLine, n int) []step {
	var s []step
	for i := 1; i < len(l); i++ {
		s = append(s, step{i, l[i].ts - l[i-1].ts})
	}
	sort.SliceStable(s, func(a, b int) bool { return s[a].ts > s[b].ts })
	return s[:min(n, len(s))]
}

func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 100 {
		return s[:100] + "..."
	}
	return s
}
