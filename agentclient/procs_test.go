package agentclient

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/guestinit/agent"
	"github.com/cellvm/cellvm/guestinit/proto"
)

// procOut collects a stream's output.
type procOut struct {
	mu     sync.Mutex
	pid    int
	out    map[string]*bytes.Buffer
	kinds  []string
	signal chan struct{}
}

func newProcOut() *procOut {
	return &procOut{out: map[string]*bytes.Buffer{}, signal: make(chan struct{}, 100)}
}

func (o *procOut) on(e proto.ProcEvent) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.kinds = append(o.kinds, e.Kind)
	if e.Kind == proto.ProcEventStart {
		o.pid = e.PID
	} else {
		if o.out[e.Kind] == nil {
			o.out[e.Kind] = &bytes.Buffer{}
		}
		o.out[e.Kind].Write(e.Data)
	}
	select {
	case o.signal <- struct{}{}:
	default:
	}
	return nil
}

func (o *procOut) text(kind string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if b := o.out[kind]; b != nil {
		return b.String()
	}
	return ""
}

// waitFor waits until the kind's output holds want.
func (o *procOut) waitFor(t *testing.T, kind, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !strings.Contains(o.text(kind), want) {
		select {
		case <-o.signal:
		case <-deadline:
			t.Fatalf("no %q in %s output %q", want, kind, o.text(kind))
		}
	}
}

func procClient(t *testing.T) *Client {
	return serve(t, agent.Config{Interp: newFake()})
}

func TestProcOutputAndExit(t *testing.T) {
	c := procClient(t)
	o := newProcOut()
	exit, err := c.StartProc(ctxT(t), proto.ProcRequest{Argv: []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, Tag: "t1"}, o.on)
	if err != nil {
		t.Fatal(err)
	}
	if exit.ExitCode != 3 || exit.Signal != "" || exit.TimedOut || exit.Error != "" {
		t.Fatalf("exit %+v", exit)
	}
	if o.pid <= 0 || o.kinds[0] != proto.ProcEventStart || o.text("stdout") != "out\n" || o.text("stderr") != "err\n" {
		t.Fatalf("pid %d kinds %v stdout %q stderr %q", o.pid, o.kinds, o.text("stdout"), o.text("stderr"))
	}
}

func TestProcCannotStart(t *testing.T) {
	c := procClient(t)
	exit, err := c.StartProc(ctxT(t), proto.ProcRequest{Argv: []string{"/no/such/program"}}, nil)
	if err != nil || exit.Error == "" || exit.ExitCode != -1 {
		t.Fatalf("exit %+v err %v", exit, err)
	}
	if l, err := c.ListProcs(ctxT(t)); err != nil || len(l) != 0 {
		t.Fatalf("list %+v err %v", l, err)
	}
}

// A process outlives the stream that started it; it is listed, attached
// to (backlog first), and killed by a signal to its group.
func TestProcOutlivesStreamAttachKill(t *testing.T) {
	c := procClient(t)
	o := newProcOut()
	ctx, cancel := context.WithCancel(ctxT(t))
	errc := make(chan error, 1)
	go func() {
		_, err := c.StartProc(ctx, proto.ProcRequest{Argv: []string{"/bin/sh", "-c", "echo early; sleep 30 & wait"}, Tag: "bg", Env: map[string]string{"FOO": "1"}}, o.on)
		errc <- err
	}()
	o.waitFor(t, "stdout", "early")
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("stream ended with %v", err)
	}
	list, err := c.ListProcs(ctxT(t))
	if err != nil || len(list) != 1 || list[0].PID != o.pid || list[0].Tag != "bg" || len(list[0].EnvNames) != 1 || list[0].EnvNames[0] != "FOO" {
		t.Fatalf("list %+v err %v", list, err)
	}
	a := newProcOut()
	exitc := make(chan proto.ProcExit, 1)
	go func() {
		exit, err := c.AttachProc(ctxT(t), o.pid, a.on)
		if err != nil {
			t.Error(err)
		}
		exitc <- exit
	}()
	a.waitFor(t, "stdout", "early") // the backlog
	if err := c.SignalProc(ctxT(t), o.pid, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	select {
	case exit := <-exitc:
		if exit.Signal != "SIGKILL" || exit.ExitCode != -1 {
			t.Fatalf("exit %+v", exit)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("attach did not end after SIGKILL")
	}
	if _, err := c.AttachProc(ctxT(t), o.pid, nil); !isCode(err, proto.CodeNotFound) {
		t.Fatalf("attach to an ended process: %v", err)
	}
	if err := c.SignalProc(ctxT(t), o.pid, "SIGTERM"); !isCode(err, proto.CodeNotFound) {
		t.Fatalf("signal to an ended process: %v", err)
	}
}

func isCode(err error, code string) bool {
	var pe *proto.Error
	return errors.As(err, &pe) && pe.Code == code
}

func TestProcStdin(t *testing.T) {
	c := procClient(t)
	o := newProcOut()
	exitc := make(chan proto.ProcExit, 1)
	go func() {
		exit, err := c.StartProc(ctxT(t), proto.ProcRequest{Argv: []string{"cat"}, Stdin: true}, o.on)
		if err != nil {
			t.Error(err)
		}
		exitc <- exit
	}()
	for o.pidNow() == 0 {
		<-o.signal
	}
	if err := c.ProcInput(ctxT(t), o.pidNow(), []byte("hello\n"), false); err != nil {
		t.Fatal(err)
	}
	o.waitFor(t, "stdout", "hello\n")
	if err := c.ProcInput(ctxT(t), o.pidNow(), []byte("bye"), true); err != nil {
		t.Fatal(err)
	}
	exit := <-exitc
	if exit.ExitCode != 0 || o.text("stdout") != "hello\nbye" {
		t.Fatalf("exit %+v out %q", exit, o.text("stdout"))
	}
}

func (o *procOut) pidNow() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pid
}

func TestProcNoStdinIsRefused(t *testing.T) {
	c := procClient(t)
	o := newProcOut()
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	go c.StartProc(ctx, proto.ProcRequest{Argv: []string{"sleep", "30"}, TimeoutMS: 20000}, o.on)
	for o.pidNow() == 0 {
		<-o.signal
	}
	pid := o.pidNow()
	if err := c.ProcInput(ctxT(t), pid, []byte("x"), false); !isCode(err, proto.CodeProcInvalid) {
		t.Fatalf("input without stdin: %v", err)
	}
	if err := c.ResizeProc(ctxT(t), pid, proto.PTYSize{Cols: 10, Rows: 10}); !isCode(err, proto.CodeProcInvalid) {
		t.Fatalf("resize without a terminal: %v", err)
	}
	if err := c.SignalProc(ctxT(t), pid, "SIGSTOP"); err == nil {
		t.Fatal("SIGSTOP was sent")
	}
	c.SignalProc(ctxT(t), pid, "SIGKILL")
}

func TestProcTimeoutKillsGroup(t *testing.T) {
	c := procClient(t)
	o := newProcOut()
	start := time.Now()
	// The shell's child holds stdout open: the group kill must reach it,
	// or the stream would wait for it.
	exit, err := c.StartProc(ctxT(t), proto.ProcRequest{Argv: []string{"/bin/sh", "-c", "sleep 30; echo never"}, TimeoutMS: 300}, o.on)
	if err != nil {
		t.Fatal(err)
	}
	if !exit.TimedOut || exit.Signal != "SIGKILL" || time.Since(start) > 5*time.Second || strings.Contains(o.text("stdout"), "never") {
		t.Fatalf("exit %+v after %v", exit, time.Since(start))
	}
}

func TestProcPTYEchoAndResize(t *testing.T) {
	c := procClient(t)
	o := newProcOut()
	exitc := make(chan proto.ProcExit, 1)
	go func() {
		exit, err := c.StartProc(ctxT(t), proto.ProcRequest{Argv: []string{"/bin/sh"}, PTY: &proto.PTYSize{Cols: 80, Rows: 24}, Env: map[string]string{"PS1": "$ "}}, o.on)
		if err != nil {
			t.Error(err)
		}
		exitc <- exit
	}()
	for o.pidNow() == 0 {
		<-o.signal
	}
	pid := o.pidNow()
	if err := c.ProcInput(ctxT(t), pid, []byte("tty; stty size; echo he''llo\n"), false); err != nil {
		t.Fatal(err)
	}
	o.waitFor(t, "pty", "hello")
	if !strings.Contains(o.text("pty"), "/dev/pts/") || !strings.Contains(o.text("pty"), "24 80") {
		t.Fatalf("pty output %q", o.text("pty"))
	}
	if err := c.ResizeProc(ctxT(t), pid, proto.PTYSize{Cols: 100, Rows: 40}); err != nil {
		t.Fatal(err)
	}
	if err := c.ProcInput(ctxT(t), pid, []byte("stty size\n"), false); err != nil {
		t.Fatal(err)
	}
	o.waitFor(t, "pty", "40 100")
	if err := c.ProcInput(ctxT(t), pid, []byte("exit 7\n"), false); err != nil {
		t.Fatal(err)
	}
	select {
	case exit := <-exitc:
		if exit.ExitCode != 7 {
			t.Fatalf("exit %+v", exit)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the shell did not exit")
	}
	if o.text("stdout") != "" || o.text("stderr") != "" {
		t.Fatal("a terminal's output came as stdout or stderr")
	}
}

func TestProcMaxProcs(t *testing.T) {
	c := procClient(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var pids []int
	for i := 0; i < proto.MaxProcs; i++ {
		o := newProcOut()
		go c.StartProc(ctx, proto.ProcRequest{Argv: []string{"sleep", "30"}, TimeoutMS: 30000}, o.on)
		for o.pidNow() == 0 {
			<-o.signal
		}
		pids = append(pids, o.pidNow())
	}
	defer func() {
		for _, pid := range pids {
			c.SignalProc(ctxT(t), pid, "SIGKILL")
		}
	}()
	_, err := c.StartProc(ctxT(t), proto.ProcRequest{Argv: []string{"true"}}, nil)
	if !isCode(err, proto.CodeFull) {
		t.Fatalf("process %d: %v", proto.MaxProcs+1, err)
	}
	if l, err := c.ListProcs(ctxT(t)); err != nil || len(l) != proto.MaxProcs {
		t.Fatalf("list of %d, %v", len(l), err)
	}
}

func TestProcRequestValidation(t *testing.T) {
	for _, r := range []proto.ProcRequest{
		{Op: proto.ProcStart},
		{Op: proto.ProcStart, Argv: []string{"x"}, PID: 3},
		{Op: proto.ProcAttach},
		{Op: proto.ProcInput, PID: 1, Data: make([]byte, proto.MaxProcInput+1)},
		{Op: proto.ProcSignal, PID: 1},
		{Op: proto.ProcResize, PID: 1, PTY: &proto.PTYSize{Cols: 0, Rows: 3}},
		{Op: proto.ProcResize, PID: 1, PTY: &proto.PTYSize{Cols: 3, Rows: proto.MaxPTYSide + 1}},
		{Op: proto.ProcList, Signal: "SIGKILL"},
		{Op: proto.ProcStart, Argv: []string{"x"}, Cwd: "rel"},
		{Op: proto.ProcStart, Argv: []string{"x"}, Tag: strings.Repeat("t", proto.MaxProcTag+1)},
		{Op: "nope"},
	} {
		if err := r.Validate(); err == nil {
			t.Errorf("%+v passed", r)
		}
	}
	if got := proto.ClipArgv([]string{strings.Repeat("a", proto.MaxProcInfoArgv+5), "b"}); len(got) != 1 || len(got[0]) != proto.MaxProcInfoArgv {
		t.Fatalf("clip: %d args", len(got))
	}
}

// A process that exits leaving a child in the background holding its
// output ends at once, and the child is killed with its group.
func TestProcLeftoversAreKilled(t *testing.T) {
	c := procClient(t)
	o := newProcOut()
	start := time.Now()
	exit, err := c.StartProc(ctxT(t), proto.ProcRequest{Argv: []string{"/bin/sh", "-c", "sleep 60 & echo $!"}}, o.on)
	if err != nil || exit.ExitCode != 0 {
		t.Fatalf("exit %+v err %v", exit, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the stream waited %v for the background child", d)
	}
	child, err := strconv.Atoi(strings.TrimSpace(o.text("stdout")))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(child) + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			break // gone, or a zombie: killed
		}
		if time.Now().After(deadline) {
			t.Fatalf("the background child %d outlived its process: %s", child, b)
		}
	}
}
