package main

import (
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/engine"
)

// What the daemon gives by default so that nothing grows without bound
// when nobody thinks of it: a sandbox whose create names no lifetime
// ends after --default-ttl (1 h) or --default-idle-timeout (15 min)
// unused, whichever comes first, whatever front end made it (the API,
// MCP, the clients, the CLI); --max-ttl caps what a create may ask for;
// and machine images (snapshots, paused sandboxes) may take half of the
// state file system's free space unless --snapshot-max-mib says
// otherwise. The engine applies the lifetimes (sandbox.Lifetimes), so
// every front end gets the same.

// serveLifetimes are serve's flags for lifetimes and the snapshot disk
// cap.
type serveLifetimes struct {
	ttl, idle, maxTTL time.Duration
	snapshotMiB       optionalMiB
}

func addServeLifetimeFlags(fs *pflag.FlagSet) *serveLifetimes {
	l := &serveLifetimes{}
	fs.DurationVar(&l.ttl, "default-ttl", time.Hour, "destroy a sandbox whose create names no TTL (ttl_s) this long after its creation (0: never)")
	fs.DurationVar(&l.idle, "default-idle-timeout", 15*time.Minute, "destroy a sandbox whose create names no idle timeout (idle_timeout_s) after this long unused (0: never)")
	fs.DurationVar(&l.maxTTL, "max-ttl", 0, "the longest TTL a create may ask for: above it, or never (ttl_s 0), is refused with 400 (0: no cap)")
	fs.Var(&l.snapshotMiB, "snapshot-max-mib", "cap in MiB on the disk machine images take: snapshots and paused sandboxes; a snapshot or pause past it is refused "+
		"(default: half of the state directory's free space at start, counting the images there; 0: no cap)")
	return l
}

func (l *serveLifetimes) lifetimes() sandbox.Lifetimes {
	return sandbox.Lifetimes{DefaultTTL: l.ttl, DefaultIdleTimeout: l.idle, MaxTTL: l.maxTTL}
}

// check refuses flags the daemon could not apply, before anything starts.
func (l *serveLifetimes) check() error {
	if err := l.lifetimes().Validate(); err != nil {
		return usageError{err}
	}
	if l.snapshotMiB.set && (l.snapshotMiB.mib < 0 || l.snapshotMiB.mib > 1<<40) {
		return usagef("--snapshot-max-mib %d: want 0 (no cap) or a size in MiB", l.snapshotMiB.mib)
	}
	return nil
}

// imageCap is the engine's MaxImageBytes: --snapshot-max-mib when given,
// else half of what images could have on the state file system. The log
// says which, and how much.
func (l *serveLifetimes) imageCap(stateDir string, log *slog.Logger) (int64, error) {
	if l.snapshotMiB.set {
		if l.snapshotMiB.mib == 0 {
			log.Warn("no snapshot disk cap (--snapshot-max-mib 0): snapshots and paused sandboxes can fill the state directory's file system", "state_dir", stateDir)
		} else {
			log.Info(fmt.Sprintf("snapshot disk cap %d MiB (--snapshot-max-mib)", l.snapshotMiB.mib), "max_mib", l.snapshotMiB.mib)
		}
		return l.snapshotMiB.mib << 20, nil
	}
	sfs, err := engine.StatStateFS(stateDir)
	if err != nil {
		return 0, fmt.Errorf("the default snapshot disk cap: %w (give --snapshot-max-mib)", err)
	}
	c := engine.DefaultImageCap(stateDir, sfs)
	log.Info(fmt.Sprintf("snapshot disk cap %d MiB: half of the free space on %s", c.Bytes>>20, sfs.Dir),
		"max_mib", c.Bytes>>20, "free_mib", c.FreeBytes>>20, "images_mib", c.ImageBytes>>20, "set_with", "--snapshot-max-mib")
	return c.Bytes, nil
}

// warnStateInRAM warns when the state directory is on a tmpfs (or a
// ramfs): what the daemon keeps there "on disk" then takes the host's
// memory and is gone at a reboot.
func warnStateInRAM(stateDir string, log *slog.Logger) {
	sfs, err := engine.StatStateFS(stateDir)
	if err != nil {
		log.Warn("cannot tell what file system the state directory is on", "state_dir", stateDir, "error", err)
		return
	}
	if sfs.InRAM {
		log.Warn("the state directory is on tmpfs: snapshots, templates, workspaces and paused sandboxes are then in RAM, "+
			"taking the host's memory, and are lost at a reboot; give --state-dir on a disk", "state_dir", stateDir)
	}
}

// optionalMiB is a size flag that tells "not given" from 0.
type optionalMiB struct {
	mib int64
	set bool
}

func (o *optionalMiB) String() string {
	if !o.set {
		return ""
	}
	return strconv.FormatInt(o.mib, 10)
}

func (o *optionalMiB) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return fmt.Errorf("%q: want a whole number of MiB", v)
	}
	o.mib, o.set = n, true
	return nil
}

func (o *optionalMiB) Type() string { return "MiB" }
