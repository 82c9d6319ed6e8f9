package engine

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPreallocateMemory: a fresh memory file on a tmpfs is allocated at
// the guest's size (the daemon pays for its pages, not the VMM's cgroup);
// on a disk it is left empty.
func TestPreallocateMemory(t *testing.T) {
	var sfs unix.Statfs_t
	if unix.Statfs("/dev/shm", &sfs) != nil || sfs.Type != unix.TMPFS_MAGIC {
		t.Skip("no tmpfs at /dev/shm")
	}
	f, err := os.CreateTemp("/dev/shm", "mem")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	did, err := preallocateMemory(f, 8)
	if err != nil || !did {
		t.Fatalf("preallocate on a tmpfs: %v, %v", did, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 8<<20 || st.Blocks*512 < 8<<20 {
		t.Fatalf("after preallocating 8 MiB: size %d, %d bytes allocated", st.Size, st.Blocks*512)
	}

	d, err := os.CreateTemp(t.TempDir(), "mem")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var dfs unix.Statfs_t
	if unix.Fstatfs(int(d.Fd()), &dfs) == nil && dfs.Type == unix.TMPFS_MAGIC {
		return // the test directory is a tmpfs too: nothing more to show
	}
	if did, err := preallocateMemory(d, 8); err != nil || did {
		t.Fatalf("preallocate on a disk: %v, %v; want nothing done", did, err)
	}
	if fi, _ := d.Stat(); fi.Size() != 0 {
		t.Fatalf("a memory file on a disk was sized to %d", fi.Size())
	}
}

// TestNeedPrealloc: a snapshot (the VM goes on) always preallocates; a
// pause only when its cgroup could not hold a second copy of what it
// holds; no cgroup, or no limit, never; an unreadable cgroup is the safe
// side.
func TestNeedPrealloc(t *testing.T) {
	cg := func(current, max string) string {
		d := t.TempDir()
		if current != "" {
			os.WriteFile(filepath.Join(d, "memory.current"), []byte(current+"\n"), 0o600)
		}
		if max != "" {
			os.WriteFile(filepath.Join(d, "memory.max"), []byte(max+"\n"), 0o600)
		}
		return d
	}
	for _, c := range []struct {
		name   string
		dir    string
		goesOn bool
		want   bool
	}{
		{"no cgroup", "", true, false},
		{"snapshot", cg("100", "1000"), true, true},
		{"pause with room", cg("400", "1000"), false, false},
		{"pause of a full guest", cg("600", "1000"), false, true},
		{"pause without a limit", cg("600", "max"), false, false},
		{"pause, unreadable", cg("", ""), false, true},
	} {
		if got := needPrealloc(c.dir, c.goesOn); got != c.want {
			t.Errorf("%s: needPrealloc = %v, want %v", c.name, got, c.want)
		}
	}
}
