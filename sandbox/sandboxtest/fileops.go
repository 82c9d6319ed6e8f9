package sandboxtest

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/cellvm/cellvm/sandbox"
)

// Files beyond upload and download, over the same map the fake keeps
// files in: a directory is any parent of a file, a key ending in "/"
// (what MakeDir adds), or one of alwaysDirs. The cell user may not touch
// /root (ErrForbidden), as in a real guest; root needs Config.Root.
// WatchDir sees the changes the fake's own file calls make (MakeDir,
// MovePath, RemovePath, Upload). DialPort reaches what a test serves with
// ListenPort.

// alwaysDirs exist in every fake sandbox.
var alwaysDirs = []string{"/", "/home", "/home/user", "/root", "/tmp", "/workspace"}

// checkFile validates req for sandbox b and returns the clean path.
func checkFile(b *box, req sandbox.FileRequest) (string, error) {
	if err := req.Validate(); err != nil {
		return "", err
	}
	p, _ := sandbox.GuestPath(req.Path)
	if req.User == sandbox.GuestUserRoot && !b.info.Config.Root {
		return "", fmt.Errorf("%w: user root needs a sandbox created with root", sandbox.ErrForbidden)
	}
	if req.User != sandbox.GuestUserRoot && !b.info.Config.Root && (p == "/root" || strings.HasPrefix(p, "/root/")) {
		return "", fmt.Errorf("%w: %s: permission denied", sandbox.ErrForbidden, p)
	}
	return p, nil
}

// tree is every path of b: files (data, not dir) and directories.
func (b *box) tree() map[string]bool {
	t := map[string]bool{}
	for _, d := range alwaysDirs {
		t[d] = true
	}
	add := func(files map[string][]byte) {
		for k := range files {
			isDir := strings.HasSuffix(k, "/")
			k = strings.TrimSuffix(k, "/")
			if k == "" {
				continue
			}
			t[k] = isDir
			for d := path.Dir(k); d != "/"; d = path.Dir(d) {
				t[d] = true
			}
		}
	}
	add(b.files)
	if b.ws != nil {
		add(b.ws.files)
	}
	return t
}

func (b *box) entry(t map[string]bool, p string) sandbox.FileEntry {
	e := sandbox.FileEntry{Name: path.Base(p), Path: p, Type: sandbox.FileTypeFile, Mode: 0o644, Owner: "user", Group: "user", ModTime: epoch}
	if t[p] {
		e.Type, e.Mode, e.Size = sandbox.FileTypeDir, 0o755, 0
	} else {
		e.Size = int64(len(b.filesAt(p)[p]))
	}
	return e
}

func (m *Manager) ListDir(ctx context.Context, id string, req sandbox.FileRequest) ([]sandbox.FileEntry, error) {
	if err := m.enter("ListDir", id, req.Path); err != nil {
		return nil, err
	}
	var out []sandbox.FileEntry
	err := m.withBox(id, func(b *box) error {
		p, err := checkFile(b, req)
		if err != nil {
			return err
		}
		t := b.tree()
		isDir, ok := t[p]
		if !ok {
			return fmt.Errorf("%w: %s", sandbox.ErrNotFound, p)
		}
		if !isDir {
			return fmt.Errorf("%w: %s is not a directory", sandbox.ErrInvalid, p)
		}
		depth := max(req.Depth, 1)
		var keys []string
		for k := range t {
			if !strings.HasPrefix(k, p+"/") || k == p {
				continue
			}
			if strings.Count(k[len(p)+1:], "/") >= depth {
				continue
			}
			if req.User != sandbox.GuestUserRoot && !b.info.Config.Root && strings.HasPrefix(k, "/root/") {
				continue
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if len(keys) > sandbox.MaxListEntries {
			return fmt.Errorf("%w: more than %d entries", sandbox.ErrTooLarge, sandbox.MaxListEntries)
		}
		out = []sandbox.FileEntry{}
		for _, k := range keys {
			out = append(out, b.entry(t, k))
		}
		return nil
	})
	return out, err
}

func (m *Manager) StatPath(ctx context.Context, id string, req sandbox.FileRequest) (sandbox.FileEntry, error) {
	if err := m.enter("StatPath", id, req.Path); err != nil {
		return sandbox.FileEntry{}, err
	}
	var e sandbox.FileEntry
	err := m.withBox(id, func(b *box) error {
		p, err := checkFile(b, req)
		if err != nil {
			return err
		}
		t := b.tree()
		if _, ok := t[p]; !ok {
			return fmt.Errorf("%w: %s", sandbox.ErrNotFound, p)
		}
		e = b.entry(t, p)
		return nil
	})
	return e, err
}

func (m *Manager) MakeDir(ctx context.Context, id string, req sandbox.FileRequest) (bool, error) {
	if err := m.enter("MakeDir", id, req.Path); err != nil {
		return false, err
	}
	created := false
	err := m.withBox(id, func(b *box) error {
		p, err := checkFile(b, req)
		if err != nil {
			return err
		}
		t := b.tree()
		for d := p; d != "/"; d = path.Dir(d) {
			if isDir, ok := t[d]; ok && !isDir {
				return fmt.Errorf("%w: %s exists and is not a directory", sandbox.ErrInvalid, d)
			}
		}
		if _, ok := t[p]; ok {
			return nil
		}
		b.filesAt(p)[p+"/"] = nil
		created = true
		m.notify(b, p, sandbox.FileCreate)
		return nil
	})
	return created, err
}

func (m *Manager) MovePath(ctx context.Context, id string, from sandbox.FileRequest, to string) (sandbox.FileEntry, error) {
	if err := m.enter("MovePath", id, from.Path, to); err != nil {
		return sandbox.FileEntry{}, err
	}
	var e sandbox.FileEntry
	err := m.withBox(id, func(b *box) error {
		src, err := checkFile(b, from)
		if err != nil {
			return err
		}
		dst, err := checkFile(b, sandbox.FileRequest{Path: to, User: from.User})
		if err != nil {
			return err
		}
		t := b.tree()
		if _, ok := t[src]; !ok {
			return fmt.Errorf("%w: %s", sandbox.ErrNotFound, src)
		}
		if isDir, ok := t[path.Dir(dst)]; !ok || !isDir {
			return fmt.Errorf("%w: %s", sandbox.ErrNotFound, path.Dir(dst))
		}
		if dst == src || strings.HasPrefix(dst, src+"/") {
			return fmt.Errorf("%w: cannot move %s into itself", sandbox.ErrInvalid, src)
		}
		for _, files := range b.fileMaps() {
			for k, v := range files {
				if k == src || k == src+"/" || strings.HasPrefix(k, src+"/") {
					delete(files, k)
					nk := dst + k[len(src):]
					b.filesAt(strings.TrimSuffix(nk, "/"))[nk] = v
				}
			}
		}
		m.notify(b, src, sandbox.FileRename)
		m.notify(b, dst, sandbox.FileCreate)
		e = b.entry(b.tree(), dst)
		return nil
	})
	return e, err
}

func (b *box) fileMaps() []map[string][]byte {
	if b.ws != nil {
		return []map[string][]byte{b.files, b.ws.files}
	}
	return []map[string][]byte{b.files}
}

func (m *Manager) RemovePath(ctx context.Context, id string, req sandbox.FileRequest) error {
	if err := m.enter("RemovePath", id, req.Path); err != nil {
		return err
	}
	return m.withBox(id, func(b *box) error {
		p, err := checkFile(b, req)
		if err != nil {
			return err
		}
		if _, ok := b.tree()[p]; !ok {
			return fmt.Errorf("%w: %s", sandbox.ErrNotFound, p)
		}
		for _, files := range b.fileMaps() {
			for k := range files {
				if k == p || strings.HasPrefix(k, p+"/") {
					delete(files, k)
				}
			}
		}
		m.notify(b, p, sandbox.FileRemove)
		return nil
	})
}

// fakeWatch is one WatchDir call of the fake.
type fakeWatch struct {
	dir       string
	recursive bool
	events    chan sandbox.FileEvent
}

// watchers holds the fake's running watches by sandbox.
var watchers = struct {
	sync.Mutex
	by map[*box][]*fakeWatch
}{by: map[*box][]*fakeWatch{}}

// notify tells b's watches of a change at p; events past a watch's
// buffer are dropped, as a real watch coalesces a flood.
func (m *Manager) notify(b *box, p, op string) {
	watchers.Lock()
	defer watchers.Unlock()
	for _, w := range watchers.by[b] {
		if !strings.HasPrefix(p, w.dir+"/") {
			continue
		}
		rel := p[len(w.dir)+1:]
		if !w.recursive && strings.Contains(rel, "/") {
			continue
		}
		select {
		case w.events <- sandbox.FileEvent{Name: rel, Op: op}:
		default:
		}
	}
}

func (m *Manager) WatchDir(ctx context.Context, id string, req sandbox.FileRequest, onEvent func(sandbox.FileEvent) error) error {
	if err := m.enter("WatchDir", id, req.Path); err != nil {
		return err
	}
	w := &fakeWatch{recursive: req.Recursive, events: make(chan sandbox.FileEvent, 256)}
	var wb *box
	err := m.withBox(id, func(b *box) error {
		p, err := checkFile(b, req)
		if err != nil {
			return err
		}
		isDir, ok := b.tree()[p]
		if !ok {
			return fmt.Errorf("%w: %s", sandbox.ErrNotFound, p)
		}
		if !isDir {
			return fmt.Errorf("%w: %s is not a directory", sandbox.ErrInvalid, p)
		}
		w.dir, wb = p, b
		watchers.Lock()
		defer watchers.Unlock()
		if len(watchers.by[b]) >= sandbox.MaxWatches {
			return fmt.Errorf("%w: sandbox %s has %d watches running, the most it may", sandbox.ErrFull, id, sandbox.MaxWatches)
		}
		watchers.by[b] = append(watchers.by[b], w)
		return nil
	})
	if err != nil {
		return err
	}
	defer func() {
		watchers.Lock()
		defer watchers.Unlock()
		ws := watchers.by[wb]
		for i, x := range ws {
			if x == w {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(watchers.by, wb)
		} else {
			watchers.by[wb] = ws
		}
	}()
	if err := onEvent(sandbox.FileEvent{}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-w.events:
			if err := onEvent(e); err != nil {
				return err
			}
		}
	}
}

// Watches is how many WatchDir calls run in sandbox id (tests check none
// is left behind).
func (m *Manager) Watches(id string) int {
	m.mu.Lock()
	b := m.boxes[id]
	m.mu.Unlock()
	watchers.Lock()
	defer watchers.Unlock()
	return len(watchers.by[b])
}
