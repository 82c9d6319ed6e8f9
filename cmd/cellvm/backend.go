package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/sandbox"
)

// DefaultSocket is where `cellvm serve` listens and the CLI looks for it
// when asked to use a daemon without a path.
const DefaultSocket = "/run/cellvm/cellvm.sock"

// backendFlags are the flags every command that reaches sandboxes takes.
type backendFlags struct {
	socket   *string
	kernel   *string
	initrd   *string
	rootfs   *string
	logLevel *string
	jsonOut  *bool

	jail        *bool
	jailUIDBase *int
	jailCgroup  *string
}

func addBackendFlags(fs *flag.FlagSet) *backendFlags {
	return &backendFlags{
		socket:   fs.String("socket", os.Getenv("CELLVM_SOCKET"), "daemon socket; when empty, run sandboxes in this process (default $CELLVM_SOCKET)"),
		kernel:   fs.String("kernel", "", "guest kernel (default build/kernel/vmlinux or $CELLVM_KERNEL)"),
		initrd:   fs.String("initrd", "", "guest initramfs (default build/initramfs.cpio)"),
		rootfs:   fs.String("rootfs", "", "guest root image (default build/rootfs.ext4)"),
		logLevel: fs.String("log-level", "warn", "log level on stderr"),
		jsonOut:  fs.Bool("json", false, "print JSON for scripts"),
		jail: fs.Bool("jail", os.Geteuid() == 0,
			"confine each VMM: its own namespaces, a root with only its VM's files, its own uid, a cgroup, a seccomp filter (needs root; default on as root)"),
		jailUIDBase: fs.Int("jail-uid-base", defaultJailUIDBase, "a jailed VMM runs as this uid (and gid) plus its VM's vsock CID"),
		jailCgroup:  fs.String("jail-cgroup", defaultJailCgroup, "cgroup v2 directory for the jailed VMMs' cgroups (\"\" for none)"),
	}
}

// Jail defaults: uids far above those of people and services, and a
// cgroup beside the host's own.
const (
	defaultJailUIDBase = 200_000_000
	defaultJailCgroup  = "/sys/fs/cgroup/cellvm"
)

// jailOptions turns the jail flags into the manager's options, saying in
// the log what the VMMs will run under (nil: unjailed).
func (b *backendFlags) jailOptions(log *slog.Logger) (*sandbox.JailOptions, error) {
	if !*b.jail {
		log.Warn("VMMs run unjailed (--jail=false, or not root): a VMM bug would reach this host as this user")
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, usageError{fmt.Errorf("--jail needs root (namespaces, mounts, switching to the VMM's uid); run as root or pass --jail=false")}
	}
	if *b.jailUIDBase <= 0 || *b.jailUIDBase > 1<<31-1<<20 {
		return nil, usageError{fmt.Errorf("--jail-uid-base %d: want 1..%d", *b.jailUIDBase, 1<<31-1<<20)}
	}
	o := &sandbox.JailOptions{UIDBase: *b.jailUIDBase, CgroupParent: *b.jailCgroup}
	if o.CgroupParent != "" && !jail.CgroupV2(filepath.Dir(o.CgroupParent)) {
		log.Warn("no cgroup v2 above --jail-cgroup: jailed VMMs get no cgroup of their own (no cpu, memory or pids limit)",
			"jail_cgroup", o.CgroupParent)
		o.CgroupParent = ""
	}
	log.Info("VMMs are jailed", "uid_base", o.UIDBase, "cgroup_parent", o.CgroupParent, "seccomp", true)
	return o, nil
}

// guestFiles resolves the kernel, initramfs and root image.
func guestFiles(kernel, initrd, rootfs string) (string, string, string, error) {
	pick := func(flagVal, env, rel, what string) (string, error) {
		if flagVal != "" {
			return flagVal, nil
		}
		if v := os.Getenv(env); v != "" {
			return v, nil
		}
		if p := findBuildFile(rel); p != "" {
			abs, err := filepath.Abs(p)
			return abs, err
		}
		return "", fmt.Errorf("no %s found (build/%s): run 'make setup', or set %s", what, rel, env)
	}
	k, err := pick(kernel, "CELLVM_KERNEL", "kernel/vmlinux", "guest kernel")
	if err != nil {
		return "", "", "", err
	}
	i, err := pick(initrd, "CELLVM_INITRD", "initramfs.cpio", "guest initramfs")
	if err != nil {
		return "", "", "", err
	}
	r, err := pick(rootfs, "CELLVM_ROOTFS", "rootfs.ext4", "guest root image")
	if err != nil {
		return "", "", "", err
	}
	return k, i, r, nil
}

// newEmbeddedManager returns a manager that runs VMs from this process,
// with its state in a fresh temporary directory; cleanup removes it.
func newEmbeddedManager(b *backendFlags, log *slog.Logger) (*sandbox.VMManager, func(), error) {
	if err := requireKVM(); err != nil {
		return nil, nil, err
	}
	k, i, r, err := guestFiles(*b.kernel, *b.initrd, *b.rootfs)
	if err != nil {
		return nil, nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "cellvm-run-")
	if err != nil {
		return nil, nil, err
	}
	jailOpt, err := b.jailOptions(log)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	m, err := sandbox.NewVMManager(sandbox.Options{
		Exe: exe, Kernel: k, Initrd: i, RootFS: r, StateDir: dir, Log: log,
		BootTimeout: bootTimeoutFromEnv(), Jail: jailOpt, TestHooks: os.Getenv("CELLVM_TEST_HOOKS") == "1",
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return m, func() { m.Close(); os.RemoveAll(dir) }, nil
}

func bootTimeoutFromEnv() time.Duration {
	if v := os.Getenv("CELLVM_BOOT_TIMEOUT"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	return 0
}

// backend returns the sandbox manager the command talks to: the daemon when
// a socket is given, otherwise one embedded in this process.
func (b *backendFlags) backend(stderr io.Writer) (sandbox.Manager, func(), error) {
	log, err := newLogger(stderr, *b.logLevel)
	if err != nil {
		return nil, nil, err
	}
	if *b.socket != "" {
		if _, err := os.Stat(*b.socket); err != nil {
			return nil, nil, fmt.Errorf("no cellvm daemon at %s: start one with 'cellvm serve --socket %s' (%v)", *b.socket, *b.socket, err)
		}
		c := api.NewClient(*b.socket)
		return c, c.Close, nil
	}
	return newEmbeddedManager(b, log)
}

// remoteOnly returns a client for commands that need a daemon (sandboxes
// outlive one CLI invocation only in a daemon).
func (b *backendFlags) remoteOnly() (*api.Client, error) {
	s := *b.socket
	if s == "" {
		s = DefaultSocket
	}
	if _, err := os.Stat(s); err != nil {
		return nil, fmt.Errorf("no cellvm daemon at %s: start one with 'cellvm serve' or pass --socket / set CELLVM_SOCKET (%v)", s, err)
	}
	return api.NewClient(s), nil
}

// requireKVM runs the host KVM check (a probe guest, bounded by a deadline)
// that every front end runs before it starts a VM, so a host whose /dev/kvm
// cannot run cellvm's guests fails at once with the reason instead of
// hanging in a boot.
func requireKVM() error {
	return kvm.Check(kvm.CheckConfig{}).Err()
}
