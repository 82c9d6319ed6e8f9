package engine

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cellvm/cellvm/sandbox"
)

// procUsage reads a VMM process's resident memory and CPU time from /proc.
func procUsage(pid int) sandbox.Usage {
	var u sandbox.Usage
	if f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				u.MemoryBytes = kb << 10
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command name, which is in parentheses.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 {
			f := strings.Fields(string(b[i+1:]))
			if len(f) > 12 {
				ut, _ := strconv.ParseInt(f[11], 10, 64)
				st, _ := strconv.ParseInt(f[12], 10, 64)
				u.CPUTimeMS = (ut + st) * 10 // USER_HZ is 100 on Linux
			}
		}
	}
	return u
}
