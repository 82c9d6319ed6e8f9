package clients

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellvm/cellvm/test/kvmtest"
)

// realDaemon starts the real `cellvm serve` (build/bin/cellvm) with the
// project's guest and returns its socket; it is stopped (SIGTERM) when t
// ends, after logging the sandboxes' consoles and its own log if t failed.
// Cells that name no timeout get 10 minutes, not the daemon's 60 s: under
// nested emulation a cold sandbox's first `import pandas` (the README
// example's first cell) took longer than a minute, which on a real KVM
// host takes about a second.
func realDaemon(t *testing.T) string {
	t.Helper()
	sock, _ := realDaemonState(t)
	return sock
}

// realDaemonState is realDaemon, and the daemon's state directory.
func realDaemonState(t *testing.T) (sock, state string) {
	t.Helper()
	kvmtest.Require(t)
	dir, err := os.MkdirTemp("", "cellvm-rig-clients-")
	if err != nil {
		t.Fatal(err)
	}
	sock, state = filepath.Join(dir, "cellvm.sock"), filepath.Join(dir, "state")
	cmd := exec.Command(kvmtest.BuildFile(t, "bin/cellvm"), "serve", "--socket", sock, "--state-dir", state, "--network=false", "--templates=false", "--cell-timeout", "10m")
	cmd.Env = append(os.Environ(),
		"CELLVM_KERNEL="+kvmtest.BuildFile(t, "kernel/vmlinux"),
		"CELLVM_INITRD="+kvmtest.BuildFile(t, "initramfs.cpio"),
		"CELLVM_ROOTFS="+kvmtest.BuildFile(t, "rootfs.ext4"),
		"CELLVM_BOOT_TIMEOUT=3m")
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			kvmtest.LogSandboxTails(t, state)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("daemon log:\n%s", log.String())
		}
		os.RemoveAll(dir)
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			return sock, state
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not listen within 30 s:\n%s", log.String())
		}
	}
}

// runtimeLine is one cell's outcome as the Runtime-style loops print it.
type runtimeLine struct {
	Cell      string `json:"cell"`
	Status    string `json:"status"`
	Stdout    string `json:"stdout"`
	StateKept bool   `json:"state_kept"`
	Error     *struct {
		Name      string `json:"name"`
		Value     string `json:"value"`
		Traceback string `json:"traceback"`
	} `json:"error"`
	PNGBytes int    `json:"png_bytes"`
	PNGMagic string `json:"png_magic"`
}

// checkRuntimeLoop checks a Runtime-style loop's lines: text, a PNG
// fetched by ref, an error with a one-string traceback, a timeout that
// keeps state, and the create's env in the guest.
func checkRuntimeLoop(t *testing.T, out string) {
	t.Helper()
	got := map[string]runtimeLine{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l runtimeLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Cell != "" {
			got[l.Cell] = l
		}
	}
	if l := got["text"]; l.Status != "ok" || l.Stdout != "x is 42\n" {
		t.Errorf("text cell: %+v", l)
	}
	if l := got["chart"]; l.Status != "ok" || l.PNGBytes < 1000 || l.PNGMagic != "89504e470d0a1a0a" {
		t.Errorf("chart cell: %+v (want a PNG fetched by its ref)", l)
	}
	if l := got["error"]; l.Status != "error" || l.Error == nil || l.Error.Name != "KeyError" ||
		!strings.Contains(l.Error.Traceback, "KeyError") || !strings.Contains(l.Error.Traceback, "\n") {
		t.Errorf("error cell: %+v (want a KeyError with its traceback as one string of several lines)", l)
	}
	if l := got["timeout"]; l.Status != "timeout" || !l.StateKept {
		t.Errorf("timeout cell: %+v (want status timeout with the state kept)", l)
	}
	if l := got["after"]; l.Status != "ok" || l.Stdout != "43\n" {
		t.Errorf("the cell after the timeout: %+v (want x still defined)", l)
	}
	if l := got["env"]; l.Stdout != "hello from the host\n" {
		t.Errorf("env cell: %+v (want the create's env in the interpreter)", l)
	}
}

// TestRigBoxLiteProgram: a program written for BoxLite's CodeBox, with only
// its import changed, prints its cell's stdout from a real microVM through
// the real daemon.
func TestRigBoxLiteProgram(t *testing.T) {
	sock := realDaemon(t)
	out := runIn(t, t.TempDir(), []string{"CELLVM_SOCKET=" + sock, "PYTHONPATH=" + filepath.Join(clientsDir(t), "python")},
		10*time.Minute, python(t), filepath.Join(clientsDir(t), "testdata/rig/boxlite_program.py"))
	if !strings.Contains(out, "hello from 42 on Python 3\n") {
		t.Errorf("the BoxLite-style program printed:\n%s", out)
	}
}

// TestRigRuntimeLoopPython: a Runtime-style loop (cellvm.compat.withruntime)
// in a real microVM through the real daemon.
func TestRigRuntimeLoopPython(t *testing.T) {
	sock := realDaemon(t)
	out := runIn(t, t.TempDir(), []string{"CELLVM_SOCKET=" + sock, "PYTHONPATH=" + filepath.Join(clientsDir(t), "python")},
		15*time.Minute, python(t), filepath.Join(clientsDir(t), "testdata/rig/runtime_loop.py"))
	t.Logf("runtime_loop.py:\n%s", out)
	checkRuntimeLoop(t, out)
}

// TestRigRuntimeLoopJS: the same loop with cellvm/compat/withruntime in Node.
func TestRigRuntimeLoopJS(t *testing.T) {
	sock := realDaemon(t)
	nd := node(t)
	dir := linkedJSDir(t, "runtime_loop.mjs", readFile(t, "testdata/rig/runtime_loop.mjs"))
	out := runIn(t, dir, []string{"CELLVM_SOCKET=" + sock}, 15*time.Minute, nd, "runtime_loop.mjs")
	t.Logf("runtime_loop.mjs:\n%s", out)
	checkRuntimeLoop(t, out)
}
