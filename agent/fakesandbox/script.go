package fakesandbox

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"

	"github.com/cellvm/cellvm/agent/fakemodel"
	"github.com/cellvm/cellvm/cell"
)

// ChartPNG is the figure DefaultScriptHandler returns for the chart cell.
func ChartPNG() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 8, 8))
	for i := 0; i < 8; i++ {
		img.Set(i, 7-i, color.RGBA{0, 0, 255, 255})
	}
	var b bytes.Buffer
	png.Encode(&b, img)
	return b.Bytes()
}

// DefaultScriptHandler answers the cells of fakemodel.DefaultScript the way
// the real interpreter does: a KeyError with a long, coloured traceback,
// then "2.5", then 3000 printed rows and a figure.
func DefaultScriptHandler() Handler {
	pngB64 := base64.StdEncoding.EncodeToString(ChartPNG())
	return func(code string) (cell.Result, bool) {
		switch code {
		case fakemodel.CodeLoad:
			var tb []string
			tb = append(tb, "\x1b[0;31m---------------------------------------------------------------------------\x1b[0m")
			for i := 0; i < 40; i++ {
				tb = append(tb, fmt.Sprintf("File \x1b[0;32m/usr/lib/python3/dist-packages/pandas/core/frame.py:%d\x1b[0m, in \x1b[0;36mframe_%d\x1b[0m", 4000+i, i))
			}
			tb = append(tb, "\x1b[0;32m----> 3\x1b[0m \x1b[38;5;28mprint\x1b[39m(df[\x1b[38;5;124m'B'\x1b[39m]\x1b[38;5;241m.\x1b[39mmean())", "\x1b[0;31mKeyError\x1b[0m: 'B'")
			return cell.Result{Status: cell.StatusError, StateKept: true,
				Error: &cell.Error{Name: "KeyError", Value: "'B'", Traceback: tb}}, true
		case fakemodel.CodeFix:
			return cell.Result{Status: cell.StatusOK, StateKept: true, Stdout: "2.5\n"}, true
		case fakemodel.CodeChart:
			var out strings.Builder
			for i := 0; i < 3000; i++ {
				fmt.Fprintf(&out, "row %d\n", i)
			}
			return cell.Result{Status: cell.StatusOK, StateKept: true, Stdout: out.String(),
				Results: []cell.Display{{Data: map[string]string{cell.MIMEPNG: pngB64, cell.MIMEText: "<Figure size 640x480 with 1 Axes>"}}}}, true
		}
		return cell.Result{}, false
	}
}
