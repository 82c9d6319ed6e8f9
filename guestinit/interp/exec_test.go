package interp

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestExecExitCodeAndOutput(t *testing.T) {
	in := newTestInterp(t, nil)
	res, err := in.Exec(context.Background(), []string{"sh", "-c", "echo out; echo err >&2; pwd; exit 3"}, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || res.Stdout != "out\n"+in.cfg.Dir+"\n" || res.Stderr != "err\n" || res.TimedOut {
		t.Errorf("got %+v", res)
	}
}

func TestExecStdin(t *testing.T) {
	in := newTestInterp(t, nil)
	res, err := in.Exec(context.Background(), []string{"tr", "a-z", "A-Z"}, strings.NewReader("hello"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || res.Stdout != "HELLO" {
		t.Errorf("got %+v", res)
	}
	// No stdin: the command reads EOF at once.
	res, _ = in.Exec(context.Background(), []string{"cat"}, nil, 10*time.Second)
	if res.ExitCode != 0 || res.Stdout != "" || res.TimedOut {
		t.Errorf("cat with no stdin: %+v", res)
	}
}

func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	in := newTestInterp(t, nil)
	start := time.Now()
	res, err := in.Exec(context.Background(), []string{"sh", "-c", "sleep 1000 & echo $!; wait"}, nil, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	if !res.TimedOut || res.ExitCode != 128+9 {
		t.Errorf("got %+v", res)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil {
		t.Fatalf("stdout %q", res.Stdout)
	}
	waitGone(t, pid, 3*time.Second)
}

func TestExecNotFoundAndClipped(t *testing.T) {
	in := newTestInterp(t, func(c *Config) { c.HeadBytes, c.TailBytes = 100, 50 })
	res, err := in.Exec(context.Background(), []string{"/nonexistent/tool"}, nil, time.Second)
	if err != nil || res.ExitCode != 127 || !strings.Contains(res.Stderr, "/nonexistent/tool") {
		t.Errorf("missing command: %+v, %v", res, err)
	}
	res, err = in.Exec(context.Background(), []string{"sh", "-c", "yes | head -c 100000"}, nil, 10*time.Second)
	if err != nil || res.ExitCode != 0 || res.Truncated.StdoutBytes != 100000-150 {
		t.Errorf("clipping: exit %d cut %d err %v", res.ExitCode, res.Truncated.StdoutBytes, err)
	}
	if _, err := in.Exec(context.Background(), nil, nil, time.Second); err == nil {
		t.Error("empty argv accepted")
	}
}
