package vmm

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestNotifierWaitsInTheNetpoller: a queue notifier waiting for the guest
// is a goroutine parked in the runtime's netpoller ("IO wait"), not one
// in a blocking system call ("syscall"), which a Go 1.26 stop-the-world
// can wait a minute for (package stwguard). It still sees every kick, and
// Close ends it.
func TestNotifierWaitsInTheNetpoller(t *testing.T) {
	f, efd, err := newEventFile("ioeventfd-test")
	if err != nil {
		t.Fatal(err)
	}
	kicks := make(chan struct{}, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchEventFD(f, func() { kicks <- struct{}{} })
	}()

	state := ""
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if state = watcherState(); state == "IO wait" {
			break
		}
	}
	if state != "IO wait" {
		t.Fatalf("the waiting notifier's goroutine is in state %q, want \"IO wait\" (parked in the netpoller)", state)
	}

	for i := range 3 {
		if _, err := unix.Write(efd, one); err != nil {
			t.Fatal(err)
		}
		select {
		case <-kicks:
		case <-time.After(5 * time.Second):
			t.Fatalf("kick %d was not seen", i)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the notifier's loop")
	}
}

// watcherState is the scheduling state of the goroutine running
// watchEventFD ("IO wait", "syscall", ...), or "" when there is none.
func watcherState() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if !strings.Contains(g, "vmm.watchEventFD") {
			continue
		}
		head, _, _ := strings.Cut(g, "\n") // goroutine N [state, ...]:
		_, st, _ := strings.Cut(head, "[")
		st, _, _ = strings.Cut(st, "]")
		st, _, _ = strings.Cut(st, ",")
		return st
	}
	return ""
}
