package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Spec is one VMM's jail. The daemon makes it (Prepare) and puts it in the
// VMM's config; the VMM process applies it (Enter, Drop).
type Spec struct {
	// Root is the host path of the jail's root directory.
	Root string `json:"root"`
	// UID and GID are the unprivileged identity the VMM runs as.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Binds are what the root holds, each mounted at its Target.
	Binds []Bind `json:"binds"`
	// Hostname is the VMM's own (it has a UTS namespace).
	Hostname string  `json:"hostname"`
	Limits   Rlimits `json:"limits"`
	// Cgroup is the host path of the VMM's cgroup ("" when there is none);
	// the daemon places the process in it at clone time.
	Cgroup string `json:"cgroup,omitempty"`
}

// Bind is one host file or directory made visible in the jail.
type Bind struct {
	Source string `json:"source"` // host path
	Target string `json:"target"` // absolute path inside the jail
	// Writable leaves it writable; everything else is read-only.
	Writable bool `json:"writable,omitempty"`
	// Device keeps device nodes usable (only /dev/kvm needs it); every
	// other bind is nodev.
	Device bool `json:"device,omitempty"`
}

// Rlimits bound what the VMM process can hold.
type Rlimits struct {
	NoFile uint64 `json:"nofile"` // open descriptors
	NProc  uint64 `json:"nproc"`  // threads of its uid (the uid is its own)
	FSize  uint64 `json:"fsize"`  // the largest file it may write (bytes)
}

// Cloneflags are the namespaces a jailed VMM starts in
// (syscall.SysProcAttr.Cloneflags).
const Cloneflags = syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNET

// Validate checks a spec before anything is mounted: absolute paths, a
// non-root identity, targets inside the jail and distinct.
func (s Spec) Validate() error {
	if !filepath.IsAbs(s.Root) {
		return fmt.Errorf("jail root %q is not absolute", s.Root)
	}
	if s.UID <= 0 || s.GID <= 0 {
		return fmt.Errorf("jail uid/gid %d/%d: must be unprivileged (> 0)", s.UID, s.GID)
	}
	seen := map[string]bool{}
	for _, b := range s.Binds {
		t := filepath.Clean(b.Target)
		if !filepath.IsAbs(b.Source) || !filepath.IsAbs(t) || t == "/" || t != b.Target || strings.Contains(t, "..") {
			return fmt.Errorf("jail bind %q -> %q: both must be clean absolute paths, the target not /", b.Source, b.Target)
		}
		if seen[t] {
			return fmt.Errorf("jail bind target %q given twice", t)
		}
		seen[t] = true
	}
	if s.Limits.NoFile == 0 || s.Limits.NProc == 0 || s.Limits.FSize == 0 {
		return errors.New("jail rlimits must all be set")
	}
	return nil
}

// Prepare makes s.Root and an empty mount point for each bind (a directory
// for a directory, an empty file for anything else), owned by root and not
// writable by the jail's uid. The daemon calls it; it is idempotent.
func Prepare(s Spec) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		return fmt.Errorf("jail root: %w", err)
	}
	for _, b := range s.Binds {
		fi, err := os.Stat(b.Source)
		if err != nil {
			return fmt.Errorf("jail bind source: %w", err)
		}
		target := filepath.Join(s.Root, b.Target)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return fmt.Errorf("jail mount point: %w", err)
		}
		if fi.IsDir() {
			err = os.MkdirAll(target, 0o755)
		} else {
			var f *os.File
			f, err = os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o444)
			if err == nil {
				f.Close()
			}
		}
		if err != nil {
			return fmt.Errorf("jail mount point: %w", err)
		}
	}
	return nil
}

// Path is where a bind's source appears inside the jail, for the VMM's
// config; it is the source itself when no bind names it.
func (s Spec) Path(source string) string {
	for _, b := range s.Binds {
		if b.Source == source {
			return b.Target
		}
	}
	return source
}
