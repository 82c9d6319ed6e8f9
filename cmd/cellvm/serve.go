package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/agentclient"
	"github.com/cellvm/cellvm/sandbox/engine"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/netpolicy"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/metrics"
	"github.com/cellvm/cellvm/sandbox/tenant"
	"github.com/cellvm/cellvm/vmm/consolelog"
)

// serveOptions are serve's flags.
type serveOptions struct {
	guest        *guestFlags
	socket       string
	stateDir     string
	imagesDir    string
	maxSandboxes int
	maxMemory    int
	network      bool
	uplink       string
	consoleMiB   int64
	resultMiB    int64
	life         *serveLifetimes // lifetimes and the snapshot disk cap (serve_lifetimes.go)
	boot         *serveBoot      // VM starts: deadline, slots, line (serve_boot.go)
	resident     *serveResident  // templates' memory kept resident (serve_resident.go)
	workspaceMiB int64
	// checkpointMiB bounds one sandbox's checkpoints on disk (0: none).
	checkpointMiB int64
	maxWorkspace  int
	images        *serveImages // serve_images.go
	publicRanges  prefixList
	egress        egressOptions // serve_egress.go
	// templates: warm starts from a template per machine shape, at
	// most maxTemplates of them in templatesMiB of disk.
	templates    bool
	maxTemplates int
	templatesMiB int64
	dnsUpstreams addrPortList
	node         string

	listen      string
	tokenFile   string
	tlsCert     string
	tlsKey      string
	socketGroup string

	tenants *tenantFlags

	mcp        bool
	mcpFlags   *mcpFlags
	mcpSession time.Duration
	// mcpMaxSessions caps each tenant's MCP sessions.
	mcpMaxSessions int
	// cellTimeout is a cell's or command's limit when its request names
	// none; maxCellTimeout the most a request may ask for.
	cellTimeout, maxCellTimeout time.Duration
	// maxImageUploadMiB bounds an image request's archive.
	maxImageUploadMiB int64
	policy            *cellPolicyFlags // serve_policy.go
	audit             *auditFlags      // serve_audit.go
	e2b               *e2bFlags        // serve_e2b.go
}

// deps are what tests replace: how the daemon and the embedded manager are
// made (a test binary serves a fake manager through the real serve).
type deps struct {
	daemonManager   func(o *serveOptions, log *slog.Logger) (sandbox.Manager, func(), error)
	embeddedManager func(g *guestFlags, log *slog.Logger) (sandbox.Manager, func(), error)
}

func productionDeps() deps {
	return deps{daemonManager: newDaemonManager, embeddedManager: newEmbeddedManager}
}

func (d deps) embedded(g *guestFlags, log *slog.Logger) (sandbox.Manager, func(), error) {
	return d.embeddedManager(g, log)
}

// serveCommand runs the daemon: the HTTP API on a Unix socket (and, with
// --listen, over TLS with bearer tokens) over a VM manager. SIGTERM or
// SIGINT destroys every sandbox and exits; a daemon that dies instead
// (kill -9) leaves its VMs running, and the next one takes them back from
// the state directory.
func (a *app) serveCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "run the daemon (the HTTP API on a Unix socket; --listen adds TLS with tokens)",
		Long: "Run the daemon: the HTTP API on a Unix socket (mode 0600, or 0660 with --socket-group), and with\n" +
			"--listen tcp://ADDR the same API over TLS, every request carrying a bearer token from --token-file.\n" +
			"Without --tls-cert and --tls-key a self-signed certificate is made at start and written to\n" +
			"STATE_DIR/tls/cert.pem (give it to clients with --tls-ca). --mcp serves the sandbox tools over\n" +
			"MCP's Streamable HTTP at /mcp on the same listeners, with the same auth.",
		Args: noArgs,
	}
	fs := cmd.Flags()
	o := &serveOptions{guest: addGuestFlags(fs, "info")}
	fs.StringVar(&o.socket, "socket", os.Getenv("CELLVM_SOCKET"), "the API socket (default $CELLVM_SOCKET, else "+DefaultSocket+")")
	fs.StringVar(&o.stateDir, "state-dir", "", "where sandboxes, snapshots, templates, workspaces and images are kept (default $CELLVM_STATE_DIR, else "+DefaultStateDir+")")
	fs.StringVar(&o.imagesDir, "images-dir", os.Getenv("CELLVM_IMAGES_DIR"), "where the images built by 'cellvm image build' are (default $CELLVM_IMAGES_DIR, else STATE_DIR/images)")
	fs.IntVar(&o.maxSandboxes, "max-sandboxes", 64, "cap on sandboxes (0: none)")
	fs.IntVar(&o.maxMemory, "max-memory", 0, "cap on total guest memory in MiB (default: 3/4 of the host's)")
	fs.BoolVar(&o.network, "network", os.Geteuid() == 0, "enforce network policies (TAP, iptables, DNS; needs root)")
	fs.StringVar(&o.uplink, "uplink", "", "interface guest traffic leaves through (default: any)")
	fs.Int64Var(&o.consoleMiB, "console-max-mib", consolelog.DefaultMax>>20, "cap on each sandbox's console log in MiB: the newest output is kept")
	fs.Int64Var(&o.resultMiB, "result-memory-mib", engine.DefaultResultMemoryBytes>>20, "budget in MiB for the cell results held at once across every sandbox (at least 160: one maximal result); a result past it waits, then is refused with a DaemonBusy error result")
	fs.BoolVar(&o.templates, "templates", true, "start plain creates from a template per VM shape (booted, numpy, pandas and matplotlib imported), built in the background")
	fs.IntVar(&o.maxTemplates, "max-templates", 4, "cap on templates kept (one per VM shape asked for; the least recently used go)")
	fs.Int64Var(&o.templatesMiB, "templates-max-mib", 8192, "cap on the templates' disk use in MiB")
	fs.Int64Var(&o.workspaceMiB, "workspace-mib", sandbox.DefaultWorkspaceBytes>>20, "size in MiB of a workspace made from now on: the most its files can take (the file on the host is sparse)")
	fs.Int64Var(&o.checkpointMiB, "checkpoint-max-mib", 4096, "cap in MiB on the disk one sandbox's checkpoints take; past it the oldest go (0: no cap)")
	fs.IntVar(&o.maxWorkspace, "max-workspaces", 64, "cap on the number of workspaces (0: none); a create that would make one more is refused with 503")
	o.life = addServeLifetimeFlags(fs)
	o.boot = addServeBootFlags(fs)
	o.resident = addServeResidentFlags(fs)
	o.images = addServeImageFlags(fs)
	fs.Var(&o.publicRanges, "public-ranges", "`CIDR[,CIDR...]` of the denied special ranges that are public on this host (e.g. a documentation range its network uses); one that --egress-deny holds stays closed unless --egress-allow-private names it too")
	o.egress.addFlags(fs)
	fs.Var(&o.dnsUpstreams, "dns-upstream", "`IP:PORT[,IP:PORT...]` resolvers that the guests' DNS asks for allowed names, e.g. one that knows a private package index (default: /etc/resolv.conf's)")
	fs.StringVar(&o.node, "node", "", "this daemon's node name, written into sandbox ids (sb-NODE-...) for a router in front of many daemons")
	fs.StringVar(&o.listen, "listen", "", "also serve the API over TLS at tcp://HOST:PORT (needs --token-file)")
	fs.StringVar(&o.tokenFile, "token-file", "", "file of bearer tokens accepted on --listen, one a line (at least 16 characters each)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate for --listen (default: a self-signed one made at start)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key for --tls-cert")
	fs.StringVar(&o.socketGroup, "socket-group", "", "let this group (name or gid) use the Unix socket too (mode 0660)")
	fs.BoolVar(&o.mcp, "mcp", false, "serve the sandbox tools over MCP Streamable HTTP at /mcp (a sandbox per MCP session)")
	fs.DurationVar(&o.cellTimeout, "cell-timeout", api.DefaultCellTimeout, "a cell's or command's time limit when its request gives none")
	fs.DurationVar(&o.maxCellTimeout, "max-cell-timeout", api.DefaultMaxTimeout, "the longest time limit a cell or command may ask for")
	fs.Int64Var(&o.maxImageUploadMiB, "max-image-upload-mib", api.DefaultMaxImageUploadBytes>>20, "the largest archive an image request may send (an import's, or a build's files), in MiB")
	fs.DurationVar(&o.mcpSession, "mcp-idle-timeout", 15*time.Minute, "end an MCP session (and delete its sandbox) after this long without a request")
	o.mcpFlags = addMCPFlagsPrefixed(fs)
	fs.IntVar(&o.mcpMaxSessions, "mcp-max-sessions", 16, "cap on each tenant's open MCP sessions (0: none; the tenant config's max_mcp_sessions overrides it)")
	o.tenants = addTenantFlags(fs)
	o.policy = addCellPolicyFlags(fs)
	o.audit = addAuditFlags(fs)
	o.e2b = addE2BFlags(fs)
	cmd.RunE = func(*cobra.Command, []string) error { return a.serve(o) }
	return cmd
}

// addMCPFlagsPrefixed adds the MCP tool settings as --mcp-* flags.
func addMCPFlagsPrefixed(fs interface {
	DurationVar(*time.Duration, string, time.Duration, string)
	IntVar(*int, string, int, string)
	BoolVar(*bool, string, bool, string)
}) *mcpFlags {
	f := &mcpFlags{}
	fs.DurationVar(&f.timeout, "mcp-timeout", 60*time.Second, "default time limit of one MCP tool call")
	fs.IntVar(&f.maxChars, "mcp-max-chars", 8000, "characters of each output section an MCP tool returns")
	fs.BoolVar(&f.companions, "mcp-tools", true, "offer the companion tools beside run_python over MCP")
	fs.BoolVar(&f.checkpoints, "mcp-checkpoints", false, "MCP sessions' sandboxes record a checkpoint after each cell, and the tools include undo_last_cell")
	return f
}

// checkServe checks the flags before anything is started.
func (o *serveOptions) check() error {
	if _, err := newLogger(os.Stderr, o.guest.logLevel); err != nil {
		return err
	}
	if min := agentclient.MinBudget >> 20; o.resultMiB < min || o.resultMiB > 1<<20 {
		return usagef("--result-memory-mib %d: want %d (one maximal result in flight) to %d", o.resultMiB, min, 1<<20)
	}
	if o.listen != "" {
		addr, ok := strings.CutPrefix(o.listen, "tcp://")
		if !ok || addr == "" {
			return usagef("--listen %q: want tcp://HOST:PORT", o.listen)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return usagef("--listen %q: %v", o.listen, err)
		}
		if o.tokenFile == "" {
			return usagef("--listen needs --token-file: a TCP listener without tokens would let anyone who reaches it run code")
		}
	} else if o.tokenFile != "" || o.tlsCert != "" || o.tlsKey != "" {
		return usagef("--token-file, --tls-cert and --tls-key go with --listen")
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return usagef("give --tls-cert and --tls-key together")
	}
	if o.maxImageUploadMiB <= 0 || o.maxImageUploadMiB > 1<<30 {
		return usagef("--max-image-upload-mib %d: want 1 to %d", o.maxImageUploadMiB, 1<<30)
	}
	if o.cellTimeout <= 0 || o.maxCellTimeout <= 0 {
		return usagef("--cell-timeout %v and --max-cell-timeout %v must both be positive", o.cellTimeout, o.maxCellTimeout)
	}
	if o.cellTimeout > o.maxCellTimeout {
		return usagef("--cell-timeout %v is above --max-cell-timeout %v", o.cellTimeout, o.maxCellTimeout)
	}
	if len(o.publicRanges) > 0 && !o.network {
		return usagef("--public-ranges needs --network")
	}
	if len(o.dnsUpstreams) > 0 && !o.network {
		return usagef("--dns-upstream needs --network")
	}
	if err := sandbox.ValidNode(o.node); err != nil {
		return usageError{err}
	}
	if o.mcpSession <= 0 {
		return usagef("--mcp-idle-timeout must be positive")
	}
	if o.workspaceMiB < 16 || o.workspaceMiB > engine.MaxWorkspaceBytes>>20 {
		// The jailed VMM's RLIMIT_FSIZE bounds the offsets it can write.
		return usagef("--workspace-mib %d: want 16 to %d", o.workspaceMiB, engine.MaxWorkspaceBytes>>20)
	}
	if o.checkpointMiB < 0 || o.checkpointMiB > 1<<30 {
		return usagef("--checkpoint-max-mib %d: want 0 to %d", o.checkpointMiB, 1<<30)
	}
	if o.maxWorkspace < 0 {
		return usagef("--max-workspaces %d is negative", o.maxWorkspace)
	}
	if err := o.tenants.check(); err != nil {
		return err
	}
	if err := o.life.check(); err != nil {
		return err
	}
	if err := o.resident.check(); err != nil {
		return err
	}
	if err := o.boot.check(); err != nil {
		return err
	}
	if err := o.images.check(); err != nil {
		return err
	}
	if err := o.e2b.check(o.listen); err != nil {
		return err
	}
	if err := o.audit.check(o.listen); err != nil {
		return err
	}
	return o.policy.check()
}

func (a *app) serve(o *serveOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	if o.socket == "" {
		o.socket = DefaultSocket
	}
	o.stateDir = StateDir(o.stateDir)
	log, err := newLogger(a.stderr, o.guest.logLevel)
	if err != nil {
		return err
	}
	warnStateInRAM(o.stateDir, log)
	if err := o.egress.resolve(log, o.publicRanges, hostInterfaces); err != nil {
		return err
	}
	var tokens *api.Tokens
	if o.tokenFile != "" {
		if tokens, err = api.LoadTokens(o.tokenFile); err != nil {
			return usageError{err}
		}
	}
	tenantFile, err := o.tenants.load()
	if err != nil {
		return err
	}
	known := knownTenants(tokens, tenantFile)
	var sockOpts []api.ListenOption
	sockOpts = append(sockOpts, api.WithListenLogger(log))
	if o.socketGroup != "" {
		gid, err := lookupGroup(o.socketGroup)
		if err != nil {
			return usageError{err}
		}
		sockOpts = append(sockOpts, api.AllowGroup(gid))
	}
	if err := os.MkdirAll(filepath.Dir(o.socket), 0o700); err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	// Opened before the manager and closed after it, for the records
	// of the sandboxes it ends.
	auditOpts, gateOpts, closeAudit, err := o.audit.open(o.stateDir, log)
	if err != nil {
		return err
	}
	defer closeAudit()
	inner, closeManager, err := a.deps.daemonManager(o, log)
	if err != nil {
		return err
	}
	defer closeManager()
	if inner, err = o.policy.wrap(inner, log, o.audit.policyRefusal(log)); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every front end calls the tenant layer, which calls the metrics'
	// wrapper over the engine.
	m := tenant.New(metrics.Instrument(inner, reg), tenant.Options{Quotas: o.tenants.quotas, File: tenantFile, Log: log,
		CheckEgress: o.checkEgress})
	logTenants(log, known, o.tenants, tenantFile)
	if err := o.audit.watchEnds(m, log); err != nil {
		return err
	}
	apiOpts := []api.Option{api.WithMetrics(reg), api.WithTimeouts(o.cellTimeout, o.maxCellTimeout),
		api.WithTenants(func(t string) bool { return known[t] }), api.WithMaxImageUploadBytes(o.maxImageUploadMiB << 20), api.WithVersion(apiVersion())}
	if o.mcp {
		mh, closeMCP := newMCPHandler(m, o, tenantFile, log)
		defer closeMCP()
		apiOpts = append(apiOpts, api.WithMCP(mh))
	}
	handler := api.NewServer(m, log, append(apiOpts, auditOpts...)...)
	var servers []*http.Server
	errc := make(chan error, 2)
	ln, err := api.ListenUnix(o.socket, sockOpts...)
	if err != nil {
		return err
	}
	unixSrv := api.NewHTTPServer(handler)
	servers = append(servers, unixSrv)
	go func() { errc <- unixSrv.Serve(ln) }()
	if o.listen != "" {
		tlsCfg, certPath, err := serverTLS(o, log)
		if err != nil {
			return err
		}
		tln, err := net.Listen("tcp", strings.TrimPrefix(o.listen, "tcp://"))
		if err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
		tcpHandler, err := o.e2b.wrap(api.RequireToken(handler, tokens, log, gateOpts...), m, tokens, o.stateDir, log)
		if err != nil {
			return err
		}
		tcpSrv := api.NewHTTPServer(tcpHandler)
		tcpSrv.TLSConfig = tlsCfg
		servers = append(servers, tcpSrv)
		go func() { errc <- tcpSrv.ServeTLS(tln, "", "") }()
		log.Info("cellvm daemon listening over TLS", "addr", tln.Addr().String(), "cert", certPath, "tokens", tokens.Len())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("cellvm daemon listening", "socket", o.socket, "state_dir", o.stateDir, "mcp", o.mcp)
	select {
	case <-ctx.Done():
		log.Info("shutting down: destroying sandboxes")
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range servers {
		s.Shutdown(sctx)
	}
	os.Remove(o.socket)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// vmmExeEnv is engine.Options.ExeEnv: nil in cellvm; this package's
// TestMain sets the variable that makes the test binary, run as the VMM,
// act as cellvm.
var vmmExeEnv []string

// newDaemonManager is the daemon's VM manager.
func newDaemonManager(o *serveOptions, log *slog.Logger) (sandbox.Manager, func(), error) {
	if err := requireKVM(); err != nil {
		return nil, nil, fmt.Errorf("the daemon cannot start VMs: %w", err)
	}
	k, i, r, err := guestFiles(o.guest.kernel, o.guest.initrd, o.guest.rootfs)
	if err != nil {
		return nil, nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	if o.maxMemory == 0 {
		if total, err := hostMemMiB(); err == nil {
			o.maxMemory = total * 3 / 4
		}
	}
	var netHost *netpolicy.Host
	if o.network {
		if netHost, err = netpolicy.NewHost(netpolicy.HostConfig{Uplink: o.uplink, PublicRanges: o.publicRanges, Upstreams: o.dnsUpstreams.strings(), Egress: o.egress.guard}, log); err != nil {
			return nil, nil, fmt.Errorf("network policies: %w (pass --network=false to run without them)", err)
		}
		log.Info("network policies on", "uplink", o.uplink, "public_ranges", o.publicRanges.String(), "dns_upstreams", o.dnsUpstreams.String())
	}
	closeNet := func() {
		if netHost != nil {
			netHost.Close()
		}
	}
	jailOpt, err := o.guest.jailOptions(log)
	if err != nil {
		closeNet()
		return nil, nil, err
	}
	maxImage, err := o.life.imageCap(o.stateDir, log)
	if err != nil {
		closeNet()
		return nil, nil, err
	}
	engine.SetResultMemory(o.resultMiB<<20, log)
	opt := engine.Options{
		Exe: vmmBinary(exe, vmmExeEnv, log), ExeEnv: vmmExeEnv, Kernel: k, Initrd: i, RootFS: r, StateDir: o.stateDir, ImagesDir: o.imagesDir,
		MaxSandboxes: o.maxSandboxes, MaxMemoryMiB: o.maxMemory, Log: log,
		Net: netHost, Jail: jailOpt, ConsoleMaxBytes: o.consoleMiB << 20,
		TestHooks: os.Getenv("CELLVM_TEST_HOOKS") == "1", Node: o.node, MaxImageBytes: maxImage,
		WorkspaceBytes: o.workspaceMiB << 20, MaxWorkspaces: o.maxWorkspace,
		CheckpointMaxBytes: o.checkpointMiB << 20,
		AllowPrivate:       func(t string) []netip.Prefix { return o.tenants.file.For(t).AllowPrivate() },
		DefaultTTL:         o.life.ttl, DefaultIdleTimeout: o.life.idle, MaxTTL: o.life.maxTTL,
		Templates: engine.TemplateOptions{Enabled: o.templates, MaxTemplates: o.maxTemplates, MaxBytes: o.templatesMiB << 20}, ImageBuild: o.images.options(o.publicRanges),
	}
	o.boot.apply(&opt)
	o.resident.apply(&opt.Templates)
	m, err := engine.NewVMManager(opt)
	if err != nil {
		closeNet()
		return nil, nil, err
	}
	log.Info("VM manager ready", "kernel", k, "rootfs", r, "boot_timeout", opt.BootTimeout, "boot_concurrency", opt.BootConcurrency, "vmm_pool", opt.VMMPool)
	return m, func() { m.Close(); closeNet() }, nil
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

func (l *prefixList) Type() string { return "CIDR[,CIDR...]" }

// addrPortList is --dns-upstream's value.
type addrPortList []netip.AddrPort

func (l *addrPortList) String() string { return strings.Join(l.strings(), ",") }

func (l *addrPortList) strings() []string {
	s := make([]string, len(*l))
	for i, a := range *l {
		s[i] = a.String()
	}
	return s
}

func (l *addrPortList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		a, err := netip.ParseAddrPort(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("%q: want IP:PORT such as 192.0.2.53:53", f)
		}
		*l = append(*l, a)
	}
	return nil
}

func (l *addrPortList) Type() string { return "IP:PORT[,IP:PORT...]" }

func hostMemMiB() (int, error) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0, err
	}
	return int(uint64(si.Totalram) * uint64(si.Unit) >> 20), nil
}
