package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// TestDaemonFilesAndPorts: one real guest, through the daemon: mkdir,
// stat, ls, mv, rm and a watch act as the cell user (who may not list
// /root), and a python http.server started in a background cell is
// reached by `cellvm port-forward` with no network device.
func TestDaemonFilesAndPorts(t *testing.T) {
	kvmtest.Require(t)
	dir := t.TempDir()
	d := startDaemon(t, dir)
	defer d.stop(t)
	c := api.NewClient(d.socket)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	info, err := c.Create(ctx, sandbox.Config{MemoryMiB: 384})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID

	// A watch first, so the changes below are seen.
	wctx, wcancel := context.WithCancel(ctx)
	ready := make(chan struct{})
	events := make(chan sandbox.FileEvent, 64)
	wdone := make(chan error, 1)
	go func() {
		wdone <- c.WatchDir(wctx, id, sandbox.FileRequest{Path: "/workspace", Recursive: true}, func(e sandbox.FileEvent) error {
			if e == (sandbox.FileEvent{}) {
				close(ready)
			} else {
				select {
				case events <- e:
				default:
				}
			}
			return nil
		})
	}()
	select {
	case <-ready:
	case err := <-wdone:
		t.Fatalf("watch: %v", err)
	}
	if created, err := c.MakeDir(ctx, id, sandbox.FileRequest{Path: "/workspace/a/b"}); err != nil || !created {
		t.Fatalf("mkdir: %v %v", created, err)
	}
	if _, err := c.Upload(ctx, id, "/workspace/a/b/f.txt", strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	st, err := c.StatPath(ctx, id, sandbox.FileRequest{Path: "/workspace/a/b/f.txt"})
	if err != nil || st.Size != 5 || st.Owner == "root" || st.Owner == "" || st.Type != sandbox.FileTypeFile {
		t.Errorf("stat: %+v %v", st, err)
	}
	ents, err := c.ListDir(ctx, id, sandbox.FileRequest{Path: "/workspace/a", Depth: 2})
	if err != nil || len(ents) != 2 {
		t.Errorf("ls: %+v %v", ents, err)
	}
	if _, err := c.MovePath(ctx, id, sandbox.FileRequest{Path: "/workspace/a/b/f.txt"}, "/workspace/g.txt"); err != nil {
		t.Errorf("mv: %v", err)
	}
	if err := c.RemovePath(ctx, id, sandbox.FileRequest{Path: "/workspace/a"}); err != nil {
		t.Errorf("rm: %v", err)
	}
	if _, err := c.StatPath(ctx, id, sandbox.FileRequest{Path: "/workspace/a"}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("stat after rm: %v", err)
	}
	if _, err := c.ListDir(ctx, id, sandbox.FileRequest{Path: "/root"}); !errors.Is(err, sandbox.ErrForbidden) {
		t.Errorf("the cell user listed /root: %v", err)
	}
	seen := map[sandbox.FileEvent]bool{}
	deadline := time.After(20 * time.Second)
	for !seen[sandbox.FileEvent{Name: "a", Op: sandbox.FileCreate}] || !seen[sandbox.FileEvent{Name: "g.txt", Op: sandbox.FileCreate}] {
		select {
		case e := <-events:
			seen[e] = true
		case <-deadline:
			t.Fatalf("watch saw %v", seen)
		}
	}
	wcancel()
	if err := <-wdone; err != nil {
		t.Errorf("watch end: %v", err)
	}

	// A web server in the guest, reached by port-forward.
	code := "import subprocess\nopen('/workspace/index.html', 'w').write('served\\n')\n" +
		"srv = subprocess.Popen(['python3', '-m', 'http.server', '8000'], cwd='/workspace', stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
	if r, err := c.RunCell(ctx, id, sandbox.Cell{Code: code, Timeout: time.Minute}, nil); err != nil || r.Status != "ok" {
		t.Fatalf("start the server: %+v %v", r, err)
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "port-forward", id, "0:8000", "--json", "--socket", d.socket)
	cmd.Env = guestEnv(t)
	stdout, _ := cmd.StdoutPipe()
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	var fw struct{ Address string }
	if json.Unmarshal([]byte(line), &fw) != nil || fw.Address == "" {
		t.Fatalf("port-forward printed %q; stderr %s", line, stderr.String())
	}
	var body string
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		resp, err := http.Get("http://" + fw.Address + "/index.html")
		if err != nil {
			continue // the server is still starting
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if body = string(b); resp.StatusCode == 200 {
			break
		}
	}
	if body != "served\n" {
		t.Errorf("through port-forward: %q; stderr %s", body, stderr.String())
	}
}
