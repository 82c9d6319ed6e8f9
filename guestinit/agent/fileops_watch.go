package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// Watching a directory with inotify. Watches are added with the user's
// credentials (inotify checks read permission as the caller), one per
// directory, at most MaxWatchDirs for one watch; a recursive watch adds
// directories created later. Events are coalesced: those within
// watchBatch of each other go in one response, duplicates dropped, at
// most proto.MaxEventBatch (the rest dropped, with a log line), so a
// guest writing a file in a loop costs the host one message per batch.

// MaxWatchDirs bounds the directories one recursive watch follows.
const MaxWatchDirs = 1024

const watchBatch = 50 * time.Millisecond

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

type watcher struct {
	f         *os.File
	owner     *Owner
	recursive bool
	mu        sync.Mutex
	dirs      map[int]string // watch descriptor -> path relative to the root ("" for it)
	dropped   int            // events past a batch's bound, and directories past MaxWatchDirs
}

func (ss *session) watchDir(op *proto.FileOp) bool {
	owner := ss.s.cfg.Files.Owner
	if op.Root {
		owner = nil
	}
	var real string
	err := owner.asOwner(func() (err error) {
		real, err = ss.s.cfg.Files.checked(op.Path, false)
		if err != nil {
			return err
		}
		fi, err := os.Stat(real)
		if err == nil && !fi.IsDir() {
			err = fmt.Errorf("%w: %s is not a directory", errBadPath, op.Path)
		}
		return err
	})
	if err != nil {
		return ss.reply(errResponse(fileCode(err), fmt.Errorf("watch %s: %w", op.Path, err)))
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return ss.reply(errResponse(proto.CodeIO, fmt.Errorf("watch %s: inotify: %w", op.Path, err)))
	}
	w := &watcher{f: os.NewFile(uintptr(fd), "inotify"), owner: owner, recursive: op.Recursive, dirs: map[int]string{}}
	defer w.f.Close()
	if err := w.add(real, ""); err != nil {
		return ss.reply(errResponse(fileCode(err), fmt.Errorf("watch %s: %w", op.Path, err)))
	}
	if !ss.reply(proto.Response{Files: &proto.FileReply{}}) {
		return false
	}
	// The host ends the watch by closing the connection.
	hostGone := make(chan struct{})
	go func() {
		var b [1]byte
		ss.nc.Read(b[:])
		close(hostGone)
		w.f.Close()
	}()
	events := make(chan []proto.FileEvent, 1)
	go w.read(real, events, hostGone)
	for {
		select {
		case <-hostGone:
			return false
		case batch, ok := <-events:
			if !ok {
				// The directory went away, or inotify failed: the watch
				// ends; the host sees the connection close.
				ss.nc.Close()
				<-hostGone
				return false
			}
			ss.nc.SetWriteDeadline(time.Now().Add(ss.s.cfg.WriteTimeout))
			if err := ss.c.WriteJSON(proto.TypeResponse, proto.Response{Files: &proto.FileReply{Events: batch}}); err != nil {
				ss.nc.Close()
				<-hostGone
				return false
			}
		}
	}
}

// add watches dir (named rel under the root) and, for a recursive watch,
// its subdirectories, with the owner's credentials.
func (w *watcher) add(dir, rel string) error {
	return w.owner.asOwner(func() error { return w.addTree(dir, rel) })
}

func (w *watcher) addTree(dir, rel string) error {
	w.mu.Lock()
	n := len(w.dirs)
	w.mu.Unlock()
	if n >= MaxWatchDirs {
		return fmt.Errorf("%w: more than %d directories to watch", proto.ErrMessageTooLarge, MaxWatchDirs)
	}
	wd, err := unix.InotifyAddWatch(int(w.f.Fd()), dir, watchMask)
	if err != nil {
		if rel != "" {
			return nil // a subdirectory removed or closed to the user: skipped
		}
		return &fs.PathError{Op: "watch", Path: dir, Err: err}
	}
	w.mu.Lock()
	w.dirs[wd] = rel
	w.mu.Unlock()
	if !w.recursive {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := w.addTree(path.Join(dir, e.Name()), path.Join(rel, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// read turns inotify's records into batches on out; it closes out when
// the root goes away or the inotify file is closed.
func (w *watcher) read(root string, out chan<- []proto.FileEvent, done <-chan struct{}) {
	defer close(out)
	buf := make([]byte, 64<<10)
	recs := make(chan []byte, 16)
	go func() {
		defer close(recs)
		for {
			n, err := w.f.Read(buf)
			if err != nil || n <= 0 {
				return
			}
			select {
			case recs <- append([]byte(nil), buf[:n]...):
			case <-done:
				return
			}
		}
	}()
	var batch []proto.FileEvent
	seen := map[proto.FileEvent]bool{}
	var flush <-chan time.Time
	rootGone := false
	for {
		select {
		case b, ok := <-recs:
			if !ok {
				return
			}
			for _, ev := range w.parse(root, b, &rootGone) {
				if seen[ev] {
					continue
				}
				if len(batch) >= proto.MaxEventBatch {
					w.dropped++
					continue
				}
				seen[ev] = true
				batch = append(batch, ev)
			}
			if flush == nil && len(batch) > 0 {
				flush = time.After(watchBatch)
			}
			if rootGone {
				if len(batch) > 0 {
					select {
					case out <- batch:
					case <-done:
					}
				}
				return
			}
		case <-flush:
			select {
			case out <- batch:
			case <-done:
				return
			}
			batch, seen, flush = nil, map[proto.FileEvent]bool{}, nil
		}
	}
}

// parse decodes inotify records; rootGone is set when the watched
// directory itself was removed or moved.
func (w *watcher) parse(root string, b []byte, rootGone *bool) []proto.FileEvent {
	var out []proto.FileEvent
	for len(b) >= unix.SizeofInotifyEvent {
		raw := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(raw.Len)
		if end > len(b) {
			break
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:end]), "\x00")
		b = b[end:]
		w.mu.Lock()
		rel, ok := w.dirs[int(raw.Wd)]
		w.mu.Unlock()
		if !ok {
			continue
		}
		mask := raw.Mask
		if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
			if rel == "" {
				*rootGone = true
			}
			continue
		}
		if mask&unix.IN_IGNORED != 0 {
			w.mu.Lock()
			delete(w.dirs, int(raw.Wd))
			w.mu.Unlock()
			continue
		}
		if mask&unix.IN_Q_OVERFLOW != 0 || name == "" {
			continue
		}
		full := path.Join(rel, name)
		var op string
		switch {
		case mask&unix.IN_CREATE != 0, mask&unix.IN_MOVED_TO != 0:
			op = "create"
			if w.recursive && mask&unix.IN_ISDIR != 0 {
				if err := w.add(path.Join(root, full), full); err != nil && !errors.Is(err, fs.ErrNotExist) {
					w.dropped++ // past MaxWatchDirs: its changes are not seen
				}
			}
		case mask&unix.IN_MODIFY != 0:
			op = "write"
		case mask&unix.IN_DELETE != 0:
			op = "remove"
		case mask&unix.IN_MOVED_FROM != 0:
			op = "rename"
		case mask&unix.IN_ATTRIB != 0:
			op = "chmod"
		default:
			continue
		}
		out = append(out, proto.FileEvent{Name: full, Op: op})
	}
	return out
}
