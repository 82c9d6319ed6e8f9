package proto

import (
	"errors"
	"fmt"
)

// OpFile carries the file operations beyond upload and download (listing,
// stat, mkdir, move, remove, watching a directory) and the dialling of a
// TCP port inside the guest: one op whose FileOp says which, so the
// protocol grows by one field rather than seven ops.
const OpFile Op = "file"

// FileOp kinds.
const (
	FileList   = "list"
	FileStat   = "stat"
	FileMkdir  = "mkdir"
	FileMove   = "move"
	FileRemove = "remove"
	// FileWatch: after the first (empty) response the agent sends a
	// response with FileReply.Events for each batch of changes until the
	// host closes the connection (the connection carries nothing else).
	FileWatch = "watch"
	// FileDial: after the first (empty) response the connection is the
	// TCP connection's two byte streams as data frames, each direction
	// ended by a data-end (the connection carries nothing else).
	FileDial = "dial"
)

// Bounds of file operations.
const (
	MaxListDepth   = 16
	MaxListEntries = 10000
	// MaxEventBatch bounds the events of one watch response.
	MaxEventBatch = 1024
	// CodePortClosed: nothing listens on the dialled port.
	CodePortClosed = "port_closed"
	// CodeExists: mkdir found a file that is not a directory.
	CodeExists = "exists"
	// CodeForbidden: the user may not touch the path.
	CodeForbidden = "forbidden"
)

// FileOp is the request of OpFile.
type FileOp struct {
	Kind string `json:"kind"`
	Path string `json:"path,omitempty"`
	// To is the new path of a move.
	To string `json:"to,omitempty"`
	// Depth of a list: 1 lists the directory's own entries.
	Depth int `json:"depth,omitempty"`
	// Recursive watch: subdirectories too.
	Recursive bool `json:"recursive,omitempty"`
	// Root acts as the agent (root) rather than the cells' user.
	Root bool `json:"root,omitempty"`
	// Port to dial on 127.0.0.1 (then ::1).
	Port int `json:"port,omitempty"`
}

// Validate checks the op's fields.
func (f *FileOp) Validate() error {
	switch f.Kind {
	case FileList, FileStat, FileMkdir, FileMove, FileRemove, FileWatch:
		if err := CheckPath(f.Path); err != nil {
			return err
		}
		if f.Port != 0 {
			return fmt.Errorf("file %s does not take a port", f.Kind)
		}
	case FileDial:
		if f.Port < 1 || f.Port > 65535 {
			return fmt.Errorf("port %d out of 1..65535", f.Port)
		}
		if f.Path != "" || f.Root {
			return errors.New("dial takes only a port")
		}
	default:
		return fmt.Errorf("unknown file op %q", truncate(f.Kind, 32))
	}
	if (f.Kind == FileMove) != (f.To != "") {
		return errors.New("to is for a move, and a move needs it")
	}
	if f.To != "" {
		if err := CheckPath(f.To); err != nil {
			return err
		}
	}
	if f.Depth < 0 || f.Depth > MaxListDepth || (f.Depth != 0 && f.Kind != FileList) {
		return fmt.Errorf("depth %d: a list's, 0..%d", f.Depth, MaxListDepth)
	}
	if f.Recursive && f.Kind != FileWatch {
		return errors.New("recursive is for a watch")
	}
	return nil
}

// FileEntry describes one file (sandbox.FileEntry's fields; Mode holds
// the permission bits and setuid, setgid, sticky).
type FileEntry struct {
	Name          string `json:"name"`
	Path          string `json:"path"`
	Type          string `json:"type"`
	Size          int64  `json:"size"`
	Mode          uint32 `json:"mode"`
	Owner         string `json:"owner,omitempty"`
	Group         string `json:"group,omitempty"`
	ModTimeNS     int64  `json:"mod_time_ns"`
	SymlinkTarget string `json:"symlink_target,omitempty"`
}

func (e *FileEntry) validate() error {
	switch e.Type {
	case "file", "dir", "symlink", "other":
	default:
		return fmt.Errorf("entry type %q", truncate(e.Type, 32))
	}
	if e.Size < 0 || e.Mode&^0o7777 != 0 {
		return errors.New("entry with a negative size or mode bits beyond permissions")
	}
	if err := CheckPath(e.Path); err != nil {
		return fmt.Errorf("entry: %w", err)
	}
	for what, s := range map[string]string{"name": e.Name, "owner": e.Owner, "group": e.Group} {
		if err := checkText("entry "+what, s, 255); err != nil {
			return err
		}
	}
	return checkText("symlink target", e.SymlinkTarget, MaxPathBytes)
}

// FileEvent is one change a watch saw; Name is relative to the watched
// directory.
type FileEvent struct {
	Name string `json:"name"`
	Op   string `json:"op"`
}

// FileReply is the answer of OpFile: the entries of a list, the entry of
// a stat or move, whether a mkdir created the directory, or a watch's
// events. All empty: done (remove), or the stream begins (watch, dial).
type FileReply struct {
	Entries []FileEntry `json:"entries,omitempty"`
	Entry   *FileEntry  `json:"entry,omitempty"`
	Created *bool       `json:"created,omitempty"`
	Events  []FileEvent `json:"events,omitempty"`
}

// Validate implements Validator: the host checks what a guest sends.
func (r *FileReply) Validate() error {
	if len(r.Entries) > MaxListEntries {
		return fmt.Errorf("%d entries (max %d)", len(r.Entries), MaxListEntries)
	}
	if len(r.Events) > MaxEventBatch {
		return fmt.Errorf("%d events (max %d)", len(r.Events), MaxEventBatch)
	}
	for i := range r.Entries {
		if err := r.Entries[i].validate(); err != nil {
			return err
		}
	}
	if r.Entry != nil {
		if err := r.Entry.validate(); err != nil {
			return err
		}
	}
	for _, e := range r.Events {
		switch e.Op {
		case "create", "write", "remove", "rename", "chmod":
		default:
			return fmt.Errorf("event op %q", truncate(e.Op, 32))
		}
		if err := checkText("event name", e.Name, MaxPathBytes); err != nil {
			return err
		}
	}
	return nil
}
