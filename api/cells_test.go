package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

func TestRunCellJSONResult(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	res, err := e.client.RunCell(context.Background(), id, sandbox.Cell{Code: "stream", Timeout: 0}, nil)
	if err != nil {
		t.Fatalf("RunCell: %v", err)
	}
	if res.Status != cell.StatusOK || res.Stdout != "out 1\nout 2\n" || res.Stderr != "err 1\n" ||
		res.MainResult() == nil || res.MainResult().Data[cell.MIMEText] != "3" || res.ExecutionCount != 1 {
		t.Errorf("result %+v", res)
	}
	// The fake's "timeout_ms" cell prints the timeout the manager got.
	res, err = e.client.RunCell(context.Background(), id, sandbox.Cell{Code: "timeout_ms", Timeout: 0}, nil)
	if got := fmt.Sprintf("%d\n", DefaultCellTimeout.Milliseconds()); err != nil || res.Stdout != got {
		t.Errorf("missing timeout_ms gave %q (%v), want the default %v", res.Stdout, err, DefaultCellTimeout)
	}

	res, err = e.client.RunCell(context.Background(), id, sandbox.Cell{Code: "timeout_ms", Timeout: 1500 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "1500\n" {
		t.Errorf("timeout_ms 1500 gave %q ms", res.Stdout)
	}

	// A Python exception is a result, not an HTTP error.
	res, err = e.client.RunCell(context.Background(), id, sandbox.Cell{Code: "raise", Timeout: 0}, nil)
	if err != nil || res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "KeyError" {
		t.Errorf("raise: %+v, %v", res, err)
	}
}

func TestRunCellTimeoutValidation(t *testing.T) {
	e := newTestEnv(t, WithTimeouts(time.Second, time.Minute))
	id := mustCreate(t, e)
	for _, body := range []string{
		`{"code": "1", "timeout_ms": 0}`,
		`{"code": "1", "timeout_ms": -5}`,
		`{"code": "1", "timeout_ms": 60001}`,
		`{"code": "1", "timeout_ms": 9223372036854775807}`,
		`{"code": "1", "timeout_ms": 1.5}`,
		`{"code": "1", "timeout_ms": "10"}`,
	} {
		status, _, b := e.do(t, "POST", "/v1/sandboxes/"+id+"/cells", jsonBody(body))
		wantAPIError(t, body, status, b, http.StatusBadRequest, CodeInvalid)
	}
	_, err := e.client.RunCell(context.Background(), id, sandbox.Cell{Code: "1", Timeout: -time.Second}, nil)
	if !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("negative timeout through the client: %v", err)
	}
	// The maximum itself is allowed, and the configured default is used.
	status, _, b := e.do(t, "POST", "/v1/sandboxes/"+id+"/cells", jsonBody(`{"code": "1", "timeout_ms": 60000}`))
	if status != http.StatusOK {
		t.Errorf("timeout_ms at the max: %d %s", status, b)
	}
	res, err := e.client.RunCell(context.Background(), id, sandbox.Cell{Code: "timeout_ms", Timeout: 0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "1000\n" {
		t.Errorf("default timeout %q ms, want the configured 1s", res.Stdout)
	}
}

func TestRunCellCodeTooLarge(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	_, err := e.client.RunCell(context.Background(), id, sandbox.Cell{Code: strings.Repeat("#", sandbox.MaxCodeBytes+1), Timeout: 0}, nil)
	wantClientError(t, "code over 1 MiB", err, http.StatusRequestEntityTooLarge, CodeTooLarge)
	// A body far over the limit is cut off while reading.
	status, _, b := e.do(t, "POST", "/v1/sandboxes/"+id+"/cells",
		strings.NewReader(`{"code": "`+strings.Repeat("\\u0001", 2<<20)+`"}`))
	wantAPIError(t, "escaped body over the limit", status, b, http.StatusRequestEntityTooLarge, CodeTooLarge)
	// Exactly the limit is fine.
	if _, err := e.client.RunCell(context.Background(), id, sandbox.Cell{Code: strings.Repeat("#", sandbox.MaxCodeBytes), Timeout: 0}, nil); err != nil {
		t.Errorf("code of exactly 1 MiB: %v", err)
	}
}

func TestRunCellStreamsEventsInOrder(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	var got []cell.Event
	res, err := e.client.RunCell(context.Background(), id, sandbox.Cell{Code: "stream", Timeout: 0}, func(ev cell.Event) { got = append(got, ev) })
	if err != nil {
		t.Fatalf("RunCell: %v", err)
	}
	var kinds []string
	for _, ev := range got {
		kinds = append(kinds, string(ev.Type)+":"+ev.Text)
	}
	want := []string{"stdout:out 1\n", "stderr:err 1\n", "stdout:out 2\n", "result:", "end:"}
	if strings.Join(kinds, "|") != strings.Join(want, "|") {
		t.Fatalf("events %q, want %q", kinds, want)
	}
	if got[3].Result == nil || got[3].Result.Data[cell.MIMEText] != "3" {
		t.Errorf("result event %+v", got[3])
	}
	if got[4].End == nil || got[4].End.Stdout != "out 1\nout 2\n" || res.Stdout != got[4].End.Stdout {
		t.Errorf("end event %+v, returned result %+v", got[4].End, res)
	}
}

// TestRunCellStreamIsFlushedWhileCellRuns proves flushing: the fake cell
// sends one event and then cannot finish until the test has received it.
// Without a flush per event the client would see nothing until the cell
// ended, and the fake would give up after 5 s (blockTimedOut).
func TestRunCellStreamIsFlushedWhileCellRuns(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	var first time.Time
	var n int
	start := time.Now()
	res, err := e.client.RunCell(context.Background(), id, sandbox.Cell{Code: "block", Timeout: 0}, func(ev cell.Event) {
		n++
		if n == 1 {
			first = time.Now()
			if ev.Type != cell.EventStdout || ev.Text != "first\n" {
				t.Errorf("first event %+v", ev)
			}
			e.cells.free()
		}
	})

	if err != nil {
		t.Fatalf("RunCell: %v", err)
	}
	if e.cells.timedOut.Load() {
		t.Fatal("the first event did not reach the client while the cell ran (fake waited 5 s)")
	}
	if n != 2 || res.Status != cell.StatusOK {
		t.Errorf("%d events, result %+v", n, res)
	}
	if first.Sub(start) > 3*time.Second {
		t.Errorf("first event after %v", first.Sub(start))
	}
}

func TestRunCellStreamQueryParamAndContentType(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	status, hdr, body := e.do(t, "POST", "/v1/sandboxes/"+id+"/cells?stream=1", jsonBody(`{"code": "stream"}`))
	if status != http.StatusOK || hdr.Get("Content-Type") != NDJSONType {
		t.Fatalf("status %d, content type %q", status, hdr.Get("Content-Type"))
	}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	var lines int
	var last cell.Event
	for sc.Scan() {
		lines++
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatalf("line %d %q: %v", lines, sc.Text(), err)
		}
	}
	if lines != 5 || last.Type != cell.EventEnd {
		t.Errorf("%d lines, last %+v", lines, last)
	}
	// Without asking, one JSON result.
	status, hdr, _ = e.do(t, "POST", "/v1/sandboxes/"+id+"/cells", jsonBody(`{"code": "stream"}`))
	if status != http.StatusOK || hdr.Get("Content-Type") != "application/json" {
		t.Errorf("plain: status %d, content type %q", status, hdr.Get("Content-Type"))
	}
	// Accept with parameters and several types still selects NDJSON.
	_, hdr, _ = e.do(t, "POST", "/v1/sandboxes/"+id+"/cells", jsonBody(`{"code": "stream"}`),
		"Accept", "application/json;q=0.5, application/x-ndjson; charset=utf-8")
	if hdr.Get("Content-Type") != NDJSONType {
		t.Errorf("Accept list: content type %q", hdr.Get("Content-Type"))
	}
}

func TestSecondCellIsRefusedBusy(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	var wg sync.WaitGroup
	wg.Add(1)
	var firstErr error
	var firstRes cell.Result
	go func() {
		defer wg.Done()
		firstRes, firstErr = e.client.RunCell(context.Background(), id, sandbox.Cell{Code: "block", Timeout: 0}, func(cell.Event) {})
	}()
	select {
	case <-e.cells.started:
	case <-time.After(5 * time.Second):
		t.Fatal("first cell never started")
	}
	// Both forms of the second request are refused at once, not queued.
	_, err := e.client.RunCell(context.Background(), id, sandbox.Cell{Code: "1", Timeout: 0}, nil)
	if !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("second cell: %v, want ErrBusy", err)
	}
	wantClientError(t, "second cell", err, http.StatusConflict, CodeBusy)
	status, hdr, body := e.do(t, "POST", "/v1/sandboxes/"+id+"/cells", jsonBody(`{"code":"1"}`), "Accept", NDJSONType)
	wantAPIError(t, "second streamed cell", status, body, http.StatusConflict, CodeBusy)
	if hdr.Get("Content-Type") != "application/json" {
		t.Errorf("refused streamed cell answered as %q, want a JSON error", hdr.Get("Content-Type"))
	}
	e.cells.free()
	wg.Wait()
	if firstErr != nil || firstRes.Status != cell.StatusOK {
		t.Errorf("first cell: %+v, %v", firstRes, firstErr)
	}
}

func TestClientDisconnectCancelsCell(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		e := newTestEnv(t)
		id := mustCreate(t, e)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		var onEvent func(cell.Event)
		if streaming {
			onEvent = func(cell.Event) {}
		}
		go func() {
			_, err := e.client.RunCell(ctx, id, sandbox.Cell{Code: "block", Timeout: 0}, onEvent)
			done <- err
		}()
		select {
		case <-e.cells.started:
		case <-time.After(5 * time.Second):
			t.Fatal("cell never started")
		}
		cancel()
		select {
		case <-e.cells.canceled:
		case <-time.After(5 * time.Second):
			t.Fatalf("streaming=%v: the manager's context was not cancelled after the client went away", streaming)
		}
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("streaming=%v: client error %v, want context.Canceled", streaming, err)
		}
	}
}

func TestRunCellStreamAlwaysEnds(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	// A manager failing after the first event: the client still gets an
	// end event, with status lost.
	var kinds []cell.EventType
	res, err := e.client.RunCell(context.Background(), id, sandbox.Cell{Code: "lost-mid", Timeout: 0}, func(ev cell.Event) { kinds = append(kinds, ev.Type) })
	if err != nil {
		t.Fatalf("lost-mid: %v", err)
	}
	if len(kinds) != 2 || kinds[0] != cell.EventStdout || kinds[1] != cell.EventEnd {
		t.Errorf("lost-mid events %q", kinds)
	}
	if res.Status != cell.StatusLost || res.Error == nil || !strings.Contains(res.Error.Value, "VM exited") {
		t.Errorf("lost-mid result %+v", res)
	}
	// A manager that sends no events: the server sends the end event.
	kinds = nil
	res, err = e.client.RunCell(context.Background(), id, sandbox.Cell{Code: "quiet", Timeout: 0}, func(ev cell.Event) { kinds = append(kinds, ev.Type) })
	if err != nil || len(kinds) != 1 || kinds[0] != cell.EventEnd || res.Stdout != "quiet\n" {
		t.Errorf("quiet: events %q, result %+v, err %v", kinds, res, err)
	}
}

func TestReadEventsRejectsTruncatedStream(t *testing.T) {
	_, err := readEvents(strings.NewReader(`{"type":"stdout","text":"a"}`+"\n"), func(cell.Event) {})
	if err == nil || !strings.Contains(err.Error(), "without an end event") {
		t.Errorf("truncated stream: %v", err)
	}
	_, err = readEvents(strings.NewReader("not json\n"), func(cell.Event) {})
	if err == nil {
		t.Error("bad line accepted")
	}
}
