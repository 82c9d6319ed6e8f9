package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mdlayher/vsock"
	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestinit/agent"
	"github.com/cellvm/cellvm/guestinit/drop"
	"github.com/cellvm/cellvm/guestinit/interp"
	"github.com/cellvm/cellvm/guestinit/newmachine"
	"github.com/cellvm/cellvm/guestinit/pid1"
	"github.com/cellvm/cellvm/guestinit/proto"
	"github.com/cellvm/cellvm/guestinit/rootfs"
	"github.com/cellvm/cellvm/guestinit/sessions"
)

// agentMain runs the agent until a shutdown request; it returns the exit
// code.
func agentMain(args []string) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	listen := fs.String("listen", "vsock", `"vsock" (port 1024) or "unix:PATH"`)
	python := fs.String("python", "", "the interpreter: a path, or a name looked up on the cells' PATH (default "+interp.PythonName+")")
	dir := fs.String("dir", rootfs.Workspace, "working directory of cells and commands")
	guest := fs.Bool("guest", false, "apply the guest's file policy (overlay and tmpfs only) and run cells as the cells' user; PID 1 passes it")
	cellsRoot := fs.Bool(pid1.CellsRootFlag, false, "with -guest: cells and commands run as root (the sandbox's \"root\" option)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	level := slog.LevelInfo
	if os.Getenv(pid1.EnvDebug) == "1" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("proc", "agent")

	ln, err := listenOn(*listen)
	if err != nil {
		log.Error("listen", "err", err)
		return 1
	}
	// A guest on a loaded host (many VMs starting at once, or nested
	// virtualization) can take far longer than usual to start Python; a
	// slow start is still a start.
	icfg := interp.Config{Python: *python, Dir: *dir, Logger: log, StartTimeout: 3 * time.Minute}
	if cgroupHasMemory("/sys/fs/cgroup") {
		icfg.CgroupParent = "/sys/fs/cgroup"
		// Leave the init and the agent room to answer when a cell eats
		// all the memory it can, or forks without end: the user code's
		// cgroup hits its limit and is OOM-killed there, or its forks
		// fail, not the whole guest's.
		icfg.MemoryMax = interpMemoryMax()
		icfg.PidsMax = cellsPidsMax()
	}
	policy := agent.FilePolicy{}
	var launch func(root bool) []string
	if *guest {
		policy = agent.GuestFilePolicy()
		spec, err := guestCells(log, &icfg, &policy, *cellsRoot)
		if err != nil {
			log.Error("set up the cells' user", "err", err)
			return 1
		}
		launch = func(root bool) []string {
			s := spec
			s.Root = s.Root || root
			return s.Command("/proc/self/exe", nil)
		}
	}
	in, err := interp.New(icfg)
	if err != nil && icfg.CgroupParent != "" {
		log.Warn("interpreter with a cgroup failed; trying without", "err", err)
		icfg.CgroupParent = ""
		in, err = interp.New(icfg)
	}
	if err != nil {
		log.Error("interpreter", "err", err)
		return 1
	}
	// The other languages' sessions and named contexts are made as cells
	// ask for them, from the configuration that worked (with or without a
	// cgroup), sharing the Python session's cgroup of all user code.
	reg, err := sessions.New(sessions.Config{Primary: in, Base: icfg, Logger: log})
	if err != nil {
		in.Close()
		log.Error("sessions", "err", err)
		return 1
	}
	shutdown := make(chan struct{})
	srv := agent.NewServer(agent.Config{
		Interp:     reg,
		Files:      policy,
		Software:   "cellvm-init",
		OnShutdown: func() { close(shutdown) },
		NewMachine: &agent.NewMachine{Reseed: newmachine.Reseed, SetClock: newmachine.SetClock, SetNetwork: newmachine.SetNetwork},
		Procs:      agent.ProcSpec{Launcher: launch, Env: in.CommandEnv, Dir: in.Dir(), Cgroup: in.CellsCgroup},
		Logger:     log,
	})
	signalReady(log)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	announce, stopAnnounce := context.WithCancel(context.Background())
	defer stopAnnounce()
	if *listen == "vsock" {
		// Tell the host the agent listens, rather than have it poll.
		a := &agent.Announcer{Dial: dialReady, Line: agent.ReadyLine(), Log: log}
		go a.Run(announce)
	}
	select {
	case <-shutdown:
		ln.Close()
		srv.Close()
		reg.Close()
		return pid1.ExitShutdown
	case err := <-errc:
		log.Error("serve", "err", err)
		reg.Close()
		return 1
	}
}

func listenOn(spec string) (net.Listener, error) {
	if spec == "vsock" {
		// Bound to any CID, not the guest's own: a VM restored from a
		// snapshot has a CID of its own, and Linux matches a listener bound
		// to the old CID against nothing (the transport reset updates only
		// what it finds).
		ln, err := vsock.ListenContextID(unix.VMADDR_CID_ANY, proto.AgentPort, nil)
		if err != nil {
			return nil, fmt.Errorf("vsock port %d: %w", proto.AgentPort, err)
		}
		return ln, nil
	}
	if path, ok := strings.CutPrefix(spec, "unix:"); ok {
		os.Remove(path)
		return net.Listen("unix", path)
	}
	return nil, fmt.Errorf("bad -listen %q", spec)
}

// dialReady connects to the host's ready port (proto.ReadyPort).
func dialReady() (net.Conn, error) {
	return vsock.Dial(vsock.Host, proto.ReadyPort, nil)
}

// signalReady tells PID 1 the agent listens (one byte on the fd it named).
func signalReady(log *slog.Logger) {
	s := os.Getenv(pid1.EnvReadyFD)
	if s == "" {
		return
	}
	fd, err := strconv.Atoi(s)
	if err != nil || fd < 3 || fd > 1024 {
		log.Warn("bad ready fd", "value", s)
		return
	}
	f := os.NewFile(uintptr(fd), "ready")
	if _, err := f.Write([]byte{1}); err != nil && !errors.Is(err, syscall.EPIPE) {
		log.Warn("signal readiness", "err", err)
	}
	f.Close()
	os.Unsetenv(pid1.EnvReadyFD) // not inherited by the interpreter
}

// interpReserve is the guest memory kept out of the interpreter's reach.
const interpReserve = 96 << 20

// interpMemoryMax is the guest's memory less interpReserve (never below
// half of it).
func interpMemoryMax() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	total := int64(si.Totalram) * int64(si.Unit)
	return max(total-interpReserve, total/2)
}

func cgroupHasMemory(dir string) bool {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		return false
	}
	b, err := os.ReadFile(dir + "/cgroup.controllers")
	if err != nil {
		return false
	}
	for _, f := range strings.Fields(string(b)) {
		if f == "memory" {
			return true
		}
	}
	return false
}

// cellsPidsMax bounds the tasks (processes and threads) of all user code:
// a fork bomb meets it, the agent does not. 256 per vCPU (threads count:
// a numerical library starts one per CPU), at most 4096: enough for a
// notebook's pools and servers, and few enough that the guest can kill
// them all quickly.
func cellsPidsMax() int64 {
	return int64(min(256*runtime.NumCPU(), 4096))
}

// runDir holds the interpreter's driver in the guest: on /run, which only
// root may write, so a cell can neither replace the driver nor, by
// filling /tmp, keep the next interpreter from starting.
const runDir = "/run/cellvm-interp"

// guestCells makes the interpreter and commands start through the drop
// step as the image's config says (package imagecfg): as cellvm's cell
// user (package celluser), the image's own user, or root with asRoot; in
// the image's working directory, with its environment; and does uploads
// and downloads with that user's permissions. The agent itself keeps
// root, out of the OOM killer's reach.
func guestCells(log *slog.Logger, icfg *interp.Config, policy *agent.FilePolicy, asRoot bool) (drop.Spec, error) {
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0); err != nil {
		return drop.Spec{}, fmt.Errorf("shield the agent from the OOM killer: %w", err)
	}
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return drop.Spec{}, err
	}
	icfg.RunDir = runDir
	cells := imageCells(log, "/", asRoot, os.Environ(), icfg.Dir)
	spec := drop.Spec{UID: cells.UID, GID: cells.GID, Root: cells.AsRoot}
	icfg.Launcher = spec.Command("/proc/self/exe", nil)
	icfg.Env = cells.Env
	icfg.Dir = cells.Dir
	if !cells.AsRoot {
		policy.Owner = &agent.Owner{UID: cells.UID, GID: cells.GID}
	}
	return spec, nil
}
