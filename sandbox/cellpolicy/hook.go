package cellpolicy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"
)

// Bounds on a hook.
const (
	// DefaultTimeout is a hook's deadline when Options.Timeout is zero.
	DefaultTimeout = 5 * time.Second
	// MaxConcurrent bounds the hooks running at once: a client that
	// sends cells as fast as it can gets refusals, not a fork bomb.
	MaxConcurrent = 16
	// MaxOutput bounds what is kept of a hook's stdout and of its stderr.
	MaxOutput = 4 << 10
	// MaxReason bounds the reason taken from the hook's stderr.
	MaxReason = 200
	// waitDelay bounds the wait for a hook's output pipes after it exited
	// or was killed (a stray grandchild may hold them open).
	waitDelay = time.Second
)

// verdict is what one run of the hook decided.
type verdict struct {
	allow bool
	// reason says why not, for the caller.
	reason string
	// failed: the hook did not decide (timed out, crashed, could not
	// start, no slot); the refusal is the fail-closed default.
	failed bool
}

// hook runs the operator's program.
type hook struct {
	path    string
	timeout time.Duration
	slots   chan struct{}
}

// CheckHook reports whether path can be a hook: an existing regular file
// that someone may execute. It is checked at start so that a typo fails
// the daemon's start, not every cell.
func CheckHook(path string) error {
	if path == "" {
		return errors.New("cell policy hook: no path given")
	}
	if !strings.HasPrefix(path, "/") {
		return fmt.Errorf("cell policy hook %q: give an absolute path (it runs in /, with no shell)", clipText(path, 128))
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("cell policy hook: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("cell policy hook %s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("cell policy hook %s is not executable (chmod +x it)", path)
	}
	return nil
}

// decide runs the hook on input. The error is the caller's context's
// when it ended first (the request went away: nothing to answer);
// every other outcome is a verdict.
func (h *hook) decide(ctx context.Context, input []byte) (verdict, error) {
	dctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	case <-dctx.Done():
		if err := ctx.Err(); err != nil {
			return verdict{}, err
		}
		return verdict{failed: true, reason: fmt.Sprintf("cell policy: %d hooks were already running and none finished within %v; try again", cap(h.slots), h.timeout)}, nil
	}

	cmd := exec.CommandContext(dctx, h.path)
	cmd.Dir = "/"
	cmd.Stdin = bytes.NewReader(input)
	stdout, stderr := &capped{max: MaxOutput}, &capped{max: MaxOutput}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Its own process group, so that the deadline kills everything the
	// hook started, not only the hook.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	err := cmd.Run()
	if cmd.Process != nil {
		// Whatever the hook left behind in its group goes with it.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if cerr := ctx.Err(); cerr != nil {
		return verdict{}, cerr
	}
	if errors.Is(dctx.Err(), context.DeadlineExceeded) {
		return verdict{failed: true, reason: fmt.Sprintf("cell policy hook timed out after %v; refused (fail closed)", h.timeout)}, nil
	}
	ps := cmd.ProcessState
	switch {
	case ps == nil:
		return verdict{failed: true, reason: fmt.Sprintf("cell policy hook could not start: %s; refused (fail closed)", clipText(err.Error(), MaxReason))}, nil
	case ps.Success():
		// An exit of 0 allows, even if a stray child kept its output open
		// past waitDelay (exec.ErrWaitDelay): the hook had decided.
		return verdict{allow: true}, nil
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		why := fmt.Sprintf("cell policy hook crashed (killed by %v); refused (fail closed)", ws.Signal())
		if line := firstLine(stderr.buf.Bytes()); line != "" {
			why += ": " + line
		}
		return verdict{failed: true, reason: why}, nil
	}
	if line := firstLine(stderr.buf.Bytes()); line != "" {
		return verdict{reason: line}, nil
	}
	return verdict{reason: fmt.Sprintf("refused by the cell policy hook (exit status %d, no reason on its stderr)", ps.ExitCode())}, nil
}

// firstLine is the first non-empty line of b, made safe to show and log:
// invalid UTF-8 replaced, control and format characters (terminal escapes,
// bidirectional overrides) dropped, clipped to MaxReason bytes.
func firstLine(b []byte) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	for _, line := range strings.Split(s, "\n") {
		clean := strings.Map(func(r rune) rune {
			if r == '\t' {
				return ' '
			}
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
				return -1
			}
			return r
		}, line)
		if clean = strings.TrimSpace(clean); clean != "" {
			return clipText(clean, MaxReason)
		}
	}
	return ""
}

// clipText cuts s to at most n bytes on a rune boundary, marking the cut.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// capped keeps the first max bytes written to it and accepts the rest
// unseen, so a hook that floods its output neither fills the daemon's
// memory nor blocks on a full pipe.
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
