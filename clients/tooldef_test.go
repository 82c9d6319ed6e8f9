package clients

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/agent/anthropic"
	"github.com/cellvm/cellvm/agent/openai"
	"github.com/cellvm/cellvm/cell"
)

// TestToolDefinitionFilesAreGenerated: the copies of the tool definition
// in the clients are what package agent says now.
func TestToolDefinitionFilesAreGenerated(t *testing.T) {
	want, err := ToolDefinition()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range ToolDefinitionFiles() {
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from package agent's tool definition: run 'go generate ./clients'", f)
		}
	}
}

// crossInput is what the clients' crosscheck scripts read.
type crossInput struct {
	Cells []crossCell  `json:"cells"`
	Facts []crossFacts `json:"facts"`
}

type crossCell struct {
	ID     string      `json:"id"`
	Result cell.Result `json:"result"`
}

type crossFacts struct {
	Network  []string `json:"network"`
	TimeoutS int      `json:"timeout_s"`
}

// crossOutput is what they print.
type crossOutput struct {
	Cells []struct {
		Text      string          `json:"text"`
		Images    [][2]string     `json:"images"`
		IsError   bool            `json:"is_error"`
		Anthropic json.RawMessage `json:"anthropic"`
		OpenAI    json.RawMessage `json:"openai"`
	} `json:"cells"`
	Descriptions    []string        `json:"descriptions"`
	Default         json.RawMessage `json:"default"`
	DefaultTimeoutS int             `json:"default_timeout_s"`
}

// formatCorpus is a set of cell results that exercise every branch of
// agent.FormatCell.
func formatCorpus() []cell.Result {
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\nfake image bytes"))
	var long strings.Builder
	for i := 0; i < 3000; i++ {
		fmt.Fprintf(&long, "row %d é✓🐍\n", i)
	}
	var tb []string
	for i := 0; i < 40; i++ {
		tb = append(tb, fmt.Sprintf("\x1b[0;32mFile x.py:%d\x1b[0m in f_%d\n  line", i, i))
	}
	tb = append(tb, "\x1b[0;31mKeyError\x1b[0m: 'B'")
	img := func(mime, data string) cell.Display { return cell.Display{Data: map[string]string{mime: data}} }
	return []cell.Result{
		{Status: cell.StatusOK, StateKept: true},
		{Status: cell.StatusOK, Stdout: "hello\n", Stderr: "warn", StateKept: true, ExecutionCount: 3,
			Results: []cell.Display{{Main: true, Data: map[string]string{cell.MIMEText: "42"}}}},
		{Status: cell.StatusOK, StateKept: true, Stdout: long.String(), Truncated: cell.Truncated{StdoutBytes: 12345}},
		{Status: cell.StatusOK, StateKept: true, Stdout: "progress 10%\rprogress 50%\rprogress 100%\r\nred \x1b[31mtext\x1b[0m\x1b]0;title\x07 end\x1b"},
		{Status: cell.StatusError, StateKept: true, Error: &cell.Error{Name: "KeyError", Value: "'B'", Traceback: tb}},
		{Status: cell.StatusError, StateKept: true, Error: &cell.Error{Name: "\x1b[31mValueError\x1b[0m", Value: strings.Repeat("v", 5000)}},
		{Status: cell.StatusTimeout, StateKept: true, KilledBy: cell.KilledByTimeout, Stdout: "started\n"},
		{Status: cell.StatusTimeout, KilledBy: cell.KilledByTimeout},
		{Status: cell.StatusLost, Error: &cell.Error{Name: "InterpreterLost", Value: "signal 9"}},
		{Status: cell.StatusLost, StateKept: true, KilledBy: cell.KilledBySignal},
		{Status: cell.StatusTimeout, StateKept: false, KilledBy: cell.KilledByTimeout, Stdout: "started\n",
			Error: &cell.Error{Name: "TimeoutError", Value: "the interpreter was killed and restarted"}},
		{Status: cell.StatusOK, Stdout: "1\n", Stderr: "cellvm: the interpreter had exited since the last cell\n"},
		{Status: cell.StatusError, KilledBy: cell.KilledByOOM, Error: &cell.Error{Name: "OutOfMemory", Value: "killed"}},
		{Status: cell.StatusOK, StateKept: true, ExecutionCount: 7, Results: []cell.Display{
			{Data: map[string]string{cell.MIMEPNG: png, cell.MIMEText: "<Figure>"}},
			{Main: true, Data: map[string]string{cell.MIMEPNG: png, cell.MIMEText: "main with image"}},
			img(cell.MIMEJPEG, png), img(cell.MIMEPNG, png), img(cell.MIMEPNG, png),
			img(cell.MIMEPNG, "not base64!"),
			{Data: map[string]string{cell.MIMESVG: "<svg>é</svg>", cell.MIMEText: "svg text"}},
			{Data: map[string]string{cell.MIMEHTML: "<b>x</b>", cell.MIMEText: "display text"}},
			img(cell.MIMEPNG, strings.Repeat("A", 8<<20)),
		}},
	}
}

// TestClientsMatchPackageAgent: for the same cell results and sandbox
// facts, the clients produce exactly what package agent does: the text a
// model reads, the images, the error flag, the Anthropic tool_result block
// and the OpenAI messages, and the tool's description.
func TestClientsMatchPackageAgent(t *testing.T) {
	facts := []crossFacts{{nil, 60}, {[]string{"pypi.org", "*.github.com:443"}, 120}, {nil, 0}, {[]string{"10.0.0.0/8"}, 0}}
	in := crossInput{Facts: facts}
	for i, r := range formatCorpus() {
		in.Cells = append(in.Cells, crossCell{ID: fmt.Sprintf("call_%d", i), Result: r})
	}
	input, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("python", func(t *testing.T) {
		py := python(t)
		checkCross(t, in, runCross(t, input, []string{"PYTHONPATH=" + filepath.Join(clientsDir(t), "python")}, py, "testdata/crosscheck.py"))
	})
	t.Run("js", func(t *testing.T) {
		checkCross(t, in, runCross(t, input, nil, node(t), "testdata/crosscheck.mjs"))
	})
}

func runCross(t *testing.T, input []byte, env []string, name string, args ...string) crossOutput {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = bytes.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, stderr.String())
	}
	var got crossOutput
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s printed no JSON: %v\n%.2000s", name, err, out)
	}
	return got
}

func checkCross(t *testing.T, in crossInput, got crossOutput) {
	t.Helper()
	if len(got.Cells) != len(in.Cells) || len(got.Descriptions) != len(in.Facts) {
		t.Fatalf("%d cells and %d descriptions, want %d and %d", len(got.Cells), len(got.Descriptions), len(in.Cells), len(in.Facts))
	}
	for i, c := range in.Cells {
		want := agent.FormatCell(c.Result, agent.FormatOptions{})
		g := got.Cells[i]
		if g.Text != want.Text {
			t.Errorf("cell %d: text differs from agent.FormatCell:\n got %.600q\nwant %.600q", i, g.Text, want.Text)
		}
		if g.IsError != want.IsError {
			t.Errorf("cell %d: is_error %v, agent says %v", i, g.IsError, want.IsError)
		}
		var wantImages [][2]string
		for _, img := range want.Images {
			wantImages = append(wantImages, [2]string{img.MIME, base64.StdEncoding.EncodeToString(img.Data)})
		}
		if len(g.Images) != len(wantImages) || len(wantImages) > 0 && !reflect.DeepEqual(g.Images, wantImages) {
			t.Errorf("cell %d: %d images, agent attaches %d", i, len(g.Images), len(wantImages))
		}
		want.CallID, want.Name = c.ID, agent.ToolRunPython
		msg := agent.Message{Role: agent.RoleUser, Parts: []agent.Part{{Type: agent.PartToolResult, Result: &want}}}
		areq, err := anthropic.EncodeRequest("m", 1, agent.Request{Messages: []agent.Message{msg}})
		if err != nil {
			t.Fatal(err)
		}
		var aw struct {
			Messages []struct {
				Content []any `json:"content"`
			} `json:"messages"`
		}
		roundTrip(t, areq, &aw)
		if !jsonEqual(t, g.Anthropic, aw.Messages[0].Content[0]) {
			t.Errorf("cell %d: the Anthropic tool_result differs from package anthropic's:\n got %.600s\nwant %.600s", i, g.Anthropic, mustJSON(aw.Messages[0].Content[0]))
		}
		var ow struct {
			Messages []any `json:"messages"`
		}
		roundTrip(t, openai.EncodeRequest("m", agent.Request{Messages: []agent.Message{msg}}), &ow)
		if !jsonEqual(t, g.OpenAI, ow.Messages) {
			t.Errorf("cell %d: the OpenAI messages differ from package openai's:\n got %.600s\nwant %.600s", i, g.OpenAI, mustJSON(ow.Messages))
		}
	}
	for i, f := range in.Facts {
		want := agent.RunPythonDescription(agent.SandboxFacts{Network: f.Network, TimeoutS: f.TimeoutS})
		if got.Descriptions[i] != want {
			t.Errorf("description for %+v:\n got %q\nwant %q", f, got.Descriptions[i], want)
		}
	}
	def := (&agent.Toolbox{}).Specs()[0]
	var wantDef any
	roundTrip(t, map[string]any{"name": def.Name, "description": def.Description, "input_schema": def.Schema}, &wantDef)
	if !jsonEqual(t, got.Default, wantDef) {
		t.Errorf("the default tool differs from the default Go toolbox's:\n got %s\nwant %s", got.Default, mustJSON(wantDef))
	}
}

func roundTrip(t *testing.T, v, out any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}

func jsonEqual(t *testing.T, raw json.RawMessage, want any) bool {
	t.Helper()
	var got any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("not JSON: %v: %.300s", err, raw)
	}
	var w any
	roundTrip(t, want, &w)
	return reflect.DeepEqual(got, w)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
