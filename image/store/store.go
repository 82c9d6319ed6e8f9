// Package store is the image store: where the images sandboxes boot lie on
// the host, what names they may have, how one is put in place and taken
// away, and how an image is told from another (its ext4 UUID). The image
// builder (package image/derive) writes into it and the sandbox engine
// (package sandbox/engine) reads from it, so both keep one layout and one
// name rule, the contract's (sandbox.ValidImageName).
//
// The layout: DIR/NAME/ holds rootfs.ext4 (the read-only root image),
// manifest.json (what the image holds: package image/manifest) and
// build.json (the build's Record). The daemon's own image, "default", is
// not in the store: it is the daemon's --rootfs.
//
// An image appears and goes in one step (a rename), so a sandbox booting
// meanwhile sees the old image or the new one, never half of either.
package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/sandbox"
)

// Files of an image directory.
const (
	ImageFile    = "rootfs.ext4"
	ManifestFile = "manifest.json"
	// BuildFile records the build: its key and inputs (Record).
	BuildFile = "build.json"
)

// MaxName bounds an image's name (the contract's bound on names).
const MaxName = sandbox.MaxWorkspaceName

// maxRecordBytes bounds build.json.
const maxRecordBytes = 1 << 20

// ValidName reports whether name can name an image in the store: the
// contract's rule for image names (it names a directory on the host),
// less "default", which is the daemon's own image.
func ValidName(name string) bool {
	return sandbox.ValidImageName(name) && name != sandbox.DefaultImage
}

// Store is an images directory (the daemon's STATE_DIR/images, or its
// --images-dir).
type Store struct {
	Dir string
}

// ImageDir is image name's directory.
func (s Store) ImageDir(name string) string { return filepath.Join(s.Dir, name) }

// ImagePath is image name's root image file, if it is there.
func (s Store) ImagePath(name string) (string, bool) {
	if !ValidName(name) {
		return "", false
	}
	p := filepath.Join(s.Dir, name, ImageFile)
	fi, err := os.Stat(p)
	return p, err == nil && fi.Mode().IsRegular()
}

// Names lists the images in the store by name.
func (s Store) Names() []string {
	var names []string
	ents, _ := os.ReadDir(s.Dir)
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if _, ok := s.ImagePath(e.Name()); ok {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// Remove takes image name out of the store: out of its names in one step
// (a rename to a hidden name), then its files. A missing image is an
// error wrapping fs.ErrNotExist. tag makes the hidden name unique.
func (s Store) Remove(name, tag string) error {
	if !ValidName(name) {
		return fmt.Errorf("%q is not an image name", clip(name, 64))
	}
	dir := s.ImageDir(name)
	if _, err := os.Stat(filepath.Join(dir, ImageFile)); err != nil {
		return err
	}
	gone := filepath.Join(s.Dir, ".rm-"+name+"-"+tag)
	if err := os.Rename(dir, gone); err != nil {
		return err
	}
	return os.RemoveAll(gone)
}

// Install puts the built image directory at dst in one step: an exchange
// with the old one where there is one (sandboxes booting from it
// meanwhile see the old or the new image, never none); built then names
// the old image, for the caller to remove.
func Install(built, dst string) error {
	err := unix.Renameat2(unix.AT_FDCWD, built, unix.AT_FDCWD, dst, unix.RENAME_EXCHANGE)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOENT):
		if err := os.Rename(built, dst); err != nil {
			return fmt.Errorf("putting the image in place: %w", err)
		}
		return nil
	default:
		return fmt.Errorf("putting the image in place (exchange with %s): %w", dst, err)
	}
}

// Record is build.json: what a build was made from.
type Record struct {
	Key          string    `json:"key"`
	Name         string    `json:"name"`
	Base         string    `json:"base"`
	BaseUUID     string    `json:"base_uuid"`
	Apt          []string  `json:"apt,omitempty"`
	Mirror       string    `json:"mirror,omitempty"`
	PipWheels    string    `json:"pip_wheels,omitempty"`
	Requirements string    `json:"requirements,omitempty"`
	PipIndex     string    `json:"pip_index,omitempty"`
	Files        string    `json:"files,omitempty"`
	BuiltAt      time.Time `json:"built_at"`
	Seconds      float64   `json:"build_seconds"`
	SizeBytes    int64     `json:"size_bytes"`
}

// ReadRecord reads an image directory's build.json.
func ReadRecord(dir string) (Record, error) {
	var r Record
	b, err := os.ReadFile(filepath.Join(dir, BuildFile))
	if err != nil {
		return r, err
	}
	if len(b) > maxRecordBytes {
		return r, fmt.Errorf("%s is too large", BuildFile)
	}
	return r, json.Unmarshal(b, &r)
}

// FSUUID reads an ext4 file system's UUID from its superblock: an image's
// identity. Each build has its own (derived from its key), so a machine
// whose memory caches one build's files is never resumed over another's.
func FSUUID(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		return "", fmt.Errorf("image %s: reading its superblock: %w", path, err)
	}
	if binary.LittleEndian.Uint16(sb[0x38:]) != 0xEF53 {
		return "", fmt.Errorf("image %s is not an ext4 file system (no superblock magic)", path)
	}
	u := sb[0x68:0x78]
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
