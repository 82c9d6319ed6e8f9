package jail

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const envChild = "CELLVM_JAIL_TEST_SPEC"

// envSharedChild and envEnterChild make the test binary
// sharedNamespaceChild and enterChild.
const (
	envSharedChild = "CELLVM_JAIL_TEST_SHARED"
	envEnterChild  = "CELLVM_JAIL_TEST_ENTER"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(envChild); spec != "" {
		os.Exit(jailedChild(spec))
	}
	if spec := os.Getenv(envSharedChild); spec != "" {
		os.Exit(sharedNamespaceChild(spec))
	}
	if spec := os.Getenv(envEnterChild); spec != "" {
		os.Exit(enterChild(spec))
	}
	if spec := os.Getenv(envBoundingChild); spec != "" {
		os.Exit(boundingChild(spec))
	}
	os.Exit(m.Run())
}

// jailedChild is the test binary inside its jail: it enters it, drops its
// privileges, reports what it can and cannot do, installs the filter, says
// "ready", and on "go" makes a forbidden system call.
func jailedChild(specJSON string) int {
	s, ok := childSpec(specJSON)
	if !ok {
		return 3
	}
	if err := Enter(s); err != nil {
		fmt.Println("child: enter:", err)
		return 3
	}
	if err := Drop(s); err != nil {
		fmt.Println("child: drop:", err)
		return 3
	}
	var root []string
	entries, _ := os.ReadDir("/")
	for _, e := range entries {
		root = append(root, e.Name())
	}
	fmt.Println("root:", strings.Join(root, " "))
	data, err := os.ReadFile("/kernel")
	fmt.Printf("read /kernel: %q %v\n", data, err)
	fmt.Println("write /kernel:", os.WriteFile("/kernel", []byte("x"), 0o644))
	fmt.Println("write /run/x:", os.WriteFile("/run/x", []byte("x"), 0o644))
	fmt.Println("mkdir /etc:", os.Mkdir("/etc", 0o755))
	_, err = os.Stat("/proc/1/root")
	fmt.Println("stat /proc:", err)
	fmt.Println("setuid 0:", syscall.Setuid(0))
	if err := Install(); err != nil {
		fmt.Println("child: seccomp:", err)
		return 3
	}
	_, err = os.Open("/kernel")
	fmt.Println("open after seccomp:", err)
	fmt.Println("ready")
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if strings.TrimSpace(line) == "go" {
		fmt.Println(ForbiddenSyscall())
	}
	return 0
}

func statusField(t *testing.T, pid int, key string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return ""
}

// TestJailHoldsAndSeccompKills starts a process in a jail as the daemon
// starts a VMM (namespaces at clone, then Enter, Drop and Install) and
// checks, from outside and inside, what the issue asks of it: not uid 0, no
// capabilities, no_new_privs, seccomp in filter mode, its own mount, pid and
// net namespaces, a root holding only its binds, read-only where it must be;
// then that a forbidden system call kills it with SIGSYS.
func TestJailHoldsAndSeccompKills(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: namespaces, mounts, setuid")
	}
	if !AllThreads() {
		t.Skip("this test binary was built with cgo (CGO_ENABLED=1, e.g. for -race); the jail needs a binary without it, as make test builds")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	kernel := filepath.Join(dir, "kernel.src")
	os.WriteFile(kernel, []byte("KERNEL"), 0o644)
	run := filepath.Join(dir, "run.src")
	os.Mkdir(run, 0o777)
	s := Spec{
		Root: filepath.Join(dir, "root"), UID: 200_000_123, GID: 200_000_123, Hostname: "cellvm-vmm-test",
		Binds: []Bind{
			{Source: kernel, Target: "/kernel"},
			{Source: run, Target: "/run", Writable: true},
		},
		Limits: Rlimits{NoFile: 64, NProc: 64, FSize: 1 << 20},
	}
	if err := Prepare(s); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(s)
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), envChild+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: Cloneflags, Pdeathsig: syscall.SIGKILL}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	ready := false
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if sc.Text() == "ready" {
			ready = true
			break
		}
	}
	if !ready {
		cmd.Wait()
		t.Fatalf("the jailed child never got ready:\n%s", out.String())
	}
	pid := cmd.Process.Pid
	report := out.String()
	t.Logf("child says:\n%s", report)

	if uid := statusField(t, pid, "Uid"); uid != "200000123\t200000123\t200000123\t200000123" {
		t.Errorf("Uid: %q", uid)
	}
	for key, want := range map[string]string{"CapEff": "0000000000000000", "CapPrm": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"} {
		if got := statusField(t, pid, key); got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	for _, ns := range []string{"mnt", "pid", "net", "ipc", "uts"} {
		mine, _ := os.Readlink("/proc/self/ns/" + ns)
		its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		if err != nil || its == mine {
			t.Errorf("%s namespace %q is the test's own %q (%v)", ns, its, mine, err)
		}
	}
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/root/", pid))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if err != nil || strings.Join(names, " ") != "kernel run" {
		t.Errorf("/proc/%d/root holds %v (%v), want only kernel and run", pid, names, err)
	}
	for _, want := range []string{
		"root: kernel run\n",
		`read /kernel: "KERNEL" <nil>`,
		"write /kernel: open /kernel: read-only file system",
		"write /run/x: open /run/x: permission denied", // /run is root's; the jail's uid may not write it
		"mkdir /etc: mkdir /etc: read-only file system",
		"stat /proc: stat /proc/1/root: no such file or directory",
		"setuid 0: operation not permitted",
		"open after seccomp: open /kernel: permission denied",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the child did not report %q", want)
		}
	}

	io.WriteString(stdin, "go\n")
	rest, _ := io.ReadAll(stdout)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child exited %v after the forbidden syscall; it printed %q", err, rest)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
		t.Errorf("child ended with %v, want killed by SIGSYS; it printed %q", ws, rest)
	}
	// The jail's root is left as the daemon made it: nothing was written.
	if _, err := os.Stat(filepath.Join(run, "x")); err == nil {
		t.Error("the jailed uid wrote into a root-owned bind")
	}
}

func TestSpecValidate(t *testing.T) {
	good := Spec{Root: "/r", UID: 5, GID: 5, Binds: []Bind{{Source: "/a", Target: "/a"}}, Limits: Rlimits{1, 1, 1}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Spec){
		"relative root":   func(s *Spec) { s.Root = "r" },
		"root uid":        func(s *Spec) { s.UID = 0 },
		"root gid":        func(s *Spec) { s.GID = 0 },
		"target /":        func(s *Spec) { s.Binds = []Bind{{Source: "/a", Target: "/"}} },
		"unclean target":  func(s *Spec) { s.Binds = []Bind{{Source: "/a", Target: "/x/../../etc"}} },
		"relative source": func(s *Spec) { s.Binds = []Bind{{Source: "a", Target: "/a"}} },
		"duplicate":       func(s *Spec) { s.Binds = []Bind{{Source: "/a", Target: "/a"}, {Source: "/b", Target: "/a"}} },
		"no limits":       func(s *Spec) { s.Limits = Rlimits{} },
	} {
		s := good
		mod(&s)
		if s.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if p := good.Path("/a"); p != "/a" {
		t.Errorf("Path = %q", p)
	}
}

// TestEnableControllers runs the cgroup code over a fake cgroup tree (plain
// files; the cgroup v2 check itself is not faked): the controller lists
// are read as fields, whatever their order or trailing newline.
func TestEnableControllers(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("memory\n"), 0o644)
	if err := enableControllers(dir); err != nil {
		t.Fatal(err)
	}
	// A plain file keeps only the last write: the last controller enabled.
	if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control")); string(b) != "+pids" {
		t.Errorf("subtree_control = %q, want the last of +cpu and +pids written", b)
	}
	os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("cpu memory\n"), 0o644)
	if err := enableControllers(dir); err == nil || !strings.Contains(err.Error(), "lacks the pids controller") {
		t.Errorf("missing pids: %v", err)
	}
}

// sharedNamespaceChild stands for a daemon whose launcher forgot
// CLONE_NEWNS, without the risk of one: cloned into mount and pid
// namespaces of its own, it makes its mounts private, mounts its pid
// namespace's /proc, and starts the test binary again, without new
// namespaces, to call Enter (enterChild). Had Enter gone on, its mounts
// and pivot_root would have changed only this child's namespace.
func sharedNamespaceChild(specJSON string) int {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		fmt.Println("child: private:", err)
		return 3
	}
	if err := syscall.Mount("proc", "/proc", "proc", 0, ""); err != nil {
		fmt.Println("child: mount /proc:", err)
		return 3
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), envSharedChild+"=", envEnterChild+"="+specJSON)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Println("child: enter child:", err)
		return 3
	}
	return 0
}

// childSpec decodes a child's spec from its environment, and says why
// it could not.
func childSpec(specJSON string) (Spec, bool) {
	var s Spec
	if err := json.Unmarshal([]byte(specJSON), &s); err != nil {
		fmt.Println("child: spec:", err)
		return s, false
	}
	return s, true
}

// enterChild calls Enter and says what it answered.
func enterChild(specJSON string) int {
	s, ok := childSpec(specJSON)
	if !ok {
		return 3
	}
	if err := Enter(s); err != nil {
		fmt.Println("enter:", err)
		return 0
	}
	fmt.Println("entered")
	return 0
}

// TestEnterRefusesItsLaunchersMountNamespace: Enter in a process that
// shares its launcher's mount namespace refuses before it mounts
// anything, so that a launcher without CLONE_NEWNS cannot make the jail's
// mounts the host's.
func TestEnterRefusesItsLaunchersMountNamespace(t *testing.T) {
	for status, want := range map[string]int{"Name:\tx\nPPid:\t412\nTracerPid:\t0\n": 412, "PPid:\t0\n": 0, "PPid: -1\n": -1, "PPid:\tx\n": -1, "Pid:\t3\n": -1} {
		got, err := parentPID([]byte(status))
		if (err != nil) != (want < 0) || (want >= 0 && got != want) {
			t.Errorf("parentPID(%q) = %d, %v; want %d", status, got, err, want)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: namespaces, mounts")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	kernel := filepath.Join(dir, "kernel.src")
	os.WriteFile(kernel, []byte("KERNEL"), 0o644)
	s := Spec{Root: filepath.Join(dir, "root"), UID: 200_000_124, GID: 200_000_124,
		Binds: []Bind{{Source: kernel, Target: "/kernel"}}, Limits: Rlimits{NoFile: 64, NProc: 64, FSize: 1 << 20}}
	if err := Prepare(s); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(s)
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), envSharedChild+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "enter: jail: this process shares its launcher's (pid 1) mount namespace") {
		t.Errorf("Enter in its launcher's mount namespace: the child said %q, want refused", out)
	}
}

// TestOwnMountNamespaceWhenTheLauncherDies: a launcher that exits while
// its child checks the namespaces may have its pid taken by a process in
// another mount namespace; the check reads the parent again after its
// link and refuses when it changed, instead of passing on the stranger's
// link.
func TestOwnMountNamespaceWhenTheLauncherDies(t *testing.T) {
	const shared = "mnt:[4026531841]"
	links := map[string]string{
		"/proc/self/ns/mnt": shared,             // the launcher forgot CLONE_NEWNS
		"/proc/412/ns/mnt":  "mnt:[4026532999]", // pid 412 reused by a stranger
	}
	readlink := func(p string) (string, error) {
		if l, ok := links[p]; ok {
			return l, nil
		}
		return "", os.ErrNotExist
	}
	statuses := []string{"PPid:\t412\n", "PPid:\t1\n"} // reparented to pid 1 between the reads
	reads := 0
	readStatus := func() ([]byte, error) {
		s := statuses[min(reads, len(statuses)-1)]
		reads++
		return []byte(s), nil
	}
	err := checkOwnMountNamespace(readlink, readStatus)
	if err == nil || !strings.Contains(err.Error(), "exited while") {
		t.Fatalf("check with the launcher gone and its pid reused: %v, want a refusal", err)
	}

	// The launcher alive throughout: the same check passes a namespace of
	// its own and refuses the launcher's.
	statuses = []string{"PPid:\t412\n"}
	if err := checkOwnMountNamespace(readlink, readStatus); err != nil {
		t.Errorf("own namespace, launcher alive: %v", err)
	}
	links["/proc/412/ns/mnt"] = shared
	if err := checkOwnMountNamespace(readlink, readStatus); err == nil || !strings.Contains(err.Error(), "shares its launcher's") {
		t.Errorf("shared namespace, launcher alive: %v, want a refusal", err)
	}
}
