package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionOfBuildInfo(t *testing.T) {
	v := versionOf(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/cellvm/cellvm", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-12-01T00:00:00Z"}, {Key: "vcs.modified", Value: "true"}}})
	s := v.String()
	for _, w := range []string{"v1.2.3", "commit 0123456789abcdef0123", "(modified)", "2026-12-01T00:00:00Z", "go1.26.8"} {
		if !strings.Contains(s, w) {
			t.Errorf("%q lacks %q", s, w)
		}
	}
	if v := versionOf(nil); v.Commit != "unknown" {
		t.Errorf("no build info: %+v", v)
	}
}

// TestVersionNamesTheCommit builds cellvm from this checkout the way the
// Makefile does and checks that `cellvm version` names the commit git has
// checked out.
func TestVersionNamesTheCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git checkout (or no git): %v", err)
	}
	wantVersionCommit(t, strings.TrimSpace(string(head)), nil,
		"-buildvcs=auto", "-ldflags", "-X main.buildCommit="+strings.TrimSpace(string(head)))
}

// wantVersionCommit builds cellvm with flags and checks that `cellvm
// version` names commit.
func wantVersionCommit(t *testing.T, commit string, env []string, flags ...string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cellvm")
	build := exec.Command("go", append(append([]string{"build"}, flags...), "-o", bin, ".")...)
	build.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "commit "+commit) {
		t.Errorf("cellvm version printed %q; want commit %s", out, commit)
	}
}

// TestVersionFromVCSStamp: in a plain clone (CI's), Go's own VCS stamp
// names the commit without the Makefile's -ldflags.
func TestVersionFromVCSStamp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout (or no git): %v", err)
	}
	if fi, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err != nil || !fi.IsDir() {
		t.Skip("a git worktree (.git is a file): Go records no VCS stamp there; the Makefile's -ldflags covers it")
	}
	head, _ := exec.Command("git", "rev-parse", "HEAD").Output()
	wantVersionCommit(t, strings.TrimSpace(string(head)), []string{"GOFLAGS="}, "-buildvcs=true")
}
