package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// listenCell serves HTTP on the fake sandbox's port for the cell
// "listen:PORT": each answer names the path asked for.
func listenCell(m *sandboxtest.Manager, c *sandboxtest.Cell) (cell.Result, error) {
	port, err := strconv.Atoi(strings.TrimPrefix(c.Code, cellListen))
	if err != nil {
		return cell.Result{}, err
	}
	ln, err := m.ListenPort(c.Sandbox, port)
	if err != nil {
		return cell.Result{}, err
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "guest port %d: %s", port, r.URL.Path)
	}))
	return cell.Result{Status: cell.StatusOK, StateKept: true}, nil
}

// TestCopyTreeAndList: `cp -r` copies a directory tree in and back out
// unchanged (into an existing directory, as cp does), and `ls` shows it.
func TestCopyTreeAndList(t *testing.T) {
	d := startFakeDaemon(t)
	id := strings.TrimSpace(d.cellvm(t, "sandbox", "create").stdout)
	src := filepath.Join(t.TempDir(), "proj")
	files := map[string]string{"a.txt": "alpha", "sub/b.txt": "beta", "sub/deeper/c.bin": "\x00\x01gamma"}
	for name, data := range files {
		p := filepath.Join(src, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(data), 0o644)
	}
	os.MkdirAll(filepath.Join(src, "empty"), 0o755)
	if r := d.cellvm(t, "cp", "-r", src, id+":/workspace"); r.code != 0 || !strings.Contains(r.stderr, "copied 3 files") {
		t.Fatalf("cp -r in: %+v", r)
	}
	r := d.cellvm(t, "ls", id, "/workspace/proj")
	if r.code != 0 || r.stdout != "a.txt\nempty/\nsub/\n" {
		t.Fatalf("ls: %+v", r)
	}
	if r := d.cellvm(t, "ls", id, "/workspace/proj", "--depth", "3", "-l"); r.code != 0 || !strings.Contains(r.stdout, "sub/deeper/c.bin") || !strings.Contains(r.stdout, "drwxr-xr-x") {
		t.Fatalf("ls -l --depth 3: %+v", r)
	}
	if r := d.cellvm(t, "ls", id, "/root"); r.code == 0 || !strings.Contains(r.stderr, "forbidden") {
		t.Errorf("ls /root as the cell user: %+v", r)
	}
	if r := d.cellvm(t, "ls", id, "/workspace", "--depth", "0"); r.code != 2 {
		t.Errorf("ls --depth 0: %+v", r)
	}
	out := t.TempDir()
	if r := d.cellvm(t, "cp", "-r", id+":/workspace/proj", out); r.code != 0 {
		t.Fatalf("cp -r out: %+v", r)
	}
	for name, data := range files {
		b, err := os.ReadFile(filepath.Join(out, "proj", name))
		if err != nil || string(b) != data {
			t.Errorf("%s came back as %q, %v", name, b, err)
		}
	}
	if st, err := os.Stat(filepath.Join(out, "proj", "empty")); err != nil || !st.IsDir() {
		t.Errorf("the empty directory did not come back: %v", err)
	}
	// Without -r a file still copies as before.
	if r := d.cellvm(t, "cp", "-r", id+":/workspace/proj/a.txt", filepath.Join(out, "a")); r.code != 0 {
		t.Errorf("cp -r of a file: %+v", r)
	}
}

// TestPortForward: port-forward prints the local address, and an HTTP
// request to it reaches the server on the sandbox's port; a closed port
// is named on stderr while the forward goes on.
func TestPortForward(t *testing.T) {
	d := startFakeDaemon(t)
	id := strings.TrimSpace(d.cellvm(t, "sandbox", "create").stdout)
	if r := d.cellvm(t, "cell", id, "-c", cellListen+"8000"); r.code != 0 {
		t.Fatalf("listen cell: %+v", r)
	}
	for _, spec := range []string{"0:8000", "0:8001"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, os.Args[0], "port-forward", id, spec, "--json")
		cmd.Env = append(os.Environ(), "CELLVM_TEST_MAIN=1", "CELLVM_URL=", "CELLVM_SOCKET="+d.socket)
		stdout, _ := cmd.StdoutPipe()
		var stderr lockedBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		var fw struct {
			Address string `json:"address"`
			Port    int    `json:"port"`
		}
		if err != nil || json.Unmarshal([]byte(line), &fw) != nil || fw.Address == "" {
			t.Fatalf("port-forward printed %q (%v); stderr %s", line, err, stderr.String())
		}
		resp, err := http.Get("http://" + fw.Address + "/hi")
		if spec == "0:8000" {
			if err != nil {
				t.Fatalf("GET through the forward: %v; stderr %s", err, stderr.String())
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "guest port 8000: /hi" {
				t.Errorf("body %q", b)
			}
		} else {
			if err == nil {
				resp.Body.Close()
				t.Errorf("GET of a closed port answered %s", resp.Status)
			}
			deadline := time.Now().Add(5 * time.Second)
			for !strings.Contains(stderr.String(), "port_closed") && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if !strings.Contains(stderr.String(), "port_closed") {
				t.Errorf("stderr %q does not say the port is closed", stderr.String())
			}
		}
		cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("port-forward after ctrl-c: %v; stderr %s", err, stderr.String())
		}
		cancel()
	}
	if r := d.cellvm(t, "port-forward", id, "99999"); r.code != 2 {
		t.Errorf("port 99999: %+v", r)
	}
	if r := d.cellvm(t, "port-forward", "sb-nope", "8000"); r.code == 0 || !strings.Contains(r.stderr, "not_found") {
		t.Errorf("unknown sandbox: %+v", r)
	}
}
