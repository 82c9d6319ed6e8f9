package build

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Commands in the image run chrooted into its mount, each in a mount
// namespace of its own (made on a locked OS thread, which the command is
// started from) holding /proc, a small /dev, the VM's resolv.conf and
// the build's inputs (read-only at InputsMount), and in a PID namespace
// of its own, so that nothing it leaves running outlives it and nothing
// it mounted stays. Every mount point in the image is resolved in the
// image (Root) and mounted onto through its descriptor (the new mount
// API), so a link in the image cannot move a mount out of it.

// InputsMount is where a step finds the build's inputs in the image.
const InputsMount = "/tmp/cellvm-inputs"

// DefaultPath is a step's PATH when the image's config sets none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// rootCmd is a command to run in the image.
type rootCmd struct {
	// argv[0] is looked up in the image's PATH unless absolute.
	argv []string
	env  []string // on top of the step's environment
	dir  string   // "" is "/"
	// out takes the command's output (nil: progress lines).
	out io.Writer
}

// stepEnv is a step's environment: the defaults, the image's Env, then
// what every step gets.
func (b *builder) stepEnv(extra []string) []string {
	env := []string{"PATH=" + DefaultPath, "HOME=/root", "LANG=C.UTF-8"}
	env = mergeEnv(env, b.config.Env)
	env = mergeEnv(env, []string{"DEBIAN_FRONTEND=noninteractive", "PIP_CONFIG_FILE=/dev/null"})
	return mergeEnv(env, extra)
}

// mergeEnv sets add's KEY=VALUE entries in env, replacing a key's value
// where it is, appending new keys.
func mergeEnv(env, add []string) []string {
	out := append([]string(nil), env...)
	for _, e := range add {
		k, _, _ := strings.Cut(e, "=")
		done := false
		for i, o := range out {
			if ok, _, _ := strings.Cut(o, "="); ok == k {
				out[i], done = e, true
				break
			}
		}
		if !done {
			out = append(out, e)
		}
	}
	return out
}

func envValue(env []string, key string) string {
	v := ""
	for _, e := range env {
		if k, val, ok := strings.Cut(e, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// lookPath finds name on the image's PATH, resolved in the image; "" when
// it has none.
func (b *builder) lookPath(name string, env []string) string {
	if strings.HasPrefix(name, "/") {
		if b.isExec(name) {
			return name
		}
		return ""
	}
	for _, d := range strings.Split(envValue(env, "PATH"), ":") {
		if !strings.HasPrefix(d, "/") {
			continue
		}
		p := strings.TrimSuffix(d, "/") + "/" + name
		if b.isExec(p) {
			return p
		}
	}
	return ""
}

func (b *builder) isExec(p string) bool {
	mode, ok := b.regularFile(p)
	return ok && mode&0o111 != 0
}

// regularFile is the mode of the image's regular file at p (links
// resolved inside the image); false if there is none.
func (b *builder) regularFile(p string) (uint32, bool) {
	rel, err := cleanName(p)
	if err != nil || rel == "." {
		return 0, false
	}
	fd, err := b.root.openat2(rel, unix.O_PATH)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, false
	}
	return st.Mode, true
}

// inRoot runs c in the image and waits for it.
func (b *builder) inRoot(c rootCmd) error {
	env := b.stepEnv(c.env)
	path := b.lookPath(c.argv[0], env)
	if path == "" {
		return &notFoundError{name: c.argv[0], path: envValue(env, "PATH")}
	}
	errc := make(chan error, 1)
	go func() { errc <- b.inRootLocked(c, path, env) }()
	return <-errc
}

// notFoundError is a command the image lacks.
type notFoundError struct{ name, path string }

func (e *notFoundError) Error() string {
	return fmt.Sprintf("the image has no %s on its PATH (%s)", e.name, e.path)
}

// inRootLocked runs on its own OS thread, never unlocked: the thread,
// the only one in the new mount namespace, ends with the goroutine.
func (b *builder) inRootLocked(c rootCmd, path string, env []string) error {
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("the builder's mount namespace: %w", err)
	}
	defer unix.Close(orig)
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("a mount namespace for the step: %w", err)
	}
	// Back to the builder's namespace at the end: the step's, with its
	// mounts, goes as its last process has.
	defer unix.Setns(orig, unix.CLONE_NEWNS)
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("a private mount namespace: %w", err)
	}
	// The image as this namespace has it (b.root's descriptor is of the
	// builder's namespace); mounts inside are crossed from here on.
	r, err := OpenRoot(b.mnt)
	if err != nil {
		return err
	}
	r.resolve = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS
	defer r.Close()
	if err := b.stepMounts(r); err != nil {
		return err
	}
	out := c.out
	if out == nil {
		lw := &lineWriter{p: b.p}
		defer lw.Close()
		out = lw
	}
	dir := c.dir
	if dir == "" {
		dir = "/"
	}
	mk := func(clone uintptr) *exec.Cmd {
		return &exec.Cmd{
			Path:   path,
			Args:   c.argv,
			Env:    env,
			Dir:    dir,
			Stdout: out,
			Stderr: out,
			// Without a PID namespace a background straggler may hold
			// the output pipe: stop reading it soon after the step
			// exits (its process group is killed then).
			WaitDelay: 2 * time.Second,
			SysProcAttr: &syscall.SysProcAttr{
				Chroot:     b.mnt,
				Cloneflags: clone,
				Setsid:     true,
				Pdeathsig:  syscall.SIGKILL,
			},
		}
	}
	var cmd *exec.Cmd
	err = syscall.EINVAL
	if pidNamespaces {
		cmd = mk(syscall.CLONE_NEWPID)
		err = cmd.Start()
	}
	if errors.Is(err, syscall.EINVAL) {
		// A guest kernel without PID namespaces (cellvm's own has
		// none: CONFIG_PID_NS is off): the step runs in the builder's,
		// in a session of its own whose process group is killed after
		// it, so what it left running in the background ends with it.
		// The builder VM itself ends with the build either way.
		cmd = mk(0)
		err = cmd.Start()
	}
	if err == nil {
		pgid := cmd.Process.Pid
		err = cmd.Wait()
		if cmd.SysProcAttr.Cloneflags == 0 {
			syscall.Kill(-pgid, syscall.SIGKILL)
		}
		if errors.Is(err, exec.ErrWaitDelay) {
			err = nil // the step exited 0; a straggler held its output
		}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ee.ExitCode() < 0 {
			return fmt.Errorf("%s was killed (%v)", c.argv[0], ee.ProcessState)
		}
		return fmt.Errorf("%s exited with status %d", c.argv[0], ee.ExitCode())
	}
	if err != nil {
		return fmt.Errorf("starting %s in the image: %w", c.argv[0], err)
	}
	return nil
}

// pidNamespaces is whether steps try a PID namespace of their own first
// (tests turn it off to run the fallback).
var pidNamespaces = true

// stepMounts mounts /proc, /dev, /etc/resolv.conf and the inputs in the
// image, in the calling thread's mount namespace.
func (b *builder) stepMounts(r *Root) error {
	proc, err := r.openDir("proc", true)
	if err != nil {
		return fmt.Errorf("/proc in the image: %w", err)
	}
	defer unix.Close(proc)
	if err := mountNew("proc", nil, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, proc, nil); err != nil {
		return fmt.Errorf("mounting /proc in the image: %w", err)
	}
	dev, err := r.openDir("dev", true)
	if err != nil {
		return fmt.Errorf("/dev in the image: %w", err)
	}
	defer unix.Close(dev)
	err = mountNew("tmpfs", map[string]string{"mode": "0755", "size": "4m"}, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, dev, b.fillDev)
	if err != nil {
		return fmt.Errorf("mounting /dev in the image: %w", err)
	}
	if err := b.mountResolvConf(r); err != nil {
		return err
	}
	return b.mountInputs(r)
}

// mountNew makes a new file system of type fstype and mounts it on the
// directory target (a descriptor); fill, if any, then gets its root.
func mountNew(fstype string, opts map[string]string, attrs int, target int, fill func(int) error) error {
	fs, err := unix.Fsopen(fstype, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fs)
	for k, v := range opts {
		if err := unix.FsconfigSetString(fs, k, v); err != nil {
			return fmt.Errorf("%s=%s: %w", k, v, err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return err
	}
	m, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, attrs)
	if err != nil {
		return err
	}
	defer unix.Close(m)
	if err := unix.MoveMount(m, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return err
	}
	if fill != nil {
		return fill(m)
	}
	return nil
}

// bindOnto bind-mounts the builder's src onto target (a descriptor),
// with attrs (read-only and the like).
func bindOnto(src string, target int, attrs uint64, recursive bool) error {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC)
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	t, err := unix.OpenTree(unix.AT_FDCWD, src, flags)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	defer unix.Close(t)
	if attrs != 0 {
		setFlags := uint(unix.AT_EMPTY_PATH)
		if recursive {
			setFlags |= unix.AT_RECURSIVE
		}
		if err := unix.MountSetattr(t, "", setFlags, &unix.MountAttr{Attr_set: attrs}); err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
	}
	if err := unix.MoveMount(t, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return nil
}

// fillDev puts the VM's null, zero, full, random, urandom and tty in the
// step's /dev (a fresh tmpfs, dev), and the usual links.
func (b *builder) fillDev(dev int) error {
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		if _, err := os.Stat("/dev/" + n); err != nil {
			continue
		}
		fd, err := unix.Openat(dev, n, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o666)
		if err != nil {
			return err
		}
		unix.Close(fd)
		t, err := unix.Openat(dev, n, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = bindOnto("/dev/"+n, t, 0, false)
		unix.Close(t)
		if err != nil {
			return err
		}
	}
	unix.Mkdirat(dev, "shm", 0o1777)
	unix.Fchmodat(dev, "shm", 0o1777, 0)
	unix.Mkdirat(dev, "pts", 0o755)
	for n, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		unix.Symlinkat(target, dev, n)
	}
	return nil
}

// mountResolvConf binds the VM's resolv.conf (the builder's network) over
// the image's, which prepare made a regular file.
func (b *builder) mountResolvConf(r *Root) error {
	if _, err := os.Stat("/etc/resolv.conf"); err != nil {
		return nil // no network
	}
	etc, err := r.openDir("etc", true)
	if err != nil {
		return fmt.Errorf("/etc in the image: %w", err)
	}
	defer unix.Close(etc)
	if err := ensureFile(etc, "resolv.conf"); err != nil {
		return fmt.Errorf("/etc/resolv.conf in the image: %w", err)
	}
	t, err := unix.Openat(etc, "resolv.conf", unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(t)
	if err := bindOnto("/etc/resolv.conf", t, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, false); err != nil {
		return fmt.Errorf("binding the VM's resolv.conf into the image: %w", err)
	}
	return nil
}

// ensureFile makes name in dir a regular file (an empty one if it was
// missing or something else), never following a link.
func ensureFile(dir int, name string) error {
	st, ok, err := lstatAt(dir, name)
	if err != nil {
		return err
	}
	if ok && st.Mode&unix.S_IFMT == unix.S_IFREG {
		return nil
	}
	if ok {
		if err := removeAllAt(dir, name); err != nil {
			return err
		}
	}
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	unix.Fchmod(fd, 0o644)
	return unix.Close(fd)
}

// mountInputs binds the build's inputs read-only at InputsMount, making
// the directory in the image's /tmp (resolved in the image) if need be.
func (b *builder) mountInputs(r *Root) error {
	dir, base := splitMount(InputsMount)
	tmp, err := r.openDir(dir, true)
	if err != nil {
		return fmt.Errorf("%s in the image: %w", dir, err)
	}
	defer unix.Close(tmp)
	st, ok, err := lstatAt(tmp, base)
	if err != nil {
		return err
	}
	if ok && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := removeAllAt(tmp, base); err != nil {
			return err
		}
		ok = false
	}
	if !ok {
		if err := unix.Mkdirat(tmp, base, 0o755); err != nil {
			return fmt.Errorf("%s in the image: %w", InputsMount, err)
		}
		b.madeInputsDir = true
	}
	t, err := unix.Openat(tmp, base, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(t)
	if err := bindOnto(b.inDir, t, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, true); err != nil {
		return fmt.Errorf("binding the build's inputs into the image: %w", err)
	}
	return nil
}

// splitMount splits an absolute path of the image into its directory
// (relative to the root) and name.
func splitMount(p string) (string, string) {
	i := strings.LastIndexByte(p, '/')
	dir := strings.TrimPrefix(p[:i], "/")
	if dir == "" {
		dir = "."
	}
	return dir, p[i+1:]
}
