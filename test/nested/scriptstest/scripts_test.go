// Package scriptstest tests the nested-KVM rig's scripts (test/nested/*.sh):
// their own logic (attempts, skips, reruns), over fakes, without a rig.
package scriptstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// script writes an executable bash script into dir.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/bash\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// step is what one call of a fake prints and its exit code.
type step struct {
	out  string
	exit int
}

// fake writes a script whose Nth call prints steps[N-1].out and exits with
// steps[N-1].exit, after saving its arguments to args-N and, when
// CELLVM_RIG_PASSED is set, that file to passed-N.
func fake(t *testing.T, dir, name string, steps ...step) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "n=$(cat %[1]s/%[2]s.count 2>/dev/null || echo 0); n=$((n+1)); echo $n >%[1]s/%[2]s.count\n", dir, name)
	fmt.Fprintf(&b, "printf '%%s\\n' \"$@\" >%s/args-$n\n", dir)
	fmt.Fprintf(&b, "[[ -n ${CELLVM_RIG_PASSED:-} ]] && cp \"$CELLVM_RIG_PASSED\" %s/passed-$n\n", dir)
	b.WriteString("case $n in\n")
	for i, s := range steps {
		fmt.Fprintf(&b, "%d) cat <<'OUT'\n%sOUT\nexit %d;;\n", i+1, s.out, s.exit)
	}
	b.WriteString("esac\necho 'fake called too often'; exit 99\n")
	return script(t, dir, name, b.String())
}

func calls(t *testing.T, dir, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name+".count"))
	if err != nil {
		return 0
	}
	var n int
	fmt.Sscan(string(b), &n)
	return n
}

// runScript runs one of this directory's scripts with extra environment.
func runScript(t *testing.T, env []string, name string, args ...string) (string, int) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	cmd := exec.Command("../"+name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	code := cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	return string(out), code
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const wedgedAttempt = `=== rig: cmd/cellvm
=== RUN   TestA
--- PASS: TestA (1.00s)
    --- PASS: TestA/sub (1.00s)
--- FAIL: TestB (1.00s)
=== rig: cmd/cellvm FAILED twice (3s)
=== rig: sandbox
--- PASS: TestC (2.00s)
`

func TestRigAttemptAfterAWedgedL1RunsOnlyWhatDidNotPass(t *testing.T) {
	dir := t.TempDir()
	rig := fake(t, dir, "rig", step{wedgedAttempt, 123}, step{"=== rig: sandbox\n--- PASS: TestD (1.00s)\n", 0})
	out, code := runScript(t, []string{"RIG_RUN=" + rig, "RIG_STATE=" + dir}, "test-rig.sh")
	if code != 0 {
		t.Fatalf("exit %d, want 0 (the second attempt passed)\n%s", code, out)
	}
	if n := calls(t, dir, "rig"); n != 2 {
		t.Fatalf("rig ran %d times, want 2\n%s", n, out)
	}
	if got := readFile(t, filepath.Join(dir, "passed-1")); got != "" {
		t.Errorf("first attempt skipped %q, want nothing", got)
	}
	if got, want := readFile(t, filepath.Join(dir, "passed-2")), "cmd/cellvm TestA\nsandbox TestC\n"; got != want {
		t.Errorf("second attempt skipped %q, want %q (top-level passes only, by package)", got, want)
	}
	for _, want := range []string{"L1 went silent (wedged)", "attempt 2 of 5 in a fresh L1", "in 2 attempt(s) (exit 0)",
		"fresh L1s: 1, test reruns: 0, packages passed only on a rerun (FLAKY): 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// A failed test is confirmed once in a fresh L1 (a sick L1 fails every
// guest of a kind); failed there too, the verdict is final.
func TestRigVerdictIsFinal(t *testing.T) {
	dir := t.TempDir()
	fail := step{"=== rig: sandbox\n--- FAIL: TestC (1.00s)\n", 1}
	rig := fake(t, dir, "rig", fail, fail, step{"", 0})
	out, code := runScript(t, []string{"RIG_RUN=" + rig, "RIG_STATE=" + dir}, "test-rig.sh")
	if code != 1 || calls(t, dir, "rig") != 2 {
		t.Fatalf("exit %d after %d attempts, want 1 after 2 (a failure confirmed in a fresh L1 is final)\n%s", code, calls(t, dir, "rig"), out)
	}
	if !strings.Contains(out, "a fresh L1 runs them once more to confirm") {
		t.Errorf("the confirming attempt is not said:\n%s", out)
	}
}

// A failure that a fresh L1 does not confirm passes, and the fresh L1 is
// counted.
func TestRigFailureNotConfirmedInAFreshL1(t *testing.T) {
	dir := t.TempDir()
	rig := fake(t, dir, "rig", step{"=== rig: sandbox\n--- PASS: TestA (1.00s)\n--- FAIL: TestC (1.00s)\n", 1}, step{"=== rig: sandbox\n--- PASS: TestC (1.00s)\n", 0})
	out, code := runScript(t, []string{"RIG_RUN=" + rig, "RIG_STATE=" + dir}, "test-rig.sh")
	if code != 0 || calls(t, dir, "rig") != 2 {
		t.Fatalf("exit %d after %d attempts, want 0 after 2\n%s", code, calls(t, dir, "rig"), out)
	}
	if passed := readFile(t, filepath.Join(dir, "passed-2")); !strings.Contains(passed, "sandbox TestA") || strings.Contains(passed, "TestC") {
		t.Errorf("the fresh L1 should skip TestA and run TestC; passed.txt it got: %q", passed)
	}
	if !strings.Contains(out, "fresh L1s: 1") {
		t.Errorf("the fresh L1 is not counted:\n%s", out)
	}
}

func TestRigStopsAtItsBudgetAndAttempts(t *testing.T) {
	dir := t.TempDir()
	rig := fake(t, dir, "rig", step{"", 125}, step{"", 124}, step{"", 123}, step{"", 125}, step{"", 123}, step{"", 0})
	out, code := runScript(t, []string{"RIG_RUN=" + rig, "RIG_STATE=" + dir, "RIG_BUDGET=1000", "RIG_MIN_ATTEMPT=1"}, "test-rig.sh")
	if code != 123 || calls(t, dir, "rig") != 5 {
		t.Fatalf("exit %d after %d attempts, want 123 after 5 (RIG_ATTEMPTS' default)\n%s", code, calls(t, dir, "rig"), out)
	}
	if args := readFile(t, filepath.Join(dir, "args-1")); !strings.Contains(args, "--timeout\n1000\n") {
		t.Errorf("first attempt's arguments %q: its timeout should be capped by the budget (1000 s)", args)
	}

	dir = t.TempDir()
	rig = fake(t, dir, "rig", step{"", 125}, step{"", 0})
	out, code = runScript(t, []string{"RIG_RUN=" + rig, "RIG_STATE=" + dir, "RIG_BUDGET=100", "RIG_MIN_ATTEMPT=420"}, "test-rig.sh")
	if code != 125 || calls(t, dir, "rig") != 1 || !strings.Contains(out, "not starting attempt 2") {
		t.Fatalf("exit %d after %d attempts, want 125 after 1 and a word about the budget\n%s", code, calls(t, dir, "rig"), out)
	}

	if out, code := runScript(t, []string{"RIG_STATE=" + dir, "RIG_BUDGET=soon"}, "test-rig.sh"); code != 2 || !strings.Contains(out, "budget must be a whole number") {
		t.Errorf("RIG_BUDGET=soon: exit %d, want 2 with a clear message\n%s", code, out)
	}
}

// kvmTests runs run-kvm-tests.sh over one fake test binary in this package.
func kvmTests(t *testing.T, dir, bin string, env ...string) (string, int) {
	t.Helper()
	list := filepath.Join(dir, "tests.txt")
	if err := os.WriteFile(list, []byte("test/nested "+bin+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// CELLVM_RIG_REAP=0: never kill the VMMs (real or fake) of other
	// packages' tests running beside this one.
	return runScript(t, append(env, "CELLVM_RIG_LIST="+list, "CELLVM_RIG_REAP=0"), "run-kvm-tests.sh")
}

func TestKVMTestsSkipWhatPassedInAnEarlierL1(t *testing.T) {
	dir := t.TempDir()
	bin := fake(t, dir, "pkg.test", step{"--- PASS: TestC (1.00s)\nPASS\n", 0})
	passed := filepath.Join(dir, "passed.txt")
	if err := os.WriteFile(passed, []byte("other/pkg TestZ\ntest/nested TestA\ntest/nested TestB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := kvmTests(t, dir, bin, "CELLVM_RIG_PASSED="+passed)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	args := readFile(t, filepath.Join(dir, "args-1"))
	if !strings.Contains(args, "-test.skip\n^(TestA|TestB)$\n") {
		t.Errorf("test binary's arguments %q lack -test.skip ^(TestA|TestB)$", args)
	}
	if !strings.Contains(out, "skipping what passed in an earlier L1: TestA TestB") {
		t.Errorf("the skip is not said:\n%s", out)
	}
}

func TestKVMTestsRerunAFailedTestOnceAndSayFlaky(t *testing.T) {
	dir := t.TempDir()
	bin := fake(t, dir, "pkg.test",
		step{"--- PASS: TestA (1.00s)\n--- FAIL: TestB (1.00s)\nFAIL\n", 1},
		step{"--- PASS: TestB (1.00s)\nPASS\n", 0})
	out, code := kvmTests(t, dir, bin)
	if code != 0 || !strings.Contains(out, "FLAKY: TestB") {
		t.Fatalf("exit %d, want 0 and TestB reported FLAKY\n%s", code, out)
	}
	if args := readFile(t, filepath.Join(dir, "args-2")); !strings.Contains(args, "-test.run\n^(TestB)$\n") {
		t.Errorf("the rerun's arguments %q: want only TestB", args)
	}

	// A test that fails, fails again, then passes: flaky, after two reruns.
	dir = t.TempDir()
	fail := step{"--- FAIL: TestB (1.00s)\nFAIL\n", 1}
	bin = fake(t, dir, "pkg.test", fail, fail, step{"--- PASS: TestB (1.00s)\nPASS\n", 0})
	out, code = kvmTests(t, dir, bin)
	if code != 0 || !strings.Contains(out, "ok after 2 rerun(s); FLAKY: TestB") {
		t.Fatalf("exit %d, want 0 and TestB FLAKY after 2 reruns\n%s", code, out)
	}
}

func TestKVMTestsFailATestThatFailsEveryRun(t *testing.T) {
	dir := t.TempDir()
	fail := step{"--- FAIL: TestB (1.00s)\nFAIL\n", 1}
	bin := fake(t, dir, "pkg.test", fail, fail, fail, fail, step{"--- PASS: TestB (1.00s)\nPASS\n", 0})
	out, code := kvmTests(t, dir, bin)
	if code != 1 || calls(t, dir, "pkg.test") != 4 || !strings.Contains(out, "FAILED, in 4 run(s): TestB") || !strings.Contains(out, "rig: FAILED: test/nested") {
		t.Fatalf("exit %d after %d runs, want 1 after 4 (a run and 3 reruns) with TestB named\n%s", code, calls(t, dir, "pkg.test"), out)
	}

	dir = t.TempDir()
	bin = fake(t, dir, "pkg.test", fail, step{"--- PASS: TestB (1.00s)\nPASS\n", 0})
	out, code = kvmTests(t, dir, bin, "CELLVM_RIG_RERUN=0")
	if code != 1 || calls(t, dir, "pkg.test") != 1 {
		t.Fatalf("CELLVM_RIG_RERUN=0: exit %d after %d runs, want 1 after 1\n%s", code, calls(t, dir, "pkg.test"), out)
	}

	// A binary that dies without naming a test is not rerun, and fails.
	dir = t.TempDir()
	bin = fake(t, dir, "pkg.test", step{"panic: boom\n", 2}, step{"PASS\n", 0})
	out, code = kvmTests(t, dir, bin)
	if code != 1 || calls(t, dir, "pkg.test") != 1 || !strings.Contains(out, "the test binary") {
		t.Fatalf("crashed binary: exit %d after %d runs, want 1 after 1\n%s", code, calls(t, dir, "pkg.test"), out)
	}
}

func TestRigCountsRerunsAndFlakyPackages(t *testing.T) {
	dir := t.TempDir()
	log := `=== rig: cmd/cellvm
--- FAIL: TestA (1.00s)
=== rig: cmd/cellvm: TestA failed; rerun 1 of 2, to tell a flaky emulator from a bug
--- FAIL: TestA (1.00s)
=== rig: cmd/cellvm: TestA failed; rerun 2 of 2, to tell a flaky emulator from a bug
--- PASS: TestA (1.00s)
=== rig: cmd/cellvm ok after 2 rerun(s); FLAKY: TestA (3s)
=== rig: sandbox
--- FAIL: TestB (1.00s)
=== rig: sandbox: TestB failed; rerun 1 of 2, to tell a flaky emulator from a bug
--- PASS: TestB (1.00s)
=== rig: sandbox ok after 1 rerun(s); FLAKY: TestB (2s)
`
	rig := fake(t, dir, "rig", step{log, 0})
	out, code := runScript(t, []string{"RIG_RUN=" + rig, "RIG_STATE=" + dir}, "test-rig.sh")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if want := "fresh L1s: 0, test reruns: 3, packages passed only on a rerun (FLAKY): 2"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}

// TestRunKillsAnL1ThatNeverStartsItsCommand: an L1 whose boot hangs (a
// QEMU that prints nothing and never runs the command, as one was seen
// with every vCPU halted) is killed after RIG_BOOT seconds with exit 123,
// which test-rig.sh answers with a fresh L1, instead of RIG_STALL's ten
// minutes. run.sh runs from a copy of this directory whose mkinitramfs.sh
// is a fake, under a fake QEMU that only sleeps.
func TestRunKillsAnL1ThatNeverStartsItsCommand(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	if out, err := exec.Command("bash", "-c", `ls /boot/vmlinuz-* >/dev/null 2>&1 && [ -x /bin/busybox ] && command -v modinfo`).CombinedOutput(); err != nil {
		t.Skipf("run.sh needs a host kernel in /boot, a static busybox and kmod: %s", out)
	}
	tree := t.TempDir()
	nested := filepath.Join(tree, "test", "nested")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"run.sh", "init.sh"} {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(nested, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script(t, nested, "mkinitramfs.sh", `: >"$2"`+"\n")
	bin := t.TempDir()
	script(t, bin, "qemu-system-x86_64", "exec sleep 300\n")
	cmd := exec.Command(filepath.Join(nested, "run.sh"), "--timeout", "120", "--", "true")
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "RIG_BOOT=3")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 123 {
		t.Fatalf("run.sh exited %d, want 123 (a hung boot killed):\n%s", code, out)
	}
	if !strings.Contains(string(out), "did not start the command within 3s") {
		t.Errorf("run.sh did not say why it killed L1:\n%s", out)
	}
}
