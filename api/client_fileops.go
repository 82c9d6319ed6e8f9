package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// fileURL is the URL of route kind ("dir", "stat", "watch", "files") for
// the guest path, with the request's query.
func (c *Client) fileURL(id, kind string, req sandbox.FileRequest) string {
	segs := strings.Split(strings.TrimLeft(req.Path, "/"), "/")
	u := c.sandboxURL(id, append([]string{kind}, segs...)...)
	q := url.Values{}
	if req.User != "" {
		q.Set("user", req.User)
	}
	if req.Depth != 0 {
		q.Set("depth", strconv.Itoa(req.Depth))
	}
	if req.Recursive {
		q.Set("recursive", "true")
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// ListDir lists a directory in the sandbox.
func (c *Client) ListDir(ctx context.Context, id string, req sandbox.FileRequest) ([]sandbox.FileEntry, error) {
	var dr DirResponse
	err := c.do(ctx, http.MethodGet, c.fileURL(id, "dir", req), nil, &dr, http.StatusOK)
	return dr.Entries, err
}

// StatPath describes one file in the sandbox.
func (c *Client) StatPath(ctx context.Context, id string, req sandbox.FileRequest) (sandbox.FileEntry, error) {
	var e sandbox.FileEntry
	err := c.do(ctx, http.MethodGet, c.fileURL(id, "stat", req), nil, &e, http.StatusOK)
	return e, err
}

// MakeDir makes a directory and its parents in the sandbox.
func (c *Client) MakeDir(ctx context.Context, id string, req sandbox.FileRequest) (bool, error) {
	var mr MakeDirResponse
	err := c.do(ctx, http.MethodPost, c.fileURL(id, "dir", req), nil, &mr, http.StatusOK)
	return mr.Created, err
}

// MovePath renames a file or directory in the sandbox.
func (c *Client) MovePath(ctx context.Context, id string, from sandbox.FileRequest, to string) (sandbox.FileEntry, error) {
	var e sandbox.FileEntry
	err := c.do(ctx, http.MethodPost, c.sandboxURL(id, "move"), MoveRequest{From: from.Path, To: to, User: from.User}, &e, http.StatusOK)
	return e, err
}

// RemovePath removes a file, or a directory and what it holds.
func (c *Client) RemovePath(ctx context.Context, id string, req sandbox.FileRequest) error {
	return c.do(ctx, http.MethodDelete, c.fileURL(id, "files", req), nil, nil, http.StatusNoContent)
}

// maxWatchLine bounds one line of a watch stream.
const maxWatchLine = 64 << 10

// WatchDir streams the directory's changes to onEvent (first the zero
// FileEvent once the watch is set) until ctx ends (nil) or onEvent fails.
func (c *Client) WatchDir(ctx context.Context, id string, req sandbox.FileRequest, onEvent func(sandbox.FileEvent) error) error {
	hr, err := c.newRequest(ctx, http.MethodGet, c.fileURL(id, "watch", req), nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("cellvm api watch %s: %w", req.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return decodeError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 4096), maxWatchLine)
	first := true
	for sc.Scan() {
		var e sandbox.FileEvent
		if first {
			var ws WatchStarted
			if err := json.Unmarshal(sc.Bytes(), &ws); err != nil || ws.Watching == "" {
				return fmt.Errorf("cellvm api watch %s: the stream did not start with the watch", req.Path)
			}
			first = false
		} else if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Op == "" {
			return fmt.Errorf("cellvm api watch %s: bad event line", req.Path)
		}
		if err := onEvent(e); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("cellvm api watch %s: %w", req.Path, err)
	}
	return nil
}

// DialPort connects to a TCP port a process in the sandbox listens on,
// through the daemon (an upgraded HTTP connection). Nothing listening is
// an error matching sandbox.ErrPortClosed.
func (c *Client) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	hr, err := c.newRequest(ctx, http.MethodGet, c.sandboxURL(id, "ports", strconv.Itoa(port)), nil)
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Connection", "Upgrade")
	hr.Header.Set("Upgrade", PortUpgrade)
	resp, err := c.hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("cellvm api port %d: %w", port, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, errors.New("cellvm api port: the upgraded connection is not writable")
	}
	return &upgradedConn{rwc: rwc}, nil
}

// upgradedConn is an upgraded HTTP connection as a net.Conn; deadlines
// are not carried (the transport owns the socket).
type upgradedConn struct{ rwc io.ReadWriteCloser }

func (u *upgradedConn) Read(p []byte) (int, error)  { return u.rwc.Read(p) }
func (u *upgradedConn) Write(p []byte) (int, error) { return u.rwc.Write(p) }
func (u *upgradedConn) Close() error                { return u.rwc.Close() }

// CloseWrite half-closes the connection when the transport's allows it.
func (u *upgradedConn) CloseWrite() error {
	if cw, ok := u.rwc.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
func (u *upgradedConn) LocalAddr() net.Addr              { return portAddr("local") }
func (u *upgradedConn) RemoteAddr() net.Addr             { return portAddr("sandbox") }
func (u *upgradedConn) SetDeadline(time.Time) error      { return nil }
func (u *upgradedConn) SetReadDeadline(time.Time) error  { return nil }
func (u *upgradedConn) SetWriteDeadline(time.Time) error { return nil }

type portAddr string

func (a portAddr) Network() string { return "cellvm-port" }
func (a portAddr) String() string  { return string(a) }
