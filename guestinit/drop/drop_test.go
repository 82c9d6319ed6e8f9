package drop

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Arg {
		os.Exit(Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// run starts argv through the drop step of this test binary as root with
// oom_score_adj -1000 (as the agent has it) and returns its output.
func run(t *testing.T, s Spec, argv ...string) (string, int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	line := s.Command(os.Args[0], argv)
	// Lowering needs CAP_SYS_RESOURCE, which the guest's init has and a
	// container may not; then the test starts from 0.
	cmd := exec.Command("/bin/sh", "-c", `echo -1000 2>/dev/null > /proc/self/oom_score_adj; exec "$@"`, "sh")
	cmd.Args = append(cmd.Args, line...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// TestDropsToTheCellUser: the program runs as the given uid and gid with
// no groups and no capabilities, no_new_privs set, oom_score_adj 0, and
// cannot go back below 0.
func TestDropsToTheCellUser(t *testing.T) {
	out, code := run(t, Spec{UID: 1000, GID: 1000}, "/bin/sh", "-c",
		`id -u; id -g; id -G; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; cat /proc/self/oom_score_adj; echo -1000 2>/dev/null > /proc/self/oom_score_adj && echo LOWERED || echo REFUSED`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	want := []string{"1000", "1000", "1000", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "0", "REFUSED"}
	got := strings.Split(strings.TrimSpace(out), "\n")
	if len(got) < len(want) {
		t.Fatalf("output %q", out)
	}
	for i, w := range want {
		if got[len(got)-len(want)+i] != w {
			t.Errorf("line %d: %q, want %q (all: %q)", i, got[len(got)-len(want)+i], w, out)
		}
	}
}

func TestRootKeepsRootButLeavesTheOOMShield(t *testing.T) {
	out, code := run(t, Spec{Root: true}, "/bin/sh", "-c", `id -u; cat /proc/self/oom_score_adj`)
	if code != 0 || strings.TrimSpace(out) != "0\n0" {
		t.Fatalf("exit %d, output %q; want uid 0 and oom_score_adj 0", code, out)
	}
}

func TestMissingProgramIs127(t *testing.T) {
	out, code := run(t, Spec{UID: 1000, GID: 1000}, "/no/such/program")
	if code != ExitNotFound || !strings.Contains(out, "/no/such/program") {
		t.Fatalf("exit %d, output %q", code, out)
	}
}

func TestRefusesRootAsTheCellUser(t *testing.T) {
	if _, code := run(t, Spec{UID: 0, GID: 0}, "/bin/true"); code == 0 {
		t.Fatal("uid 0 accepted as the unprivileged user")
	}
}
