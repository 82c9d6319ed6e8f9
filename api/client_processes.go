package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/cellvm/cellvm/sandbox"
)

// maxProcessLine bounds one NDJSON line of a process stream: an output
// chunk in base64 and its envelope.
const maxProcessLine = 1 << 20

// StartProcess implements sandbox.Manager over the API's streaming start.
// Returning an error from onEvent (or ending ctx) hangs up; the process
// goes on.
func (c *Client) StartProcess(ctx context.Context, id string, req sandbox.ProcessRequest, onEvent func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	in := ProcessStartRequest{Argv: req.Argv, Cwd: req.Cwd, Env: req.Env, User: req.User, PTY: req.PTY, Stdin: req.Stdin,
		Tag: req.Tag, TimeoutMS: req.Timeout.Milliseconds()}
	b, err := json.Marshal(in)
	if err != nil {
		return sandbox.ProcessExit{}, fmt.Errorf("encoding request: %w", err)
	}
	return c.processStream(ctx, http.MethodPost, c.sandboxURL(id, "processes"), bytes.NewReader(b), onEvent)
}

// AttachProcess implements sandbox.Manager.
func (c *Client) AttachProcess(ctx context.Context, id string, pid int, onEvent func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	return c.processStream(ctx, http.MethodGet, c.sandboxURL(id, "processes", strconv.Itoa(pid), "attach"), nil, onEvent)
}

func (c *Client) processStream(ctx context.Context, method, u string, body io.Reader, onEvent func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	req, err := c.newRequest(ctx, method, u, body)
	if err != nil {
		return sandbox.ProcessExit{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", NDJSONType)
	resp, err := c.hc.Do(req)
	if err != nil {
		return sandbox.ProcessExit{}, fmt.Errorf("cellvm api process: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return sandbox.ProcessExit{}, decodeError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxProcessLine)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var ev sandbox.ProcessEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return sandbox.ProcessExit{}, fmt.Errorf("cellvm api process: bad event line: %w", err)
		}
		if onEvent != nil {
			if err := onEvent(ev); err != nil {
				return sandbox.ProcessExit{}, err
			}
		}
		if ev.Kind == sandbox.ProcessEnd {
			if ev.Exit == nil {
				return sandbox.ProcessExit{}, errors.New("cellvm api process: end event without an exit")
			}
			return *ev.Exit, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return sandbox.ProcessExit{}, err
	}
	if err := sc.Err(); err != nil {
		return sandbox.ProcessExit{}, fmt.Errorf("cellvm api process: reading events: %w", err)
	}
	return sandbox.ProcessExit{}, fmt.Errorf("cellvm api process: stream ended without an end event: %w", io.ErrUnexpectedEOF)
}

// ListProcesses implements sandbox.Manager.
func (c *Client) ListProcesses(ctx context.Context, id string) ([]sandbox.ProcessInfo, error) {
	var out []sandbox.ProcessInfo
	err := c.do(ctx, http.MethodGet, c.sandboxURL(id, "processes"), nil, &out, http.StatusOK)
	return out, err
}

// SendInput implements sandbox.Manager.
func (c *Client) SendInput(ctx context.Context, id string, pid int, data []byte, eof bool) error {
	in := ProcessInput{EOF: eof}
	if len(data) > 0 {
		in.DataBase64 = base64.StdEncoding.EncodeToString(data)
	}
	return c.do(ctx, http.MethodPost, c.sandboxURL(id, "processes", strconv.Itoa(pid), "stdin"), in, nil, http.StatusNoContent)
}

// SignalProcess implements sandbox.Manager.
func (c *Client) SignalProcess(ctx context.Context, id string, pid int, sig string) error {
	return c.do(ctx, http.MethodPost, c.sandboxURL(id, "processes", strconv.Itoa(pid), "signal"), ProcessSignal{Signal: sig}, nil, http.StatusNoContent)
}

// ResizePTY implements sandbox.Manager.
func (c *Client) ResizePTY(ctx context.Context, id string, pid int, size sandbox.PTYSize) error {
	return c.do(ctx, http.MethodPost, c.sandboxURL(id, "processes", strconv.Itoa(pid), "resize"), size, nil, http.StatusNoContent)
}
