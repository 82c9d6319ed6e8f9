package process

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/vmm/control"
)

// Options are what a VMM process has besides its spec: its streams.
type Options struct {
	// Stdin feeds the serial console's input (`cellvm boot`); none when
	// nil.
	Stdin io.Reader
	// Stdout receives the console; Stderr the VMM's log.
	Stdout, Stderr io.Writer
	// Log, when set, is the VMM's log instead of one on Stderr at the
	// spec's level.
	Log *slog.Logger
	// StopOnSignal makes SIGTERM and SIGINT stop the VM, which is how the
	// daemon ends a VMM; `cellvm boot` leaves them their default.
	StopOnSignal bool
	// HostCheck, when set, is waited for before the guest's first
	// instruction (before the jail's privilege drop): `cellvm boot`'s
	// KVM probe, which runs while the machine is built. Its error ends
	// the VM before the guest runs, and Run returns it (wrapped).
	HostCheck func() error
	// Claimed is when a pooled process was claimed (Main): its start
	// is counted from then, not from its exec, which was the pool's.
	Claimed time.Time
}

// Run runs the machine spec describes, with files in its slots, until the
// guest ends or the VM is stopped (a signal, a snapshot that ends it). It
// returns nil when the guest reset or was stopped, and the error that
// ended it otherwise. When files has SlotEnd, the End report is written
// there as Run returns, whatever happened.
func Run(spec control.Spec, files control.Files, o Options) (err error) {
	started := time.Now() // where a slow start's time went: the "vmm jailed" line says
	execMS := sinceExec().Milliseconds()
	if !o.Claimed.IsZero() {
		execMS = time.Since(o.Claimed).Milliseconds()
	}
	var ends ending
	if f := files[control.SlotEnd]; f != nil {
		files = copyWithout(files, control.SlotEnd)
		defer func() {
			if werr := control.WriteEnd(f, ends.report(err)); werr != nil && err == nil {
				err = fmt.Errorf("write the end report: %w", werr)
			}
		}()
	}
	plan, err := NewPlan(spec, files)
	if err != nil {
		files.Close()
		return err
	}
	enoughProcs(spec.VCPUs)
	log := o.Log
	if log == nil {
		level, _ := spec.Level() // NewPlan validated it
		log = slog.New(slog.NewTextHandler(o.Stderr, &slog.HandlerOptions{Level: level}))
	}
	// The page map lets a save skip the pages the guest never touched; the
	// jail has no /proc, so it is opened first, and so that it shows no
	// host frame numbers (openPagemap). Without it saves read every page.
	pagemap, err := openPagemap()
	if err != nil {
		log.Debug("no page map: a snapshot will read every page of guest memory", "err", err)
		pagemap = nil
	}
	// Until the machine is built and owns them, a failure closes what was
	// opened for it.
	abandon := func() {
		files.Close()
		if pagemap != nil {
			pagemap.Close()
		}
	}
	if spec.Jail != nil {
		if err := jail.Enter(*spec.Jail); err != nil {
			abandon()
			return err
		}
	}
	entered := time.Now()
	if spec.TestHooks {
		forbiddenCallOnSIGUSR2(log)
		rewriteArgvOnSIGWINCH(log)
	}
	console, err := cappedConsole(o.Stdout, spec.ConsoleMaxBytes)
	if err != nil {
		abandon()
		return err
	}
	// The start's steps after the jail's mounts, for the "vmm built"
	// line: a start that once took a minute here, with every thread
	// idle, is to say which step held it.
	var built, served, dropped time.Time
	consoleReady := time.Now()
	cfg := plan.Config
	cfg.Console, cfg.ConsoleInput, cfg.Log, cfg.Pagemap = console, o.Stdin, log, pagemap
	cfg.QueueGate = jailCheck(spec.Jail, log, selfProbe)
	cfg.BeforeGuest = func() error {
		if o.HostCheck != nil {
			if err := o.HostCheck(); err != nil {
				return err
			}
		}
		ran := time.Now()
		if j := spec.Jail; j != nil {
			if err := jail.Drop(*j); err != nil {
				return err
			}
			dropped = time.Now()
			if err := jail.Install(); err != nil {
				return err
			}
			log.Info("vmm jailed", "uid", j.UID, "root", j.Root, "cgroup", j.Cgroup, "seccomp", "on")
		} else {
			dropped = ran
		}
		// Where the process's start went, jailed or not: the kernel's
		// clone to Run, the jail's mounts, and the machine's build (a
		// boot's kernel load, a restore's mapping and state), and within
		// the build: the console, the machine (its own steps are the "vm
		// starting" line's setup), the control socket, Run's own set-up
		// (a boot's vCPUs), the privileges' drop and the seccomp filter.
		log.Info("vmm built", "since_exec_ms", execMS, "jail_enter_ms", entered.Sub(started).Milliseconds(), "build_ms", time.Since(entered).Milliseconds(),
			"console_ms", consoleReady.Sub(entered).Milliseconds(), "machine_ms", built.Sub(consoleReady).Milliseconds(),
			"control_ms", served.Sub(built).Milliseconds(), "run_ms", ran.Sub(served).Milliseconds(),
			"drop_ms", dropped.Sub(ran).Milliseconds(), "seccomp_ms", time.Since(dropped).Milliseconds())
		ends.guestRuns()
		return nil
	}
	m, err := plan.build(cfg)
	if err != nil {
		return err
	}
	built = time.Now()
	defer m.Close()
	stopControl, err := serveControl(m, spec.Control, &ends, log)
	if err != nil {
		return err
	}
	defer stopControl()
	defer dumpVCPUsOnSIGUSR1(m)()
	served = time.Now()
	if o.StopOnSignal {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(sigs)
		go func() {
			if s, ok := <-sigs; ok {
				log.Info("stopping on signal", "signal", s.String())
				ends.stopped(s.String())
				m.Stop()
			}
		}()
	}
	return m.Run()
}

// copyWithout is files without slot.
func copyWithout(files control.Files, slot string) control.Files {
	out := control.Files{}
	for s, f := range files {
		if s != slot {
			out[s] = f
		}
	}
	return out
}
