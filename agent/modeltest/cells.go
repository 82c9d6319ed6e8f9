package modeltest

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// DefaultScriptCells answers the cells of DefaultScript in a sandboxtest
// manager the way the real interpreter does: CodeLoad fails with a
// KeyError and a long, coloured traceback, CodeFix prints "2.5", and
// CodeChart prints 3000 rows and draws sandboxtest.ChartPNG. Other cells
// pass to the manager.
func DefaultScriptCells() sandboxtest.Script {
	pngB64 := base64.StdEncoding.EncodeToString(sandboxtest.ChartPNG())
	return func(ctx context.Context, c *sandboxtest.Cell) (cell.Result, error) {
		switch c.Code {
		case CodeLoad:
			var tb []string
			tb = append(tb, "\x1b[0;31m---------------------------------------------------------------------------\x1b[0m")
			for i := 0; i < 40; i++ {
				tb = append(tb, fmt.Sprintf("File \x1b[0;32m/usr/lib/python3/dist-packages/pandas/core/frame.py:%d\x1b[0m, in \x1b[0;36mframe_%d\x1b[0m", 4000+i, i))
			}
			tb = append(tb, "\x1b[0;32m----> 3\x1b[0m \x1b[38;5;28mprint\x1b[39m(df[\x1b[38;5;124m'B'\x1b[39m]\x1b[38;5;241m.\x1b[39mmean())", "\x1b[0;31mKeyError\x1b[0m: 'B'")
			return cell.Result{Status: cell.StatusError, StateKept: true,
				Error: &cell.Error{Name: "KeyError", Value: "'B'", Traceback: tb}}, nil
		case CodeFix:
			return cell.Result{Status: cell.StatusOK, StateKept: true, Stdout: "2.5\n"}, nil
		case CodeChart:
			var out strings.Builder
			for i := 0; i < 3000; i++ {
				fmt.Fprintf(&out, "row %d\n", i)
			}
			return cell.Result{Status: cell.StatusOK, StateKept: true, Stdout: out.String(),
				Results: []cell.Display{{Data: map[string]string{cell.MIMEPNG: pngB64, cell.MIMEText: "<Figure size 640x480 with 1 Axes>"}}}}, nil
		}
		return cell.Result{}, sandboxtest.Pass
	}
}
