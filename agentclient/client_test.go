package agentclient

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/agent"
	"github.com/cellvm/cellvm/guestinit/proto"
)

// fakeVMM listens on a Unix socket like the VMM's vsock device: it reads
// "CONNECT <port>\n", answers "OK <n>\n" and hands the stream to srv.
func fakeVMM(t *testing.T, sock string, srv *agent.Server, port string) net.Listener {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				r := bufio.NewReader(nc)
				line, err := r.ReadString('\n')
				if err != nil || line != "CONNECT "+port+"\n" {
					nc.Close()
					return
				}
				nc.Write([]byte("OK 1073741824\n"))
				srv.ServeConn(nc) // bufio read nothing past the line: the client waits for OK
			}()
		}
	}()
	return ln
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestDialRetriesUntilAgentIsUp starts the fake VMM socket only after Dial
// began, as when the host dials right after starting the VM.
func TestDialRetriesUntilAgentIsUp(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "vsock.sock")
	srv := agent.NewServer(agent.Config{Interp: newFake(), Software: "test-agent", Logger: quiet()})
	go func() {
		time.Sleep(150 * time.Millisecond)
		ln := fakeVMM(t, sock, srv, "1024")
		t.Cleanup(func() { ln.Close(); srv.Close() })
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	if time.Since(start) < 150*time.Millisecond {
		t.Fatalf("Dial returned before the socket existed")
	}
	h, err := c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Agent != "test-agent" || h.UptimeMS <= 0 || h.MemTotalBytes == 0 || h.MemAvailableBytes == 0 || h.Procs <= 0 {
		t.Fatalf("Health = %+v", h)
	}
}

// TestDialRetriesALostConnect: the VMM accepts the first connection but the
// guest never answers it (its vsock driver was not up yet); Dial must give
// up on that attempt and retry, not wait out the whole boot deadline.
func TestDialRetriesALostConnect(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "vsock.sock")
	srv := agent.NewServer(agent.Config{Interp: newFake(), Software: "test-agent", Logger: quiet()})
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); srv.Close() })
	lost := make(chan net.Conn, 1)
	go func() {
		first := true
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			if first { // swallowed: no OK, no close
				first = false
				lost <- nc
				continue
			}
			go func() {
				r := bufio.NewReader(nc)
				if line, err := r.ReadString('\n'); err != nil || line != "CONNECT 1024\n" {
					nc.Close()
					return
				}
				nc.Write([]byte("OK 1073741824\n"))
				srv.ServeConn(nc)
			}()
		}
	}()
	t.Cleanup(func() {
		select {
		case nc := <-lost:
			nc.Close()
		default:
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	c, err := dial(ctx, sock, 300*time.Millisecond)
	if err != nil {
		t.Fatalf("dial after a lost connect: %v (after %v)", err, time.Since(start))
	}
	c.Close()
	if len(lost) != 1 {
		t.Fatalf("the first connection was not the lost one")
	}
}

func TestDialGivesUpAtDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, filepath.Join(t.TempDir(), "nobody.sock"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial = %v, want DeadlineExceeded", err)
	}
}

func TestHandshakeRefusedAndBounded(t *testing.T) {
	for name, answer := range map[string]string{
		"refused":  "NO\n",
		"too long": strings.Repeat("O", 1000),
	} {
		t.Run(name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "v.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				nc, err := ln.Accept()
				if err == nil {
					nc.Write([]byte(answer))
					time.Sleep(time.Second)
					nc.Close()
				}
			}()
			if _, err := DialVsock(context.Background(), sock, 1024); err == nil {
				t.Fatal("handshake accepted")
			}
		})
	}
}

func TestVersionMismatchRefused(t *testing.T) {
	a, b := net.Pipe()
	srv := agent.NewServer(agent.Config{Interp: newFake(), Logger: quiet()})
	go srv.ServeConn(b)
	defer a.Close()
	c := proto.NewConn(a, 0)
	if err := c.WriteJSON(proto.TypeHello, proto.Hello{Version: proto.Version + 1}); err != nil {
		t.Fatal(err)
	}
	var r proto.Response
	if err := c.ReadJSON(proto.TypeResponse, &r); err != nil {
		t.Fatal(err)
	}
	if r.Error == nil || r.Error.Code != proto.CodeUnsupported {
		t.Fatalf("response %+v, want unsupported_version", r)
	}
}

func TestRunCellStreamsEvents(t *testing.T) {
	c := serve(t, agent.Config{Interp: newFake()})
	var got []cell.Event
	res, err := c.RunCell(ctxT(t), "41+1", time.Second, func(e cell.Event) { got = append(got, e) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != cell.StatusOK || res.Stdout != "41+1\n" || res.MainResult() == nil || res.MainResult().Data[cell.MIMEText] != "41+1" {
		t.Fatalf("result %+v", res)
	}
	if len(got) != 3 || got[0].Type != cell.EventStdout || got[1].Type != cell.EventResult || got[2].Type != cell.EventEnd || got[2].End.ExecutionCount != 1 {
		t.Fatalf("events %+v", got)
	}
	// The connection is reused for the next request.
	if res, err := c.RunCell(ctxT(t), "x", 0, nil); err != nil || res.ExecutionCount != 2 {
		t.Fatalf("second cell: %+v %v", res, err)
	}
}

func TestInterruptWhileCellRunsFake(t *testing.T) {
	f := newFake()
	c := serve(t, agent.Config{Interp: f})
	done := make(chan cell.Result)
	go func() {
		res, err := c.RunCell(ctxT(t), "block", 0, nil)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-f.running
	ok, err := c.Interrupt(ctxT(t))
	if err != nil || !ok {
		t.Fatalf("Interrupt = %v, %v", ok, err)
	}
	res := <-done
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "KeyboardInterrupt" || !res.StateKept {
		t.Fatalf("result %+v", res)
	}
}

// TestCancelClosesConnectionAndStopsCell checks that cancelling RunCell's
// context reaches the agent, which cancels the cell.
func TestCancelClosesConnectionAndStopsCell(t *testing.T) {
	f := newFake()
	c := serve(t, agent.Config{Interp: f})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := c.RunCell(ctx, "block", 0, nil)
		errc <- err
	}()
	<-f.running
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("RunCell = %v, want Canceled", err)
	}
	select {
	case <-f.cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the agent did not cancel the cell")
	}
	// The client still works on a fresh connection.
	if _, err := c.Health(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func TestRestartAndShutdown(t *testing.T) {
	f := newFake()
	shut := make(chan struct{})
	c := serve(t, agent.Config{Interp: f, OnShutdown: func() { close(shut) }})
	if err := c.Restart(ctxT(t)); err != nil || f.restarts != 1 {
		t.Fatalf("Restart: %v, restarts %d", err, f.restarts)
	}
	if err := c.Shutdown(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-shut:
	case <-time.After(5 * time.Second):
		t.Fatal("OnShutdown not called")
	}
}

func TestShutdownDisabled(t *testing.T) {
	c := serve(t, agent.Config{Interp: newFake()})
	var pe *proto.Error
	if err := c.Shutdown(ctxT(t)); !errors.As(err, &pe) {
		t.Fatalf("Shutdown = %v, want an agent error", err)
	}
}

func sha(b []byte) [32]byte { return sha256.Sum256(b) }

func TestUploadDownload20MiB(t *testing.T) {
	c := serve(t, agent.Config{Interp: newFake()})
	data := make([]byte, 20<<20)
	rand.Read(data)
	dst := filepath.Join(t.TempDir(), "deep", "er", "data.bin")
	start := time.Now()
	n, err := c.Upload(ctxT(t), dst, bytes.NewReader(data), 0o640)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("Upload = %d, %v", n, err)
	}
	up := time.Since(start)
	fi, err := os.Stat(dst)
	if err != nil || fi.Mode().Perm() != 0o640 || fi.Size() != int64(len(data)) {
		t.Fatalf("uploaded file: %v %v", fi, err)
	}
	var got bytes.Buffer
	start = time.Now()
	n, err = c.Download(ctxT(t), dst, &got, 1<<40)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("Download = %d, %v", n, err)
	}
	if sha(got.Bytes()) != sha(data) {
		t.Fatal("downloaded bytes differ from uploaded ones")
	}
	t.Logf("20 MiB: upload %v, download %v", up, time.Since(start))
	// No temporary files are left beside the target.
	ents, _ := os.ReadDir(filepath.Dir(dst))
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want 1", len(ents))
	}
}

func TestUploadReplacesAtomicallyAndEmptyFile(t *testing.T) {
	c := serve(t, agent.Config{Interp: newFake()})
	dst := filepath.Join(t.TempDir(), "f.txt")
	os.WriteFile(dst, []byte("old"), 0o644)
	if _, err := c.Upload(ctxT(t), dst, strings.NewReader(""), 0); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); len(b) != 0 {
		t.Fatalf("file holds %q, want empty", b)
	}
	// A failing source leaves the old contents.
	os.WriteFile(dst, []byte("keep"), 0o644)
	_, err := c.Upload(ctxT(t), dst, io.MultiReader(strings.NewReader("partial"), errReader{}), 0)
	if err == nil {
		t.Fatal("upload with a failing source succeeded")
	}
	if b, _ := os.ReadFile(dst); string(b) != "keep" {
		t.Fatalf("file holds %q after a failed upload, want keep", b)
	}
	if _, err := c.Health(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("source broke") }

func TestUploadTooLarge(t *testing.T) {
	c := serve(t, agent.Config{Interp: newFake(), Files: agent.FilePolicy{MaxUpload: 1 << 20}})
	dst := filepath.Join(t.TempDir(), "big")
	_, err := c.Upload(ctxT(t), dst, bytes.NewReader(make([]byte, 8<<20)), 0)
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Code != proto.CodeTooLarge {
		t.Fatalf("Upload = %v, want too_large", err)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("oversized upload left a file: %v", err)
	}
	if _, err := c.Health(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func TestBadPathsRefused(t *testing.T) {
	c := serve(t, agent.Config{Interp: newFake()})
	dir := t.TempDir()
	os.Symlink("/proc/self", filepath.Join(dir, "link"))
	os.Symlink("/proc/self/status", filepath.Join(dir, "statuslink"))
	os.Mkdir(filepath.Join(dir, "adir"), 0o755)
	for _, p := range []string{
		"relative/path", "/tmp/../proc/x", "/proc/sys/kernel/hostname", "/sys/kernel/x", "/dev/null", "/dev/sda", "/",
		filepath.Join(dir, "link", "environ"), filepath.Join(dir, "adir"),
	} {
		_, err := c.Upload(ctxT(t), p, strings.NewReader("evil"), 0)
		var pe *proto.Error
		if !errors.As(err, &pe) || (pe.Code != proto.CodeBadPath && pe.Code != proto.CodeBadRequest) {
			t.Errorf("Upload(%q) = %v, want bad_path or bad_request", p, err)
		}
	}
	for _, p := range []string{"/proc/self/status", "/dev/zero", filepath.Join(dir, "statuslink"), filepath.Join(dir, "adir"), "/etc/../proc/self/environ"} {
		_, err := c.Download(ctxT(t), p, io.Discard, 1<<40)
		var pe *proto.Error
		if !errors.As(err, &pe) || (pe.Code != proto.CodeBadPath && pe.Code != proto.CodeBadRequest) {
			t.Errorf("Download(%q) = %v, want bad_path or bad_request", p, err)
		}
	}
	_, err := c.Download(ctxT(t), filepath.Join(dir, "missing"), io.Discard, 1<<40)
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Code != proto.CodeNotFound {
		t.Errorf("Download(missing) = %v, want not_found", err)
	}
	if _, err := os.Stat("/dev/null"); err != nil {
		t.Fatal(err)
	}
}

func TestExecReal(t *testing.T) {
	in := realInterpOrExecOnly(t)
	c := serve(t, agent.Config{Interp: in})
	stdin := []byte("binary\x00data\xff\n")
	res, err := c.Exec(ctxT(t), []string{"/bin/sh", "-c", "cat; echo oops >&2; exit 3"}, stdin, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || res.Stderr != "oops\n" || res.TimedOut {
		t.Fatalf("exec result %+v", res)
	}
	// Clipped output is text; the NUL passes, the invalid byte becomes U+FFFD.
	if !strings.HasPrefix(res.Stdout, "binary\x00data") {
		t.Fatalf("stdout %q", res.Stdout)
	}
	res, err = c.Exec(ctxT(t), []string{"/bin/sleep", "10"}, nil, 200*time.Millisecond)
	if err != nil || !res.TimedOut {
		t.Fatalf("timeout exec: %+v %v", res, err)
	}
	res, err = c.Exec(ctxT(t), []string{"/no/such/binary"}, nil, 0)
	if err != nil || res.ExitCode != 127 {
		t.Fatalf("missing binary: %+v %v", res, err)
	}
}
