package agentclient

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cellvm/cellvm/guestinit/agent"
	"github.com/cellvm/cellvm/guestinit/proto"
)

// TestFilesAreDoneWithTheOwnersPermissions: with an Owner, the root agent
// writes and reads only what that user may: uploads where the user can
// write, owned by it; not into root's directories, not through a symlink
// the user planted towards them, and no download of root's files.
func TestFilesAreDoneWithTheOwnersPermissions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as another user")
	}
	const uid, gid = 1000, 1000
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755) // the test's own temp dirs are 0700
	os.Chmod(base, 0o755)
	userDir := filepath.Join(base, "workspace")
	rootDir := filepath.Join(base, "etc")
	for _, d := range []string{userDir, rootDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(rootDir, 0o700)
	os.Chown(userDir, uid, gid)
	secret := filepath.Join(base, "secret")
	os.WriteFile(secret, []byte("root only"), 0o600)
	if err := os.Symlink(rootDir, filepath.Join(userDir, "link")); err != nil {
		t.Fatal(err)
	}
	os.Lchown(filepath.Join(userDir, "link"), uid, gid)

	c := serve(t, agent.Config{Interp: newFake(), Files: agent.FilePolicy{Owner: &agent.Owner{UID: uid, GID: gid}}})
	dst := filepath.Join(userDir, "sub", "data.csv")
	if _, err := c.Upload(ctxT(t), dst, strings.NewReader("a,b\n"), 0); err != nil {
		t.Fatalf("upload into the user's directory: %v", err)
	}
	for _, p := range []string{dst, filepath.Dir(dst)} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if s := st.Sys().(*syscall.Stat_t); s.Uid != uid || s.Gid != gid {
			t.Errorf("%s is owned by %d:%d, want the user's %d:%d", p, s.Uid, s.Gid, uid, gid)
		}
	}
	for _, p := range []string{filepath.Join(rootDir, "passwd"), filepath.Join(userDir, "link", "passwd"), filepath.Join(base, "new")} {
		_, err := c.Upload(ctxT(t), p, strings.NewReader("evil"), 0)
		var pe *proto.Error
		if !errors.As(err, &pe) || pe.Code != proto.CodeBadPath {
			t.Errorf("upload to %s as the user: %v, want bad_path", p, err)
		}
	}
	if ents, _ := os.ReadDir(rootDir); len(ents) != 0 {
		t.Errorf("root's directory got files: %v", ents)
	}
	_, err := c.Download(ctxT(t), secret, io.Discard, 1<<20)
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Code != proto.CodeBadPath {
		t.Errorf("download of a root-only file as the user: %v, want bad_path", err)
	}
	if _, err := c.Health(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestOwnerThreadsAreHandedBack: the threads that did uploads as the
// owner live on (with the agent's credentials back). A thread that ended
// instead would fire the parent-death signal of any child Go had forked
// on it: the guest's interpreter died that way after an upload.
func TestOwnerThreadsAreHandedBack(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as another user")
	}
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	os.Chown(dir, 1000, 1000)
	c := serve(t, agent.Config{Interp: newFake(), Files: agent.FilePolicy{Owner: &agent.Owner{UID: 1000, GID: 1000}}})
	if _, err := c.Health(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	tasks := func() map[string]bool {
		ents, _ := os.ReadDir("/proc/self/task")
		m := map[string]bool{}
		for _, e := range ents {
			m[e.Name()] = true
		}
		return m
	}
	before := tasks()
	for i := 0; i < 50; i++ {
		if _, err := c.Upload(ctxT(t), filepath.Join(dir, "f"), strings.NewReader("x"), 0); err != nil {
			t.Fatal(err)
		}
	}
	after := tasks()
	for tid := range before {
		if !after[tid] {
			t.Errorf("thread %s ended during the uploads as the owner", tid)
		}
	}
	// And they have the agent's credentials back: from goroutines on any
	// thread, root can still write where only root may.
	rootOnly := filepath.Join(t.TempDir(), "root-only")
	os.Mkdir(rootOnly, 0o700)
	errc := make(chan error, 64)
	for i := range 64 {
		go func() { errc <- os.WriteFile(filepath.Join(rootOnly, strconv.Itoa(i)), nil, 0o600) }()
	}
	for range 64 {
		if err := <-errc; err != nil {
			t.Errorf("a root write after the uploads as the owner: %v", err)
		}
	}
}
