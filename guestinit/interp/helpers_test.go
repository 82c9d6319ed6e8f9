package interp

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/drop"
)

// testPython is the interpreter under test: Debian's python3 with the data
// stack, not whatever python3 is first on PATH.
func testPython(t *testing.T) string {
	t.Helper()
	p := os.Getenv("CELLVM_TEST_PYTHON")
	if p == "" {
		p = DefaultPython
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no python at %s (set CELLVM_TEST_PYTHON): %v", p, err)
	}
	return p
}

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == drop.Arg { // the guest agent's drop step, for launcher tests
		os.Exit(drop.Main(os.Args[2:]))
	}
	// Become a subreaper, as the guest's init is PID 1: processes orphaned
	// by a killed interpreter are re-parented here, and the supervisor
	// must reap them.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	code := m.Run()
	if code == 0 {
		// Nothing the tests started may be left: no process and no zombie
		// may still have the test binary as its parent.
		self := os.Getpid()
		for _, p := range listProcs() {
			if p.ppid == self {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/cmdline")
				fmt.Fprintf(os.Stderr, "FAIL: leftover child process %d (state %c) %q\n", p.pid, p.state, b)
				code = 1
			}
		}
	}
	os.Exit(code)
}

func newTestInterp(t *testing.T, mod func(*Config)) *Interp {
	t.Helper()
	cfg := Config{
		Python: testPython(t),
		Dir:    t.TempDir(),
		Grace:  500 * time.Millisecond,
	}
	if mod != nil {
		mod(&cfg)
	}
	in, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := in.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return in
}

// recorder collects the events of one cell.
type recorder struct {
	mu     sync.Mutex
	events []cell.Event
	times  []time.Time
}

func (r *recorder) on(e cell.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	r.times = append(r.times, time.Now())
}

func run(t *testing.T, in *Interp, code string) cell.Result {
	t.Helper()
	return runT(t, in, code, 30*time.Second)
}

func runT(t *testing.T, in *Interp, code string, timeout time.Duration) cell.Result {
	t.Helper()
	res, err := in.Run(context.Background(), code, timeout, nil)
	if err != nil {
		t.Fatalf("Run(%q): %v", code, err)
	}
	return res
}

func mainText(t *testing.T, res cell.Result) string {
	t.Helper()
	m := res.MainResult()
	if m == nil {
		t.Fatalf("no main result in %+v", res)
	}
	return m.Data[cell.MIMEText]
}

func expectOK(t *testing.T, res cell.Result) {
	t.Helper()
	if res.Status != cell.StatusOK {
		t.Fatalf("status %q, want ok; error %+v; stderr %q", res.Status, res.Error, res.Stderr)
	}
}

// procExists reports whether pid exists at all (zombies included).
func procExists(pid int) bool {
	_, ok := readProcStat(pid)
	return ok
}

func waitGone(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for procExists(pid) {
		if time.Now().After(deadline) {
			st, _ := readProcStat(pid)
			b, _ := os.ReadFile("/proc/" + itoa(pid) + "/cmdline")
			t.Fatalf("process %d still exists (state %c, ppid %d, cmdline %q)", pid, st.state, st.ppid, strings.ReplaceAll(string(b), "\x00", " "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
