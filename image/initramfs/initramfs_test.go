package initramfs

import (
	"bytes"
	"io"
	"testing"

	"github.com/u-root/u-root/pkg/cpio"
)

func TestWriteReadBack(t *testing.T) {
	var buf bytes.Buffer
	err := Write(&buf, []Entry{
		{Path: "/bin/busybox", Mode: 0o755, Data: []byte("ELF...")},
		{Path: "bin/sh", Symlink: "busybox"},
		{Path: "init", Mode: 0o755, Data: []byte("#!/bin/sh\n")},
		{Path: "proc", Dir: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := cpio.ReadAllRecords(cpio.Newc.Reader(bytes.NewReader(buf.Bytes())))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]cpio.Record{}
	var order []string
	for _, r := range recs {
		got[r.Name] = r
		order = append(order, r.Name)
	}
	if order[0] != "bin" {
		t.Errorf("parent directory not first: %v", order)
	}
	bb, ok := got["bin/busybox"]
	if !ok || bb.Mode&0o777 != 0o755 || bb.Mode&cpio.S_IFMT != cpio.S_IFREG {
		t.Fatalf("bin/busybox: %+v", bb.Info)
	}
	data, _ := io.ReadAll(io.NewSectionReader(bb.ReaderAt, 0, int64(bb.FileSize)))
	if string(data) != "ELF..." {
		t.Errorf("contents %q", data)
	}
	if got["bin/sh"].Mode&cpio.S_IFMT != cpio.S_IFLNK || got["proc"].Mode&cpio.S_IFMT != cpio.S_IFDIR {
		t.Error("symlink or directory type wrong")
	}
	if bb.MTime != 0 || bb.UID != 0 {
		t.Error("not reproducible")
	}
	var again bytes.Buffer
	Write(&again, []Entry{
		{Path: "/bin/busybox", Mode: 0o755, Data: []byte("ELF...")},
		{Path: "bin/sh", Symlink: "busybox"},
		{Path: "init", Mode: 0o755, Data: []byte("#!/bin/sh\n")},
		{Path: "proc", Dir: true},
	})
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Error("same entries, different archive")
	}
}

func TestEmptyPath(t *testing.T) {
	if err := Write(io.Discard, []Entry{{Path: "/"}}); err == nil {
		t.Error("empty path accepted")
	}
}
