package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
)

// The state directory's file system decides two things an operator
// should not have to think of: how much disk machine images may take
// when no cap is given (DefaultImageCap), and whether what the daemon
// keeps "on disk" (snapshots, templates, workspaces, paused sandboxes) is
// in fact in RAM (a tmpfs such as /run), which the daemon warns about.

// File system magic numbers (statfs(2)) of the file systems whose files
// live in RAM.
const (
	tmpfsMagic = 0x01021994
	ramfsMagic = 0x858458f6
)

// StateFS is what the daemon needs to know of its state directory's file
// system.
type StateFS struct {
	// Dir is the directory measured: the state directory, or its nearest
	// parent that exists when it is not made yet.
	Dir string
	// InRAM: the file system is a tmpfs or a ramfs.
	InRAM bool
	// FreeBytes is the space free to unprivileged users (the root
	// reserve is left alone).
	FreeBytes int64
}

// StatStateFS describes the file system stateDir is on, or will be on.
func StatStateFS(stateDir string) (StateFS, error) {
	dir, err := filepath.Abs(stateDir)
	if err != nil {
		return StateFS{}, err
	}
	for {
		var st syscall.Statfs_t
		err := syscall.Statfs(dir, &st)
		if err == nil {
			typ := uint32(st.Type)
			return StateFS{Dir: dir, InRAM: typ == tmpfsMagic || typ == ramfsMagic, FreeBytes: int64(st.Bavail) * int64(st.Bsize)}, nil
		}
		parent := filepath.Dir(dir)
		if !errors.Is(err, fs.ErrNotExist) || parent == dir {
			return StateFS{}, fmt.Errorf("the state directory's file system: statfs %s: %w", dir, err)
		}
		dir = parent
	}
}

// ImageCap is a default cap on machine images' disk, and what it was
// made of.
type ImageCap struct {
	// Bytes is the cap: half of FreeBytes and ImageBytes together, at
	// least 1 (a cap of 0 would mean none).
	Bytes int64
	// FreeBytes is the state file system's free space, ImageBytes what
	// machine images already take in the state directory.
	FreeBytes, ImageBytes int64
}

// DefaultImageCap is the cap on machine images' disk (Options.MaxImageBytes)
// for an operator who gives none: half of the space images could have on
// the state directory's file system now, that is its free space and what
// images already take there. Counting those keeps the cap the same across
// a restart that finds the images an earlier daemon made.
func DefaultImageCap(stateDir string, sfs StateFS) ImageCap {
	images := imageDiskUseIn(stateDir)
	return ImageCap{Bytes: max((sfs.FreeBytes+images)/2, 1), FreeBytes: sfs.FreeBytes, ImageBytes: images}
}
