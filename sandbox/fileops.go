package sandbox

import (
	"fmt"
	"time"
)

// File operations beyond Upload and Download: what E2B's filesystem and
// `cellvm cp -r` need. Paths go through GuestPath; every call acts as a
// guest user (FileRequest.User), so the cell user cannot list or remove
// what it could not in a shell.

// Bounds on file operations.
const (
	// MaxListDepth bounds ListDir's depth.
	MaxListDepth = 16
	// MaxListEntries bounds ListDir's answer; a tree with more is
	// ErrTooLarge, naming the bound.
	MaxListEntries = 10000
	// MaxWatches is how many WatchDir calls may run at once per sandbox.
	MaxWatches = 16
)

// File types of FileEntry.Type.
const (
	FileTypeFile    = "file"
	FileTypeDir     = "dir"
	FileTypeSymlink = "symlink"
	FileTypeOther   = "other" // a device, a socket, a fifo
)

// FileRequest names a path and the user that acts on it.
type FileRequest struct {
	Path string `json:"path"`
	// User: GuestUserDefault, GuestUserCell or GuestUserRoot (root needs
	// a Config.Root sandbox, else ErrForbidden).
	User string `json:"user,omitempty"`
	// Depth, for ListDir: 1 lists the directory's own entries, n goes
	// n levels down (0 reads as 1; at most MaxListDepth).
	Depth int `json:"depth,omitempty"`
	// Recursive, for WatchDir: watch subdirectories too.
	Recursive bool `json:"recursive,omitempty"`
}

// Validate checks the path (GuestPath), the user and the depth.
func (r FileRequest) Validate() error {
	if _, err := GuestPath(r.Path); err != nil {
		return err
	}
	if !ValidGuestUser(r.User) {
		return fmt.Errorf("%w: user %q: use %q or %q", ErrInvalid, clip(r.User, 64), GuestUserCell, GuestUserRoot)
	}
	if r.Depth < 0 || r.Depth > MaxListDepth {
		return fmt.Errorf("%w: depth %d out of 0..%d", ErrInvalid, r.Depth, MaxListDepth)
	}
	return nil
}

// FileEntry describes one file.
type FileEntry struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Type string `json:"type"`
	Size int64  `json:"size"`
	// Mode is the permission bits (and setuid, setgid, sticky).
	Mode          uint32    `json:"mode"`
	Owner         string    `json:"owner,omitempty"`
	Group         string    `json:"group,omitempty"`
	ModTime       time.Time `json:"mod_time"`
	SymlinkTarget string    `json:"symlink_target,omitempty"`
}

// File event kinds of FileEvent.Op.
const (
	FileCreate = "create"
	FileWrite  = "write"
	FileRemove = "remove"
	FileRename = "rename"
	FileChmod  = "chmod"
)

// FileEvent is one change WatchDir saw. Name is relative to the watched
// directory.
type FileEvent struct {
	Name string `json:"name"`
	Op   string `json:"op"`
}
