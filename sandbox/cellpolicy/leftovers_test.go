package cellpolicy

import (
	"os"
	"path/filepath"
	"strings"
	"time"
)

// leftovers waits briefly and lists the processes whose command line
// names the hook (the hook's shell and its subshells), from /proc.
func leftovers(hook string) string {
	time.Sleep(100 * time.Millisecond)
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var found []string
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), hook) {
			found = append(found, p+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return strings.Join(found, "; ")
}
