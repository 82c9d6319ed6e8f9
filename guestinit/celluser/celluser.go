// Package celluser is the unprivileged user that cells and commands run as
// in the guest.
//
// Code in a cell is written by a model and cannot be trusted, so it does
// not run as root: as its own user it cannot signal PID 1 or the agent,
// write the cgroup files that bound it, move itself out of its cgroup, or
// write the system's files. The root image (a debootstrap) has no such
// user, so PID 1 adds it to the overlay root's /etc/passwd and /etc/group at
// boot rather than the image carrying it: the image needs no rebuild, and
// the user is the same in every image. The entries are written directly,
// so an image without useradd, /etc/passwd or /home (busybox, Alpine,
// distroless) gets the user too. An image that names a user of its own
// runs its cells as that user instead (package imagecfg).
package celluser

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The user. UID and GID are fixed so the host and the guest agree without
// asking each other. Its name and home are E2B's ("user", /home/user), so
// that programs written for E2B's sandboxes find the paths they expect.
const (
	Name  = "user"
	UID   = 1000
	GID   = 1000
	Home  = "/home/user"
	Shell = "/bin/sh"
)

// Ensure makes the user exist under root (the guest's "/"): its entries in
// etc/passwd and etc/group unless an entry with its id is there, its home
// directory, and the ownership of the directories in owned (such as
// /workspace), which cells must be able to write. It is idempotent.
func Ensure(root string, owned ...string) error {
	if err := addEntry(filepath.Join(root, "etc/passwd"), UID, fmt.Sprintf("%s:x:%d:%d:cellvm cells:%s:%s\n", Name, UID, GID, Home, Shell)); err != nil {
		return err
	}
	if err := addEntry(filepath.Join(root, "etc/group"), GID, fmt.Sprintf("%s:x:%d:\n", Name, GID)); err != nil {
		return err
	}
	// An image may have no /home: its parents are made 0755, so the
	// user can reach its own 0750 home through them.
	home := filepath.Join(root, Home)
	if err := os.MkdirAll(filepath.Dir(home), 0o755); err != nil {
		return fmt.Errorf("cell user's home: %w", err)
	}
	if err := os.Mkdir(home, 0o750); err != nil && !os.IsExist(err) {
		return fmt.Errorf("cell user's home: %w", err)
	}
	for _, d := range append([]string{Home}, owned...) {
		p := filepath.Join(root, d)
		if err := os.Lchown(p, UID, GID); err != nil {
			return fmt.Errorf("hand %s to the cell user: %w", d, err)
		}
	}
	return nil
}

// addEntry appends line to the colon-separated database at path unless an
// entry with id in its third field is there already.
func addEntry(path string, id int, line string) error {
	b, err := readBounded(path)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) >= 3 && f[2] == strconv.Itoa(id) {
			return nil
		}
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		line = "\n" + line
	}
	// An image may have no /etc/passwd, /etc/group, or even /etc (a
	// busybox or distroless image): they are made, and no useradd is
	// needed. A dangling link in their place is replaced.
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("add the cell user to %s: %w", path, err)
	}
	if len(b) == 0 {
		if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSymlink != 0 {
			os.Remove(path)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("add the cell user to %s: %w", path, err)
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return fmt.Errorf("add the cell user to %s: %w", path, err)
	}
	return f.Close()
}

// maxDBBytes bounds what is read of /etc/passwd or /etc/group.
const maxDBBytes = 4 << 20

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDBBytes+1))
	if err == nil && len(b) > maxDBBytes {
		err = fmt.Errorf("%s is over %d bytes", path, maxDBBytes)
	}
	return b, err
}
