// Package pid1 is the guest's init: it sets up the machine (mounts, the
// overlay root, clock, host name, network), starts the agent, reaps every
// orphan, and shuts the VM down cleanly on request.
//
// The agent runs as a separate process (this same binary, re-executed)
// rather than inside PID 1, for two reasons. The interpreter supervisor
// waits for its own children through os/exec, and PID 1 must reap every
// orphan with wait4(-1), which would steal those statuses if both lived in
// one process. And a crash of the agent, which parses everything the host
// sends, must not be a crash of PID 1, which the kernel answers with a
// panic: PID 1 restarts the agent instead.
//
// PID 1 must never exit. Every goroutine it starts recovers panics, and a
// fatal error is printed on the console before the VM reboots (the VMM
// treats the guest's reboot as the VM's end).
package pid1

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestinit/bootmarker"
	"github.com/cellvm/cellvm/guestinit/celluser"
	"github.com/cellvm/cellvm/guestinit/cmdline"
	"github.com/cellvm/cellvm/guestinit/netcfg"
	"github.com/cellvm/cellvm/guestinit/reaper"
	"github.com/cellvm/cellvm/guestinit/rootfs"
)

// ExitShutdown is the agent's exit code for "the host asked for a
// shutdown".
const ExitShutdown = 64

// AgentArg is the argument that makes the binary run as the agent.
const AgentArg = "agent"

// CellsRootFlag is the agent's flag (without its dash) that runs cells and
// commands as root; PID 1 passes it for cellvm.cellsroot=1.
const CellsRootFlag = "cells-root"

// ReadyFD is the agent's fd on which it writes one byte once it listens.
const ReadyFD = 3

// EnvReadyFD names ReadyFD in the agent's environment.
const EnvReadyFD = "CELLVM_READY_FD"

// EnvDebug is set to 1 in the agent's environment for debug logs.
const EnvDebug = "CELLVM_DEBUG"

// agentEnv is the environment of the agent, the interpreter and commands.
var agentEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root",
	"LANG=C.UTF-8",
	"LC_ALL=C.UTF-8",
	"USER=root",
}

// Main is the init. It never returns.
func Main() {
	defer func() {
		if p := recover(); p != nil {
			fatal(fmt.Errorf("panic: %v\n%s", p, debug.Stack()))
		}
	}()
	boot := time.Now()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg, err := setup(log)
	if err != nil {
		fatal(err)
	}
	if cfg.Debug {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	log.Info("cellvm-init: system ready", "setup", time.Since(boot).Round(time.Microsecond))
	run(log, cfg)
}

// setup mounts everything, switches root and configures the system.
func setup(log *slog.Logger) (cmdline.Config, error) {
	// Signals first: until a handler exists the kernel drops them for
	// PID 1, and ctrl-alt-del should become SIGINT, not an instant reboot.
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF)

	sys := rootfs.System{}
	early := rootfs.NewPlan("none")
	if err := early.ApplyEarly(sys, log); err != nil {
		return cmdline.Config{}, err
	}
	useConsole(log)

	raw, err := readCmdline()
	if err != nil {
		log.Warn("read kernel command line", "err", err)
	}
	cfg, warns := cmdline.Parse(raw)
	for _, w := range warns {
		log.Warn("kernel command line", "err", w)
	}
	setClock(log, cfg.Time)

	plan := rootfs.NewPlan(cfg.Root)
	if cfg.Workspace != "" {
		plan = plan.WithWorkspace(cfg.Workspace)
	}
	if err := plan.SwitchRoot(sys, log); err != nil {
		if !errors.Is(err, rootfs.ErrNoRoot) {
			return cfg, err // half switched: nothing sane to go on with
		}
		log.Error("no root image: staying in the initramfs (no interpreter)", "err", err)
	}
	if err := plan.ApplyLate(sys, log); err != nil {
		return cfg, err
	}
	devLinks(log)
	// PID 1 and the agent (which inherits it) are the last things the OOM
	// killer may take; the drop step puts cell code back at 0.
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0); err != nil {
		log.Warn("shield init from the OOM killer", "err", err)
	}
	if err := celluser.Ensure("/", rootfs.Workspace); err != nil {
		log.Error("the cells' user", "err", err)
	}
	if cfg.Workspace != "" {
		// mkfs's empty lost+found would be the first thing a model
		// listing its files sees; e2fsck makes it again if it needs it.
		_ = unix.Rmdir(rootfs.Workspace + "/lost+found")
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		log.Warn("set host name", "err", err)
	}
	if err := netcfg.AddHostsEntry("/etc/hosts", cfg.Hostname); err != nil {
		log.Warn("hosts", "err", err)
	}
	if err := netcfg.Up(netcfg.Config{Addr: cfg.Addr, Gateway: cfg.Gateway}, time.Second); err != nil {
		log.Error("network", "err", err)
	}
	if err := netcfg.WriteResolvConf("/etc/resolv.conf", cfg.DNS); err != nil {
		log.Warn("resolv.conf", "err", err)
	}
	return cfg, nil
}

// useConsole makes fds 0-2 the console: the initramfs may have no
// /dev/console node, in which case the kernel started init without them.
func useConsole(log *slog.Logger) {
	fd, err := unix.Open("/dev/console", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	for _, std := range []int{0, 1, 2} {
		if err := unix.Dup3(fd, std, 0); err != nil {
			log.Warn("console", "fd", std, "err", err)
		}
	}
	if fd > 2 {
		unix.Close(fd)
	}
}

func readCmdline() (string, error) {
	f, err := os.Open("/proc/cmdline")
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, cmdline.MaxCmdline+1))
	return strings.TrimSpace(string(b)), err
}

// setClock sets the wall clock from the host's time at VM start, plus the
// time the guest has been up since.
func setClock(log *slog.Logger, host time.Time) {
	if host.IsZero() {
		return
	}
	var up unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &up); err == nil {
		host = host.Add(time.Duration(up.Nano()))
	}
	tv := unix.NsecToTimeval(host.UnixNano())
	if err := unix.Settimeofday(&tv); err != nil {
		log.Warn("set clock", "err", err)
	}
}

// fatal prints err on the console and reboots; it never returns.
func fatal(err error) {
	fmt.Fprintf(os.Stderr, "cellvm-init: FATAL: %v\ncellvm-init: rebooting\n", err)
	unix.Sync()
	for {
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
		time.Sleep(time.Second) // only reached without CAP_SYS_BOOT
	}
}

// goSafe runs f on a goroutine whose panic is fatal (and printed) rather
// than an unexplained exit of PID 1.
func goSafe(f func()) {
	go func() {
		defer func() {
			if p := recover(); p != nil {
				fatal(fmt.Errorf("panic: %v\n%s", p, debug.Stack()))
			}
		}()
		f()
	}()
}

// run starts the agent and supervises until shutdown.
func run(log *slog.Logger, cfg cmdline.Config) {
	r := reaper.New(log)
	goSafe(func() { r.Run(context.Background()) })

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGPWR)
	signal.Ignore(unix.SIGHUP, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU)

	ready := make(chan struct{}, 1)
	s := supervisor{log: log, r: r, sigs: sigs, ready: ready}
	var crashes crashWindow
	for {
		// A failed start (fork refused while a cell has the guest's memory,
		// say) counts like a crash: retried with backoff, fatal only when
		// it keeps happening.
		exits, err := startAgent(log, r, cfg, ready)
		if err != nil {
			log.Error("could not start the agent; retrying", "err", err)
		} else {
			e := s.watch(exits)
			log.Error("agent died; restarting it", "status", e.String())
		}
		delay, tooMany := crashes.add(time.Now())
		if tooMany {
			why := fmt.Errorf("the agent died or failed to start %d times within %v", maxCrashes, crashWindowSpan)
			if err != nil {
				why = fmt.Errorf("%w; the last start failed: %w", why, err)
			}
			fatal(why)
		}
		time.Sleep(delay)
	}
}

// Agent restarts: at most maxCrashes within crashWindowSpan before PID 1
// gives up (and the VM ends, which the host reports as lost).
const (
	maxCrashes      = 10
	crashWindowSpan = time.Minute
	crashBackoff    = 100 * time.Millisecond
)

// crashWindow counts the agent's recent crashes.
type crashWindow struct{ at []time.Time }

// add records a crash at now and returns how long to wait before the next
// start (longer the more recent crashes there are) and whether there were
// too many.
func (w *crashWindow) add(now time.Time) (delay time.Duration, tooMany bool) {
	w.at = append(w.at, now)
	for len(w.at) > 0 && now.Sub(w.at[0]) > crashWindowSpan {
		w.at = w.at[1:]
	}
	return time.Duration(len(w.at)) * crashBackoff, len(w.at) >= maxCrashes
}

type supervisor struct {
	log       *slog.Logger
	r         *reaper.Reaper
	sigs      <-chan os.Signal
	ready     <-chan struct{}
	everReady bool
}

// watch waits for the agent to exit and returns how, handling readiness
// (the boot marker, once) and shutdown requests meanwhile.
func (s *supervisor) watch(exits <-chan reaper.Exit) reaper.Exit {
	for {
		select {
		case sig := <-s.sigs:
			s.log.Info("signal: shutting down", "signal", sig)
			Shutdown(s.log, s.r)
		case e := <-exits:
			if e.Code() == ExitShutdown {
				s.log.Info("agent asked for shutdown")
				Shutdown(s.log, s.r)
			}
			return e
		case <-s.ready:
			if !s.everReady {
				s.everReady = true
				if err := bootmarker.Write(); err != nil {
					s.log.Warn("boot marker", "err", err)
				}
				s.log.Info("agent ready")
			}
		}
	}
}

// startAgent starts the agent (this binary, from /proc/self/exe: the file
// stays reachable that way after the root switch) and forwards its
// readiness byte to ready.
func startAgent(log *slog.Logger, r *reaper.Reaper, cfg cmdline.Config, ready chan<- struct{}) (<-chan reaper.Exit, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	env := append(agentEnv[:len(agentEnv):len(agentEnv)], fmt.Sprintf("%s=%d", EnvReadyFD, ReadyFD))
	if cfg.Debug {
		env = append(env, EnvDebug+"=1")
	}
	args := []string{"cellvm-agent", AgentArg, "-guest"}
	if cfg.CellsRoot {
		args = append(args, "-"+CellsRootFlag)
	}
	_, exits, err := r.Start("/proc/self/exe", args, &os.ProcAttr{
		Dir:   "/",
		Env:   env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, pw},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, err
	}
	goSafe(func() {
		defer pr.Close()
		var b [1]byte
		if n, _ := pr.Read(b[:]); n == 1 {
			select {
			case ready <- struct{}{}:
			default:
			}
		}
	})
	return exits, nil
}
