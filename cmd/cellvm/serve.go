package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/netpolicy"
	"github.com/cellvm/cellvm/sandbox"
)

// cmdServe runs the daemon: the HTTP API on a Unix socket over a VM
// manager. SIGTERM or SIGINT destroys every sandbox and exits; a daemon
// that dies instead (kill -9) leaves its VMs running, and the next one takes
// them back from the state directory.
func cmdServe(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := addBackendFlags(fs)
	stateDir := fs.String("state-dir", "", "where sandboxes keep their files (default: beside the socket)")
	maxSandboxes := fs.Int("max-sandboxes", 64, "cap on sandboxes (0: none)")
	maxMemory := fs.Int("max-memory", 0, "cap on total guest memory in MiB (default: 3/4 of the host's)")
	withNet := fs.Bool("network", os.Geteuid() == 0, "enforce network policies (TAP, iptables, DNS; needs root)")
	uplink := fs.String("uplink", "", "interface guest traffic leaves through (default: any)")
	var public prefixList
	fs.Var(&public, "public-ranges", "`CIDR[,CIDR...]` of the denied special ranges that are public on this host (e.g. a documentation range its network uses)")
	*b.logLevel = "info"
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if len(public) > 0 && !*withNet {
		return usageError{errors.New("--public-ranges needs --network")}
	}
	socket := *b.socket
	if socket == "" {
		socket = DefaultSocket
	}
	if *stateDir == "" {
		*stateDir = filepath.Join(filepath.Dir(socket), "state")
	}
	log, err := newLogger(stderr, *b.logLevel)
	if err != nil {
		return err
	}
	if err := requireKVM(); err != nil {
		return fmt.Errorf("the daemon cannot start VMs: %w", err)
	}
	k, i, r, err := guestFiles(*b.kernel, *b.initrd, *b.rootfs)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if *maxMemory == 0 {
		if total, err := hostMemMiB(); err == nil {
			*maxMemory = total * 3 / 4
		}
	}
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	var netHost *netpolicy.Host
	if *withNet {
		if netHost, err = netpolicy.NewHost(netpolicy.HostConfig{Uplink: *uplink, PublicRanges: public}, log); err != nil {
			return fmt.Errorf("network policies: %w (pass --network=false to run without them)", err)
		}
		log.Info("network policies on", "uplink", *uplink, "public_ranges", public.String())
	}
	jailOpt, err := b.jailOptions(log)
	if err != nil {
		return err
	}
	m, err := sandbox.NewVMManager(sandbox.Options{
		Exe: exe, Kernel: k, Initrd: i, RootFS: r, StateDir: *stateDir,
		MaxSandboxes: *maxSandboxes, MaxMemoryMiB: *maxMemory, Log: log,
		BootTimeout: bootTimeoutFromEnv(), Net: netHost, Jail: jailOpt,
		TestHooks: os.Getenv("CELLVM_TEST_HOOKS") == "1",
	})
	if err != nil {
		if netHost != nil {
			netHost.Close()
		}
		return err
	}
	ln, err := api.ListenUnix(socket, api.WithListenLogger(log))
	if err != nil {
		m.Close()
		if netHost != nil {
			netHost.Close()
		}
		return err
	}
	srv := api.NewHTTPServer(api.NewServer(m, log))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("cellvm daemon listening", "socket", socket, "state_dir", *stateDir, "kernel", k, "rootfs", r)
	select {
	case <-ctx.Done():
		log.Info("shutting down: destroying sandboxes")
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	m.Close()
	if netHost != nil {
		netHost.Close()
	}
	os.Remove(socket)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// prefixList is a flag of comma-separated CIDR prefixes.
type prefixList []netip.Prefix

func (l *prefixList) String() string {
	s := make([]string, len(*l))
	for i, p := range *l {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func (l *prefixList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("%q: want a CIDR prefix such as 192.0.2.0/24", f)
		}
		*l = append(*l, p)
	}
	return nil
}

func hostMemMiB() (int, error) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0, err
	}
	return int(uint64(si.Totalram) * uint64(si.Unit) >> 20), nil
}
