package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/test/kvmtest"
)

// TestRunStreamsLinesAsTheCellRuns: `cellvm run` on a real guest prints a
// cell's lines as the cell prints them, one a second, not all at its end.
// What is checked is not a speed: the guest sleeps 1 s between lines, so
// lines that are streamed arrive (at least about) that far apart, while
// lines held back until the result would arrive together at the end.
func TestRunStreamsLinesAsTheCellRuns(t *testing.T) {
	kvmtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const lines = 6
	code := "import time\nfor i in range(6):\n    print('line', i, flush=True)\n    time.sleep(1)\n"
	cmd := exec.CommandContext(ctx, os.Args[0], "run", "--timeout", "3m", "-c", code)
	cmd.Env = guestEnv(t)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb lockedBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var arrived []time.Time
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "line ") {
			arrived = append(arrived, time.Now())
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("cellvm run: %v\nstderr:\n%s", err, errb.String())
	}
	if len(arrived) != lines {
		t.Fatalf("%d lines, want %d; stderr:\n%s", len(arrived), lines, errb.String())
	}
	// The guest slept 5 s between the first line and the last; streamed
	// lines keep (at least half of) that gap, a result printed at the end
	// has none.
	if gap := arrived[lines-1].Sub(arrived[0]); gap < 2500*time.Millisecond {
		t.Errorf("the lines arrived %v apart, all at once: they were not streamed", gap)
	}
}
