package engine

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// mountsOfType returns the mount points whose file system type is typ,
// as /proc/self/mountinfo lists them (independently of statfs).
func mountsOfType(t *testing.T, typ string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("no mountinfo: %v", err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) >= 5 && len(g) >= 1 && g[0] == typ {
			out = append(out, f[4])
		}
	}
	return out
}

// TestStateFSTellsRAMFromDisk: a directory on a tmpfs (as mountinfo
// says) is in RAM, and so is one not made yet under it; one on proc or
// the test's own temporary directory's file system (when mountinfo says
// it is no tmpfs) is not.
func TestStateFSTellsRAMFromDisk(t *testing.T) {
	tmpfs := mountsOfType(t, "tmpfs")
	var checked bool
	for _, mp := range tmpfs {
		if _, err := os.Stat(mp); err != nil {
			continue
		}
		for _, dir := range []string{mp, filepath.Join(mp, "not", "made", "yet")} {
			sfs, err := StatStateFS(dir)
			if err != nil || !sfs.InRAM {
				t.Errorf("%s (on tmpfs %s): %+v, %v; want in RAM", dir, mp, sfs, err)
			}
		}
		checked = true
		break
	}
	if !checked {
		t.Log("no tmpfs mounted here: only the other side is checked")
	}
	if sfs, err := StatStateFS("/proc"); err != nil || sfs.InRAM {
		t.Errorf("/proc: %+v, %v; want not in RAM", sfs, err)
	}
	var st syscall.Statfs_t
	tmp := t.TempDir()
	if err := syscall.Statfs(tmp, &st); err != nil {
		t.Fatal(err)
	}
	if sfs, err := StatStateFS(tmp); err != nil || sfs.InRAM != (uint32(st.Type) == tmpfsMagic) {
		t.Errorf("%s (type %#x): %+v, %v", tmp, st.Type, sfs, err)
	}
}

// TestStateFSOfADirectoryNotMadeYet measures its nearest parent.
func TestStateFSOfADirectoryNotMadeYet(t *testing.T) {
	tmp := t.TempDir()
	sfs, err := StatStateFS(filepath.Join(tmp, "a", "b", "state"))
	if err != nil {
		t.Fatal(err)
	}
	if sfs.Dir != tmp || sfs.FreeBytes <= 0 {
		t.Errorf("a state directory not made yet under %s: %+v", tmp, sfs)
	}
}

// TestDefaultImageCap: half of the free space and of what complete
// machine images (snapshots, paused sandboxes' images and the images
// resumed VMs map) take; half-written snapshots and other files are not
// images; with no space at all the cap is 1 byte, never 0 (no cap).
func TestDefaultImageCap(t *testing.T) {
	state := t.TempDir()
	write := func(rel string, n int) {
		p := filepath.Join(state, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, bytes.Repeat([]byte{1}, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("snapshots/snap-00000000000a/vm.mem", 4<<20)
	write("sandboxes/sb-1/paused/vm.mem", 2<<20)
	write("sandboxes/sb-2/backing/vm.mem", 1<<20)
	write("snapshots/snap-00000000000b.partial/vm.mem", 8<<20)
	write("workspaces/w.ext4", 8<<20)
	write("templates/t/vm.mem", 8<<20)
	c := DefaultImageCap(state, StateFS{FreeBytes: 100 << 20})
	if c.ImageBytes < 7<<20 || c.ImageBytes >= 8<<20 {
		t.Errorf("images measured %d bytes, want 7 MiB (and what their file system adds)", c.ImageBytes)
	}
	if c.FreeBytes != 100<<20 || c.Bytes != (100<<20+c.ImageBytes)/2 {
		t.Errorf("cap %+v, want half of 100 MiB free and the images' %d", c, c.ImageBytes)
	}
	if c := DefaultImageCap(t.TempDir(), StateFS{}); c.Bytes != 1 {
		t.Errorf("no free space and no images: cap %d, want 1 byte", c.Bytes)
	}
}
