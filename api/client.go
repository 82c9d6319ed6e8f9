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
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// Client bounds on what it reads from the server.
const (
	maxResponseJSON = 64 << 20
	// maxEventLine bounds one NDJSON line: an end event repeats the
	// clipped output and rich results (a PNG can be several MiB).
	maxEventLine = 64 << 20
)

// Client talks to a cellvm daemon over its Unix socket, or over HTTPS
// with a bearer token (see Dial). It implements sandbox.Manager, so code
// written against the manager works remotely; errors are *Error values that
// match the sandbox sentinels with errors.Is.
type Client struct {
	hc    *http.Client
	base  string // scheme and authority: "http://cellvm" on a socket
	token string
	// tenant, when set, is sent as TenantHeader: the operator acting
	// for that tenant.
	tenant string
}

// ForTenant returns a client that acts for tenant, sharing c's
// connections: on the daemon's socket, the operator making and seeing
// that tenant's objects. A token's own tenant needs none (a token naming
// another is refused).
func (c *Client) ForTenant(tenant string) *Client {
	cc := *c
	cc.tenant = tenant
	return &cc
}

var _ sandbox.Manager = (*Client)(nil)

// NewClient returns a client for the socket at socketPath.
func NewClient(socketPath string) *Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return newClient("http://cellvm", "", &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socketPath)
		},
	})
}

func newClient(base, token string, tr *http.Transport) *Client {
	tr.MaxIdleConns = 8
	tr.IdleConnTimeout = 30 * time.Second
	tr.ExpectContinueTimeout = 2 * time.Second
	tr.DisableCompression = true
	tr.TLSHandshakeTimeout = 10 * time.Second
	return &Client{base: base, token: token, hc: &http.Client{
		Transport: tr,
		// The API never redirects; following one could turn a PUT into a GET.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Close drops idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// sandboxesURL is the collection's URL.
func (c *Client) sandboxesURL() string { return c.base + "/v1/sandboxes" }

// sandboxURL builds the URL of one sandbox's route, escaping each segment.
func (c *Client) sandboxURL(id string, rest ...string) string {
	var b strings.Builder
	b.WriteString(c.sandboxesURL())
	b.WriteString("/" + url.PathEscape(id))
	for _, r := range rest {
		b.WriteString("/" + url.PathEscape(r))
	}
	return b.String()
}

// newRequest makes a request that carries the client's token.
func (c *Client) newRequest(ctx context.Context, method, u string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.tenant != "" {
		req.Header.Set(TenantHeader, c.tenant)
	}
	return req, nil
}

// do sends a request with an optional JSON body and decodes a JSON
// response into out (if not nil) when the status is want.
func (c *Client) do(ctx context.Context, method, u string, in, out any, want int) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encoding request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, u, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("cellvm api %s %s: %w", method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		return decodeError(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponseJSON)).Decode(out); err != nil {
		return fmt.Errorf("cellvm api %s %s: decoding response: %w", method, req.URL.Path, err)
	}
	return nil
}

// decodeError turns a non-success response into an *Error.
func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb errorBody
	if err := json.Unmarshal(b, &eb); err != nil || eb.Error == nil || eb.Error.Code == "" {
		return &Error{Status: resp.StatusCode, Code: codeForStatus(resp.StatusCode),
			Message: strings.TrimSpace(string(b))}
	}
	eb.Error.Status = resp.StatusCode
	return eb.Error
}

// codeForStatus guesses a code for an error response that had none.
func codeForStatus(status int) string {
	for _, c := range codeTable {
		if c.status == status {
			return c.code
		}
	}
	if status >= 400 && status < 500 {
		return CodeInvalid
	}
	return CodeInternal
}

// Create creates a sandbox and returns it once it runs.
func (c *Client) Create(ctx context.Context, cfg sandbox.Config) (sandbox.Info, error) {
	var info sandbox.Info
	err := c.do(ctx, http.MethodPost, c.sandboxesURL(), cfg, &info, http.StatusCreated)
	return info, err
}

// List returns all sandboxes.
func (c *Client) List(ctx context.Context) ([]sandbox.Info, error) {
	var lr ListResponse
	err := c.do(ctx, http.MethodGet, c.sandboxesURL(), nil, &lr, http.StatusOK)
	return lr.Sandboxes, err
}

// Get returns one sandbox.
func (c *Client) Get(ctx context.Context, id string) (sandbox.Info, error) {
	var info sandbox.Info
	err := c.do(ctx, http.MethodGet, c.sandboxURL(id), nil, &info, http.StatusOK)
	return info, err
}

// Delete destroys a sandbox.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, c.sandboxURL(id), nil, nil, http.StatusNoContent)
}

// Interrupt interrupts the running cell.
func (c *Client) Interrupt(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, c.sandboxURL(id, "interrupt"), nil, nil, http.StatusNoContent)
}

// Restart gives one of the sandbox's sessions (the zero Session: Python's
// default one) a fresh program.
func (c *Client) Restart(ctx context.Context, id string, s sandbox.Session) error {
	var body any
	if s != (sandbox.Session{}) {
		body = s
	}
	return c.do(ctx, http.MethodPost, c.sandboxURL(id, "restart"), body, nil, http.StatusNoContent)
}

// Pause pauses the sandbox's VM.
func (c *Client) Pause(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, c.sandboxURL(id, "pause"), nil, nil, http.StatusNoContent)
}

// Resume resumes a paused VM.
func (c *Client) Resume(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, c.sandboxURL(id, "resume"), nil, nil, http.StatusNoContent)
}

// Snapshot snapshots the sandbox.
func (c *Client) Snapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	var snap sandbox.SnapshotInfo
	err := c.do(ctx, http.MethodPost, c.sandboxURL(id, "snapshot"), nil, &snap, http.StatusCreated)
	return snap, err
}

// ListSnapshots lists the snapshots.
func (c *Client) ListSnapshots(ctx context.Context) ([]sandbox.SnapshotInfo, error) {
	var snaps []sandbox.SnapshotInfo
	err := c.do(ctx, http.MethodGet, c.base+"/v1/snapshots", nil, &snaps, http.StatusOK)
	return snaps, err
}

// GetSnapshot describes a snapshot.
func (c *Client) GetSnapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	var snap sandbox.SnapshotInfo
	err := c.do(ctx, http.MethodGet, c.base+"/v1/snapshots/"+url.PathEscape(id), nil, &snap, http.StatusOK)
	return snap, err
}

// DeleteSnapshot deletes a snapshot.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, c.base+"/v1/snapshots/"+url.PathEscape(id), nil, nil, http.StatusNoContent)
}

// Workspaces lists the workspaces.
func (c *Client) Workspaces(ctx context.Context) ([]sandbox.WorkspaceInfo, error) {
	var ws []sandbox.WorkspaceInfo
	err := c.do(ctx, http.MethodGet, c.base+"/v1/workspaces", nil, &ws, http.StatusOK)
	return ws, err
}

// Images lists the root images sandboxes can boot.
func (c *Client) Images(ctx context.Context) ([]sandbox.ImageInfo, error) {
	var imgs []sandbox.ImageInfo
	err := c.do(ctx, http.MethodGet, c.base+"/v1/images", nil, &imgs, http.StatusOK)
	return imgs, err
}

// DeleteImage deletes an image built by `cellvm image build` that no
// sandbox or snapshot uses.
func (c *Client) DeleteImage(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, c.base+"/v1/images/"+url.PathEscape(name), nil, nil, http.StatusNoContent)
}

// DeleteWorkspace deletes a workspace no sandbox holds.
func (c *Client) DeleteWorkspace(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, c.base+"/v1/workspaces/"+url.PathEscape(name), nil, nil, http.StatusNoContent)
}

// SetNetwork replaces the sandbox's egress allowlist.
func (c *Client) SetNetwork(ctx context.Context, id string, p sandbox.NetworkPolicy) error {
	if p.Allow == nil {
		p.Allow = []string{}
	}
	return c.do(ctx, http.MethodPut, c.sandboxURL(id, "network"), p, nil, http.StatusNoContent)
}

// OpenAPI fetches the server's OpenAPI document.
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	var raw json.RawMessage
	err := c.do(ctx, http.MethodGet, c.base+"/v1/openapi.json", nil, &raw, http.StatusOK)
	return raw, err
}

// Exec runs one command in the guest. A zero Timeout means the server's
// default.
func (c *Client) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (cell.ExecResult, error) {
	wire := ExecRequest{Argv: req.Argv, TimeoutMS: timeoutMS(req.Timeout)}
	if utf8.Valid(req.Stdin) {
		wire.Stdin = string(req.Stdin)
	} else {
		wire.StdinBase64 = base64.StdEncoding.EncodeToString(req.Stdin)
	}
	var res cell.ExecResult
	err := c.do(ctx, http.MethodPost, c.sandboxURL(id, "exec"), wire, &res, http.StatusOK)
	return res, err
}

// timeoutMS converts a timeout for the wire: zero means absent (the
// server's default); a positive one is rounded up to whole milliseconds.
func timeoutMS(d time.Duration) *int64 {
	if d == 0 {
		return nil
	}
	ms := d.Milliseconds()
	if d > 0 && d%time.Millisecond != 0 {
		ms++
	}
	return &ms
}

// RunCell runs code in the sandbox's interpreter. A zero timeout means the
// server's default. With onEvent nil it waits for the one JSON result;
// otherwise it streams, calling onEvent for each event as it arrives (the
// end event included) and returning the end event's result. Cancelling ctx
// closes the connection, which interrupts the cell.
func (c *Client) RunCell(ctx context.Context, id string, spec sandbox.Cell, onEvent func(cell.Event)) (cell.Result, error) {
	code, timeout := spec.Code, spec.Timeout
	in := CellRequest{Code: code, TimeoutMS: timeoutMS(timeout), Language: string(spec.Language), Context: spec.Context}
	var res cell.Result
	if onEvent == nil {
		err := c.do(ctx, http.MethodPost, c.sandboxURL(id, "cells"), in, &res, http.StatusOK)
		return res, err
	}
	b, err := json.Marshal(in)
	if err != nil {
		return res, fmt.Errorf("encoding request: %w", err)
	}
	req, err := c.newRequest(ctx, http.MethodPost, c.sandboxURL(id, "cells"), bytes.NewReader(b))
	if err != nil {
		return res, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", NDJSONType)
	resp, err := c.hc.Do(req)
	if err != nil {
		return res, fmt.Errorf("cellvm api run cell: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return res, decodeError(resp)
	}
	return readEvents(resp.Body, onEvent)
}

// readEvents reads NDJSON events until the end event.
func readEvents(r io.Reader, onEvent func(cell.Event)) (cell.Result, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var ev cell.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return cell.Result{}, fmt.Errorf("cellvm api run cell: bad event line: %w", err)
		}
		onEvent(ev)
		if ev.Type == cell.EventEnd {
			if ev.End == nil {
				return cell.Result{}, errors.New("cellvm api run cell: end event without a result")
			}
			return *ev.End, nil
		}
	}
	if err := sc.Err(); err != nil {
		return cell.Result{}, fmt.Errorf("cellvm api run cell: reading events: %w", err)
	}
	return cell.Result{}, fmt.Errorf("cellvm api run cell: stream ended without an end event: %w", io.ErrUnexpectedEOF)
}

// filesURL is the files route for an absolute (or relative) guest path.
func (c *Client) filesURL(id, guestPath string) string {
	segs := strings.Split(strings.TrimLeft(guestPath, "/"), "/")
	return c.sandboxURL(id, append([]string{"files"}, segs...)...)
}

// Upload streams r to guestPath in the sandbox and returns the bytes the
// server wrote. If r's size is known (bytes.Reader, strings.Reader,
// bytes.Buffer) it is declared, so an oversized upload is refused before
// it is sent.
func (c *Client) Upload(ctx context.Context, id, guestPath string, r io.Reader) (int64, error) {
	req, err := c.newRequest(ctx, http.MethodPut, c.filesURL(id, guestPath), r)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	// Wait for the server's go-ahead: a refusal (unknown sandbox, bad
	// path, too large) then costs no transfer.
	req.Header.Set("Expect", "100-continue")
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("cellvm api upload %s: %w", guestPath, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, decodeError(resp)
	}
	var ur UploadResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponseJSON)).Decode(&ur); err != nil {
		return 0, fmt.Errorf("cellvm api upload %s: decoding response: %w", guestPath, err)
	}
	return ur.Bytes, nil
}

// Download streams the file at guestPath to w and returns the bytes
// written. A transfer cut off by the server is an error
// (io.ErrUnexpectedEOF), never a silently short file.
func (c *Client) Download(ctx context.Context, id, guestPath string, w io.Writer) (int64, error) {
	req, err := c.newRequest(ctx, http.MethodGet, c.filesURL(id, guestPath), nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("cellvm api download %s: %w", guestPath, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, decodeError(resp)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("cellvm api download %s: %w", guestPath, err)
	}
	return n, nil
}
