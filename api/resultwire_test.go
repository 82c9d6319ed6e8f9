package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// oldResult encodes a Result as the API did before cell.ResultJSON: the
// plain struct through json.Marshal inside MarshalJSON, compacted again
// by the outer json.Marshal. The wire must not change.
type oldResult cell.Result

func (r oldResult) MarshalJSON() ([]byte, error) {
	type plain cell.Result
	p := plain(r)
	if p.Results == nil {
		p.Results = []cell.Display{}
	}
	return json.Marshal(p)
}

type oldEvent struct {
	Type   cell.EventType `json:"type"`
	Text   string         `json:"text,omitempty"`
	Result *cell.Display  `json:"result,omitempty"`
	Error  *cell.Error    `json:"error,omitempty"`
	End    *oldResult     `json:"end,omitempty"`
}

func oldLine(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// wireCorpus is a spread of results with what json.Marshal escapes:
// HTML-special characters, U+2028, control bytes, invalid UTF-8.
func wireCorpus() []cell.Result {
	html := "<b>&amp;</b> \u2028 \x00\x1f \xff é 世界 🎉 \"q\" \\"
	return []cell.Result{
		{},
		{Status: cell.StatusOK, ExecutionCount: 2, Stdout: html, StateKept: true, DurationMS: 5,
			Results: []cell.Display{
				{Data: map[string]string{cell.MIMEPNG: "iVBORw0KGgo=", cell.MIMEText: "<Figure>"}},
				{Main: true, Data: map[string]string{cell.MIMEHTML: html, cell.MIMEJSON: `{"a":"<x>"}`, cell.MIMEText: html}},
			}},
		{Status: cell.StatusError, ExecutionCount: 3, Stderr: html,
			Error: &cell.Error{Name: "KeyError", Value: html, Traceback: []string{"Traceback:", html}}},
		{Status: cell.StatusTimeout, KilledBy: cell.KilledByTimeout, Error: &cell.Error{Name: "TimeoutError"}},
		{Status: cell.StatusOK, Stdout: "head\n" + cell.CutMarker(12345) + "tail\n",
			Truncated: cell.Truncated{StdoutBytes: 12345, StderrBytes: 1}},
		{Status: cell.StatusOK, Stdout: strings.Repeat("<&>\n", 100000),
			Results: []cell.Display{{Main: true, Data: map[string]string{cell.MIMEPNG: strings.Repeat("iVBOR", 100000)}}}},
	}
}

// cannedCells answers code "canned N" with wireCorpus()[N], streaming its
// stdout, each display and its error first.
type cannedCells struct{ sandbox.Manager }

func (m cannedCells) RunCell(ctx context.Context, id string, c sandbox.Cell, onEvent func(cell.Event)) (cell.Result, error) {
	code := c.Code
	n, ok := strings.CutPrefix(code, "canned ")
	if !ok {
		return m.Manager.RunCell(ctx, id, c, onEvent)
	}
	i, _ := strconv.Atoi(n)
	res := wireCorpus()[i]
	if onEvent != nil {
		for _, ev := range cannedEvents(&res) {
			onEvent(ev)
		}
	}
	return res, nil
}

func cannedEvents(res *cell.Result) []cell.Event {
	evs := []cell.Event{{Type: cell.EventStdout, Text: res.Stdout}}
	for i := range res.Results {
		evs = append(evs, cell.Event{Type: cell.EventResult, Result: &res.Results[i]})
	}
	if res.Error != nil {
		evs = append(evs, cell.Event{Type: cell.EventError, Error: res.Error})
	}
	return append(evs, cell.Event{Type: cell.EventEnd, End: res})
}

// TestCellResultWireBytes: the cells route's body and stream are byte for
// byte what the old json.Marshal path sent, Content-Length included.
func TestCellResultWireBytes(t *testing.T) {
	e := newTestEnvWith(t, func(m *sandboxtest.Manager) sandbox.Manager { return cannedCells{m} }, nil)
	id := mustCreate(t, e)
	for i, res := range wireCorpus() {
		code := fmt.Sprintf(`{"code": "canned %d"}`, i)
		status, hdr, body := e.do(t, "POST", "/v1/sandboxes/"+id+"/cells", jsonBody(code))
		want := oldLine(t, oldResult(res))
		if status != http.StatusOK || !bytes.Equal(body, want) {
			t.Errorf("result %d: %d\n%.300s\nwant\n%.300s", i, status, body, want)
		}
		if cl := hdr.Get("Content-Length"); cl != strconv.Itoa(len(want)) {
			t.Errorf("result %d: Content-Length %s, want %d", i, cl, len(want))
		}

		status, _, body = e.do(t, "POST", "/v1/sandboxes/"+id+"/cells?stream=1", jsonBody(code))
		want = nil
		for _, ev := range cannedEvents(&res) {
			want = append(want, oldLine(t, oldEvent{Type: ev.Type, Text: ev.Text, Result: ev.Result, Error: ev.Error, End: (*oldResult)(ev.End)})...)
		}
		if status != http.StatusOK || !bytes.Equal(body, want) {
			t.Errorf("stream %d: %d\n%.300s\nwant\n%.300s", i, status, body, want)
		}
	}
}
