package stwguard

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestStopTheWorldDoesNotWaitForAPoller races the runtime's
// stop-the-world against goroutines that enter a blocking poll(2) over
// and over, as the jail's privilege drop did against the VMM's queue
// notifiers: every syscall.AllThreadsSyscall stops the world and signals
// every thread, which throws each poller out of poll and back in. With
// the guard no call waits long. Without it, on a 2-core host, one call in
// 1,000 to 17,000 waited exactly 60 s (sysmon's sleep): this test failed
// in 5 of 5 runs with Start removed. It is a race it provokes, not one it
// can force, so it may miss one now and then.
func TestStopTheWorldDoesNotWaitForAPoller(t *testing.T) {
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_GETPID, 0, 0, 0); e == syscall.ENOTSUP {
		t.Skip("AllThreadsSyscall is not supported in a cgo build")
	}
	Start()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[1])
	stop := make(chan struct{})
	done := make(chan struct{})
	const pollers = 32
	for range pollers {
		go func() {
			defer func() { done <- struct{}{} }()
			fds := []unix.PollFd{{Fd: int32(p[0]), Events: unix.POLLIN}}
			for {
				if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
					t.Errorf("poll: %v", err)
					return
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond) // the pollers are in poll
	var worst time.Duration
	deadline := time.Now().Add(10 * time.Second)
	calls := 0
	for ; calls < 200000 && time.Now().Before(deadline); calls++ {
		start := time.Now()
		// PR_SET_KEEPCAPS to its default, 0: harmless on every thread,
		// and it needs no privilege.
		if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_SET_KEEPCAPS, 0, 0); e != 0 {
			t.Fatalf("AllThreadsSyscall: %v", e)
		}
		worst = max(worst, time.Since(start))
		if worst > 2*time.Second {
			break
		}
	}
	close(stop)
	unix.Write(p[1], []byte{1}) // wakes every poller: the pipe stays readable
	for range pollers {
		<-done
	}
	unix.Close(p[0])
	t.Logf("%d AllThreadsSyscalls against %d pollers, the slowest %v", calls, pollers, worst)
	if worst > 2*time.Second {
		t.Fatalf("an AllThreadsSyscall waited %v for the world to stop: a poller that entered poll(2) as the world stopped held its P (the guard bounds that to about its period)", worst)
	}
}
