package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/cellvm/cellvm/sandbox"
)

// maxLogLine bounds one NDJSON line of a log or event stream.
const maxLogLine = 1 << 20

// Logs reads one of a sandbox's logs (see sandbox.Manager.Logs). With
// req.Follow it streams until ctx ends (a nil error), the sandbox is
// deleted, or onLine fails.
func (c *Client) Logs(ctx context.Context, id string, req sandbox.LogRequest, onLine func(sandbox.LogLine) error) error {
	q := url.Values{}
	q.Set("source", string(req.Source))
	q.Set("tail", strconv.Itoa(req.Tail))
	u := c.sandboxURL(id, "logs") + "?"
	if !req.Follow {
		var lr LogsResponse
		if err := c.do(ctx, http.MethodGet, u+q.Encode(), nil, &lr, http.StatusOK); err != nil {
			return err
		}
		for _, l := range lr.Lines {
			if err := onLine(l); err != nil {
				return err
			}
		}
		return nil
	}
	q.Set("follow", "1")
	resp, err := c.stream(ctx, u+q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := lineScanner(resp.Body)
	for sc.Scan() {
		var l struct {
			sandbox.LogLine
			Error *Error `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("cellvm api logs: bad line: %w", err)
		}
		if l.Error != nil {
			return l.Error
		}
		if err := onLine(l.LogLine); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return sc.Err()
}

// Events subscribes to the daemon's lifecycle events; it returns once the
// daemon has subscribed, so every event after the return is delivered.
func (c *Client) Events(ctx context.Context) (sandbox.EventStream, error) {
	resp, err := c.stream(ctx, c.base+"/v1/events")
	if err != nil {
		return nil, err
	}
	return &clientEvents{body: resp.Body, sc: lineScanner(resp.Body)}, nil
}

// Capacity returns the daemon's caps and their use.
func (c *Client) Capacity(ctx context.Context) (sandbox.Capacity, error) {
	var cp sandbox.Capacity
	err := c.do(ctx, http.MethodGet, c.base+"/v1/capacity", nil, &cp, http.StatusOK)
	return cp, err
}

// Metrics returns the daemon's metrics in the Prometheus text format.
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	req, err := c.newRequest(ctx, http.MethodGet, c.base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cellvm api GET /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, decodeError(resp)
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxResponseJSON))
}

// stream opens a GET whose answer is NDJSON.
func (c *Client) stream(ctx context.Context, u string) (*http.Response, error) {
	req, err := c.newRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", NDJSONType)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cellvm api GET %s: %w", req.URL.Path, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

func lineScanner(r io.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLogLine)
	return sc
}

// clientEvents reads an event stream's lines.
type clientEvents struct {
	mu   sync.Mutex
	body io.ReadCloser
	sc   *bufio.Scanner
}

func (e *clientEvents) Next(ctx context.Context) (sandbox.Event, error) {
	stop := context.AfterFunc(ctx, func() { e.body.Close() })
	defer stop()
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.sc.Scan() {
		line := bytes.TrimSpace(e.sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var ev struct {
			sandbox.Event
			Error *Error `json:"error"`
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			return sandbox.Event{}, fmt.Errorf("cellvm api events: bad line: %w", err)
		}
		if ev.Error != nil {
			return sandbox.Event{}, fmt.Errorf("%w: %s", sandbox.ErrEventsLagged, ev.Error.Message)
		}
		return ev.Event, nil
	}
	if ctx.Err() != nil {
		return sandbox.Event{}, ctx.Err()
	}
	if err := e.sc.Err(); err != nil {
		return sandbox.Event{}, fmt.Errorf("cellvm api events: %w", err)
	}
	return sandbox.Event{}, io.EOF
}

func (e *clientEvents) Close() error { return e.body.Close() }
