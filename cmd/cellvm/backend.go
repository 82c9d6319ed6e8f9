package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cellvm/cellvm/sandbox/engine"

	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/sandbox"
)

// DefaultSocket is where `cellvm serve` listens and the CLI looks for it
// when asked to use a daemon without a path.
const DefaultSocket = "/run/cellvm/cellvm.sock"

// connFlags say how to reach a daemon: its Unix socket, or its URL with a
// token (and the CA of its certificate).
type connFlags struct {
	socket    string
	url       string
	tokenFile string
	tlsCA     string
	// tenant: on the socket, the operator acts for this tenant.
	tenant  string
	jsonOut *bool
}

func (a *app) addConnFlags(fs *pflag.FlagSet) *connFlags {
	c := &connFlags{jsonOut: &a.jsonOut}
	fs.StringVar(&c.socket, "socket", os.Getenv("CELLVM_SOCKET"), "daemon socket (default $CELLVM_SOCKET; run and chat run sandboxes in this process when neither it nor --url is given)")
	fs.StringVar(&c.url, "url", os.Getenv("CELLVM_URL"), "daemon URL, https://HOST:PORT (default $CELLVM_URL)")
	fs.StringVar(&c.tokenFile, "token-file", os.Getenv("CELLVM_TOKEN_FILE"), "file holding the bearer token for --url (default $CELLVM_TOKEN_FILE, else $CELLVM_TOKEN)")
	fs.StringVar(&c.tlsCA, "tls-ca", os.Getenv("CELLVM_TLS_CA"), "PEM certificate(s) to trust for --url, e.g. the daemon's self-signed one (default $CELLVM_TLS_CA, else the system's)")
	fs.StringVar(&c.tenant, "tenant", os.Getenv("CELLVM_TENANT"), "on the daemon's socket, act for this tenant: make and see its sandboxes, snapshots and workspaces (default $CELLVM_TENANT; the operator sees all tenants without it)")
	fs.BoolVar(c.jsonOut, "json", false, "print JSON for scripts (errors too, on stdout)")
	return c
}

// remote reports whether a daemon was named.
func (c *connFlags) remote() bool { return c.socket != "" || c.url != "" }

// client returns a client for the daemon named by the flags, or the one at
// DefaultSocket. An absent socket is an unreachableError at once.
func (c *connFlags) client() (*api.Client, error) {
	if c.url != "" {
		if c.socket != "" {
			return nil, usagef("give --socket or --url, not both")
		}
		token, err := c.token()
		if err != nil {
			return nil, err
		}
		cl, err := api.Dial(c.url, api.WithToken(token), api.WithCAFile(c.tlsCA))
		if err != nil {
			return nil, usageError{err}
		}
		if c.tenant != "" {
			return nil, usagef("--tenant is the operator's, on the daemon's socket: a token acts for its own tenant")
		}
		return cl, nil
	}
	s := c.socket
	if s == "" {
		s = DefaultSocket
	}
	if _, err := os.Stat(s); err != nil {
		return nil, unreachableError{fmt.Errorf("no cellvm daemon at %s: start one with 'cellvm serve' or pass --socket / set CELLVM_SOCKET (%v)", s, err)}
	}
	if c.tenant != "" {
		if err := sandbox.CheckTenantName(c.tenant); err != nil {
			return nil, usageError{err}
		}
		return api.NewClient(s).ForTenant(c.tenant), nil
	}
	return api.NewClient(s), nil
}

// token reads the bearer token: the first token line of --token-file (the
// daemon's format: blank lines and # comments are skipped), else
// $CELLVM_TOKEN.
func (c *connFlags) token() (string, error) {
	if c.tokenFile == "" {
		return os.Getenv("CELLVM_TOKEN"), nil
	}
	b, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return "", fmt.Errorf("read the token: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			return t, nil
		}
	}
	return "", fmt.Errorf("token file %s holds no token", c.tokenFile)
}

// guestFlags choose the guest's files and how VMMs are confined, for the
// commands that run VMs themselves.
type guestFlags struct {
	kernel, initrd, rootfs string
	logLevel               string

	jail        bool
	jailUIDBase int
	jailCgroup  string
}

func addGuestFlags(fs *pflag.FlagSet, defaultLogLevel string) *guestFlags {
	g := &guestFlags{}
	fs.StringVar(&g.kernel, "kernel", "", "guest kernel (default build/kernel/vmlinux or $CELLVM_KERNEL)")
	fs.StringVar(&g.initrd, "initrd", "", "guest initramfs (default build/initramfs.cpio or $CELLVM_INITRD)")
	fs.StringVar(&g.rootfs, "rootfs", "", "guest root image (default build/rootfs.ext4 or $CELLVM_ROOTFS)")
	fs.StringVar(&g.logLevel, "log-level", defaultLogLevel, "log level on stderr (debug, info, warn, error)")
	fs.BoolVar(&g.jail, "jail", os.Geteuid() == 0,
		"confine each VMM: its own namespaces, a root with only its VM's files, its own uid, a cgroup, a seccomp filter (needs root; default on as root)")
	fs.IntVar(&g.jailUIDBase, "jail-uid-base", defaultJailUIDBase, "a jailed VMM runs as this uid (and gid) plus its VM's vsock CID")
	fs.StringVar(&g.jailCgroup, "jail-cgroup", defaultJailCgroup, "cgroup v2 directory for the jailed VMMs' cgroups (\"\" for none)")
	return g
}

// Jail defaults: uids far above those of people and services, and a
// cgroup beside the host's own.
const (
	defaultJailUIDBase = 200_000_000
	defaultJailCgroup  = "/sys/fs/cgroup/cellvm"
)

// jailOptions turns the jail flags into the manager's options, saying in
// the log what the VMMs will run under (nil: unjailed).
func (b *guestFlags) jailOptions(log *slog.Logger) (*engine.JailOptions, error) {
	if !b.jail {
		log.Warn("VMMs run unjailed (--jail=false, or not root): a VMM bug would reach this host as this user")
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, usageError{fmt.Errorf("--jail needs root (namespaces, mounts, switching to the VMM's uid); run as root or pass --jail=false")}
	}
	if b.jailUIDBase <= 0 || b.jailUIDBase > 1<<31-1<<20 {
		return nil, usageError{fmt.Errorf("--jail-uid-base %d: want 1..%d", b.jailUIDBase, 1<<31-1<<20)}
	}
	o := &engine.JailOptions{UIDBase: b.jailUIDBase, CgroupParent: b.jailCgroup}
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
func newEmbeddedManager(b *guestFlags, log *slog.Logger) (sandbox.Manager, func(), error) {
	if err := requireKVM(); err != nil {
		return nil, nil, err
	}
	k, i, r, err := guestFiles(b.kernel, b.initrd, b.rootfs)
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
	m, err := engine.NewVMManager(engine.Options{
		Exe: vmmBinary(exe, vmmExeEnv, log), ExeEnv: vmmExeEnv, Kernel: k, Initrd: i, RootFS: r, StateDir: dir, Log: log,
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

// backend returns the sandbox manager a command talks to: the daemon
// when one is named, otherwise one embedded in this process.
func (a *app) backend(c *connFlags, g *guestFlags) (sandbox.Manager, func(), error) {
	log, err := newLogger(a.stderr, g.logLevel)
	if err != nil {
		return nil, nil, err
	}
	if c.remote() {
		cl, err := c.client()
		if err != nil {
			return nil, nil, err
		}
		return cl, cl.Close, nil
	}
	return a.deps.embedded(g, log)
}

// requireKVM runs the host KVM check (a probe guest, bounded by a deadline)
// that every front end runs before it starts a VM, so a host whose /dev/kvm
// cannot run cellvm's guests fails at once with the reason instead of
// hanging in a boot.
func requireKVM() error {
	return kvm.Check(kvm.CheckConfig{}).Err()
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, usageError{fmt.Errorf("bad --log-level %q (debug, info, warn, error)", level)}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
