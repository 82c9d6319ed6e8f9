package rootfs

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestPlanOrderAndFlags(t *testing.T) {
	p := NewPlan("/dev/vda")
	mounted := map[string]Mount{}
	all := append(append(append([]Mount{}, p.Early...), p.Root...), p.Late...)
	for i, m := range p.Early {
		// A mount inside another early mount comes after it.
		for _, later := range p.Early[i+1:] {
			if strings.HasPrefix(m.Target, later.Target+"/") {
				t.Errorf("%s is mounted before %s, which covers it", m.Target, later.Target)
			}
		}
		mounted[m.Target] = m
	}
	for _, want := range []string{"/proc", "/sys", "/dev", "/dev/pts", "/dev/shm", "/sys/fs/cgroup"} {
		if _, ok := mounted[want]; !ok {
			t.Errorf("no early mount on %s", want)
		}
	}
	for _, m := range p.Move {
		if _, ok := mounted[m]; !ok {
			t.Errorf("moves %s, which no early mount made", m)
		}
		if path.Dir(m) != "/" {
			t.Errorf("moves %s, which is not top level (its parent mount moves it)", m)
		}
	}
	for _, m := range all {
		if m.FSType != "ext4" && m.FSType != "overlay" && m.Flags&unix.MS_NODEV == 0 && m.FSType != "devtmpfs" && m.FSType != "devpts" {
			t.Errorf("%s (%s) lacks nodev", m.Target, m.FSType)
		}
	}
	lower := p.Root[0]
	if lower.Source != "/dev/vda" || lower.FSType != "ext4" || lower.Flags&unix.MS_RDONLY == 0 {
		t.Errorf("lower mount %+v is not the image, read-only", lower)
	}
	ov := p.Root[len(p.Root)-1]
	if ov.FSType != "overlay" || ov.Target != NewRoot {
		t.Fatalf("last root mount %+v is not the overlay", ov)
	}
	opts := map[string]string{}
	for _, kv := range strings.Split(ov.Data, ",") {
		k, v, _ := strings.Cut(kv, "=")
		opts[k] = v
	}
	if opts["lowerdir"] != lower.Target || opts["upperdir"] != UpperDir || opts["workdir"] != WorkDir {
		t.Errorf("overlay options %q do not match the layers", ov.Data)
	}
	// upper and work are on the same tmpfs, a different mount from lower.
	rw := p.Root[1]
	if rw.FSType != "tmpfs" || path.Dir(UpperDir) != rw.Target || path.Dir(WorkDir) != rw.Target {
		t.Errorf("upper/work not on the rw tmpfs %+v", rw)
	}
	tmp := findMount(p.Late, "/tmp")
	if tmp == nil || tmp.FSType != "tmpfs" || !strings.Contains(tmp.Data, "mode=1777") {
		t.Errorf("/tmp mount %+v", tmp)
	}
	if findMount(p.Late, "/run") == nil {
		t.Error("no /run mount")
	}
	if len(p.Dirs) != 1 || p.Dirs[0].Path != Workspace {
		t.Errorf("Dirs = %+v, want /workspace", p.Dirs)
	}
}

func findMount(ms []Mount, target string) *Mount {
	for i := range ms {
		if ms[i].Target == target {
			return &ms[i]
		}
	}
	return nil
}

// A workspace is mounted last, at /workspace, nosuid and nodev, and is not
// optional; the plan it was added to is unchanged.
func TestPlanWithWorkspace(t *testing.T) {
	base := NewPlan("/dev/vda")
	p := base.WithWorkspace("/dev/vdb")
	if len(p.Late) != len(base.Late)+1 {
		t.Fatalf("Late: %d mounts, want %d", len(p.Late), len(base.Late)+1)
	}
	ws := p.Late[len(p.Late)-1]
	if ws.Source != "/dev/vdb" || ws.Target != Workspace || ws.FSType != "ext4" || ws.Optional ||
		ws.Flags&(unix.MS_NOSUID|unix.MS_NODEV) != unix.MS_NOSUID|unix.MS_NODEV || ws.Flags&unix.MS_RDONLY != 0 {
		t.Errorf("the workspace mount: %+v", ws)
	}
	if base.WithWorkspace("/dev/vdc"); p.Late[len(p.Late)-1].Source != "/dev/vdb" {
		t.Error("WithWorkspace changed another plan's mounts")
	}
	rec := &recorder{failOn: "/dev/vdb"}
	if err := p.ApplyLate(rec, quiet()); err == nil || !strings.Contains(err.Error(), "/workspace") {
		t.Errorf("a workspace that does not mount: %v, want an error naming /workspace", err)
	}
}

func TestPlanWithoutRoot(t *testing.T) {
	p := NewPlan("none")
	if len(p.Root) != 0 || len(p.Move) != 0 {
		t.Fatalf("plan without root image has root mounts: %+v", p)
	}
	rec := &recorder{}
	if err := p.SwitchRoot(rec, quiet()); err != nil || len(rec.calls) != 0 {
		t.Fatalf("SwitchRoot without root: %v, calls %v", err, rec.calls)
	}
}

// recorder is a Sys that records the calls.
type recorder struct {
	calls  []string
	failOn string
	noDev  bool
}

func (r *recorder) Mount(source, target, fstype string, flags uintptr, data string) error {
	c := fmt.Sprintf("mount %s %s %s %#x", source, target, fstype, flags)
	r.calls = append(r.calls, c)
	if r.failOn != "" && strings.Contains(c, r.failOn) {
		return unix.EINVAL
	}
	if fstype == "devtmpfs" {
		return unix.EBUSY // as when the kernel mounted it already
	}
	return nil
}
func (r *recorder) MkdirAll(p string, _ os.FileMode) error {
	r.calls = append(r.calls, "mkdir "+p)
	return nil
}
func (r *recorder) Chdir(p string) error  { r.calls = append(r.calls, "chdir "+p); return nil }
func (r *recorder) Chroot(p string) error { r.calls = append(r.calls, "chroot "+p); return nil }
func (r *recorder) WaitDevice(p string, _ time.Duration) error {
	if r.noDev {
		return os.ErrNotExist
	}
	return nil
}

func TestSwitchRootSequence(t *testing.T) {
	p := NewPlan("/dev/vda")
	rec := &recorder{}
	if err := p.ApplyEarly(rec, quiet()); err != nil {
		t.Fatalf("ApplyEarly: %v (devtmpfs EBUSY must be accepted)", err)
	}
	rec.calls = nil
	if err := p.SwitchRoot(rec, quiet()); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(rec.calls, "\n")
	want := []string{
		fmt.Sprintf("mount /dev/vda %s ext4", LowerDir),
		"mkdir " + UpperDir,
		"mkdir " + WorkDir,
		fmt.Sprintf("mount overlay %s overlay", NewRoot),
		fmt.Sprintf("mount /dev %s/dev  %#x", NewRoot, unix.MS_MOVE),
		fmt.Sprintf("mount /proc %s/proc  %#x", NewRoot, unix.MS_MOVE),
		"chdir " + NewRoot,
		fmt.Sprintf("mount . /  %#x", unix.MS_MOVE),
		"chroot .",
		"chdir /",
	}
	at := 0
	for _, w := range want {
		i := strings.Index(got[at:], w)
		if i < 0 {
			t.Fatalf("call %q missing or out of order in:\n%s", w, got)
		}
		at += i + len(w)
	}
}

func TestSwitchRootFailureKeepsInitramfs(t *testing.T) {
	p := NewPlan("/dev/vda")
	for _, rec := range []*recorder{{noDev: true}, {failOn: "overlay"}} {
		err := p.SwitchRoot(rec, quiet())
		if !errors.Is(err, ErrNoRoot) {
			t.Fatalf("SwitchRoot = %v, want ErrNoRoot", err)
		}
		for _, c := range rec.calls {
			if strings.HasPrefix(c, "chroot") || strings.Contains(c, fmt.Sprintf("%#x", unix.MS_MOVE)) {
				t.Fatalf("switched or moved after a failed root mount: %v", rec.calls)
			}
		}
	}
}

func TestOptionalMountFailureIsNotFatal(t *testing.T) {
	p := NewPlan("none")
	if err := p.ApplyEarly(&recorder{failOn: "cgroup2"}, quiet()); err != nil {
		t.Fatalf("cgroup2 failure stopped the plan: %v", err)
	}
	if err := p.ApplyEarly(&recorder{failOn: "proc"}, quiet()); err == nil {
		t.Fatal("proc failure did not stop the plan")
	}
}

func TestMountPoints(t *testing.T) {
	in := "rootfs / rootfs rw 0 0\nproc /proc proc rw 0 0\noverlay /work\\040space overlay rw 0 0\nbad\n"
	got := MountPoints(strings.NewReader(in))
	if strings.Join(got, "|") != "/|/proc|/work space" {
		t.Fatalf("MountPoints = %q", got)
	}
}

// TestEveryTmpfsIsSized: no tmpfs keeps the kernel's default of half the
// memory each, which several together could pass.
func TestEveryTmpfsIsSized(t *testing.T) {
	p := NewPlan("/dev/vda")
	n := 0
	for _, list := range [][]Mount{p.Early, p.Root, p.Late} {
		for _, m := range list {
			if m.FSType != "tmpfs" {
				continue
			}
			n++
			if !strings.Contains(m.Data, "size=") {
				t.Errorf("tmpfs %s has no size: %q", m.Target, m.Data)
			}
		}
	}
	if n != 4 {
		t.Errorf("%d tmpfs mounts, want 4 (rw, /dev/shm, /run, /tmp)", n)
	}
}
