package e2b

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// filesystem.Filesystem: the SDK's files.list/exists/getInfo/makeDir/
// rename/remove/watchDir, mapped onto the Manager's file calls as the
// user the SDK names.

type (
	fsPathRequest struct {
		Path string `json:"path"`
	}
	fsListRequest struct {
		Path  string `json:"path"`
		Depth uint32 `json:"depth"`
	}
	fsMoveRequest struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
	}
	fsWatchRequest struct {
		Path         string `json:"path"`
		Recursive    bool   `json:"recursive"`
		IncludeEntry bool   `json:"includeEntry"`
	}
	// fsEntry is EntryInfo in proto3 JSON: int64 as a string, enums by
	// name, the timestamp RFC 3339 with 0 or 9 fractional digits.
	fsEntry struct {
		Name          string  `json:"name"`
		Type          string  `json:"type"`
		Path          string  `json:"path"`
		Size          string  `json:"size"`
		Mode          uint32  `json:"mode"`
		Permissions   string  `json:"permissions"`
		Owner         string  `json:"owner"`
		Group         string  `json:"group"`
		ModifiedTime  string  `json:"modifiedTime,omitempty"`
		SymlinkTarget *string `json:"symlinkTarget,omitempty"`
	}
	fsEntryResponse struct {
		Entry fsEntry `json:"entry"`
	}
	// fsWatchResponse is WatchDirResponse: its oneof at the top.
	fsWatchResponse struct {
		Start      *struct{} `json:"start,omitempty"`
		Filesystem *fsEvent  `json:"filesystem,omitempty"`
		Keepalive  *struct{} `json:"keepalive,omitempty"`
	}
	fsEvent struct {
		Name  string   `json:"name"`
		Type  string   `json:"type"`
		Entry *fsEntry `json:"entry,omitempty"`
	}
)

var fsKeepalive = fsWatchResponse{Keepalive: &struct{}{}}

var fsTypes = map[string]string{
	sandbox.FileTypeFile:    "FILE_TYPE_FILE",
	sandbox.FileTypeDir:     "FILE_TYPE_DIRECTORY",
	sandbox.FileTypeSymlink: "FILE_TYPE_SYMLINK",
}

var fsEventTypes = map[string]string{
	sandbox.FileCreate: "EVENT_TYPE_CREATE",
	sandbox.FileWrite:  "EVENT_TYPE_WRITE",
	sandbox.FileRemove: "EVENT_TYPE_REMOVE",
	sandbox.FileRename: "EVENT_TYPE_RENAME",
	sandbox.FileChmod:  "EVENT_TYPE_CHMOD",
}

func fsEntryOf(e sandbox.FileEntry) fsEntry {
	t, ok := fsTypes[e.Type]
	if !ok {
		t = "FILE_TYPE_UNSPECIFIED"
	}
	mode := fs.FileMode(e.Mode & 0o777)
	if e.Mode&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if e.Mode&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if e.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	switch e.Type {
	case sandbox.FileTypeDir:
		mode |= fs.ModeDir
	case sandbox.FileTypeSymlink:
		mode |= fs.ModeSymlink
	}
	out := fsEntry{Name: e.Name, Type: t, Path: e.Path, Size: strconv.FormatInt(e.Size, 10),
		Mode: e.Mode, Permissions: mode.String(), Owner: e.Owner, Group: e.Group}
	if !e.ModTime.IsZero() {
		out.ModifiedTime = e.ModTime.UTC().Format("2006-01-02T15:04:05.000000000Z07:00")
	}
	if e.Type == sandbox.FileTypeSymlink || e.SymlinkTarget != "" {
		t := e.SymlinkTarget
		out.SymlinkTarget = &t
	}
	return out
}

func envdFilesystem(s scope, w http.ResponseWriter, r *http.Request, method string) {
	// fileReq is the request for p as the call's user.
	fileReq := func(p string) (sandbox.FileRequest, error) {
		user, err := envdUser(r)
		if err != nil {
			return sandbox.FileRequest{}, err
		}
		return sandbox.FileRequest{Path: envdPath(p, user), User: user}, nil
	}
	switch method {
	case "Stat":
		connectUnary(w, r, func(ctx context.Context, req *fsPathRequest) (any, error) {
			fr, err := fileReq(req.Path)
			if err != nil {
				return nil, err
			}
			e, err := s.m.StatPath(ctx, s.id, fr)
			if err != nil {
				return nil, err
			}
			return fsEntryResponse{fsEntryOf(e)}, nil
		})
	case "ListDir":
		connectUnary(w, r, func(ctx context.Context, req *fsListRequest) (any, error) {
			fr, err := fileReq(req.Path)
			if err != nil {
				return nil, err
			}
			if req.Depth > sandbox.MaxListDepth {
				return nil, connectErrorf(codeInvalidArgument, "depth %d: at most %d", req.Depth, sandbox.MaxListDepth)
			}
			fr.Depth = max(int(req.Depth), 1)
			es, err := s.m.ListDir(ctx, s.id, fr)
			if err != nil {
				return nil, err
			}
			out := make([]fsEntry, 0, len(es))
			for _, e := range es {
				out = append(out, fsEntryOf(e))
			}
			return map[string]any{"entries": out}, nil
		})
	case "MakeDir":
		connectUnary(w, r, func(ctx context.Context, req *fsPathRequest) (any, error) {
			fr, err := fileReq(req.Path)
			if err != nil {
				return nil, err
			}
			created, err := s.m.MakeDir(ctx, s.id, fr)
			if err != nil {
				return nil, err
			}
			if !created {
				// The SDK's makeDir reads this code as false.
				return nil, connectErrorf(codeAlreadyExists, "%s exists already", clipCaller(fr.Path))
			}
			e, err := s.m.StatPath(ctx, s.id, fr)
			if err != nil {
				e = sandbox.FileEntry{Name: path.Base(fr.Path), Path: fr.Path, Type: sandbox.FileTypeDir, ModTime: time.Now()}
			}
			return fsEntryResponse{fsEntryOf(e)}, nil
		})
	case "Move":
		connectUnary(w, r, func(ctx context.Context, req *fsMoveRequest) (any, error) {
			fr, err := fileReq(req.Source)
			if err != nil {
				return nil, err
			}
			if req.Destination == "" {
				return nil, connectErrorf(codeInvalidArgument, "destination is missing")
			}
			e, err := s.m.MovePath(ctx, s.id, fr, envdPath(req.Destination, fr.User))
			if err != nil {
				return nil, err
			}
			return fsEntryResponse{fsEntryOf(e)}, nil
		})
	case "Remove":
		connectUnary(w, r, func(ctx context.Context, req *fsPathRequest) (any, error) {
			fr, err := fileReq(req.Path)
			if err != nil {
				return nil, err
			}
			return struct{}{}, s.m.RemovePath(ctx, s.id, fr)
		})
	case "WatchDir":
		connectServerStream(w, r, fsKeepalive, func(ctx context.Context, req *fsWatchRequest, st *connectStream) error {
			fr, err := fileReq(req.Path)
			if err != nil {
				return err
			}
			fr.Recursive = req.Recursive
			return fsWatch(ctx, s, fr, req.IncludeEntry, st)
		})
	case "CreateWatcher", "GetWatcherEvents", "RemoveWatcher":
		connectWriteUnaryError(w, connectErrorf(codeUnimplemented, "filesystem.Filesystem/%s is not supported by cellvm yet: use WatchDir", method))
	default:
		connectWriteUnaryError(w, connectErrorf(codeUnimplemented, "filesystem.Filesystem/%s is not a method", clipCaller(method)))
	}
}

// fsWatch streams a directory's changes: the start event once the watch
// is set (the Manager's zero event), then each change.
func fsWatch(ctx context.Context, s scope, fr sandbox.FileRequest, withEntry bool, st *connectStream) error {
	started := false
	err := s.m.WatchDir(ctx, s.id, fr, func(ev sandbox.FileEvent) error {
		if ev == (sandbox.FileEvent{}) {
			if started {
				return nil
			}
			started = true
			return st.Send(fsWatchResponse{Start: &struct{}{}})
		}
		t, ok := fsEventTypes[ev.Op]
		if !ok {
			return nil
		}
		fe := &fsEvent{Name: ev.Name, Type: t}
		if withEntry && ev.Op != sandbox.FileRemove && ev.Op != sandbox.FileRename {
			sub := fr
			sub.Path = fr.Path + "/" + ev.Name
			if e, err := s.m.StatPath(ctx, s.id, sub); err == nil {
				en := fsEntryOf(e)
				fe.Entry = &en
			}
		}
		return st.Send(fsWatchResponse{Filesystem: fe})
	})
	if err != nil && started && errors.Is(err, context.Canceled) {
		return nil // the client stopped watching
	}
	return err
}
