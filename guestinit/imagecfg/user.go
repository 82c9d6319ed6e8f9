package imagecfg

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// User is an image's USER, resolved in the image's own /etc/passwd and
// /etc/group.
type User struct {
	// Name is the passwd entry's name; "" for a uid without one.
	Name     string
	UID, GID int
	// Home is the passwd entry's home directory; "" without one.
	Home string
}

// Root reports whether u is root (uid 0).
func (u User) Root() bool { return u.UID == 0 }

// maxDBBytes bounds what is read of /etc/passwd and /etc/group.
const maxDBBytes = 4 << 20

// maxID is the largest uid or gid taken (the kernel's -1 is "none").
const maxID = 1<<31 - 2

// ErrRootGroup is LookupUser's error for a non-root user whose group is
// root's (gid 0): the cells never get root's group.
var ErrRootGroup = errors.New("group 0 (root's)")

// LookupUser resolves spec (Docker's USER: name or uid, optionally
// ":group" as a name or gid) in root's etc/passwd and etc/group. A numeric
// uid needs no passwd entry; without one, and without a group, its group
// is its uid (Docker would take 0, root's group, which the cells never
// get). A name must be in passwd, a group name in group.
func LookupUser(root, spec string) (User, error) {
	name, group, hasGroup := strings.Cut(spec, ":")
	if name == "" || (hasGroup && group == "") {
		return User{}, fmt.Errorf("user %q: empty name or group", clip(spec))
	}
	pw, err := readDB(filepath.Join(root, "etc/passwd"), 7)
	if err != nil {
		return User{}, err
	}
	var u User
	if id, ok := parseID(name); ok {
		u = User{UID: id, GID: id}
		if e, ok := findEntry(pw, 2, name); ok {
			u = userFrom(e, id)
		}
	} else {
		e, ok := findEntry(pw, 0, name)
		if !ok {
			return User{}, fmt.Errorf("user %q is not in the image's /etc/passwd", clip(name))
		}
		id, ok := parseID(e[2])
		if !ok {
			return User{}, fmt.Errorf("user %q has a bad uid %q in the image's /etc/passwd", clip(name), clip(e[2]))
		}
		u = userFrom(e, id)
	}
	if hasGroup {
		gid, ok := parseID(group)
		if !ok {
			gr, err := readDB(filepath.Join(root, "etc/group"), 3)
			if err != nil {
				return User{}, err
			}
			e, found := findEntry(gr, 0, group)
			if !found {
				return User{}, fmt.Errorf("group %q is not in the image's /etc/group", clip(group))
			}
			if gid, ok = parseID(e[2]); !ok {
				return User{}, fmt.Errorf("group %q has a bad gid %q in the image's /etc/group", clip(group), clip(e[2]))
			}
		}
		u.GID = gid
	}
	if u.UID != 0 && u.GID == 0 {
		return User{}, fmt.Errorf("user %q: %w", clip(spec), ErrRootGroup)
	}
	return u, nil
}

// userFrom is the User of passwd entry e with uid id. A bad gid field is
// taken as the uid.
func userFrom(e []string, id int) User {
	u := User{Name: e[0], UID: id, GID: id, Home: e[5]}
	if gid, ok := parseID(e[3]); ok {
		u.GID = gid
	}
	if !strings.HasPrefix(u.Home, "/") {
		u.Home = ""
	}
	return u
}

func parseID(s string) (int, bool) {
	if s == "" || len(s) > 10 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > maxID {
		return 0, false
	}
	return n, true
}

// readDB reads a colon-separated database (passwd, group), keeping the
// entries with at least fields fields; a missing file has none.
func readDB(file string, fields int) ([][]string, error) {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the image's %s: %w", filepath.Base(file), err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDBBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read the image's %s: %w", filepath.Base(file), err)
	}
	if len(b) > maxDBBytes {
		return nil, fmt.Errorf("the image's %s is over %d bytes", filepath.Base(file), maxDBBytes)
	}
	var out [][]string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxDBBytes)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, "+") || strings.HasPrefix(line, "-") {
			continue // comments, NIS compat entries
		}
		if e := strings.Split(line, ":"); len(e) >= fields {
			out = append(out, e)
		}
	}
	return out, nil
}

// findEntry returns the first entry whose field i is v.
func findEntry(db [][]string, i int, v string) ([]string, bool) {
	for _, e := range db {
		if e[i] == v {
			return e, true
		}
	}
	return nil, false
}
