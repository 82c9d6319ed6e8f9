// Package stwguard bounds how long a stop-the-world of the Go runtime can
// wait for one goroutine, which in Go 1.26 can be a minute.
//
// The race (runtime/proc.go, Go 1.26.8). A goroutine that enters a
// system call first checks whether a stop-the-world is pending
// (reentersyscall reads sched.gcwaiting) and only then marks itself as in
// a system call (_Gsyscall). A stop-the-world first marks itself pending
// and then looks, once, for Ps whose goroutine is in a system call, to
// take them (stopTheWorldWithSema, setBlockOnExitSyscall). When the
// goroutine's check falls before the mark and its own mark after the
// look, neither sees the other: the stop-the-world then waits for that P
// until the system call returns, re-preempting every 100 µs a goroutine
// that preemption skips (preemptone leaves _Gsyscall alone). A blocking
// call may not return for a long time: a poll with no timeout, the
// KVM_RUN of an idle vCPU, a wait for a child. The one thread that takes
// such a P back, sysmon, sleeps while the world is stopping, for half of
// forcegcperiod (60 s) unless a timer is due sooner. Every goroutine of
// the process waits that long.
//
// cellvm met it in the jail's privilege drop: syscall.AllThreadsSyscall
// stops the world once per call and signals every thread, and the drop
// makes about 45 calls while the VMM's queue notifiers sat in poll(2).
// Each call's signal threw them out of poll and back in as the next call
// stopped the world, and the drop took 60 s in 2 of 9 starts of one rig
// test (the "vmm built" line's drop_ms=60144). A process with 32 such
// pollers stalls an AllThreadsSyscall for exactly 60 s within a few
// thousand calls (stwguard_test.go).
//
// Start keeps a timer due every Period for the life of the process, so
// sysmon never sleeps longer than that and such a stop-the-world ends
// within about a Period. It costs one wake-up of the process per Period
// (20 a second: a few microseconds of CPU each). The VMM, the daemon and
// the guest's init and agent start it first thing.
package stwguard

import (
	"sync"
	"time"
)

// Period is how often the guard's timer is due, and so about the longest
// a stop-the-world waits for a goroutine it missed in a system call.
const Period = 50 * time.Millisecond

var once sync.Once

// Start starts the guard; only the first call does anything. It never
// stops: the race can happen at any stop-the-world (a GC's too), for as
// long as the process runs.
func Start() {
	once.Do(func() {
		t := time.NewTicker(Period)
		go func() {
			for range t.C {
			}
		}()
	})
}
