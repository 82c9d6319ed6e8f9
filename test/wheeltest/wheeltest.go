// Package wheeltest makes Python wheels and a package index for tests
// that install with pip where no index on the internet is reachable: a
// pure-Python wheel written by hand (the METADATA, WHEEL and RECORD pip
// checks; no build tools) and a PEP 503 "simple" index over files on disk.
package wheeltest

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Wheel is one pure-Python wheel: distribution Dist at Version, whose
// module Module has Init as its __init__.py.
type Wheel struct {
	Dist, Module, Version, Init string
	// Extra are more files at the wheel's root (installed into
	// site-packages), name to content: a .pth file, say, whose "import"
	// lines every Python start on that site runs.
	Extra map[string]string
}

// FileName is the wheel's file name.
func (w Wheel) FileName() string {
	return fmt.Sprintf("%s-%s-py3-none-any.whl", strings.ReplaceAll(w.Dist, "-", "_"), w.Version)
}

// Bytes is the wheel file.
func (w Wheel) Bytes() ([]byte, error) {
	info := fmt.Sprintf("%s-%s.dist-info/", strings.ReplaceAll(w.Dist, "-", "_"), w.Version)
	files := [][2]string{
		{w.Module + "/__init__.py", w.Init},
		{info + "METADATA", "Metadata-Version: 2.1\nName: " + w.Dist + "\nVersion: " + w.Version + "\nSummary: cellvm's test wheel\n"},
		{info + "WHEEL", "Wheel-Version: 1.0\nGenerator: cellvm-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{info + "top_level.txt", w.Module + "\n"},
	}
	extra := make([]string, 0, len(w.Extra))
	for name := range w.Extra {
		extra = append(extra, name)
	}
	sort.Strings(extra)
	for _, name := range extra {
		files = append(files, [2]string{name, w.Extra[name]})
	}
	var whl bytes.Buffer
	zw := zip.NewWriter(&whl)
	var record strings.Builder
	for _, f := range files {
		fw, err := zw.Create(f[0])
		if err != nil {
			return nil, err
		}
		fw.Write([]byte(f[1]))
		sum := sha256.Sum256([]byte(f[1]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f[0], base64.RawURLEncoding.EncodeToString(sum[:]), len(f[1]))
	}
	record.WriteString(info + "RECORD,,\n")
	fw, err := zw.Create(info + "RECORD")
	if err != nil {
		return nil, err
	}
	fw.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return whl.Bytes(), nil
}

// WriteFile writes the wheel into dir and returns its path.
func (w Wheel) WriteFile(dir string) (string, error) {
	b, err := w.Bytes()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, w.FileName())
	return p, os.WriteFile(p, b, 0o644)
}

// WriteIndex writes a simple index of wheels under dir, to be served from
// dir's root: packages/FILE, simple/index.html and simple/DIST/index.html
// with each file's sha256. Each wheel's distribution name is its project.
func WriteIndex(dir string, wheels ...Wheel) error {
	byDist := map[string][]string{}
	var order []string
	for _, w := range wheels {
		b, err := w.Bytes()
		if err != nil {
			return err
		}
		if err := write(filepath.Join(dir, "packages", w.FileName()), b); err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		if _, ok := byDist[w.Dist]; !ok {
			order = append(order, w.Dist)
		}
		byDist[w.Dist] = append(byDist[w.Dist], fmt.Sprintf("<a href=\"/packages/%s#sha256=%s\">%s</a>", w.FileName(), hex.EncodeToString(sum[:]), w.FileName()))
	}
	var root strings.Builder
	for _, d := range order {
		fmt.Fprintf(&root, "<a href=\"%s/\">%s</a>", d, d)
		page := "<!DOCTYPE html>\n<html><body>" + strings.Join(byDist[d], "\n") + "</body></html>\n"
		if err := write(filepath.Join(dir, "simple", d, "index.html"), []byte(page)); err != nil {
			return err
		}
	}
	return write(filepath.Join(dir, "simple", "index.html"), []byte("<!DOCTYPE html>\n<html><body>"+root.String()+"</body></html>\n"))
}

func write(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}
