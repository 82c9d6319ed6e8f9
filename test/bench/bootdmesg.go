package main

// The two guests' kernel logs side by side. The same kernel boots in both
// machines, so its messages come in (nearly) the same order; where the
// gap between their timestamps grows, the guest under cellvm spent longer
// on that step than the guest under QEMU, which points at what the
// machine offers there (CPUID, a timer, a device's probe).

import (
	"fmt"
	"regexp"
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

// compareDmesg prints the aligned logs: both timestamps, and how much the
// gap (cellvm's minus QEMU's) grew since the previous shared message. all
// prints every row; otherwise only the rows where the gap moved by 5 ms or
// more, and the messages of one guest alone. Then each guest's largest
// steps (the time before a message since the one before it).
func compareDmesg(c, q []dmesgLine, all bool) {
	if len(c) == 0 || len(q) == 0 {
		fmt.Printf("bench: dmesg: no kernel log (cellvm %d lines, qemu %d)\n", len(c), len(q))
		return
	}
	fmt.Printf("\nthe guests' dmesg side by side (bzImage, quiet console, one boot each; seconds of each guest's clock)\n")
	fmt.Printf("%9s %9s %9s  %s\n", "cellvm", "qemu", "gap-grew", "message")
	gap := 0.0
	shown := 0
	for _, r := range alignDmesg(c, q) {
		switch {
		case r.c >= 0 && r.q >= 0:
			g := c[r.c].ts - q[r.q].ts
			grew := g - gap
			gap = g
			if all || grew >= 0.005 || grew <= -0.005 {
				fmt.Printf("%9.3f %9.3f %+9.3f  %s\n", c[r.c].ts, q[r.q].ts, grew, clip(c[r.c].text))
				shown++
			}
		case r.c >= 0:
			fmt.Printf("%9.3f %9s %9s  cellvm only: %s\n", c[r.c].ts, "", "", clip(c[r.c].text))
			shown++
		default:
			fmt.Printf("%9s %9.3f %9s  qemu only: %s\n", "", q[r.q].ts, "", clip(q[r.q].text))
			shown++
		}
	}
	fmt.Printf("(%d of %d rows shown; the gap at the end: %+.3f s)\n", shown, len(alignDmesg(c, q)), gap)
	for _, g := range []struct {
		name string
		l    []dmesgLine
	}{{"cellvm", c}, {"qemu", q}} {
		fmt.Printf("%s's largest steps:\n", g.name)
		for _, s := range largestSteps(g.l, 8) {
			fmt.Printf("  %7.3f s before [%9.3f] %s\n", s.ts, g.l[s.i].ts, clip(g.l[s.i].text))
		}
	}
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
