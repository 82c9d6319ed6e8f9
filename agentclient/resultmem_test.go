package agentclient

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/proto"
)

// maximalResult is a cell result at the host's bounds: a full set of
// displays (one PNG's base64 text of proto.MaxDisplaysBytes) and full
// stdout and stderr, as an honest agent may send.
func maximalResult() cell.Result {
	png := strings.Repeat("iVBORw0KGgo", (proto.MaxDisplaysBytes-len(cell.MIMEPNG))/11)
	return cell.Result{Status: cell.StatusOK, ExecutionCount: 1, StateKept: true,
		Stdout: strings.Repeat("o", proto.MaxOutputBytes), Stderr: strings.Repeat("e", proto.MaxOutputBytes),
		Results: []cell.Display{{Main: true, Data: map[string]string{cell.MIMEPNG: png}}}}
}

// encoded returns the frames an agent sends for v as one message of type t.
func encoded(t testing.TB, ft proto.FrameType, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := proto.NewConn(&b, 0).WriteJSON(ft, v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// rawAgent serves canned bytes: a hello answer to the hello, then answer
// (every frame of a cell's events and its response, encoded once) to each
// request. Nothing is encoded per call, so the allocations the test
// measures are the client's.
func rawAgent(t testing.TB, answer []byte) DialFunc {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	hello := encoded(t, proto.TypeHello, proto.Hello{Version: proto.Version, Software: "raw"})
	var wg sync.WaitGroup
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				c := proto.NewConn(nc, proto.MaxRequest)
				if _, err := c.ReadMessage(); err != nil {
					return
				}
				if _, err := nc.Write(hello); err != nil {
					return
				}
				for {
					if _, err := c.ReadMessage(); err != nil {
						return
					}
					if _, err := nc.Write(answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
}

// maximalAnswer is a maximal cell's frames: its display streamed as an
// event, then the response with the whole result.
func maximalAnswer(t testing.TB) []byte {
	r := maximalResult()
	ev := encoded(t, proto.TypeEvent, proto.Event{Event: cell.Event{Type: cell.EventResult, Result: &r.Results[0]}})
	resp := encoded(t, proto.TypeResponse, proto.Response{Result: &r})
	return append(ev, resp...)
}

// allocPerResult returns the bytes the client allocates to read one
// maximal result.
func allocPerResult(t *testing.T, c *Client) uint64 {
	t.Helper()
	run := func() {
		res, err := c.RunCell(ctxT(t), "x", time.Minute, nil)
		if err != nil || len(res.Results) != 1 {
			t.Fatalf("RunCell = %d results, %v", len(res.Results), err)
		}
	}
	run() // warm the pool: the connection and its buffers
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n = 3
	for range n {
		run()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / n
}

// TestMaximalResultAllocation measures what the client allocates to read
// one maximal result (its display event and its response, each ~66 MiB
// of JSON): the joined message once and its decoded strings once, not
// the reassembly's repeated growth (1.25x at a time) and the JSON
// decoder's doubling buffer. Measured: 1315 MiB (10.1x the wire bytes)
// before the cut, 262 MiB (2.0x) after.
func TestMaximalResultAllocation(t *testing.T) {
	if testing.Short() {
		t.Skip("moves ~1 GiB")
	}
	answer := maximalAnswer(t)
	c := New(rawAgent(t, answer))
	defer c.Close()
	per := allocPerResult(t, c)
	wire := uint64(len(answer))
	t.Logf("one maximal result: %d MiB on the wire, %d MiB allocated by the client (%.2fx)", wire>>20, per>>20, float64(per)/float64(wire))
	if per > wire*5/2 {
		t.Errorf("reading one maximal result allocated %d MiB, more than 2.5x its %d MiB on the wire", per>>20, wire>>20)
	}
}
