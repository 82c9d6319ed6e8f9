package recipe

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func write(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

type entry struct {
	typ  byte
	mode int64
	body string
	link string
}

func readArchive(t *testing.T, b []byte) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d", h.Name, h.Uid, h.Gid)
		}
		out[h.Name] = entry{h.Typeflag, h.Mode & 0o7777, string(body), h.Linkname}
	}
}

func TestWriteArchive(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "files/etc/motd"), "hello\n", 0o644)
	write(t, filepath.Join(dir, "files/usr/local/bin/tool"), "#!/bin/sh\n", 0o755)
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "files/link")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "req.txt"), "six\n", 0o600)
	files := []ArchiveFile{{filepath.Join(dir, "files"), "files"}, {filepath.Join(dir, "req.txt"), "requirements.txt"}}
	n, err := Scan(files, "", 1<<20)
	if err != nil || n != int64(len("hello\n#!/bin/sh\nsix\n")) {
		t.Fatalf("Scan = %d, %v", n, err)
	}
	var b bytes.Buffer
	if err := WriteArchive(&b, files, "", 1<<20); err != nil {
		t.Fatal(err)
	}
	got := readArchive(t, b.Bytes())
	for name, want := range map[string]entry{
		"files/etc/motd":           {tar.TypeReg, 0o644, "hello\n", ""},
		"files/usr/local/bin/tool": {tar.TypeReg, 0o755, "#!/bin/sh\n", ""},
		"files/link":               {tar.TypeSymlink, 0o777, "", "/etc/passwd"},
		"requirements.txt":         {tar.TypeReg, 0o600, "six\n", ""},
		"files/etc/":               {tar.TypeDir, 0o755, "", ""},
	} {
		if g, ok := got[name]; !ok || g != want {
			t.Errorf("%s: %+v (there: %v), want %+v", name, g, ok, want)
		}
	}
	// Past the limit.
	if _, err := Scan(files, "", 8); !errors.Is(err, ErrBadInput) {
		t.Errorf("Scan past the limit: %v", err)
	}
	if err := WriteArchive(io.Discard, files, "", 8); !errors.Is(err, ErrBadInput) {
		t.Errorf("WriteArchive past the limit: %v", err)
	}
	// A FIFO is refused, before anything is sent.
	if err := syscall.Mkfifo(filepath.Join(dir, "files/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Scan(files, "", 1<<20); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "fifo") {
		t.Errorf("a FIFO: %v", err)
	}
	// Missing, and the same archive path twice.
	if _, err := Scan([]ArchiveFile{{filepath.Join(dir, "none"), "x"}}, "", 1<<20); !errors.Is(err, ErrBadInput) {
		t.Errorf("missing: %v", err)
	}
	if _, err := Scan([]ArchiveFile{{filepath.Join(dir, "req.txt"), "x"}, {filepath.Join(dir, "req.txt"), "x/"}}, "", 1<<20); !errors.Is(err, ErrBadInput) {
		t.Errorf("twice: %v", err)
	}
}

// TestArchiveStaysInContext: a Dockerfile's sources cannot reach out of
// the context through a link on the way.
func TestArchiveStaysInContext(t *testing.T) {
	outside := t.TempDir()
	write(t, filepath.Join(outside, "secret"), "s3cret", 0o600)
	ctx := t.TempDir()
	write(t, filepath.Join(ctx, "app/main.py"), "print(1)\n", 0o644)
	if err := os.Symlink(outside, filepath.Join(ctx, "out")); err != nil {
		t.Fatal(err)
	}
	d, err := Parse(strings.NewReader("FROM default\nCOPY out/secret /x\nRUN true\n"), ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Scan(d.Files, ctx, 1<<20); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "outside the build context") {
		t.Errorf("a link out of the context: %v", err)
	}
	// The link itself is copied as a link, and a directory's contents go
	// to DEST.
	d, err = Parse(strings.NewReader("FROM default\nCOPY out app /dst/\n"), ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.ResolveDirs(); err != nil {
		t.Fatal(err)
	}
	if got := d.Recipe.Steps[0].CopyTo + " " + d.Recipe.Steps[1].CopyTo; got != "/dst/out /dst" {
		t.Errorf("CopyTo: %s", got)
	}
	var b bytes.Buffer
	if err := WriteArchive(&b, d.Files, ctx, 1<<20); err != nil {
		t.Fatal(err)
	}
	got := readArchive(t, b.Bytes())
	if got["copy/0"].link != outside || got["copy/1/main.py"].body != "print(1)\n" {
		t.Errorf("archive %+v", got)
	}
}
