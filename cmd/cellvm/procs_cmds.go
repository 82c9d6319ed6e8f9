package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
)

// Processes from the command line: `cellvm exec -it` (a terminal, raw,
// resized on SIGWINCH), `exec -i` (stdin passed on), `exec -d` (started
// in the background, its pid printed), `cellvm shell`, `cellvm ps` and
// `cellvm kill`. They use the daemon's process routes (api/processes.go);
// a process started with -d outlives the command.

// procFlags are exec's flags that turn it into a process.
type procFlags struct {
	interactive, tty, detach bool
}

func (p procFlags) any() bool { return p.interactive || p.tty || p.detach }

func addProcFlags(cmd *cobra.Command) *procFlags {
	var p procFlags
	cmd.Flags().BoolVarP(&p.interactive, "interactive", "i", false, "pass stdin to the command (it runs as a process: no timeout unless --timeout is given)")
	cmd.Flags().BoolVarP(&p.tty, "tty", "t", false, "run the command on a terminal (raw mode here; resized with this one)")
	cmd.Flags().BoolVarP(&p.detach, "detach", "d", false, "start the command in the background and print its pid")
	return &p
}

// errHungUp ends a stream on purpose: the process goes on.
var errHungUp = errors.New("hung up")

// runProcess runs argv as a process of sandbox id as the flags say and
// returns the exit status to end with. timeout 0 is none.
func (a *app) runProcess(ctx context.Context, c *api.Client, id string, argv []string, pf procFlags, timeout time.Duration) error {
	req := sandbox.ProcessRequest{Argv: argv, Stdin: pf.interactive && !pf.tty, Timeout: timeout}
	if pf.detach {
		if pf.interactive || pf.tty {
			return usagef("-d runs the command in the background: it takes no -i or -t")
		}
		pid := 0
		exit, err := c.StartProcess(ctx, id, req, func(e sandbox.ProcessEvent) error {
			if e.Kind == sandbox.ProcessStart {
				pid = e.PID
				return errHungUp
			}
			return nil
		})
		if pid > 0 {
			if a.jsonOut {
				return printJSON(a.stdout, api.ProcessStarted{PID: pid})
			}
			fmt.Fprintln(a.stdout, pid)
			return nil
		}
		if err != nil {
			return err
		}
		return a.processExit(exit)
	}
	var term *localTerminal
	if pf.tty {
		term = openLocalTerminal(a.stdin, a.stdout)
		req.PTY = &sandbox.PTYSize{Cols: 80, Rows: 24}
		if size, ok := term.size(); ok {
			req.PTY = &size
		}
	}
	// A hang-up or SIGTERM ends the stream (the process goes on) and
	// gives the terminal back, rather than leaving it raw.
	ctx, cancel := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGHUP)
	defer cancel()
	var once sync.Once
	started := func(pid int) {
		if term != nil {
			if err := term.makeRaw(); err != nil {
				fmt.Fprintf(a.stderr, "cellvm: %v; the terminal stays as it is\n", err)
			}
			go term.forwardResizes(ctx, func(s sandbox.PTYSize) { c.ResizePTY(ctx, id, pid, s) })
		}
		if pf.interactive {
			go a.forwardInput(ctx, c, id, pid, pf.tty)
		}
	}
	exit, err := c.StartProcess(ctx, id, req, func(e sandbox.ProcessEvent) error {
		switch e.Kind {
		case sandbox.ProcessStart:
			once.Do(func() { started(e.PID) })
		case sandbox.ProcessStdout, sandbox.ProcessPTY:
			a.stdout.Write(e.Data)
		case sandbox.ProcessStderr:
			a.stderr.Write(e.Data)
		}
		return nil
	})
	if term != nil {
		term.restore()
	}
	if err != nil {
		return err
	}
	return a.processExit(exit)
}

// processExit is the exit status of a process, as a shell gives it.
func (a *app) processExit(exit sandbox.ProcessExit) error {
	switch {
	case exit.Error != "":
		fmt.Fprintf(a.stderr, "cellvm: %s\n", exit.Error)
		return exitStatus(127)
	case exit.TimedOut:
		fmt.Fprintln(a.stderr, "cellvm: the command timed out and was killed")
		return exitStatus(exitTimeout)
	case exit.Signal != "":
		if n := unix.SignalNum(exit.Signal); n != 0 {
			return exitStatus(128 + int(n))
		}
		return exitStatus(exitError)
	}
	return exitStatus(exit.ExitCode)
}

// forwardInput sends what stdin gives to the process until stdin ends
// (then the process's stdin is closed; a terminal gets ^D) or ctx does.
func (a *app) forwardInput(ctx context.Context, c *api.Client, id string, pid int, tty bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := a.stdin.Read(buf)
		if ctx.Err() != nil {
			return
		}
		if n > 0 {
			if c.SendInput(ctx, id, pid, append([]byte(nil), buf[:n]...), false) != nil {
				return
			}
		}
		if err != nil {
			if !tty || errors.Is(err, io.EOF) {
				c.SendInput(ctx, id, pid, nil, true)
			}
			return
		}
	}
}

// localTerminal is this side's terminal for exec -t: raw while the
// process runs, its size passed on.
type localTerminal struct {
	in, out *os.File // nil when not a terminal
	saved   *unix.Termios
}

func openLocalTerminal(stdin io.Reader, stdout io.Writer) *localTerminal {
	t := &localTerminal{}
	if f, ok := stdin.(*os.File); ok && isTerminal(f) {
		t.in = f
	}
	if f, ok := stdout.(*os.File); ok && isTerminal(f) {
		t.out = f
	}
	return t
}

func (t *localTerminal) size() (sandbox.PTYSize, bool) {
	for _, f := range []*os.File{t.out, t.in} {
		if f == nil {
			continue
		}
		ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
		if err == nil && ws.Col > 0 && ws.Row > 0 {
			return sandbox.PTYSize{Cols: min(int(ws.Col), sandbox.MaxPTYSide), Rows: min(int(ws.Row), sandbox.MaxPTYSide)}, true
		}
	}
	return sandbox.PTYSize{}, false
}

// makeRaw puts the input terminal in raw mode (as cfmakeraw does): keys
// go to the process as typed, ^C included.
func (t *localTerminal) makeRaw() error {
	if t.in == nil {
		return nil
	}
	fd := int(t.in.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return fmt.Errorf("read the terminal's mode: %w", err)
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return fmt.Errorf("set the terminal raw: %w", err)
	}
	t.saved = old
	return nil
}

func (t *localTerminal) restore() {
	if t.in != nil && t.saved != nil {
		unix.IoctlSetTermios(int(t.in.Fd()), unix.TCSETS, t.saved)
		t.saved = nil
	}
}

// forwardResizes calls resize with the terminal's size on each SIGWINCH
// until ctx ends.
func (t *localTerminal) forwardResizes(ctx context.Context, resize func(sandbox.PTYSize)) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	defer signal.Stop(ch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			if s, ok := t.size(); ok {
				resize(s)
			}
		}
	}
}

// shellCommand is `cellvm shell SANDBOX`: exec -it of the sandbox's bash
// (sh where there is none).
func (a *app) shellCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shell SANDBOX",
		Short: "open a shell on a terminal in a daemon's sandbox (exec -it SANDBOX -- bash)",
		Args:  exactArgs(1, "SANDBOX"),
	}
	return a.daemonCommand(cmd, func(ctx context.Context, c *api.Client, args []string) error {
		argv := []string{"/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi"}
		return a.runProcess(ctx, c, args[0], argv, procFlags{interactive: true, tty: true}, 0)
	})
}

// psCommand is `cellvm ps SANDBOX`.
func (a *app) psCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ps SANDBOX",
		Short: "list the processes started in a daemon's sandbox (exec -d, -i, -t, shells)",
		Args:  exactArgs(1, "SANDBOX"),
	}
	return a.daemonCommand(cmd, func(ctx context.Context, c *api.Client, args []string) error {
		list, err := c.ListProcesses(ctx, args[0])
		if err != nil {
			return err
		}
		if a.jsonOut {
			return printJSON(a.stdout, list)
		}
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PID\tUSER\tTTY\tSTARTED\tTAG\tCOMMAND")
		for _, p := range list {
			tty := "-"
			if p.PTY {
				tty = "pty"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", p.PID, p.User, tty, p.StartedAt.Local().Format("15:04:05"),
				orDash(p.Tag), clipCommand(strings.Join(p.Argv, " "), 80))
		}
		return tw.Flush()
	})
}

func clipCommand(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// killCommand is `cellvm kill SANDBOX PID`.
func (a *app) killCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kill SANDBOX PID",
		Short: "send a signal (SIGTERM unless -s says) to a process of a daemon's sandbox and its group",
		Args:  exactArgs(2, "SANDBOX and PID"),
	}
	var sig string
	cmd.Flags().StringVarP(&sig, "signal", "s", "SIGTERM", "TERM, KILL, INT or HUP (with or without SIG, or 15, 9, 2, 1)")
	var pid int
	var name string
	return a.daemonCommandChecked(cmd, func(args []string) error {
		var err error
		if pid, err = strconv.Atoi(args[1]); err != nil || pid < 1 {
			return usagef("PID %q is not a process id", args[1])
		}
		if name = signalName(sig); name == "" {
			return usagef("signal %q: use TERM, KILL, INT or HUP", sig)
		}
		return nil
	}, func(ctx context.Context, c *api.Client, args []string) error {
		return c.SignalProcess(ctx, args[0], pid, name)
	})
}

// signalName turns what kill's -s takes into the API's name ("" if none).
func signalName(s string) string {
	switch strings.TrimPrefix(strings.ToUpper(s), "SIG") {
	case "TERM", "15":
		return sandbox.SignalTerm
	case "KILL", "9":
		return sandbox.SignalKill
	case "INT", "2":
		return sandbox.SignalInt
	case "HUP", "1":
		return sandbox.SignalHup
	}
	return ""
}
