package vmm

import (
	"bytes"
	"crypto/md5"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/test/kvmtest"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// checkpointGuest waits for a line on its console before each step: it
// writes 1 MiB of 'Q' into its tmpfs (guest memory), then idles, then,
// restored, prints the file's sum (echo joins md5sum's two spaces).
const checkpointGuest = `#!/bin/busybox sh
/bin/busybox mount -t devtmpfs dev /dev
echo READY
read a
/bin/busybox dd if=/dev/zero bs=4096 count=256 2>/dev/null | /bin/busybox tr '\0' Q > /big
echo WROTE
read b
echo SUM $(/bin/busybox md5sum /big)
/bin/busybox sleep 1000
`

// runningMachine runs m, fed by a pipe, and waits for its console lines.
type runningMachine struct {
	m    *Machine
	con  *console
	in   *io.PipeWriter
	errc chan error
}

func startMachine(t *testing.T, build func(cfg Config) (*Machine, error)) *runningMachine {
	t.Helper()
	r, w := io.Pipe()
	con := newConsole()
	m, err := build(Config{Console: con, ConsoleInput: r, MemoryMiB: 128, Checkpoints: true,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rm := &runningMachine{m: m, con: con, in: w, errc: make(chan error, 1)}
	go func() { rm.errc <- m.Run() }()
	t.Cleanup(func() {
		m.Stop()
		<-rm.errc
		w.Close()
		m.Close()
	})
	return rm
}

func (rm *runningMachine) await(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		select {
		case l := <-rm.con.lines:
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case err := <-rm.errc:
			t.Fatalf("the guest ended (%v) before %q:\n%s", err, prefix, rm.con.String())
		case <-deadline:
			t.Fatalf("no %q from the guest:\n%s", prefix, rm.con.String())
		}
	}
}

type ckptFiles struct{ state, mem *os.File }

func (rm *runningMachine) checkpoint(t *testing.T, dir string, n int, full bool) (ckptFiles, int64) {
	t.Helper()
	var f ckptFiles
	var err error
	if f.state, err = os.Create(filepath.Join(dir, fmt.Sprintf("%d.state", n))); err != nil {
		t.Fatal(err)
	}
	if f.mem, err = os.Create(filepath.Join(dir, fmt.Sprintf("%d.mem", n))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.state.Close(); f.mem.Close() })
	st, err := rm.m.Checkpoint(f.state, f.mem, full)
	if err != nil {
		t.Fatalf("checkpoint %d: %v", n, err)
	}
	if want := n > 1; st.Layer != want {
		t.Fatalf("checkpoint %d: layer=%v, want %v", n, st.Layer, want)
	}
	t.Logf("checkpoint %d: %+v", n, st)
	return f, st.Pages
}

// layerOf is a checkpoint file as the daemon records it: its size and
// sum (its own, never the VMM's) and its extents.
func layerOf(t *testing.T, f ckptFiles) (snapshot.Layer, *snapshot.Checkpoint) {
	t.Helper()
	if _, err := f.state.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	sum, size, err := snapshot.SumFile(f.mem)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := snapshot.DecodeCheckpoint(f.state, size)
	if err != nil {
		t.Fatal(err)
	}
	return snapshot.Layer{Size: size, CRC32C: sum, Extents: cp.State.Machine.Extents}, cp
}

// TestCheckpointChain: a booted machine with checkpoints writes a whole
// image first, then a layer that holds the megabyte its guest wrote and
// is small, then a smaller one for an idle guest; the chain, composed as
// the daemon composes it, restores into a guest that has the megabyte.
func TestCheckpointChain(t *testing.T) {
	kvmtest.Require(t)
	kernel, initrd := kvmtest.BuildFile(t, "kernel/vmlinux"), busyboxGuest(t, checkpointGuest)
	dir := t.TempDir()
	rm := startMachine(t, func(cfg Config) (*Machine, error) {
		cfg.Kernel, cfg.Initrd = kernel, initrd
		return New(cfg)
	})
	rm.await(t, "READY")
	base, _ := rm.checkpoint(t, dir, 1, false)
	fmt.Fprintln(rm.in, "go")
	rm.await(t, "WROTE")
	l2, pages2 := rm.checkpoint(t, dir, 2, false)
	if pages2 < 256 || pages2 > 128<<20/4096/4 {
		t.Errorf("the layer after 1 MiB written holds %d pages, want at least 256 and far fewer than the memory's", pages2)
	}
	mem2, err := os.ReadFile(l2.mem.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(mem2, bytes.Repeat([]byte{'Q'}, 4096)) {
		t.Error("the layer does not hold a page of the file the guest wrote")
	}
	top, pages3 := rm.checkpoint(t, dir, 3, false)
	if pages3 >= pages2 {
		t.Errorf("an idle guest's layer holds %d pages, the writer's %d", pages3, pages2)
	}
	rm.m.Stop()

	baseLayer, _ := layerOf(t, base)
	baseLayer.Extents = nil
	l2Layer, _ := layerOf(t, l2)
	topLayer, cp := layerOf(t, top)
	composed, err := os.Create(filepath.Join(dir, "composed.state"))
	if err != nil {
		t.Fatal(err)
	}
	defer composed.Close()
	if err := snapshot.EncodeComposed(composed, cp, []snapshot.Layer{baseLayer, l2Layer}, topLayer.CRC32C); err != nil {
		t.Fatal(err)
	}
	if _, err := composed.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	restored := startMachine(t, func(cfg Config) (*Machine, error) {
		return Restore(cfg, composed, top.mem, base.mem, l2.mem)
	})
	fmt.Fprintln(restored.in, "go")
	want := fmt.Sprintf("SUM %x /big", md5.Sum(bytes.Repeat([]byte{'Q'}, 1<<20)))
	if got := restored.await(t, "SUM"); got != want {
		t.Errorf("the restored guest's file: %q, want %q", got, want)
	}
}
