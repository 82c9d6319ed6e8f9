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
