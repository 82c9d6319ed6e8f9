package main

import (
	"os"
	"path/filepath"
)

// findBuildFile looks for a build output (e.g. "kernel/vmlinux") where a
// checkout or an installed binary keeps it: $CELLVM_BUILD, ./build, and
// the build/ directory beside or above the executable.
func findBuildFile(rel string) string {
	var dirs []string
	if d := os.Getenv("CELLVM_BUILD"); d != "" {
		dirs = append(dirs, d)
	}
	dirs = append(dirs, "build")
	if exe, err := os.Executable(); err == nil {
		d := filepath.Dir(exe)
		dirs = append(dirs, filepath.Join(d, "build"), filepath.Join(d, ".."), filepath.Join(d, "..", "build"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, rel)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// DefaultStateDir is where the daemon keeps its sandboxes, snapshots,
// templates, workspaces and images when --state-dir and
// $CELLVM_STATE_DIR say nothing: on disk, where they outlive a reboot
// and do not take the host's RAM (/run, beside the socket, is a tmpfs).
const DefaultStateDir = "/var/lib/cellvm"

// StateDir is the daemon's state directory: flag (a --state-dir value)
// when given, else $CELLVM_STATE_DIR, else DefaultStateDir. Every
// command that finds the daemon's files (serve, image build, audit)
// takes it from here.
func StateDir(flag string) string {
	if flag != "" {
		return flag
	}
	if d := os.Getenv("CELLVM_STATE_DIR"); d != "" {
		return d
	}
	return DefaultStateDir
}
