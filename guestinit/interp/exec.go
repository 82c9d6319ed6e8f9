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
// With cgroups the command runs in a cgroup of its own inside the user
// code's, from its first instruction, and nothing it started outlives it.
func (in *Interp) Exec(ctx context.Context, argv []string, stdin io.Reader, timeout time.Duration) (cell.ExecResult, error) {
	if in.closed.Load() {
		return cell.ExecResult{}, ErrClosed
	}
	cfg := in.cfg
	cfg.Env = in.baseEnv()
	return runCommand(ctx, cfg, in.cells, argv, stdin, timeout)
}

// runCommand runs argv; cells, when not nil, is the user code's cgroup, in
// which the command gets its own.
func runCommand(ctx context.Context, cfg Config, cells *cgroup, argv []string, stdin io.Reader, timeout time.Duration) (cell.ExecResult, error) {
	if len(argv) == 0 || argv[0] == "" {
		return cell.ExecResult{}, errors.New("exec: empty argv")
	}
	var cg *cgroup
	if cells != nil {
		var err error
		if cg, err = newCgroup(cells.dir, "exec-", 0, 0); err != nil {
			return cell.ExecResult{}, err
		}
		defer cg.remove() // kills whatever the command left behind
	}
	start := time.Now()
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		runCtx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()

	stdout := cell.NewClipper(cfg.HeadBytes, cfg.TailBytes)
	stderr := cell.NewClipper(cfg.HeadBytes, cfg.TailBytes)
	line := append(cfg.Launcher[:len(cfg.Launcher):len(cfg.Launcher)], argv...)
	cmd := exec.CommandContext(runCtx, line[0], line[1:]...)
	cmd.Dir = cfg.Dir
	cmd.Env = cfg.Env
	cmd.Stdin = stdin
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cg != nil {
		fd, err := cg.openFD()
		if err != nil {
			return cell.ExecResult{}, err
		}
		defer unix.Close(fd)
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = fd
	}
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
	if cg != nil && cg.oomKills() > 0 {
		res.Stderr += "cellvm: the command was killed by the out-of-memory killer: it used more memory than the sandbox allows\n"
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
