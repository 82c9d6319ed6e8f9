package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
)

// burstN is how many creates the bursts bench sends at once: what issue
// 28's independent load check sent to a daemon with default flags, when 4
// of the 8 failed past the boot deadline (TestBurstCreates is its rig
// test).
const burstN = 8

// benchBursts sends burstN creates at once to a `cellvm serve` started
// with its default flags (only --network=false: the rig's L1 has no
// uplink), right after it starts, while it builds its default template,
// as a service's first users would. Each asks for 256 MiB, so the 8 fit
// beside the template's build in the rig's 4 GiB. It prints how many were
// created, refused at once (503 "full", which a client retries) and
// failed, with the creates' p50 and p99 and how long they waited for a
// boot slot (the admission queue). The goal is that all are created.
func benchBursts(cellvm, build string) error {
	dir, err := os.MkdirTemp("", "cellvm-bench-bursts")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "cellvm.sock")
	logPath := filepath.Join(dir, "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(cellvm, "serve", "--socket", socket, "--state-dir", filepath.Join(dir, "state"), "--network=false")
	cmd.Env = append(os.Environ(),
		"CELLVM_KERNEL="+filepath.Join(build, "kernel/vmlinux"),
		"CELLVM_INITRD="+filepath.Join(build, "initramfs.cpio"),
		"CELLVM_ROOTFS="+filepath.Join(build, "rootfs.ext4"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start cellvm serve: %w", err)
	}
	exited := make(chan struct{}) // closed when it has
	go func() {
		cmd.Wait()
		close(exited)
	}()
	defer stopServe(cmd, exited)
	if err := waitSocket(socket, exited, 30*time.Second); err != nil {
		b, _ := os.ReadFile(logPath)
		return fmt.Errorf("%w; its log ends:\n%s", err, lastLines(string(b), 20))
	}
	c := api.NewClient(socket)
	ctx := context.Background()
	fmt.Printf("\nbursts: %d creates at once through `cellvm serve` (default flags, --network=false; 256 MiB each), as soon as it listens\n", burstN)
	type outcome struct {
		took time.Duration
		info sandbox.Info
		err  error
	}
	out := make([]outcome, burstN)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range out {
		wg.Go(func() {
			<-start
			t0 := time.Now()
			info, err := c.Create(ctx, sandbox.Config{MemoryMiB: 256})
			out[i] = outcome{took: time.Since(t0), info: info, err: err}
		})
	}
	close(start)
	wg.Wait()
	var took, queued []time.Duration
	counts := map[string]int{}
	for i, o := range out {
		kind := burstOutcome(o.err)
		counts[kind]++
		switch kind {
		case "created":
			took = append(took, o.took)
			queued = append(queued, time.Duration(o.info.QueuedMS)*time.Millisecond)
			fmt.Printf("create %d: %v (queued %d ms, boot %d ms, started from %s)\n", i+1, dur(o.took), o.info.QueuedMS, o.info.BootMS, o.info.StartedFrom)
			defer c.Delete(ctx, o.info.ID)
		default:
			fmt.Printf("create %d %s after %v: %v\n", i+1, kind, dur(o.took), o.err)
		}
	}
	// The pool's counters after the burst: the creates that found their
	// boot slot free took a ready process with them, those that waited
	// claimed one once admitted where the pool had refilled.
	if capa, err := c.Capacity(ctx); err == nil && capa.VMMPool != nil {
		fmt.Printf("bursts: %s\n", poolLine(capa.VMMPool))
	}
	lines := measureLines{bench: "bursts"}
	goal := "goal: all created: met"
	if counts["created"] != burstN {
		goal = fmt.Sprintf("goal: all created: MISSED, %d of %d", counts["created"], burstN)
	}
	lines.line("bursts: %d creates at once: %d created, %d refused at once, %d failed; create p50 %v, p99 %v; waited for a boot slot p50 %v, p99 %v; %s",
		burstN, counts["created"], counts["refused"], counts["failed"],
		dur(percentile(took, 50)), dur(percentile(took, 99)), dur(percentile(queued, 50)), dur(percentile(queued, 99)), goal)
	lines.summary()
	return nil
}

// burstOutcome sorts a create's error: "created" (none), "refused" (503,
// the daemon's queue full: an answer at once that a client retries after
// Retry-After) or "failed" (anything else, a boot past its deadline
// among them).
func burstOutcome(err error) string {
	var e *api.Error
	switch {
	case err == nil:
		return "created"
	case errors.As(err, &e) && e.Status == http.StatusServiceUnavailable:
		return "refused"
	default:
		return "failed"
	}
}

// waitSocket waits until path exists, the process ends (exited) or
// timeout passes.
func waitSocket(path string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("cellvm serve exited before it listened")
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cellvm serve did not listen at %s within %v", path, timeout)
		}
	}
}

// stopServe ends the daemon: SIGTERM (it ends its VMs), then SIGKILL after
// a minute.
func stopServe(cmd *exec.Cmd, exited <-chan struct{}) {
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-exited
	}
}
