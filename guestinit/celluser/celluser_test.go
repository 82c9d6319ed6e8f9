package celluser

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestEnsureAddsTheUserOnceAndHandsOverItsDirectories(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.MkdirAll(filepath.Join(root, "workspace"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/bash"), 0o644) // no final newline
	os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\n"), 0o644)
	for range 2 {
		if err := Ensure(root, "/workspace"); err != nil {
			t.Fatal(err)
		}
	}
	pw, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if want := "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000:cellvm cells:/home/user:/bin/sh\n"; string(pw) != want {
		t.Errorf("passwd after two Ensures:\n%s\nwant:\n%s", pw, want)
	}
	if gr, _ := os.ReadFile(filepath.Join(root, "etc/group")); strings.Count(string(gr), "user:x:1000:") != 1 {
		t.Errorf("group: %q", gr)
	}
	for _, d := range []string{"home/user", "workspace"} {
		st, err := os.Stat(filepath.Join(root, d))
		if err != nil {
			t.Fatal(err)
		}
		if s := st.Sys().(*syscall.Stat_t); s.Uid != UID || s.Gid != GID {
			t.Errorf("%s is owned by %d:%d, want %d:%d", d, s.Uid, s.Gid, UID, GID)
		}
	}
}

func TestEnsureKeepsAnExistingUserWithTheID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("debian:x:1000:1000::/home/debian:/bin/bash\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/group"), []byte("debian:x:1000:\n"), 0o644)
	if err := Ensure(root); err != nil {
		t.Fatal(err)
	}
	if pw, _ := os.ReadFile(filepath.Join(root, "etc/passwd")); strings.Contains(string(pw), "cell:") {
		t.Errorf("a second user with uid 1000 was added:\n%s", pw)
	}
}

// TestEnsureOnAnEmptyRoot: a busybox or distroless image may have no
// /etc, /etc/passwd, /etc/group or /home; the user is added all the same,
// with a home it can reach, and a dangling link in passwd's place is
// replaced rather than followed.
func TestEnsureOnAnEmptyRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	root := t.TempDir()
	if err := Ensure(root); err != nil {
		t.Fatalf("Ensure on an empty root: %v", err)
	}
	pw, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil || string(pw) != "user:x:1000:1000:cellvm cells:/home/user:/bin/sh\n" {
		t.Errorf("passwd = %q, %v", pw, err)
	}
	if gr, err := os.ReadFile(filepath.Join(root, "etc/group")); err != nil || string(gr) != "user:x:1000:\n" {
		t.Errorf("group = %q, %v", gr, err)
	}
	st, err := os.Stat(filepath.Join(root, "home"))
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("/home made with %v, %v; want 0755 so the user reaches its home", st.Mode(), err)
	}
	st, err = os.Stat(filepath.Join(root, "home/user"))
	if err != nil || st.Mode().Perm() != 0o750 || st.Sys().(*syscall.Stat_t).Uid != UID {
		t.Errorf("home: %v, %v", st, err)
	}

	root = t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	outside := filepath.Join(t.TempDir(), "nowhere", "passwd")
	os.Symlink(outside, filepath.Join(root, "etc/passwd"))
	if err := Ensure(root); err != nil {
		t.Fatalf("Ensure with a dangling passwd link: %v", err)
	}
	if _, err := os.Stat(outside); err == nil {
		t.Error("the dangling link was followed")
	}
	if st, err := os.Lstat(filepath.Join(root, "etc/passwd")); err != nil || !st.Mode().IsRegular() {
		t.Errorf("passwd is %v, %v; want a regular file", st, err)
	}
}
