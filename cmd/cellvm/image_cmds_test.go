package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/sandbox"
)

// TestImageCommands: pull, import, build (flags and a Dockerfile) and ls
// against the fake daemon, which makes images by the contract's rules
// (sandbox/sandboxtest/imagecreate.go).
func TestImageCommands(t *testing.T) {
	d := startFakeDaemon(t)
	stamp := regexp.MustCompile(`\[image [a-z0-9.-]+ \d\d:\d\d:\d\d\] `)

	// pull, the name made of the reference; the token from the
	// environment never shows.
	r := cellvmEnv(t, []string{"CELLVM_SOCKET=" + d.socket, "CELLVM_REGISTRY_TOKEN=tok-5d1e9a"}, "", "image", "pull", "python:slim")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "image python-slim pulled (python:slim sha256:") ||
		!stamp.MatchString(r.stderr) || !strings.Contains(r.stderr, "] fetch\n") || !strings.Contains(r.stderr, "] done\n") {
		t.Fatalf("image pull: %+v", r)
	}
	if strings.Contains(r.stdout+r.stderr+d.log.String(), "tok-5d1e9a") {
		t.Error("the registry token shows")
	}
	// A taken name is refused, --replace takes it.
	if r := d.cellvm(t, "image", "pull", "python:3.12-slim", "--name", "python-slim"); r.code != exitError || !strings.Contains(r.stderr, "busy") {
		t.Errorf("pull onto a taken name: %+v", r)
	}
	if r := d.cellvm(t, "image", "pull", "python:3.12-slim", "--name", "python-slim", "--replace"); r.code != 0 {
		t.Errorf("pull --replace: %+v", r)
	}
	// An unreachable registry: exit 1, the step named.
	if r := d.cellvm(t, "image", "pull", "registry.invalid/x:1"); r.code != exitError || !strings.Contains(r.stderr, "upstream") || !strings.Contains(r.stderr, "registry.invalid") {
		t.Errorf("pull from nowhere: %+v", r)
	}

	// import from stdin.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Name: "manifest.json", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	tw.Write([]byte("[]"))
	tw.Close()
	r = cellvmEnv(t, []string{"CELLVM_SOCKET=" + d.socket}, tb.String(), "image", "import", "-", "--name", "saved", "--json")
	var info sandbox.ImageInfo
	if err := json.Unmarshal([]byte(r.stdout), &info); r.code != 0 || err != nil || info.Source != "import" || info.SizeBytes != int64(tb.Len()) {
		t.Fatalf("image import -: %+v (%v)", r, err)
	}

	// build from flags: apt, pip, files, on the pulled image.
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "wheels"), 0o755)
	os.WriteFile(filepath.Join(dir, "wheels", "six-1.16.0-py2.py3-none-any.whl"), []byte("PK"), 0o644)
	os.WriteFile(filepath.Join(dir, "req.txt"), []byte("six\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "root/etc"), 0o755)
	os.WriteFile(filepath.Join(dir, "root/etc/motd"), []byte("hi\n"), 0o644)
	r = d.cellvm(t, "image", "build", "tools", "--base", "python-slim", "--apt", "jq curl", "--pip-wheels", filepath.Join(dir, "wheels"),
		"--requirements", filepath.Join(dir, "req.txt"), "--files", filepath.Join(dir, "root"))
	if r.code != 0 || !strings.HasPrefix(r.stdout, "image tools built (on python-slim") || !strings.Contains(r.stderr, "] apt\n  Setting up jq\n") ||
		strings.Index(r.stderr, "] apt\n") > strings.Index(r.stderr, "] pip\n") || strings.Index(r.stderr, "] pip\n") > strings.Index(r.stderr, "] files\n") {
		t.Fatalf("image build: %+v", r)
	}

	// build from a Dockerfile, its COPY sources in its directory.
	os.WriteFile(filepath.Join(dir, "app.py"), []byte("print(1)\n"), 0o644)
	df := filepath.Join(dir, "Dockerfile")
	os.WriteFile(df, []byte("FROM tools\nENV APP=/srv/app\nWORKDIR $APP\nCOPY app.py ./\nCMD [\"python3\", \"app.py\"]\n"), 0o644)
	r = d.cellvm(t, "image", "build", "app", "-f", df, "--json")
	if err := json.Unmarshal([]byte(r.stdout), &info); r.code != 0 || err != nil || info.Base != "tools" || info.WorkingDir != "/srv/app" ||
		!strings.Contains(r.stderr, "line 5: CMD ignored") {
		t.Fatalf("image build -f: %+v (%v)", r, err)
	}
	// A failing RUN: exit 1, the step and its output's end shown.
	os.WriteFile(df, []byte("FROM default\nRUN exit 3\n"), 0o644)
	if r := d.cellvm(t, "image", "build", "broken", "-f", df); r.code != exitError || !strings.Contains(r.stderr, `image step "run" failed`) ||
		!strings.Contains(r.stderr, "exit status 3") {
		t.Errorf("a failing build: %+v", r)
	}
	// A Dockerfile the subset refuses, and COPY out of the context: usage.
	os.WriteFile(df, []byte("FROM default\nCOPY ../x /x\n"), 0o644)
	if r := d.cellvm(t, "image", "build", "out", "-f", df); r.code != exitUsage || !strings.Contains(r.stderr, "line 2") {
		t.Errorf("COPY out of the context: %+v", r)
	}

	// ls shows where each came from.
	r = d.cellvm(t, "image", "ls")
	if r.code != 0 {
		t.Fatal(r)
	}
	lines := strings.Split(r.stdout, "\n")
	if !strings.Contains(lines[0], "SOURCE") || !strings.Contains(lines[0], "DIGEST") {
		t.Errorf("ls header: %q", lines[0])
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^python-slim .* pull +python:3\.12-slim +sha256:[0-9a-f]{12} `),
		regexp.MustCompile(`(?m)^saved .* import +- +sha256:[0-9a-f]{12} `),
		regexp.MustCompile(`(?m)^app .* build +on tools +- `),
		regexp.MustCompile(`(?m)^default .* - +- +- `),
	} {
		if !want.MatchString(r.stdout) {
			t.Errorf("ls lacks %s:\n%s", want, r.stdout)
		}
	}
}
