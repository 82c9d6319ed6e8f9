package engine

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// signalledStarts counts the "the VM's agent answered" lines in logs
// whose start was woken by the agent's ready signal, and all of them.
func signalledStarts(logs string) (signalled, all int) {
	for _, l := range strings.Split(logs, "\n") {
		f := logFields(l)
		if f["msg"] != "the VM's agent answered" {
			continue
		}
		all++
		if f["signalled"] == "true" {
			signalled++
		}
	}
	return signalled, all
}

// TestAgentSignalsReady (issue 28): on a real guest, jailed when the rig
// runs as root, every start is woken by the agent's ready signal, not the
// poll: a cold boot, a resume from disk (a new listener, the agent's
// connection reset by the save) and a fork of a snapshot. The parent
// keeps answering after its snapshot reset its ready connection (its
// agent then redials a daemon that no longer listens).
//
// The fallback poll is set to an hour: a poll's CONNECT queued in the VMM
// while the guest is restored is answered as soon as the guest runs, at
// the moment the agent announces itself, so with the poll on, either may
// win. Here only the signal can wake a start.
func TestAgentSignalsReady(t *testing.T) {
	setReadyFallback(t, time.Hour)
	var logs lockedBuffer
	m := newRigManagerWith(t, func(o *Options) {
		o.Log = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, os.Stderr), &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	ctx := context.Background()
	check := func(what string, want int) {
		t.Helper()
		s, all := signalledStarts(logs.String())
		t.Logf("%s: %d of %d starts signalled", what, s, all)
		if s != want || all != want {
			t.Errorf("%s: %d of %d starts signalled, want %d of %d", what, s, all, want, want)
		}
	}
	start := time.Now()
	sb, err := m.Create(ctx, sandbox.Config{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cold create in %v", time.Since(start).Round(time.Millisecond))
	check("cold boot", 1)
	runCell(t, m, sb.ID, "x = 41", time.Minute)

	if err := m.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := m.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	t.Logf("resume in %v", time.Since(start).Round(time.Millisecond))
	kvmtest.LogSandboxTails(t, m.opt.StateDir) // where a slow resume's time went
	check("resume", 2)
	if got := mainText(t, m, sb.ID, "x += 1\nx"); got != "42" {
		t.Fatalf("after the resume: x = %s, want 42", got)
	}

	snap, err := m.Snapshot(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	fork, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fork in %v", time.Since(start).Round(time.Millisecond))
	kvmtest.LogSandboxTails(t, m.opt.StateDir) // where a slow fork's time went
	check("fork", 3)
	if got := mainText(t, m, fork.ID, "x"); got != "42" {
		t.Errorf("the fork: x = %s, want 42", got)
	}
	time.Sleep(3 * time.Second) // the parent's agent redials meanwhile
	if got := mainText(t, m, sb.ID, "x"); got != "42" {
		t.Errorf("the parent after its snapshot: x = %s, want 42", got)
	}
	for _, id := range []string{fork.ID, sb.ID} {
		if err := m.Delete(ctx, id); err != nil {
			t.Error(err)
		}
	}
	if err := m.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Error(err)
	}
}
