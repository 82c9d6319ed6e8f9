package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestinit/proto"
)

func (s *Server) health() (*proto.Health, error) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return nil, fmt.Errorf("sysinfo: %w", err)
	}
	unit := uint64(si.Unit)
	if unit == 0 {
		unit = 1
	}
	h := &proto.Health{
		UptimeMS:      int64(si.Uptime) * 1000,
		MemTotalBytes: uint64(si.Totalram) * unit,
		Procs:         int(si.Procs),
		Load1:         float64(si.Loads[0]) / 65536,
		Agent:         s.cfg.Software,
	}
	h.MemAvailableBytes = uint64(si.Freeram) * unit
	if avail, ok := memAvailable(); ok && avail <= h.MemTotalBytes {
		h.MemAvailableBytes = avail
	}
	if h.MemAvailableBytes > h.MemTotalBytes {
		h.MemAvailableBytes = h.MemTotalBytes
	}
	// Uptime of the guest, in ms where /proc gives it.
	if up, ok := procUptime(); ok {
		h.UptimeMS = up.Milliseconds()
	}
	return h, nil
}

// memAvailable reads MemAvailable from /proc/meminfo (bounded read).
func memAvailable() (uint64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	for sc.Scan() {
		line := sc.Bytes()
		if rest, ok := bytes.CutPrefix(line, []byte("MemAvailable:")); ok {
			fields := bytes.Fields(rest)
			if len(fields) < 1 {
				return 0, false
			}
			kb, err := strconv.ParseUint(string(fields[0]), 10, 64)
			if err != nil || kb > 1<<50 {
				return 0, false
			}
			return kb * 1024, true
		}
	}
	return 0, false
}

func procUptime() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil || len(b) > 256 {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) < 1 {
		return 0, false
	}
	sec, err := strconv.ParseFloat(string(f[0]), 64)
	if err != nil || sec < 0 || sec > 1e10 {
		return 0, false
	}
	return time.Duration(sec * float64(time.Second)), true
}

func timeNowPlus(d time.Duration) time.Time { return time.Now().Add(d) }
