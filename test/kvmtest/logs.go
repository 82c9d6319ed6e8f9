package kvmtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// LogSandboxTails logs, for every sandbox directory under a manager's state
// directory, the end of its VMM log and console: what a failed rig run
// needs to say why a guest hung or died. Call it before the manager is
// closed (closing removes the directories).
func LogSandboxTails(t testing.TB, stateDir string) {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(stateDir, "sandboxes", "*"))
	builds, _ := filepath.Glob(filepath.Join(stateDir, "templates", "build-*")) // template builds' VMs
	for _, d := range append(dirs, builds...) {
		t.Logf("sandbox %s vmm.log (end):\n%s\nconsole.log (end):\n%s",
			filepath.Base(d), tailLines(filepath.Join(d, "vmm.log"), 15), tailLines(filepath.Join(d, "console.log"), 40))
	}
}

// tailLines returns the last n lines of at most the last 16 KiB of path.
func tailLines(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "(" + err.Error() + ")"
	}
	off := max(fi.Size()-16<<10, 0)
	b := make([]byte, fi.Size()-off)
	k, _ := f.ReadAt(b, off)
	l := strings.Split(strings.TrimRight(string(b[:k]), "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
