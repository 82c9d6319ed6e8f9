package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/cellvm/cellvm/vmm/snapshot"
	"golang.org/x/sys/unix"
)

// Then says what the VM does once its snapshot is written.
type Then string

const (
	// ThenResume carries on running: a snapshot of a live VM (a template,
	// a fork's parent).
	ThenResume Then = "resume"
	// ThenStop ends the VM: pause to disk, the process's memory goes back
	// to the host.
	ThenStop Then = "stop"
)

// Op is a control operation.
type Op string

// OpSnapshot writes the machine to the two files sent with the request.
const OpSnapshot Op = "snapshot"

// OpWorkingSet answers the pages the guest of a restored machine touched
// since its restore (vmm.Machine.WorkingSet), in Reply.WorkingSet: the
// record a template's restores prefetch. It carries no files.
const OpWorkingSet Op = "working_set"

// OpCheckpoint records a checkpoint of a running machine whose Spec has
// Checkpoints: the VMM pauses the vCPUs, drains the devices, writes the
// pages written since its last checkpoint (since its restore for the
// first of a restored machine) into the memory file as a layer over the
// files of the checkpoint before, or a whole image (the first of a booted
// machine, or Request.Full), with the state (vmm/snapshot's
// EncodeCheckpoint: its own extents, no chain; the daemon composes the
// chain), and runs on. The guest's connections are not disturbed: a
// restore of the checkpoint resets them there (State.ResetVsock).
const OpCheckpoint Op = "checkpoint"

// Request is what the requester asks.
type Request struct {
	Op   Op   `json:"op"`
	Then Then `json:"then"`
	// Layer lets the VMM write the memory as a layer over the files its
	// machine was restored from (vmm.Machine.SaveLayer): the requester
	// says the files are its own and it keeps them while the snapshot
	// lives (a sandbox's pause chain, never a snapshot's or a template's).
	Layer bool `json:"layer,omitempty"`
	// Full makes an OpCheckpoint write a whole image whatever it could
	// layer over (the requester dropped the chain under it).
	Full bool `json:"full,omitempty"`
}

// Reply is the VMM's answer: OK, or a Code and the error's text.
type Reply struct {
	OK    bool   `json:"ok,omitempty"`
	Code  Code   `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
	// WorkingSet is an OpWorkingSet's answer, at most
	// snapshot.MaxWorkingSetExtents extents (which fit MaxReplyBytes).
	WorkingSet []snapshot.Extent `json:"working_set,omitempty"`
	// Checkpoint is an OpCheckpoint's answer.
	Checkpoint *CheckpointStats `json:"checkpoint,omitempty"`
}

// CheckpointStats says what an OpCheckpoint wrote. The VMM may be
// compromised: the requester trusts none of it for a decision of its own
// (sizes are read off the files; the state file is validated at restore).
type CheckpointStats struct {
	// Layer says the memory file is a layer over the previous
	// checkpoint's files; false: a whole image.
	Layer bool `json:"layer"`
	// Pages is the number of pages written.
	Pages int64 `json:"pages"`
	// PauseMS is how long the vCPUs were stopped.
	PauseMS int64 `json:"pause_ms"`
}

// WorkingSetHandler answers an OpWorkingSet request.
type WorkingSetHandler func() ([]snapshot.Extent, error)

// CheckpointHandler takes a checkpoint into state and memory (which it
// must not close; the server does), a whole image when full, and says
// what it wrote. The machine runs on, whether it succeeded or not.
type CheckpointHandler func(state, memory *os.File, full bool) (CheckpointStats, error)

// Handlers are what a control socket serves: Snapshot always,
// WorkingSet and Checkpoint when set (nil: their requests are refused).
type Handlers struct {
	Snapshot   Handler
	WorkingSet WorkingSetHandler
	Checkpoint CheckpointHandler
}

// Handler takes a snapshot of the VM into state and memory (which it must
// not close; the server does), as a layer if req.Layer allows, and then
// does what req.Then says, except that for ThenStop it leaves the VM
// paused: Serve ends it (stop) only once the reply is sent, so that a VMM
// process ending at once cannot lose the answer its requester waits for.
type Handler func(state, memory *os.File, req Request) error

// maxRequest bounds a request line.
const maxRequest = 4096

// requestTimeout bounds how long a requester may take to send its request.
const requestTimeout = 10 * time.Second

// Serve answers requests on ln until it is closed. Requests are served one
// at a time, each on the goroutine that accepted it. stop ends the VM; it
// is called after the reply to a ThenStop request whose snapshot was
// written.
func Serve(ln *net.UnixListener, h Handler, stop func(), log *slog.Logger) {
	ServeWith(ln, h, nil, stop, log)
}

// ServeWith is Serve, answering OpWorkingSet requests with ws too (nil:
// they are refused).
func ServeWith(ln *net.UnixListener, h Handler, ws WorkingSetHandler, stop func(), log *slog.Logger) {
	ServeHandlers(ln, Handlers{Snapshot: h, WorkingSet: ws}, stop, log)
}

// ServeHandlers is Serve with every handler hs has.
func ServeHandlers(ln *net.UnixListener, hs Handlers, stop func(), log *slog.Logger) {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			log.Warn("control socket: accept", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if serveOne(c, hs, log) {
			stop()
		}
	}
}

// serveOne answers one request and reports whether it asked for the VM to
// stop after a snapshot that was written.
func serveOne(c *net.UnixConn, hs Handlers, log *slog.Logger) (stop bool) {
	defer c.Close()
	var set []snapshot.Extent
	var cp *CheckpointStats
	reply := func(err error) {
		r := Reply{OK: err == nil, WorkingSet: set, Checkpoint: cp}
		if err != nil {
			r.Code, r.Error, r.WorkingSet, r.Checkpoint = codeOf(err), err.Error(), nil, nil
		}
		b, _ := json.Marshal(r)
		c.SetWriteDeadline(time.Now().Add(requestTimeout))
		c.Write(append(b, '\n'))
	}
	req, files, err := readRequest(c)
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if err != nil {
		log.Warn("control socket: bad request", "err", err)
		reply(WithCode(CodeBadRequest, err))
		return false
	}
	start := time.Now()
	if req.Op == OpCheckpoint {
		// Never taken as a snapshot: a VMM without checkpoints refuses.
		err = WithCode(CodeBadRequest, errors.New("this VMM takes no checkpoints"))
		if hs.Checkpoint != nil {
			var st CheckpointStats
			if st, err = hs.Checkpoint(files[0], files[1], req.Full); err == nil {
				cp = &st
			}
		}
		log.Info("control socket: checkpoint", "full", req.Full, "layer", cp != nil && cp.Layer, "took_ms", time.Since(start).Milliseconds(), "error", err)
		reply(err)
		return false
	}
	if req.Op == OpWorkingSet {
		err = errors.New("this VMM records no working set")
		if hs.WorkingSet != nil {
			set, err = hs.WorkingSet()
		}
		if err == nil && len(set) > snapshot.MaxWorkingSetExtents {
			set, err = nil, fmt.Errorf("working set of %d extents, at most %d", len(set), snapshot.MaxWorkingSetExtents)
		}
		log.Info("control socket: working set", "extents", len(set), "took_ms", time.Since(start).Milliseconds(), "error", err)
		reply(err)
		return false
	}
	err = hs.Snapshot(files[0], files[1], req)
	log.Info("control socket: snapshot", "then", req.Then, "layer", req.Layer, "took_ms", time.Since(start).Milliseconds(), "error", err)
	reply(err)
	return err == nil && req.Then == ThenStop
}

// readRequest reads one request and the two descriptors sent with it.
func readRequest(c *net.UnixConn) (Request, []*os.File, error) {
	var req Request
	c.SetReadDeadline(time.Now().Add(requestTimeout))
	buf := make([]byte, maxRequest)
	oob := make([]byte, unix.CmsgSpace(4*4)) // room for more than two, to see extras
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return req, nil, fmt.Errorf("read request: %w", err)
	}
	var files []*os.File
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return req, nil, fmt.Errorf("request's control message: %w", err)
	}
	for _, msg := range msgs {
		fds, err := unix.ParseUnixRights(&msg)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), fmt.Sprintf("control-fd-%d", len(files))))
		}
	}
	if err := json.Unmarshal(trimLine(buf[:n]), &req); err != nil {
		return req, files, fmt.Errorf("request %q: %w", buf[:min(n, 80)], err)
	}
	if req.Op == OpWorkingSet {
		if len(files) != 0 {
			return req, files, fmt.Errorf("a working set request carries no files, this one %d", len(files))
		}
		return req, files, nil
	}
	if req.Op != OpSnapshot && req.Op != OpCheckpoint {
		return req, files, fmt.Errorf("unknown op %q (want %s, %s or %s)", req.Op, OpSnapshot, OpCheckpoint, OpWorkingSet)
	}
	if req.Op == OpCheckpoint && req.Then != ThenResume {
		return req, files, fmt.Errorf("a checkpoint runs on: then %q, want %q", req.Then, ThenResume)
	}
	if req.Then != ThenResume && req.Then != ThenStop {
		return req, files, fmt.Errorf("then %q: want %q or %q", req.Then, ThenResume, ThenStop)
	}
	if len(files) != 2 {
		return req, files, fmt.Errorf("a snapshot request carries 2 files (state, memory), this one %d", len(files))
	}
	return req, files, nil
}

func trimLine(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// MaxReplyBytes bounds a control reply the daemon reads.
const MaxReplyBytes = 64 << 10

// Snapshot asks the VMM listening on socket for a snapshot into state and
// memory (open for writing) and waits for it to be written. ctx bounds the
// whole exchange.
func Snapshot(ctx context.Context, socket string, state, memory *os.File, then Then) error {
	_, err := request(ctx, socket, []*os.File{state, memory}, Request{Op: OpSnapshot, Then: then})
	return err
}

// SnapshotLayer is Snapshot, but the VMM may write the memory as a layer
// over the files its machine was restored from (Request.Layer): the
// caller owns those files and keeps them, unchanged, while the snapshot
// lives. The state file says which it wrote.
func SnapshotLayer(ctx context.Context, socket string, state, memory *os.File, then Then) error {
	_, err := request(ctx, socket, []*os.File{state, memory}, Request{Op: OpSnapshot, Then: then, Layer: true})
	return err
}

// Checkpoint asks the VMM listening on socket for a checkpoint into state
// and memory (OpCheckpoint) and waits for it. full asks for a whole image.
func Checkpoint(ctx context.Context, socket string, state, memory *os.File, full bool) (CheckpointStats, error) {
	r, err := request(ctx, socket, []*os.File{state, memory}, Request{Op: OpCheckpoint, Then: ThenResume, Full: full})
	if err != nil {
		return CheckpointStats{}, err
	}
	if r.Checkpoint == nil {
		return CheckpointStats{}, fmt.Errorf("VMM control socket: a checkpoint's answer without its stats")
	}
	return *r.Checkpoint, nil
}

// WorkingSet asks the VMM listening on socket for the pages its restored
// guest touched so far (OpWorkingSet). The VMM may be compromised: the
// answer's extents are bounded here and must be validated against the
// memory file they are for (snapshot.ValidateExtents) before use.
func WorkingSet(ctx context.Context, socket string) ([]snapshot.Extent, error) {
	r, err := request(ctx, socket, nil, Request{Op: OpWorkingSet})
	if err != nil {
		return nil, err
	}
	if len(r.WorkingSet) > snapshot.MaxWorkingSetExtents {
		return nil, fmt.Errorf("VMM control socket: a working set of %d extents, at most %d", len(r.WorkingSet), snapshot.MaxWorkingSetExtents)
	}
	return r.WorkingSet, nil
}

func request(ctx context.Context, socket string, files []*os.File, req Request) (Reply, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return Reply{}, fmt.Errorf("VMM control socket: %w", err)
	}
	c := conn.(*net.UnixConn)
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	b, _ := json.Marshal(req)
	var rights []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		rights = unix.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix(append(b, '\n'), rights, nil); err != nil {
		return Reply{}, fmt.Errorf("VMM control socket: send request: %w", err)
	}
	// The VMM may be compromised: its reply is read up to a bound, so an
	// endless one costs the daemon at most that, not its memory for as
	// long as ctx allows.
	var r Reply
	lr := &io.LimitedReader{R: c, N: MaxReplyBytes + 1}
	if err := json.NewDecoder(lr).Decode(&r); err != nil {
		if ctx.Err() != nil {
			return r, fmt.Errorf("VMM control socket: %w", ctx.Err())
		}
		if lr.N <= 0 {
			return r, &Error{Code: CodeFailed, Msg: fmt.Sprintf("VMM control socket: the reply is longer than %d bytes; refused", MaxReplyBytes)}
		}
		return r, fmt.Errorf("VMM control socket: read reply: %w", err)
	}
	if !r.OK {
		if r.Code == "" {
			r.Code = CodeFailed
		}
		return r, &Error{Code: r.Code, Msg: fmt.Sprintf("VMM: %s failed: %s", req.Op, r.Error)}
	}
	return r, nil
}
