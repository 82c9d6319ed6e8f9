package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/sandbox"
)

// These tests run the cellvm command line as a user would: the test binary
// stands in for cellvm (TestMain), each command is a process of its own,
// and the daemon is `cellvm serve` serving a fake manager (fakeDaemon).

// lockedBuffer is a bytes.Buffer safe for a process's writes and the
// test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type fakeDaemon struct {
	cmd     *exec.Cmd
	socket  string
	dir     string
	release string // the file that lets a "stream" cell finish
	log     *lockedBuffer
}

// startFakeDaemon runs `cellvm serve` over the fake manager with extra
// flags and waits for its socket (and, when wait is given, for a log line
// matching it).
func startFakeDaemon(t *testing.T, extra ...string) *fakeDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "cvcli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &fakeDaemon{socket: filepath.Join(dir, "cellvm.sock"), dir: dir, release: filepath.Join(dir, "release"), log: &lockedBuffer{}}
	args := append([]string{"serve", "--socket", d.socket, "--state-dir", filepath.Join(dir, "state"), "--network=false", "--jail=false"}, extra...)
	d.cmd = exec.Command(os.Args[0], args...)
	d.cmd.Env = append(os.Environ(), "CELLVM_TEST_MAIN=1", "CELLVM_TEST_FAKE_MANAGER=1", "CELLVM_TEST_RELEASE="+d.release)
	d.cmd.Stderr = d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { d.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		d.cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		if t.Failed() {
			t.Logf("daemon log:\n%s", d.log.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(d.log.String(), "cellvm daemon listening\"") && !strings.Contains(d.log.String(), "msg=\"cellvm daemon listening\" socket") {
		select {
		case <-exited:
			t.Fatalf("daemon exited: %s", d.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not listen:\n%s", d.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return d
}

// requests counts the API requests the daemon has answered.
func (d *fakeDaemon) requests() int { return strings.Count(d.log.String(), `msg="api request"`) }

type result struct {
	stdout, stderr string
	code           int
}

// cellvm runs the command line with the daemon's socket in the environment.
func (d *fakeDaemon) cellvm(t *testing.T, args ...string) result {
	t.Helper()
	env := []string{}
	if d != nil {
		env = append(env, "CELLVM_SOCKET="+d.socket)
	}
	return cellvmEnv(t, env, "", args...)
}

func cellvmEnv(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "CELLVM_TEST_MAIN=1", "CELLVM_SOCKET=", "CELLVM_URL="), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("cellvm %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}
}

// commandPaths lists every command of the CLI ("sandbox create", ...).
func commandPaths() [][]string {
	var out [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			p := append(append([]string{}, path...), sub.Name())
			out = append(out, p)
			walk(sub, p)
		}
	}
	walk((&app{stdout: io.Discard, stderr: io.Discard, deps: productionDeps()}).rootCommand(), nil)
	return out
}

// TestHelpEveryCommand: `-h` on every command exits 0 and lists every one
// of its flags.
func TestHelpEveryCommand(t *testing.T) {
	root := (&app{stdout: io.Discard, stderr: io.Discard, deps: productionDeps()}).rootCommand()
	paths := commandPaths()
	if len(paths) < 25 {
		t.Fatalf("only %d commands found", len(paths))
	}
	for _, p := range append(paths, []string{}) {
		r := cellvmEnv(t, nil, "", append(p, "-h")...)
		if r.code != 0 || r.stdout == "" {
			t.Errorf("cellvm %s -h: exit %d, stdout %q, stderr %q", strings.Join(p, " "), r.code, r.stdout, r.stderr)
			continue
		}
		cmd, _, err := root.Find(p)
		if err != nil {
			t.Fatal(err)
		}
		cmd.InitDefaultHelpFlag()
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && !strings.Contains(r.stdout, "--"+f.Name) {
				t.Errorf("cellvm %s -h does not list --%s", strings.Join(p, " "), f.Name)
			}
		})
		if cmd.Runnable() && !strings.Contains(r.stdout, "Usage:") {
			t.Errorf("cellvm %s -h has no usage line", strings.Join(p, " "))
		}
	}
	// The daemon's help tells its own default log level.
	if r := cellvmEnv(t, nil, "", "serve", "-h"); !strings.Contains(r.stdout, `--log-level string`) || !regexp.MustCompile(`log-level[^\n]*\(default "info"\)`).MatchString(r.stdout) {
		t.Errorf("serve -h does not say the log level defaults to info:\n%s", r.stdout)
	}
	if r := cellvmEnv(t, nil, "", "doctor", "-h"); strings.Contains(r.stdout, "[ok") || strings.Contains(r.stdout, "[FAIL]") {
		t.Errorf("doctor -h ran doctor:\n%s", r.stdout)
	}
}

// TestBadArgumentsExitTwoWithoutTheDaemon: bad command lines exit 2 and
// never reach the daemon; with --json the error is JSON on stdout.
func TestBadArgumentsExitTwoWithoutTheDaemon(t *testing.T) {
	d := startFakeDaemon(t)
	bad := [][]string{
		{"frob"},
		{"sandbox"},
		{"sandbox", "frob"},
		{"sandbox", "inspect"},
		{"sandbox", "inspect", "a", "b"},
		{"sandbox", "rm"},
		{"sandbox", "pause"},
		{"sandbox", "resume"},
		{"sandbox", "restart"},
		{"sandbox", "interrupt"},
		{"sandbox", "pause", "a", "b"},
		{"sandbox", "snapshot"},
		{"sandbox", "snapshot", "a", "b"},
		{"sandbox", "fork"},
		{"sandbox", "fork", "snap-1"},
		{"sandbox", "fork", "../../etc"},
		{"sandbox", "fork", "snap-000000000001", "extra"},
		{"sandbox", "fork", "snap-000000000001", "--memory", "10"},
		{"sandbox", "fork", "snap-000000000001", "--vcpus", "-1"},
		{"sandbox", "fork", "snap-000000000001", "--env", "NOVALUE"},
		{"sandbox", "fork", "snap-000000000001", "--ttl", "1.5s"},
		{"sandbox", "fork", "snap-000000000001", "--idle-pause", "-1s"},
		{"sandbox", "fork", "snap-000000000001", "--allow", "not a host!"},
		{"sandbox", "create", "--idle-pause", "10ms"},
		{"sandbox", "create", "--idle-pause", "999999h"},
		{"sandbox", "create", "--checkpoints=sometimes"},
		{"sandbox", "create", "--keep", "3"},
		{"sandbox", "create", "--checkpoints", "--keep", "33"},
		{"sandbox", "create", "--checkpoints", "--keep", "0"},
		{"sandbox", "create", "--checkpoints", "--workspace", "w"},
		{"checkpoint"},
		{"checkpoint", "frob"},
		{"checkpoint", "ls"},
		{"checkpoint", "undo", "a", "b"},
		{"checkpoint", "restore", "sb-1"},
		{"checkpoint", "restore", "sb-1", "0"},
		{"checkpoint", "restore", "sb-1", "two"},
		{"checkpoint", "branch", "sb-1", "-1"},
		{"checkpoint", "branch", "sb-1", "1", "--keep", "2"},
		{"snapshot"},
		{"snapshot", "frob"},
		{"snapshot", "ls", "extra"},
		{"snapshot", "inspect"},
		{"snapshot", "inspect", "sb-1"},
		{"snapshot", "rm"},
		{"snapshot", "rm", "snap-000000000001", "nope"},
		{"sandbox", "create", "extra"},
		{"sandbox", "create", "--ttl", "10ms"},
		{"sandbox", "create", "--ttl", "1.5s"},
		{"sandbox", "create", "--idle-timeout", "-1s"},
		{"sandbox", "create", "--memory", "10"},
		{"sandbox", "create", "--vcpus", "999"},
		{"sandbox", "create", "--env", "NOVALUE"},
		{"sandbox", "create", "--env", "1BAD=x"},
		{"sandbox", "create", "--allow", "not a host!"},
		{"sandbox", "ls", "extra"},
		{"sandbox", "ls", "--bogus"},
		{"cell"},
		{"cell", "sb-1"},
		{"cell", "sb-1", "-c", "1", "file.py"},
		{"cell", "sb-1", "-c", "1", "--timeout", "0s"},
		{"exec"},
		{"exec", "sb-1"},
		{"exec", "sb-1", "--timeout", "-1s", "--", "ls"},
		{"cp", "a"},
		{"cp", "a", "b"},
		{"cp", "sb-1:/a", "sb-2:/b"},
		{"network"},
		{"network", "set"},
		{"network", "set", "sb-1"},
		{"network", "set", "sb-1", "--none", "pypi.org"},
		{"network", "set", "sb-1", "bad host!"},
		{"logs"},
		{"logs", "sb-1", "--source", "kernel"},
		{"logs", "sb-1", "--tail", "-1"},
		{"events", "extra"},
		{"run"},
		{"run", "a.py", "b.py"},
		{"run", "--memory", "10", "-c", "1"},
		{"run", "--timeout", "-1s", "-c", "1"},
		{"run", "-c", "1", "--env", "X"},
		{"serve", "--listen", "tcp://127.0.0.1:0"},
		{"serve", "--listen", "127.0.0.1:9"},
		{"serve", "--tls-cert", "c.pem"},
		{"serve", "--public-ranges", "198.51.100.0/24", "--network=false"},
		{"serve", "--public-ranges", "not-a-cidr"},
		{"serve", "--node", "Bad_Node"},
		{"serve", "--cell-timeout", "0s"},
		{"serve", "--result-memory-mib", "10"},
		{"serve", "--result-memory-mib", "-5"},
		{"serve", "--cell-timeout", "2h", "--max-cell-timeout", "1h"},
		{"mcp", "extra"},
		{"doctor", "extra"},
		{"version", "extra"},
		{"boot", "extra"},
		{"vmm"},
		{"vmm", "--config"},
		{"image"},
		{"image", "build"},
		{"image", "build", "a", "b"},
		{"image", "build", "Bad"},
		{"image", "build", "default", "--apt", "jq"},
		{"image", "build", "x"},
		{"image", "build", "x", "--apt", "jq;reboot"},
		{"image", "build", "x", "--apt", "-oDebug=1"},
		{"image", "build", "x", "--mirror", "http://deb.example"},
		{"image", "build", "x", "--apt", "jq", "--mirror", "ftp://deb.example"},
		{"image", "build", "x", "--apt", "jq", "--base", "Bad"},
		{"image", "build", "x", "--apt", "jq", "--timeout", "0s"},
		{"image", "build", "x", "--files", "no-such-dir"},
		{"image", "build", "x", "--files", "cli_test.go"},
		{"image", "build", "x", "--requirements", "cli_test.go"},
		{"image", "build", "x", "--pip-index", "https://pypi.org/simple"},
		{"image", "build", "x", "-f", "no-such-Dockerfile"},
		{"image", "build", "x", "-f", "cli_test.go"},
		{"image", "build", "x", "-f", "cli_test.go", "--apt", "jq"},
		{"image", "pull"},
		{"image", "pull", "a", "b"},
		{"image", "pull", "alpine:3", "--name", "Bad"},
		{"image", "pull", "alpine:3", "--name", "default"},
		{"image", "pull", "alpine:3", "--platform", "linux/arm64"},
		{"image", "pull", "!!!"},
		{"image", "pull", "a b"},
		{"image", "import"},
		{"image", "import", "x.tar"},
		{"image", "import", "no-such.tar", "--name", "x"},
		{"image", "import", ".", "--name", "x"},
		{"image", "rm"},
		{"image", "rm", "default"},
		{"image", "rm", "../x"},
	}
	before := d.requests()
	for _, args := range bad {
		r := d.cellvm(t, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "-h' for its flags") {
			t.Errorf("cellvm %v: exit %d, stderr %q; want exit 2 and a pointer to -h", args, r.code, r.stderr)
		}
		if args[0] == "vmm" || slices.Contains(args, "--") {
			continue // vmm parses its own fixed argv; after "--", --json is ARGV's
		}
		j := d.cellvm(t, append(args, "--json")...)
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
				Exit    int    `json:"exit"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(j.stdout), &e); err != nil || j.code != exitUsage || e.Error.Code != "usage" || e.Error.Message == "" || e.Error.Exit != 2 {
			t.Errorf("cellvm %v --json: exit %d, stdout %q (%v); want exit 2 and a JSON usage error", args, j.code, j.stdout, err)
		}
	}
	if n := d.requests(); n != before {
		t.Errorf("bad command lines reached the daemon: %d requests", n-before)
	}
}

// TestCellExitCodes: ok, error, timeout and lost cells exit 0, 1, 124 and
// 125, through `cell` and through `run` on the daemon.
func TestCellExitCodes(t *testing.T) {
	d := startFakeDaemon(t)
	r := d.cellvm(t, "sandbox", "create")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "sb-") {
		t.Fatalf("sandbox create: %+v", r)
	}
	id := strings.TrimSpace(r.stdout)
	var cold sandbox.Info
	if r := d.cellvm(t, "sandbox", "create", "--cold", "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &cold) != nil || cold.Config.Start != sandbox.StartCold {
		t.Errorf("sandbox create --cold: %+v; want a sandbox whose config says start cold", r)
	}
	for _, c := range []struct {
		code string
		exit int
		out  string
	}{
		{"x = 7", exitOK, ""},
		{"print(x)", exitOK, "7\n"},
		{cellRaise, exitError, ""},
		{cellTimedOut, exitTimeout, "started\n"},
		{cellCrash, exitLost, ""},
	} {
		r := d.cellvm(t, "cell", id, "-c", c.code)
		if r.code != c.exit || r.stdout != c.out {
			t.Errorf("cell -c %q: exit %d, stdout %q, stderr %q; want exit %d and %q", c.code, r.code, r.stdout, r.stderr, c.exit, c.out)
		}
		// Flags after the arguments, --json: the result, same exit code.
		j := d.cellvm(t, "cell", id, "-c", c.code, "--json")
		var res struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal([]byte(j.stdout), &res); err != nil || j.code != c.exit || res.Status == "" {
			t.Errorf("cell -c %q --json: exit %d, stdout %q", c.code, j.code, j.stdout)
		}
		if r := d.cellvm(t, "run", "-c", c.code, "--socket", d.socket); r.code != c.exit && c.code != "print(x)" {
			t.Errorf("run -c %q: exit %d, stderr %q; want %d", c.code, r.code, r.stderr, c.exit)
		}
	}
	if r := d.cellvm(t, "cell", id, "-c", cellRaise); !strings.Contains(r.stderr, "KeyError: 'x'") {
		t.Errorf("the error's traceback is not printed: %q", r.stderr)
	}
	// A file, and stdin, as the code.
	f := filepath.Join(t.TempDir(), "s.py")
	os.WriteFile(f, []byte("print(x)"), 0o644)
	if r := d.cellvm(t, "cell", id, f); r.code != 0 || r.stdout != "7\n" {
		t.Errorf("cell FILE: %+v", r)
	}
	if r := cellvmEnv(t, []string{"CELLVM_SOCKET=" + d.socket}, "print(x)", "cell", id, "-"); r.code != 0 || r.stdout != "7\n" {
		t.Errorf("cell - (stdin): %+v", r)
	}
	// A lost sandbox: 125, and its info says why.
	if r := d.cellvm(t, "cell", id, "-c", cellLose); r.code != exitLost {
		t.Errorf("a cell whose VM was lost: exit %d", r.code)
	}
	if r := d.cellvm(t, "cell", id, "-c", "x"); r.code != exitLost {
		t.Errorf("a cell on a lost sandbox: exit %d, stderr %q", r.code, r.stderr)
	}
	r = d.cellvm(t, "sandbox", "inspect", id)
	if r.code != 0 || !strings.Contains(r.stdout, `"killed_by": "signal"`) || !strings.Contains(r.stdout, "last console line") ||
		!strings.Contains(r.stderr, "was lost") {
		t.Errorf("inspect of a lost sandbox: %+v", r)
	}
}

// TestRunStreamsBeforeTheEnd: a cell's first line reaches the user while
// the cell still runs (the fake cell waits for the test to see it).
func TestRunStreamsBeforeTheEnd(t *testing.T) {
	d := startFakeDaemon(t)
	for _, args := range [][]string{{"run", "--socket", d.socket, "-c", cellStream}, {"cell", "", "-c", cellStream}} {
		os.Remove(d.release)
		if args[0] == "cell" {
			args[1] = strings.TrimSpace(d.cellvm(t, "sandbox", "create").stdout)
		}
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "CELLVM_TEST_MAIN=1", "CELLVM_SOCKET="+d.socket)
		out, _ := cmd.StdoutPipe()
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(out)
		line, err := br.ReadString('\n')
		if err != nil || line != "tick 1\n" {
			t.Fatalf("%v: first line %q %v", args, line, err)
		}
		// The cell is still running: it ends only once the file exists.
		os.WriteFile(d.release, nil, 0o644)
		rest, _ := io.ReadAll(br)
		if err := cmd.Wait(); err != nil || string(rest) != "tick 2\n" {
			t.Errorf("%v: rest %q, %v, stderr %q", args, rest, err, errb.String())
		}
	}
}

// TestSandboxCommands: every sandbox command against the daemon, with
// create's defaults.
func TestSandboxCommands(t *testing.T) {
	d := startFakeDaemon(t)
	r := d.cellvm(t, "sandbox", "create", "--json", "--env", "A=1", "--allow", "pypi.org", "--memory", "256")
	var info sandbox.Info
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || r.code != 0 {
		t.Fatalf("create --json: %+v %v", r, err)
	}
	if info.Config.TTL != time.Hour || info.Config.IdleTimeout != 15*time.Minute || len(info.Config.Env) != 0 || fmt.Sprint(info.EnvNames) != "[A]" ||
		info.Config.Network == nil || info.Config.Network.Allow[0] != "pypi.org" || info.Config.MemoryMiB != 256 {
		t.Errorf("create's config: %+v", info.Config)
	}
	id := info.ID
	r = d.cellvm(t, "sandbox", "create", "--ttl", "0", "--idle-timeout", "2m")
	other := strings.TrimSpace(r.stdout)
	if r := d.cellvm(t, "sandbox", "inspect", other, "--json"); !strings.Contains(r.stdout, `"ttl_s": 0`) || !strings.Contains(r.stdout, `"idle_timeout_s": 120`) {
		t.Errorf("create --ttl 0 --idle-timeout 2m: %s", r.stdout)
	}
	if r := d.cellvm(t, "sandbox", "ls"); r.code != 0 || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, other) {
		t.Errorf("ls: %+v", r)
	}
	for _, step := range []struct {
		args []string
		exit int
		want string
	}{
		{[]string{"sandbox", "pause", id}, 0, ""},
		{[]string{"sandbox", "inspect", id}, 0, `"state": "paused"`},
		{[]string{"sandbox", "pause", id, "--json"}, exitError, `"code":"busy"`},
		{[]string{"cell", id, "-c", "y = 3"}, 0, ""}, // resumes it
		{[]string{"sandbox", "inspect", id}, 0, `"state": "running"`},
		{[]string{"sandbox", "resume", id}, exitError, "not paused"},
		{[]string{"sandbox", "pause", id}, 0, ""},
		{[]string{"sandbox", "resume", id}, 0, ""},
		{[]string{"sandbox", "restart", id}, 0, ""},
		{[]string{"cell", id, "-c", "y"}, exitError, "NameError"},
		{[]string{"sandbox", "interrupt", id}, 0, ""},
		{[]string{"network", "set", id, "example.com", "8.8.0.0/16:443"}, 0, ""},
		{[]string{"network", "set", id, "10.0.0.0/8:443"}, exitError, "denied range 10.0.0.0/8"},
		{[]string{"network", "set", id, "--none", "--json"}, 0, `"allow": []`},
		{[]string{"exec", id, "echo", "hi", "-n"}, 0, "hi -n\n"},
		{[]string{"exec", "--timeout", "5s", id, "--", "nosuch"}, 127, "not found"},
		{[]string{"cell", id, "-c", cellLog + "console says hi"}, 0, ""},
		{[]string{"logs", id}, 0, "console says hi\n"},
		{[]string{"logs", id, "--tail", "0"}, 0, ""},
		{[]string{"logs", id, "--json"}, 0, `"text":"console says hi"`},
		{[]string{"stats"}, 0, "host: 2 sandboxes"},
		{[]string{"stats", id, "--json"}, 0, `"capacity"`},
		{[]string{"sandbox", "inspect", "sb-none"}, exitError, "not_found"},
		{[]string{"sandbox", "inspect", "sb-none", "--json"}, exitError, `"code":"not_found"`},
		{[]string{"sandbox", "rm", id, other}, 0, ""},
		{[]string{"sandbox", "rm", id}, exitError, "not_found"},
	} {
		r := d.cellvm(t, step.args...)
		if r.code != step.exit || !strings.Contains(r.stdout+r.stderr, step.want) {
			t.Errorf("cellvm %v: exit %d, stdout %q, stderr %q; want exit %d and %q", step.args, r.code, r.stdout, r.stderr, step.exit, step.want)
		}
	}
	// cp in and out.
	id = strings.TrimSpace(d.cellvm(t, "sandbox", "create").stdout)
	src := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(src, []byte("payload"), 0o644)
	dst := filepath.Join(t.TempDir(), "out.txt")
	if r := d.cellvm(t, "cp", src, id+":/workspace/in.txt"); r.code != 0 {
		t.Errorf("cp in: %+v", r)
	}
	if r := d.cellvm(t, "cp", id+":/workspace/in.txt", dst); r.code != 0 {
		t.Errorf("cp out: %+v", r)
	}
	if b, _ := os.ReadFile(dst); string(b) != "payload" {
		t.Errorf("copied out %q", b)
	}
}

// TestSnapshotCommands: `sandbox snapshot` prints a snapshot id that
// `snapshot ls` and `inspect` show, `sandbox fork` starts a sandbox with
// the snapshot's variables and machine, a fork of an unknown snapshot or
// with other memory fails with the daemon's error, `snapshot rm` removes
// it, and `sandbox create --idle-pause` reaches the config.
func TestSnapshotCommands(t *testing.T) {
	d := startFakeDaemon(t)
	id := strings.TrimSpace(d.cellvm(t, "sandbox", "create", "--memory", "256", "--idle-pause", "90s").stdout)
	if r := d.cellvm(t, "sandbox", "inspect", id); !strings.Contains(r.stdout, `"idle_pause_s": 90`) {
		t.Errorf("create --idle-pause 90s: %s", r.stdout)
	}
	if r := d.cellvm(t, "cell", id, "-c", "x = 41"); r.code != 0 {
		t.Fatalf("cell: %+v", r)
	}
	r := d.cellvm(t, "sandbox", "snapshot", id)
	snap := strings.TrimSpace(r.stdout)
	if r.code != 0 || !sandbox.ValidSnapshotID(snap) {
		t.Fatalf("sandbox snapshot: %+v", r)
	}
	var infos []sandbox.SnapshotInfo
	if r := d.cellvm(t, "snapshot", "ls", "--json"); json.Unmarshal([]byte(r.stdout), &infos) != nil || len(infos) != 1 ||
		infos[0].ID != snap || infos[0].SandboxID != id || infos[0].MemoryMiB != 256 {
		t.Errorf("snapshot ls --json: %+v (%+v)", r, infos)
	}
	if r := d.cellvm(t, "snapshot", "ls"); r.code != 0 || !strings.Contains(r.stdout, snap) || !strings.Contains(r.stdout, "256 MiB") {
		t.Errorf("snapshot ls: %+v", r)
	}
	if r := d.cellvm(t, "snapshot", "inspect", snap); r.code != 0 || !strings.Contains(r.stdout, `"sandbox_id": "`+id+`"`) {
		t.Errorf("snapshot inspect: %+v", r)
	}
	r = d.cellvm(t, "sandbox", "fork", snap, "--json")
	var fork sandbox.Info
	if err := json.Unmarshal([]byte(r.stdout), &fork); err != nil || r.code != 0 || fork.ID == id || fork.Config.MemoryMiB != 256 {
		t.Fatalf("sandbox fork --json: %+v (%v)", r, err)
	}
	if r := d.cellvm(t, "cell", fork.ID, "-c", "x"); r.code != 0 || !strings.Contains(r.stdout, "41") {
		t.Errorf("x in the fork: %+v", r)
	}
	for _, step := range []struct {
		args []string
		exit int
		want string
	}{
		{[]string{"sandbox", "fork", snap, "--memory", "512"}, exitError, "invalid"},
		{[]string{"sandbox", "fork", "snap-0000000000ff"}, exitError, "not_found"},
		{[]string{"sandbox", "fork", "snap-0000000000ff", "--json"}, exitError, `"code":"not_found"`},
		{[]string{"snapshot", "inspect", "snap-0000000000ff"}, exitError, "not_found"},
		{[]string{"snapshot", "rm", snap}, 0, ""},
		{[]string{"snapshot", "rm", snap}, exitError, "not_found"},
		{[]string{"snapshot", "ls"}, 0, "ID"},
	} {
		r := d.cellvm(t, step.args...)
		if r.code != step.exit || !strings.Contains(r.stdout+r.stderr, step.want) {
			t.Errorf("cellvm %v: exit %d, stdout %q, stderr %q; want exit %d and %q", step.args, r.code, r.stdout, r.stderr, step.exit, step.want)
		}
	}
	if r := d.cellvm(t, "snapshot", "ls", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("snapshot ls after rm: %q", r.stdout)
	}
}

// TestLogsFollowAndEvents: `logs -f` prints lines written after it
// started, and `events` prints the lifecycle in order.
func TestLogsFollowAndEvents(t *testing.T) {
	d := startFakeDaemon(t)
	id := strings.TrimSpace(d.cellvm(t, "sandbox", "create").stdout)
	start := func(args ...string) (*bufio.Reader, *bufio.Reader) {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "CELLVM_TEST_MAIN=1", "CELLVM_SOCKET="+d.socket)
		out, _ := cmd.StdoutPipe()
		errp, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return bufio.NewReader(out), bufio.NewReader(errp)
	}
	// logs -f: the tail's line arrives first, which says the follow has
	// begun; then a line written later.
	d.cellvm(t, "cell", id, "-c", cellLog+"written before")
	logs, _ := start("logs", id, "-f", "--tail", "1")
	if l, err := logs.ReadString('\n'); err != nil || l != "written before\n" {
		t.Fatalf("logs -f tail: %q %v", l, err)
	}
	d.cellvm(t, "cell", id, "-c", cellLog+"followed line")
	if l, err := logs.ReadString('\n'); err != nil || l != "followed line\n" {
		t.Errorf("logs -f: %q %v", l, err)
	}
	events, notice := start("events", "--json")
	if l, err := notice.ReadString('\n'); err != nil || !strings.Contains(l, "watching") {
		t.Fatalf("events did not say it is watching: %q %v", l, err)
	}
	d.cellvm(t, "sandbox", "pause", id)
	d.cellvm(t, "sandbox", "resume", id)
	d.cellvm(t, "sandbox", "rm", id)
	var got []string
	for len(got) < 3 {
		l, err := events.ReadString('\n')
		if err != nil {
			t.Fatalf("events: %v (got %v)", err, got)
		}
		var ev sandbox.Event
		json.Unmarshal([]byte(l), &ev)
		got = append(got, fmt.Sprintf("%s %s", ev.Type, ev.Sandbox))
	}
	want := []string{"paused " + id, "resumed " + id, "deleted " + id}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("events %v, want %v", got, want)
	}
}

// TestUnreachableDaemonExitsThree: no daemon at the socket is exit 3.
func TestUnreachableDaemonExitsThree(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	for _, args := range [][]string{{"sandbox", "ls"}, {"cell", "sb-1", "-c", "1"}, {"stats"}, {"logs", "sb-1"}, {"run", "-c", "1"}} {
		r := cellvmEnv(t, []string{"CELLVM_SOCKET=" + sock}, "", args...)
		if r.code != exitUnreachable || !strings.Contains(r.stderr, "no cellvm daemon") {
			t.Errorf("%v: exit %d, stderr %q; want 3", args, r.code, r.stderr)
		}
		j := cellvmEnv(t, []string{"CELLVM_SOCKET=" + sock}, "", append(args, "--json")...)
		if j.code != exitUnreachable || !strings.Contains(j.stdout, `"code":"unreachable"`) {
			t.Errorf("%v --json: exit %d, stdout %q", args, j.code, j.stdout)
		}
	}
	// A socket nobody listens on any more.
	os.WriteFile(sock, nil, 0o600)
	if r := cellvmEnv(t, []string{"CELLVM_SOCKET=" + sock}, "", "sandbox", "ls"); r.code != exitUnreachable {
		t.Errorf("a dead socket: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestLegacyOneDashLongFlags: command lines written for the earlier
// parser (Go's flag package) keep their meaning.
func TestLegacyOneDashLongFlags(t *testing.T) {
	d := startFakeDaemon(t)
	r := d.cellvm(t, "sandbox", "create", "-json", "-memory", "256")
	if r.code != 0 || !strings.Contains(r.stdout, `"memory_mib": 256`) {
		t.Errorf("-json -memory 256: %+v", r)
	}
}
