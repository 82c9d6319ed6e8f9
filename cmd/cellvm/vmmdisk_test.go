package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A disk passed by descriptor becomes the VMM's open file; a descriptor
// that is stdio, closed, or not a regular file is refused with a message
// that names the disk.
func TestVMMDisksByDescriptor(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "ws.ext4"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ds, err := vmmDisks([]VMMDisk{{Path: "/rootfs.ext4", ReadOnly: true}, {Path: "workspace notes", FD: int(f.Fd())}})
	if err != nil || len(ds) != 2 || ds[0].File != nil || ds[0].Path != "/rootfs.ext4" || ds[1].File == nil || ds[1].ReadOnly {
		t.Fatalf("vmmDisks = %+v, %v", ds, err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, fd := range map[string]int{"stdout": 1, "a pipe": int(r.Fd()), "closed": 1000} {
		if _, err := vmmDisks([]VMMDisk{{Path: "workspace x", FD: fd}}); err == nil || !strings.Contains(err.Error(), "disk 0") {
			t.Errorf("%s as a disk: %v, want an error naming disk 0", name, err)
		}
	}
}
