package interp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/cell"
)

// Exec runs argv (no shell) in the interpreter's working directory and
// environment, with stdin (nil: empty), and returns its exit code and
// clipped output. timeout <= 0 means no limit; on timeout the command's
// whole process group is killed and TimedOut is set. A command that cannot
// be started is a result with exit code 127, not an error; Exec returns an
// error only for an empty argv, and ctx's error when ctx ends the command.
func (in *Interp) Exec(ctx context.Context, argv []string, stdin io.Reader, timeout time.Duration) (cell.ExecResult, error) {
	if in.closed.Load() {
		return cell.ExecResult{}, ErrClosed
	}
	cfg := in.cfg
	cfg.Env = in.baseEnv()
	return runCommand(ctx, cfg, argv, stdin, timeout)
}

func runCommand(ctx context.Context, cfg Config, argv []string, stdin io.Reader, timeout time.Duration) (cell.ExecResult, error) {
	if len(argv) == 0 || argv[0] == "" {
		return cell.ExecResult{}, errors.New("exec: empty argv")
	}
	start := time.Now()
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		runCtx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()

	stdout := cell.NewClipper(cfg.HeadBytes, cfg.TailBytes)
	stderr := cell.NewClipper(cfg.HeadBytes, cfg.TailBytes)
	cmd := exec.CommandContext(runCtx, argv[0], argv[1:]...)
	cmd.Dir = cfg.Dir
	cmd.Env = cfg.Env
	cmd.Stdin = stdin
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var mu sync.Mutex
	var killed []int
	cmd.Cancel = func() error {
		// The whole group and every descendant: a shell's children must
		// not outlive it.
		strays := strayProcs(cmd.Process.Pid, nil)
		err := unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
		for _, pid := range strays {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		mu.Lock()
		killed = append(killed, strays...)
		mu.Unlock()
		return err
	}
	// Background processes may hold the output pipes open after the
	// command itself exits; stop waiting for them after this long.
	cmd.WaitDelay = time.Second

	res := cell.ExecResult{}
	if err := cmd.Start(); err != nil {
		res.ExitCode = 127
		res.Stderr = fmt.Sprintf("exec %s: %v\n", argv[0], err)
		res.DurationMS = time.Since(start).Milliseconds()
		return res, nil
	}
	waitErr := cmd.Wait()
	res.DurationMS = time.Since(start).Milliseconds()
	res.TimedOut = errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	if res.TimedOut || ctx.Err() != nil {
		// The leader is reaped; members left in its group still carry its
		// id, so the group kill reaches them. Those re-parented to us (we
		// are PID 1 or a subreaper) are ours to reap.
		_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
		mu.Lock()
		reapOrphans(killed, time.Second)
		mu.Unlock()
	}
	res.ExitCode = exitCode(cmd.ProcessState)
	res.Stdout, res.Truncated.StdoutBytes = stdout.Text()
	res.Stderr, res.Truncated.StderrBytes = stderr.Text()
	if waitErr != nil && cmd.ProcessState == nil {
		res.Stderr += fmt.Sprintf("exec %s: %v\n", argv[0], waitErr)
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, nil
}

// exitCode follows the shell: 128+n for a command killed by signal n.
func exitCode(st *os.ProcessState) int {
	if st == nil {
		return -1
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok {
		return -1
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
