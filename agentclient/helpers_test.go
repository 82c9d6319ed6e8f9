package agentclient

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/agent"
	"github.com/cellvm/cellvm/guestinit/interp"
)

// fakeInterp stands in for the interpreter: code "block" runs until
// interrupted or cancelled; anything else prints the code and returns it
// as the main result.
type fakeInterp struct {
	mu          sync.Mutex
	count       int
	running     chan struct{} // closed when a blocking cell starts
	interrupt   chan struct{}
	cancelled   chan struct{}
	restarts    int
	interrupted bool
}

func newFake() *fakeInterp {
	return &fakeInterp{running: make(chan struct{}), interrupt: make(chan struct{}, 1), cancelled: make(chan struct{})}
}

func (f *fakeInterp) Run(ctx context.Context, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error) {
	f.mu.Lock()
	f.count++
	n := f.count
	f.mu.Unlock()
	if code == "block" {
		close(f.running)
		select {
		case <-f.interrupt:
			r := cell.Result{Status: cell.StatusError, ExecutionCount: n, StateKept: true,
				Error: &cell.Error{Name: "KeyboardInterrupt", Value: "", Traceback: []string{"KeyboardInterrupt"}}}
			onEvent(cell.Event{Type: cell.EventError, Error: r.Error})
			onEvent(cell.Event{Type: cell.EventEnd, End: &r})
			return r, nil
		case <-ctx.Done():
			close(f.cancelled)
			return cell.Result{Status: cell.StatusError, ExecutionCount: n}, ctx.Err()
		}
	}
	d := cell.Display{Main: true, Data: map[string]string{cell.MIMEText: code}}
	r := cell.Result{Status: cell.StatusOK, ExecutionCount: n, Stdout: code + "\n", Results: []cell.Display{d}, StateKept: true}
	onEvent(cell.Event{Type: cell.EventStdout, Text: code + "\n"})
	onEvent(cell.Event{Type: cell.EventResult, Result: &d})
	onEvent(cell.Event{Type: cell.EventEnd, End: &r})
	return r, nil
}

func (f *fakeInterp) Interrupt() bool {
	select {
	case <-f.running:
	default:
		return false
	}
	select {
	case f.interrupt <- struct{}{}:
	default:
	}
	return true
}

func (f *fakeInterp) Restart() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restarts++
	f.count = 0
	return nil
}

func (f *fakeInterp) Exec(ctx context.Context, argv []string, stdin io.Reader, timeout time.Duration) (cell.ExecResult, error) {
	b, _ := io.ReadAll(stdin)
	return cell.ExecResult{ExitCode: len(argv), Stdout: string(b)}, nil
}

// realInterp returns the real supervisor when Debian's python3 with numpy
// is there, or skips.
func realInterp(t *testing.T) *interp.Interp {
	t.Helper()
	py := os.Getenv("CELLVM_TEST_PYTHON")
	if py == "" {
		py = interp.DefaultPython
	}
	if _, err := os.Stat(py); err != nil {
		t.Skipf("no python at %s: %v", py, err)
	}
	if err := exec.Command(py, "-c", "import numpy").Run(); err != nil {
		t.Skipf("%s has no numpy: %v", py, err)
	}
	in, err := interp.New(interp.Config{Python: py, Dir: t.TempDir(), Grace: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in
}

// serve starts an agent with cfg on a Unix socket and returns a Client
// dialing it directly (no vsock handshake).
func serve(t *testing.T, cfg agent.Config) *Client {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := agent.NewServer(cfg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	c := New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	t.Cleanup(func() {
		c.Close()
		ln.Close()
		srv.Close()
		<-done
	})
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
