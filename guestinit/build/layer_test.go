package build

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// ent is a test's tar entry.
type ent struct {
	name, link, body string
	typ              byte
	mode             int64
	uid, gid         int
	major, minor     int64
	xattrs           map[string]string
}

var mtime = time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)

func tarOf(t testing.TB, ents ...ent) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.gid,
			Devmajor: e.major, Devminor: e.minor, ModTime: mtime, Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		for k, v := range e.xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// jail is a root one level down a temp dir, next to a sentinel and a
// victim directory that nothing may touch.
type jail struct {
	parent, root, victim string
	before               string
}

func newJail(t testing.TB) *jail {
	if os.Geteuid() != 0 {
		t.Skip("the applier's tests need root (owners, devices)")
	}
	p := t.TempDir()
	j := &jail{parent: p, root: filepath.Join(p, "root"), victim: filepath.Join(p, "victim")}
	for _, d := range []string{j.root, j.victim} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(p, "sentinel"), []byte("keep"), 0o644)
	os.WriteFile(filepath.Join(j.victim, "file"), []byte("victim"), 0o644)
	j.before = j.outside(t)
	return j
}

// outside lists everything outside the root: names, types, sizes.
func (j *jail) outside(t testing.TB) string {
	var b strings.Builder
	filepath.Walk(j.parent, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		if p == j.root {
			return filepath.SkipDir
		}
		data := ""
		if fi.Mode().IsRegular() {
			d, _ := os.ReadFile(p)
			data = string(d)
		}
		b.WriteString(p + " " + fi.Mode().String() + " " + data + "\n")
		return nil
	})
	return b.String()
}

func (j *jail) check(t testing.TB) {
	t.Helper()
	if got := j.outside(t); got != j.before {
		t.Fatalf("something outside the root changed:\nbefore:\n%s\nafter:\n%s", j.before, got)
	}
}

func (j *jail) apply(t testing.TB, a *Applier, data []byte) error {
	t.Helper()
	if a.Root == nil {
		r, err := OpenRoot(j.root)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		a.Root = r
	}
	return a.Apply(bytes.NewReader(data))
}

func (j *jail) p(name string) string { return filepath.Join(j.root, name) }

func TestApplyKinds(t *testing.T) {
	j := newJail(t)
	a := &Applier{}
	err := j.apply(t, a, tarOf(t,
		ent{name: "usr/", typ: tar.TypeDir, mode: 0o755},
		ent{name: "usr/bin/", typ: tar.TypeDir, mode: 0o755},
		ent{name: "usr/bin/su", body: "#!/bin/sh\n", mode: 0o4755, uid: 0, gid: 0},
		ent{name: "home/u/", typ: tar.TypeDir, mode: 0o750, uid: 1000, gid: 1001},
		ent{name: "home/u/f", body: "hello", mode: 0o640, uid: 1000, gid: 1001, xattrs: map[string]string{"user.note": "n1", "trusted.t": "t1"}},
		ent{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		ent{name: "bin", typ: tar.TypeSymlink, link: "usr/bin"},
		ent{name: "usr/bin/su2", typ: tar.TypeLink, link: "usr/bin/su"},
		ent{name: "dev/null", typ: tar.TypeChar, major: 1, minor: 3, mode: 0o666},
		ent{name: "dev/loop9", typ: tar.TypeBlock, major: 7, minor: 9, mode: 0o660, gid: 6},
		ent{name: "run/fifo", typ: tar.TypeFifo, mode: 0o620},
		ent{name: "/abs/name", body: "abs"},
		ent{name: "./dot/name", body: "dot"},
	))
	if err != nil {
		t.Fatal(err)
	}
	j.check(t)
	st := func(name string) unix.Stat_t {
		var s unix.Stat_t
		if err := unix.Lstat(j.p(name), &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := st("usr/bin/su"); s.Mode&0o7777 != 0o4755 || s.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Errorf("su mode %o", s.Mode)
	}
	if s := st("home/u/f"); s.Uid != 1000 || s.Gid != 1001 || s.Mode&0o777 != 0o640 {
		t.Errorf("f %d:%d %o", s.Uid, s.Gid, s.Mode)
	}
	if s := st("home/u"); s.Uid != 1000 || s.Mode&0o777 != 0o750 {
		t.Errorf("home/u %d %o", s.Uid, s.Mode)
	}
	if s := st("tmp"); s.Mode&0o7777 != 0o1777 {
		t.Errorf("tmp %o", s.Mode)
	}
	if s := st("usr/bin"); time.Unix(s.Mtim.Unix()).UTC() != mtime {
		t.Errorf("usr/bin mtime %v, want %v", time.Unix(s.Mtim.Unix()), mtime)
	}
	if s := st("usr/bin/su"); time.Unix(s.Mtim.Unix()).UTC() != mtime {
		t.Errorf("su mtime %v", time.Unix(s.Mtim.Unix()))
	}
	if l, _ := os.Readlink(j.p("bin")); l != "usr/bin" {
		t.Errorf("bin -> %q", l)
	}
	if s1, s2 := st("usr/bin/su"), st("usr/bin/su2"); s1.Ino != s2.Ino || s1.Nlink != 2 {
		t.Errorf("hard link: inodes %d %d, links %d", s1.Ino, s2.Ino, s1.Nlink)
	}
	if s := st("dev/null"); s.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(s.Rdev) != 1 || unix.Minor(s.Rdev) != 3 || s.Mode&0o777 != 0o666 {
		t.Errorf("dev/null %o %d", s.Mode, s.Rdev)
	}
	if s := st("dev/loop9"); s.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Minor(s.Rdev) != 9 || s.Gid != 6 {
		t.Errorf("dev/loop9 %o %d", s.Mode, s.Rdev)
	}
	if s := st("run/fifo"); s.Mode&unix.S_IFMT != unix.S_IFIFO || s.Mode&0o777 != 0o620 {
		t.Errorf("fifo %o", s.Mode)
	}
	buf := make([]byte, 64)
	for attr, want := range map[string]string{"user.note": "n1", "trusted.t": "t1"} {
		n, err := unix.Lgetxattr(j.p("home/u/f"), attr, buf)
		if err != nil {
			if err == unix.ENOTSUP {
				t.Logf("xattr %s: the test's file system takes none", attr)
				continue
			}
			t.Errorf("xattr %s: %v", attr, err)
		} else if string(buf[:n]) != want {
			t.Errorf("xattr %s = %q", attr, buf[:n])
		}
	}
	for name, want := range map[string]string{"abs/name": "abs", "dot/name": "dot", "home/u/f": "hello"} {
		if b, _ := os.ReadFile(j.p(name)); string(b) != want {
			t.Errorf("%s = %q, want %q", name, b, want)
		}
	}
}

func TestApplyWhiteouts(t *testing.T) {
	j := newJail(t)
	a := &Applier{}
	if err := j.apply(t, a, tarOf(t,
		ent{name: "a/", typ: tar.TypeDir},
		ent{name: "a/x", body: "x"},
		ent{name: "a/y", body: "y"},
		ent{name: "a/sub/deep", body: "d"},
		ent{name: "b", body: "b"},
		ent{name: "d/old1", body: "o"},
		ent{name: "d/sub/old2", body: "o"},
		ent{name: "d/keep/", typ: tar.TypeDir},
	)); err != nil {
		t.Fatal(err)
	}
	if err := j.apply(t, a, tarOf(t,
		ent{name: "a/.wh.x", body: ""},
		ent{name: "a/.wh.sub", body: ""},
		ent{name: ".wh.b", body: ""},
		ent{name: ".wh.nothere", body: ""},
		ent{name: "nodir/.wh.x", body: ""},
		ent{name: "d/keep/new1", body: "n"},
		ent{name: "d/.wh..wh..opq", body: ""},
		ent{name: "d/new2", body: "n"},
	)); err != nil {
		t.Fatal(err)
	}
	j.check(t)
	for _, gone := range []string{"a/x", "a/sub", "b", "d/old1", "d/sub"} {
		if _, err := os.Lstat(j.p(gone)); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v)", gone, err)
		}
	}
	for _, there := range []string{"a/y", "d/keep/new1", "d/new2"} {
		if _, err := os.Lstat(j.p(there)); err != nil {
			t.Errorf("%s: %v", there, err)
		}
	}
	if _, err := os.Lstat(j.p("a/.wh.x")); !os.IsNotExist(err) {
		t.Error("the whiteout itself was written")
	}
	if _, err := os.Lstat(j.p("nodir")); !os.IsNotExist(err) {
		t.Error("a whiteout made its directory")
	}
}

// The tar-slips: every way out of the root leads inside it or is refused.
func TestApplyTarSlip(t *testing.T) {
	j := newJail(t)
	a := &Applier{}
	err := j.apply(t, a, tarOf(t,
		// An absolute link to the victim, then a file through it: lands
		// in ROOT/<victim>/file.
		ent{name: "opt/x", typ: tar.TypeSymlink, link: j.victim},
		ent{name: "opt/x/file", body: "slipped"},
		ent{name: "opt/x/new", body: "slipped"},
		// A relative link climbing out, and a file through it.
		ent{name: "opt/up", typ: tar.TypeSymlink, link: "../../../../../../../.."},
		ent{name: "opt/up/sentinel", body: "slipped"},
		ent{name: "opt/up/up2/f", body: "slipped"},
		// A link replaced by a file: the file replaces the link.
		ent{name: "etc/passwd", typ: tar.TypeSymlink, link: filepath.Join(j.victim, "file")},
		ent{name: "etc/passwd", body: "root:x:0:0::/root:/bin/sh\n"},
		// A link to a directory outside, then a whiteout through it.
		ent{name: "esc", typ: tar.TypeSymlink, link: j.parent},
		ent{name: "esc/.wh.sentinel", body: ""},
		ent{name: "esc/victim2/.wh..wh..opq", body: ""},
		// A dangling link through a dangling link.
		ent{name: "l1", typ: tar.TypeSymlink, link: "/l2/a"},
		ent{name: "l2", typ: tar.TypeSymlink, link: "../../made"},
		ent{name: "l1/b/c", body: "deep"},
	))
	if err != nil {
		t.Fatal(err)
	}
	j.check(t)
	for name, want := range map[string]string{
		filepath.Join(j.victim, "file"): "slipped",
		filepath.Join(j.victim, "new"):  "slipped",
		"sentinel":                      "slipped",
		"up2/f":                         "slipped",
		"made/a/b/c":                    "deep",
		"etc/passwd":                    "root:x:0:0::/root:/bin/sh\n",
	} {
		if b, err := os.ReadFile(j.p(name)); string(b) != want {
			t.Errorf("ROOT/%s = %q (%v), want %q", name, b, err, want)
		}
	}
	if fi, err := os.Lstat(j.p("etc/passwd")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("etc/passwd: %v %v", fi, err)
	}

	// Refused outright, with nothing written.
	for _, bad := range [][]ent{
		{{name: "../../etc/x", body: "x"}},
		{{name: "a/../../x", body: "x"}},
		{{name: "hl", typ: tar.TypeLink, link: "../sentinel"}},
		{{name: "hl", typ: tar.TypeLink, link: "../../../../sentinel"}},
		{{name: "hl", typ: tar.TypeLink, link: j.parent + "/sentinel"}}, // absent in the root
		{{name: "hl", typ: tar.TypeLink, link: "esc/sentinel"}},         // through a link: ROOT/sentinel? no: esc -> parent (in root: absent)
		{{name: "dirlink", typ: tar.TypeLink, link: "opt"}},
		{{name: "x", typ: tar.TypeSymlink, link: ""}},
		{{name: strings.Repeat("a/", 2100) + "f", body: "x"}},
		{{name: "d", typ: tar.TypeDir}, {name: "d/s", typ: 'S'}},
	} {
		err := j.apply(t, &Applier{Root: a.Root}, tarOf(t, bad...))
		if err == nil {
			t.Errorf("%q: applied", clip(bad[len(bad)-1].name))
		} else {
			t.Logf("%q: %v", clip(bad[len(bad)-1].name), err)
		}
		j.check(t)
	}
	var st unix.Stat_t
	unix.Stat(filepath.Join(j.parent, "sentinel"), &st)
	if st.Nlink != 1 {
		t.Errorf("the sentinel has %d links", st.Nlink)
	}
}

func TestApplyLimits(t *testing.T) {
	j := newJail(t)
	err := j.apply(t, &Applier{MaxEntries: 2}, tarOf(t, ent{name: "a", body: "1"}, ent{name: "b", body: "2"}, ent{name: "c", body: "3"}))
	if err == nil || !strings.Contains(err.Error(), "more than 2 entries") {
		t.Errorf("entries: %v", err)
	}
	a := &Applier{MaxBytes: 10}
	if err := j.apply(t, a, tarOf(t, ent{name: "a", body: "12345"})); err != nil {
		t.Fatal(err)
	}
	if err := j.apply(t, a, tarOf(t, ent{name: "b", body: "123456"})); err == nil || !strings.Contains(err.Error(), "exceed") {
		t.Errorf("bytes: %v", err)
	}
	if a.Written() != 5 {
		t.Errorf("written %d", a.Written())
	}
	// A truncated archive is an error, not a partial success.
	data := tarOf(t, ent{name: "big", body: strings.Repeat("x", 10000)})
	if err := j.apply(t, &Applier{}, data[:3000]); err == nil {
		t.Error("a truncated layer applied")
	}
	j.check(t)
}

func TestApplyInputsMode(t *testing.T) {
	j := newJail(t)
	a := &Applier{Inputs: true}
	if err := j.apply(t, a, tarOf(t,
		ent{name: "inputs/files/.wh.keep", body: "literal", uid: 1000, mode: 0o4755},
	)); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(j.p("inputs/files/.wh.keep"), &st); err != nil || st.Uid != 0 || st.Mode&0o7777 != 0o4755 {
		t.Errorf("inputs file: %v uid %d mode %o", err, st.Uid, st.Mode)
	}
	if err := j.apply(t, a, tarOf(t, ent{name: "inputs/dev", typ: tar.TypeChar, major: 1, minor: 3})); err == nil {
		t.Error("a device among the inputs")
	}
}

func TestDecompress(t *testing.T) {
	plain := tarOf(t, ent{name: "f", body: "content"})
	var gz, zs bytes.Buffer
	gw := gzip.NewWriter(&gz)
	gw.Write(plain)
	gw.Close()
	zw, _ := zstd.NewWriter(&zs)
	zw.Write(plain)
	zw.Close()
	for _, c := range []struct {
		mt   string
		data []byte
		ok   bool
	}{
		{"application/vnd.oci.image.layer.v1.tar", plain, true},
		{"application/vnd.oci.image.layer.v1.tar+gzip", gz.Bytes(), true},
		{"application/vnd.docker.image.rootfs.diff.tar.gzip", gz.Bytes(), true},
		{"application/vnd.oci.image.layer.v1.tar+zstd", zs.Bytes(), true},
		{"application/vnd.oci.image.layer.v1.tar", gz.Bytes(), true}, // by its magic
		{"application/vnd.oci.image.layer.v1.tar+gzip", plain, false},
		{"application/vnd.oci.image.layer.v1.tar+zstd", gz.Bytes(), false},
	} {
		r, done, err := Decompress(bytes.NewReader(c.data), c.mt)
		if err != nil {
			if c.ok {
				t.Errorf("%s: %v", c.mt, err)
			}
			continue
		}
		got, err := io.ReadAll(r)
		done()
		if !c.ok {
			t.Errorf("%s: opened a mismatched blob", c.mt)
		} else if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%s: %v, %d bytes", c.mt, err, len(got))
		}
	}
}

// FuzzApply applies random small archives (built from a vocabulary of
// hostile names and links) and random bytes: no panic, nothing outside.
func FuzzApply(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte("\x03\x07\x01\x02\x05\x0b\x0c"))
	f.Add(tarOf(f, ent{name: "a", body: "x"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		j := newJail(t)
		r, err := OpenRoot(j.root)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		a := &Applier{Root: r, MaxEntries: 64, MaxBytes: 1 << 16}
		a.Apply(bytes.NewReader(data)) // as raw bytes
		names := []string{"a", "b", "a/b", "../x", "/abs", "opt/x", "opt/x/f", ".wh.a", "a/.wh..wh..opq",
			"esc/f", "esc/.wh.sentinel", "esc/victim/.wh..wh..opq", "victim/file", "..", ".", "l1", "l2", "l1/b/c", "l2/x/.wh..wh..opq"}
		links := []string{j.victim, j.parent, "../../..", "/", "a", "esc", j.parent + "/sentinel", "../sentinel", "", "/l2/a", "../../made", "l1", "l2/../l1"}
		var ents []ent
		for i := 0; i+2 < len(data) && len(ents) < 32; i += 3 {
			e := ent{name: names[int(data[i])%len(names)], link: links[int(data[i+2])%len(links)]}
			switch data[i+1] % 6 {
			case 0:
				e.typ, e.body = tar.TypeReg, "x"
			case 1:
				e.typ = tar.TypeDir
			case 2:
				e.typ = tar.TypeSymlink
				if e.link == "" {
					e.link = "x"
				}
			case 3:
				e.typ = tar.TypeLink
				if e.link == "" {
					e.link = "x"
				}
			case 4:
				e.typ = tar.TypeFifo
			case 5:
				e.typ, e.name = tar.TypeSymlink, "esc"
			}
			ents = append(ents, e)
		}
		// Applied one entry per layer too, so that each is tried whatever
		// the ones before did.
		a.Apply(bytes.NewReader(tarOf(t, ents...)))
		for _, e := range ents {
			a.Apply(bytes.NewReader(tarOf(t, e)))
		}
		j.check(t)
	})
}
