package process

import (
	"bytes"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of /proc/PID/stat's start time (USER_HZ, 100 on
// every Linux architecture cellvm runs on).
const userHZ = 100

// sinceExec is how long ago the kernel made this process (its start time
// in /proc/self/stat against CLOCK_BOOTTIME), to 10 ms: with the daemon's
// own spawn time it tells a slow start in the kernel's clone from one in
// the Go runtime's start. -1 when it cannot be read (no /proc).
func sinceExec() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return -1
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 {
		return -1
	}
	ticks, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return -1
	}
	var now unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &now) != nil {
		return -1
	}
	return time.Duration(now.Nano()) - time.Duration(ticks)*time.Second/userHZ
}
