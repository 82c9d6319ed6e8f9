package engine

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/netpolicy"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/netnstest"
)

// envCrashingManager makes the test binary a daemon that creates a
// sandbox with network, updates its policy, prints its id and waits to
// be killed (see crashingManager).
const envCrashingManager = "CELLVM_TEST_CRASHING_MANAGER"

var (
	createdPolicy = []string{"203.0.113.7", "allowed.example"}
	updatedPolicy = []string{"198.51.100.0/24:443"}
)

// fakeFiles are a manager's options over dir with the fake agent VMM
// (the test binary) and empty guest files, without network.
func fakeFiles(dir string) (Options, error) {
	for _, f := range []string{"vmlinux", "initramfs.cpio", "rootfs.ext4"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			return Options{}, err
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return Options{}, err
	}
	return Options{
		Exe: exe, Kernel: filepath.Join(dir, "vmlinux"), Initrd: filepath.Join(dir, "initramfs.cpio"),
		RootFS: filepath.Join(dir, "rootfs.ext4"), StateDir: filepath.Join(dir, "state"), BootTimeout: 30 * time.Second,
		Log: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}, nil
}

// fakeOptions are fakeFiles with a network host in this process's
// namespace.
func fakeOptions(dir string) (Options, error) {
	opt, err := fakeFiles(dir)
	if err != nil {
		return Options{}, err
	}
	opt.Net, err = netpolicy.NewHost(netpolicy.HostConfig{Upstreams: []string{"192.0.2.53:53"}, PublicRanges: worldRanges}, nil)
	return opt, err
}

// crashingManager is the first daemon of TestPolicyUpdateSurvivesACrash.
func crashingManager(dir string) int {
	// The VMMs it starts are the fake agent, not another manager.
	os.Unsetenv(envCrashingManager)
	os.Setenv("CELLVM_TEST_FAKE_VMM", "agent")
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "crashing manager:", err); return 1 }
	opt, err := fakeOptions(dir)
	if err != nil {
		return fail(err)
	}
	m, err := NewVMManager(opt)
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{Network: &sandbox.NetworkPolicy{Allow: createdPolicy}})
	if err != nil {
		return fail(err)
	}
	if err := m.SetNetwork(ctx, info.ID, sandbox.NetworkPolicy{Allow: updatedPolicy}); err != nil {
		return fail(err)
	}
	fmt.Println("sandbox", info.ID)
	select {} // until kill -9
}

// TestPolicyUpdateSurvivesACrash: create with one policy, update it, kill
// -9 the daemon, start another on the same state directory: the sandbox
// it takes back has the updated policy, in its config and in the kernel.
func TestPolicyUpdateSurvivesACrash(t *testing.T) {
	if !netnstest.Isolate(t) {
		return
	}
	for _, bin := range []string{"iptables", "iptables-restore"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s: %v", bin, err)
		}
	}
	dir := t.TempDir()
	first := exec.Command(os.Args[0])
	first.Env = append(os.Environ(), envCrashingManager+"="+dir)
	first.Stderr = os.Stderr
	out, err := first.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	idc := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		idc <- strings.TrimPrefix(strings.TrimSpace(line), "sandbox ")
		io.Copy(io.Discard, out)
	}()
	var id string
	select {
	case id = <-idc:
	case <-time.After(2 * time.Minute):
		first.Process.Kill()
		t.Fatal("the first daemon did not create and update its sandbox")
	}
	first.Process.Kill() // kill -9
	first.Wait()
	if !strings.HasPrefix(id, "sb-") {
		t.Fatalf("the first daemon said %q", id)
	}

	opt, err := fakeOptions(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Net.Close()
	m, err := NewVMManager(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	info, err := m.Get(ctx, id)
	if err != nil {
		t.Fatalf("the second daemon did not take the sandbox back: %v", err)
	}
	if info.State != sandbox.StateRunning || info.Config.Network == nil || !reflect.DeepEqual(info.Config.Network.Allow, updatedPolicy) {
		t.Errorf("taken back: state %s, policy %+v; want running with %q", info.State, info.Config.Network, updatedPolicy)
	}
	m.mu.Lock()
	s := m.sandboxes[id]
	m.mu.Unlock()
	if s == nil || s.net == nil {
		t.Fatal("the taken-back sandbox has no network")
	}
	if got := s.net.Policy().Entries(); !reflect.DeepEqual(got, updatedPolicy) {
		t.Errorf("policy in force %q, want %q", got, updatedPolicy)
	}
	rules, err := exec.Command("iptables", "-S").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables -S: %v\n%s", err, rules)
	}
	chain := "CELLVM-" + netpolicy.Tag(id)
	var mine []string
	for _, l := range strings.Split(string(rules), "\n") {
		if strings.Contains(l, chain) {
			mine = append(mine, l)
		}
	}
	joined := strings.Join(mine, "\n")
	if !strings.Contains(joined, "-d 198.51.100.0/24 -p tcp -m tcp --dport 443") || strings.Contains(joined, "203.0.113.7") {
		t.Errorf("the kernel's rules for %s are not the updated policy's:\n%s", id, joined)
	}
	if err := m.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if rules, _ := exec.Command("iptables-save").Output(); strings.Contains(string(rules), chain) {
		t.Errorf("rules of %s left after delete", id)
	}
}

// TestNoNetworkManagerRefusesNetworkState: a manager without network
// support over a state directory that holds a sandbox with network
// refuses to start, says how to clean up, and removes nothing; without
// such a sandbox it starts.
func TestNoNetworkManagerRefusesNetworkState(t *testing.T) {
	dir := t.TempDir()
	opt, err := fakeFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(opt.StateDir, "sandboxes", "sb-000000000001")
	netted := filepath.Join(opt.StateDir, "sandboxes", "sb-000000000002")
	for d, cfg := range map[string]sandbox.Config{plain: {}, netted: {Network: &sandbox.NetworkPolicy{Allow: []string{"203.0.113.7"}}}} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := writeConfig(d, cfg); err != nil {
			t.Fatal(err)
		}
	}
	_, err = NewVMManager(opt)
	if err == nil {
		t.Fatal("a manager without network started over a sandbox with network")
	}
	tag := netpolicy.Tag("sb-000000000002")
	for _, want := range []string{"sb-000000000002", "cvm-" + tag, "CELLVM-" + tag, "--network", "by hand"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "sb-000000000001") {
		t.Errorf("error names the sandbox without network: %v", err)
	}
	for _, d := range []string{plain, netted} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("refusing to start removed %s: %v", d, err)
		}
	}
	if err := os.RemoveAll(netted); err != nil {
		t.Fatal(err)
	}
	m, err := NewVMManager(opt)
	if err != nil {
		t.Fatalf("without network state: %v", err)
	}
	m.Close()
}
