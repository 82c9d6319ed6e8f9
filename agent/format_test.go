package agent

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cellvm/cellvm/cell"
)

func TestStripANSI(t *testing.T) {
	in := "\x1b[0;31mKeyError\x1b[0m: 'x'\x1b]8;;http://a\x07link\x1b]8;;\x07\nprogress 10%\rprogress 100%\r\n"
	want := "KeyError: 'x'link\nprogress 100%\n"
	if got := StripANSI(in); got != want {
		t.Errorf("StripANSI = %q, want %q", got, want)
	}
}

func TestClipMiddleStatesCount(t *testing.T) {
	s := strings.Repeat("é", 50) + strings.Repeat("x", 1000) + strings.Repeat("ü", 50)
	got, cut := ClipMiddle(s, 100)
	if cut != 1100-100 {
		t.Errorf("cut = %d, want %d", cut, 1000)
	}
	if !strings.HasPrefix(got, strings.Repeat("é", 50)) || !strings.HasSuffix(got, strings.Repeat("ü", 40)) {
		t.Errorf("head or tail lost: %q", got)
	}
	if !strings.Contains(got, "[1000 characters cut from the middle]") || !utf8.ValidString(got) {
		t.Errorf("no count stated or invalid UTF-8: %q", got)
	}
	if got, cut := ClipMiddle("short", 100); got != "short" || cut != 0 {
		t.Errorf("short text changed: %q %d", got, cut)
	}
}

func TestFormatCellNotes(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    cell.Result
		want []string
		err  bool
	}{
		{"timeout kept", cell.Result{Status: cell.StatusTimeout, StateKept: true, KilledBy: cell.KilledByTimeout}, []string{"interrupted", "variables defined before the call are still there"}, true},
		{"timeout lost", cell.Result{Status: cell.StatusTimeout, KilledBy: cell.KilledByTimeout}, []string{"killed and restarted", "variables are gone"}, true},
		{"lost", cell.Result{Status: cell.StatusLost}, []string{"interpreter was lost", "variables are gone"}, true},
		{"lost though a guest said kept", cell.Result{Status: cell.StatusLost, StateKept: true}, []string{"variables are gone"}, true},
		{"oom", cell.Result{Status: cell.StatusError, KilledBy: cell.KilledByOOM, Error: &cell.Error{Name: "OutOfMemory", Value: "killed"}}, []string{"ran out of memory", "OutOfMemory", "variables are gone"}, true},
		{"fresh interpreter", cell.Result{Status: cell.StatusOK, Stdout: "1\n"}, []string{"fresh interpreter", "variables are gone"}, false},
		{"empty", cell.Result{Status: cell.StatusOK, StateKept: true}, []string{"printed nothing"}, false},
		{"main value", cell.Result{Status: cell.StatusOK, StateKept: true, ExecutionCount: 4, Results: []cell.Display{{Main: true, Data: map[string]string{"text/plain": "42"}}}}, []string{"[Out[4]]\n42"}, false},
		{"guest cut", cell.Result{Status: cell.StatusOK, StateKept: true, Stdout: "a\nb\n", Truncated: cell.Truncated{StdoutBytes: 900}}, []string{"cut 900 bytes from the middle of stdout"}, false},
	} {
		got := FormatCell(tc.r, FormatOptions{})
		if kept := tc.r.StateKept && tc.r.Status != cell.StatusLost && tc.r.KilledBy != cell.KilledByOOM; kept == strings.Contains(got.Text, "variables are gone") {
			t.Errorf("%s: state kept %v, yet the text is %q", tc.name, kept, got.Text)
		}
		for _, w := range tc.want {
			if !strings.Contains(got.Text, w) {
				t.Errorf("%s: %q lacks %q", tc.name, got.Text, w)
			}
		}
		if got.IsError != tc.err {
			t.Errorf("%s: IsError = %v, want %v", tc.name, got.IsError, tc.err)
		}
	}
}

func TestFormatCellClipsAndStripsStdout(t *testing.T) {
	r := cell.Result{Status: cell.StatusOK, StateKept: true, Stdout: "\x1b[1mstart\x1b[0m\n" + strings.Repeat("line\n", 5000) + "end\n"}
	got := FormatCell(r, FormatOptions{MaxChars: 500})
	if strings.Contains(got.Text, "\x1b") || !strings.Contains(got.Text, "start") || !strings.Contains(got.Text, "end") {
		t.Errorf("text = %.200q", got.Text)
	}
	if !strings.Contains(got.Text, "characters cut from the middle") || len(got.Text) > 700 {
		t.Errorf("not clipped to the limit: %d bytes", len(got.Text))
	}
}

func TestFormatCellImages(t *testing.T) {
	r := cell.Result{Status: cell.StatusOK, StateKept: true, Results: []cell.Display{
		{Data: map[string]string{"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}},
		{Data: map[string]string{"image/png": "!!notbase64"}},
		{Data: map[string]string{"image/svg+xml": "<svg/>"}},
	}}
	got := FormatCell(r, FormatOptions{})
	if len(got.Images) != 1 || got.Images[0].MIME != "image/png" || string(got.Images[0].Data) != "\x89PNG\r\n\x1a\n" {
		t.Errorf("images = %+v", got.Images)
	}
	for _, w := range []string{"[image 1: image/png, 8 bytes, attached]", "not valid base64", "SVG image"} {
		if !strings.Contains(got.Text, w) {
			t.Errorf("text lacks %q: %q", w, got.Text)
		}
	}
	many := cell.Result{Status: cell.StatusOK, StateKept: true}
	for range 6 {
		many.Results = append(many.Results, cell.Display{Data: map[string]string{"image/png": "iVBORw0KGgo="}})
	}
	if got := FormatCell(many, FormatOptions{MaxImages: 2}); len(got.Images) != 2 || !strings.Contains(got.Text, "at most 2 images") {
		t.Errorf("image cap: %d images, %q", len(got.Images), got.Text)
	}
}
