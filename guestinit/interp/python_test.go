package interp

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
)

// writeScript writes an executable shell script.
func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestFindPythonOnPATH(t *testing.T) {
	base := t.TempDir()
	a, b, c := filepath.Join(base, "a"), filepath.Join(base, "b"), filepath.Join(base, "c")
	os.MkdirAll(a, 0o755)
	os.WriteFile(filepath.Join(a, "python3"), []byte("not executable"), 0o644) // skipped
	os.MkdirAll(filepath.Join(b, "python3"), 0o755)                            // a directory: skipped
	writeScript(t, filepath.Join(c, "python3"), "exit 0")
	env := []string{"PATH=relative:" + a + "::" + b + ":" + c}
	got, err := findPython(PythonName, env)
	if err != nil || got != filepath.Join(c, "python3") {
		t.Fatalf("findPython = %q, %v; want %s", got, err, filepath.Join(c, "python3"))
	}
	// The last PATH wins, as exec takes it.
	if got, err := findPython(PythonName, []string{"PATH=" + a, "PATH=" + c}); err != nil || got != filepath.Join(c, "python3") {
		t.Errorf("with two PATHs: %q, %v", got, err)
	}
	// A path is taken as it is.
	if got, err := findPython(filepath.Join(c, "python3"), nil); err != nil || got != filepath.Join(c, "python3") {
		t.Errorf("a path: %q, %v", got, err)
	}

	_, err = findPython(PythonName, []string{"PATH=" + a + ":" + b})
	var pe *PythonError
	if !errors.As(err, &pe) || !errors.Is(err, ErrNoPython) || pe.Name() != ErrNameNotFound {
		t.Fatalf("no python3: %v", err)
	}
	want := "this image has no python3 on its PATH (PATH=" + a + ":" + b + "): cells need Python 3.8 or later; exec and files work"
	if err.Error() != want {
		t.Errorf("error:\n%s\nwant:\n%s", err, want)
	}
	if _, err := findPython("/no/such/python3", nil); !errors.Is(err, ErrNoPython) || !strings.Contains(err.Error(), "this image has no /no/such/python3") {
		t.Errorf("a missing path: %v", err)
	}
}

// TestNoPythonIsACellErrorNotACrash: an image without python3 (busybox,
// a bare Alpine) still runs commands; each cell is an error result that
// says why, the interpreter is not "lost", and a restart says the same.
func TestNoPythonIsACellErrorNotACrash(t *testing.T) {
	empty := t.TempDir()
	in, err := New(Config{Dir: t.TempDir(), Env: []string{"PATH=" + empty, "LANG=C.UTF-8"}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	ctx := context.Background()
	var events []cell.Event
	for i := 1; i <= 2; i++ {
		events = nil
		res, err := in.Run(ctx, "1 + 1", 10*time.Second, func(e cell.Event) { events = append(events, e) })
		if err != nil {
			t.Fatalf("cell %d: Run returned an error instead of a result: %v", i, err)
		}
		want := "this image has no python3 on its PATH (PATH=" + empty + "): cells need Python 3.8 or later; exec and files work"
		if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "InterpreterNotFound" || res.Error.Value != want {
			t.Fatalf("cell %d: %+v (error %+v)", i, res, res.Error)
		}
		if !res.StateKept || res.KilledBy != "" || res.ExecutionCount != i {
			t.Errorf("cell %d: state_kept %v, killed_by %q, count %d: a missing python is not a lost interpreter", i, res.StateKept, res.KilledBy, res.ExecutionCount)
		}
		if len(events) != 2 || events[0].Type != cell.EventError || events[1].Type != cell.EventEnd {
			t.Errorf("cell %d: events %+v, want error then end", i, events)
		}
	}
	x, err := in.Exec(ctx, []string{"/bin/sh", "-c", "echo $LANG"}, nil, 10*time.Second)
	if err != nil || x.ExitCode != 0 || x.Stdout != "C.UTF-8\n" {
		t.Errorf("exec without python: %+v, %v", x, err)
	}
	if err := in.Restart(); !errors.Is(err, ErrNoPython) {
		t.Errorf("Restart without python: %v, want ErrNoPython", err)
	}
	// The sandbox's env may bring a PATH that has one.
	if real, err := exec.LookPath(DefaultPython); err == nil {
		if err := in.SetEnv(map[string]string{"PATH": filepath.Dir(real)}); err != nil {
			t.Fatal(err)
		}
		res, err := in.Run(ctx, "1 + 1", 30*time.Second, nil)
		if err != nil || res.Status != cell.StatusOK {
			t.Errorf("cell once PATH has python3: %+v, %v", res, err)
		}
	}
}

// TestOldPythonIsACellError: a python3 older than MinPython says so in
// the driver's first lines ("unsupported"); the cell's error names it.
func TestOldPythonIsACellError(t *testing.T) {
	dir := t.TempDir()
	// What driver.py does on Python 3.7: the frame on fd 4, then exit.
	writeScript(t, filepath.Join(dir, "python3"), `printf '{"ev": "unsupported", "version": "3.7.16"}\n' >&4; exit 3`)
	in := newOldPythonInterp(t, dir)
	res, err := in.Run(context.Background(), "1", 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "this image's python3 (" + filepath.Join(dir, "python3") + ") is Python 3.7.16: cells need Python 3.8 or later; exec and files work"
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "InterpreterTooOld" || res.Error.Value != want {
		t.Fatalf("old python: %+v (error %+v)", res, res.Error)
	}
}

func newOldPythonInterp(t *testing.T, pathDir string) *Interp {
	t.Helper()
	in, err := New(Config{Dir: t.TempDir(), Env: []string{"PATH=" + pathDir + ":/usr/bin:/bin"}, StartTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in
}

// TestPythonIsLookedUpOnTheCellsPATH: the image's PATH decides which
// python3 runs (here a wrapper that marks itself).
func TestPythonIsLookedUpOnTheCellsPATH(t *testing.T) {
	real := testPython(t)
	first, second := t.TempDir(), t.TempDir()
	writeScript(t, filepath.Join(second, "python3"), `CELLVM_WHICH=second exec `+real+` "$@"`)
	in, err := New(Config{Dir: t.TempDir(), Env: []string{"PATH=" + first + ":" + second + ":/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	res := run(t, in, "import os\nos.environ.get('CELLVM_WHICH')")
	expectOK(t, res)
	if got := mainText(t, res); got != "'second'" {
		t.Errorf("the cell ran on %s, want the wrapper in the second PATH entry", got)
	}
}
