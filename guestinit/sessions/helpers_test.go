package sessions

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/interp"
)

func TestMain(m *testing.M) {
	// As the guest's init is PID 1: orphans of killed sessions come here.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	code := m.Run()
	if code == 0 {
		if left := childrenOf(os.Getpid()); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: leftover child processes %v\n", left)
			code = 1
		}
	}
	os.Exit(code)
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces; take what
		// follows the last ')'.
		s := string(b)
		for i := len(s) - 1; i >= 0; i-- {
			if s[i] == ')' {
				var state string
				var ppid int
				fmt.Sscan(s[i+1:], &state, &ppid)
				if ppid == pid {
					out = append(out, n)
				}
				break
			}
		}
	}
	return out
}

func testPython(t *testing.T) string {
	t.Helper()
	p := os.Getenv("CELLVM_TEST_PYTHON")
	if p == "" {
		p = interp.DefaultPython
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no python at %s (set CELLVM_TEST_PYTHON): %v", p, err)
	}
	return p
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// pythonAs is a Python interpreter standing in for another runtime's
// session (Node's, Bash's), so the registry is tested with python3
// alone: it runs every language's cells as Python.
type pythonAs struct{ *interp.Interp }

func (p pythonAs) RunLanguage(ctx context.Context, _ cell.Language, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error) {
	return p.Interp.Run(ctx, code, timeout, onEvent)
}

// made records the configurations the registry made sessions with.
type made struct{ cfgs []interp.Config }

// newRegistry is a registry whose sessions are all real Python
// interpreters: the primary, and the others through pythonAs.
func newRegistry(t *testing.T, mod func(*interp.Config)) (*Registry, *made) {
	t.Helper()
	base := interp.Config{Python: testPython(t), Dir: t.TempDir(), Grace: 500 * time.Millisecond, Logger: quiet()}
	if mod != nil {
		mod(&base)
	}
	primary, err := interp.New(base)
	if err != nil {
		t.Fatal(err)
	}
	m := &made{}
	py := base.Python
	r, err := New(Config{Primary: primary, Base: base, Logger: quiet(), New: func(c interp.Config) (Session, error) {
		m.cfgs = append(m.cfgs, c)
		rt := c.Runtime
		c.Runtime, c.Python = "python", py
		in, err := interp.New(c)
		if err != nil {
			return nil, err
		}
		if rt == "python" {
			return in, nil
		}
		return pythonAs{in}, nil
	}})
	if err != nil {
		primary.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r, m
}

func runIn(t *testing.T, r *Registry, lang cell.Language, name, code string) cell.Result {
	t.Helper()
	res, err := r.RunIn(context.Background(), lang, name, code, 30*time.Second, nil)
	if err != nil {
		t.Fatalf("RunIn(%s, %q, %q): %v", lang, name, code, err)
	}
	return res
}

// value runs code (an expression) and returns its text/plain.
func value(t *testing.T, r *Registry, lang cell.Language, name, code string) string {
	t.Helper()
	res := runIn(t, r, lang, name, code)
	m := res.MainResult()
	if res.Status != cell.StatusOK || m == nil {
		t.Fatalf("%s/%s %q: status %s, error %+v, no value", lang, name, code, res.Status, res.Error)
	}
	return m.Data[cell.MIMEText]
}
