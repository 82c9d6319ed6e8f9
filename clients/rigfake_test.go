package clients

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// rigCells is a fake that answers the cells of the rig's programs
// (testdata/rig) and of the README's examples the way the real interpreter
// does (rigScript), and their commands the way the guest does (Exec), so
// the programs and their checks run on every host against the fake before
// they run in the rig against real VMs.
type rigCells struct {
	*sandboxtest.Manager
}

func newRigCells() rigCells {
	m := sandboxtest.New()
	m.Script = rigScript(m)
	return rigCells{m}
}

// rigScript answers the rig programs' cells; m is the manager it runs in.
func rigScript(m *sandboxtest.Manager) sandboxtest.Script {
	return func(ctx context.Context, c *sandboxtest.Cell) (cell.Result, error) {
		res := cell.Result{Status: cell.StatusOK, StateKept: true}
		code := c.Code
		switch {
		case strings.HasPrefix(code, "import sys\nprint('hello from'"):
			res.Stdout = "hello from 42 on Python 3\n"
		case strings.HasPrefix(code, "x = 6 * 7"):
			res.Stdout = "x is 42\n"
		case strings.HasPrefix(code, "import matplotlib"):
			png := append(sandboxtest.ChartPNG(), make([]byte, 1000)...)
			res.Results = []cell.Display{{Data: map[string]string{cell.MIMEPNG: base64.StdEncoding.EncodeToString(png), cell.MIMEText: "<Figure size 640x480 with 1 Axes>"}},
				{Main: true, Data: map[string]string{cell.MIMEText: "<BarContainer object of 3 artists>"}}}
		case code == "{}['missing']":
			res.Status = cell.StatusError
			res.Error = &cell.Error{Name: "KeyError", Value: "'missing'", Traceback: []string{
				"---------------------------------------------------------------------------", "KeyError                                  Traceback (most recent call last)",
				"Cell In[3], line 1\n----> 1 {}['missing']", "KeyError: 'missing'"}}
		case strings.HasPrefix(code, "import time\nwhile True"):
			res.Status, res.KilledBy = cell.StatusTimeout, cell.KilledByTimeout
			res.Error = &cell.Error{Name: "TimeoutError", Value: "interrupted after its time limit"}
		case code == "import pandas as pd; df = pd.DataFrame({'x': [1, 2, 3]})":
		case code == "print('rows:', len(df)); df.x.mean()", code == "df.x.mean()":
			if strings.HasPrefix(code, "print") {
				// The interpreter streams print's pieces as they are written.
				for _, piece := range []string{"rows:", " ", "3", "\n"} {
					res.Stdout += piece
					c.Emit(cell.Event{Type: cell.EventStdout, Text: piece})
				}
			}
			res.Results = []cell.Display{{Main: true, Data: map[string]string{cell.MIMEText: "2.0"}}}
		case code == "df.x.plot()":
			res.Results = []cell.Display{{Main: true, Data: map[string]string{cell.MIMEText: "<Axes: >"}},
				{Data: map[string]string{cell.MIMEPNG: base64.StdEncoding.EncodeToString(sandboxtest.ChartPNG()), cell.MIMEText: "<Figure size 640x480 with 1 Axes>"}}}
		case code == "print(x + 1)":
			res.Stdout = "43\n"
		case strings.Contains(code, "CELLVM_GREETING"):
			info, err := m.Get(ctx, c.Sandbox)
			if err != nil {
				return cell.Result{}, err
			}
			res.Stdout = info.Config.Env["CELLVM_GREETING"] + "\n"
		default:
			return cell.Result{}, sandboxtest.Pass
		}
		return res, nil
	}
}

// TestFakeRunsTheRigPrograms runs the rig's BoxLite-style program and
// Runtime-style loops (Python and JS) against the fake, with the rig
// tests' checks.
func TestFakeRunsTheRigPrograms(t *testing.T) {
	m := newRigCells()
	sock := serveAPI(t, m)
	pyEnv := []string{"CELLVM_SOCKET=" + sock, "PYTHONPATH=" + filepath.Join(clientsDir(t), "python")}
	t.Run("boxlite", func(t *testing.T) {
		out := runIn(t, t.TempDir(), pyEnv, time.Minute, python(t), filepath.Join(clientsDir(t), "testdata/rig/boxlite_program.py"))
		if !strings.Contains(out, "hello from 42 on Python 3\n") {
			t.Errorf("the BoxLite-style program printed:\n%s", out)
		}
	})
	t.Run("runtime-python", func(t *testing.T) {
		checkRuntimeLoop(t, runIn(t, t.TempDir(), pyEnv, time.Minute, python(t), filepath.Join(clientsDir(t), "testdata/rig/runtime_loop.py")))
	})
	t.Run("runtime-js", func(t *testing.T) {
		nd := node(t)
		dir := linkedJSDir(t, "runtime_loop.mjs", readFile(t, "testdata/rig/runtime_loop.mjs"))
		checkRuntimeLoop(t, runIn(t, dir, []string{"CELLVM_SOCKET=" + sock}, time.Minute, nd, "runtime_loop.mjs"))
	})
	if n := m.Live(); n != 0 {
		t.Errorf("the programs left %d sandboxes", n)
	}
}

// linkedJSDir writes a script into a fresh directory beside
// node_modules/cellvm (a link to clients/js), as a user who installed the
// package has it, and returns the directory.
func linkedJSDir(t *testing.T, name string, src []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "node_modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(clientsDir(t), "js"), filepath.Join(dir, "node_modules", "cellvm")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), src, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readFile returns a file's bytes, failing t.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (m rigCells) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (cell.ExecResult, error) {
	if a := strings.Join(req.Argv, " "); a == "wc -l /workspace/in.csv" || a == "sh -c wc -l /workspace/in.csv" {
		if _, err := m.Manager.Get(ctx, id); err != nil {
			return cell.ExecResult{}, err
		}
		return cell.ExecResult{Stdout: "2 /workspace/in.csv\n"}, nil
	}
	return m.Manager.Exec(ctx, id, req)
}
