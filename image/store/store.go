// Package store is the image store: where the images sandboxes boot lie on
// the host, what names they may have, how one is put in place and taken
// away, and how an image is told from another (its ext4 UUID). The image
// builder (the engine's CreateImage, which makes every image in a builder
// microVM) writes into it and the sandbox engine (package sandbox/engine)
// boots from it, so both keep one layout and one name rule, the
// contract's (sandbox.ValidImageName).
//
// The layout: DIR/ENTRY/ holds rootfs.ext4 (the read-only root image),
// manifest.json (what the image holds: package image/manifest) and
// build.json (the build's Record). ENTRY is the image's name for the
// default tenant's images and the operator's, which every tenant sees, and
// TENANT~NAME for another tenant's (Entry): names are per tenant, as
// workspaces' are, and neither part can hold a '~'. The daemon's own
// image, "default", is not in the store: it is the daemon's --rootfs.
//
// The store reads an image's file system only through its superblock
// (ext4.go): the host never mounts an image, since a guest wrote it.
//
// An image appears and goes in one step (a rename), so a sandbox booting
// meanwhile sees the old image or the new one, never half of either.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/image/buildplan"
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

// Entry is the directory name of tenant's image name: name for the
// default tenant ("" reads as it), TENANT~NAME for another.
func Entry(tenant, name string) string {
	if t := sandbox.Owner(tenant); t != sandbox.DefaultTenant {
		return t + "~" + name
	}
	return name
}

// ParseEntry is Entry's inverse: the tenant ("" for a shared image, the
// default tenant's or the operator's) and the name; ok is false for
// anything that is not an image's entry.
func ParseEntry(entry string) (tenant, name string, ok bool) {
	t, n, found := strings.Cut(entry, "~")
	if !found {
		return "", entry, ValidName(entry)
	}
	if !sandbox.ValidTenantName(t) || t == sandbox.DefaultTenant || !ValidName(n) {
		return "", "", false
	}
	return t, n, true
}

// ImageDir is entry's directory.
func (s Store) ImageDir(entry string) string { return filepath.Join(s.Dir, entry) }

// ImagePath is entry's root image file, if it is there.
func (s Store) ImagePath(entry string) (string, bool) {
	if _, _, ok := ParseEntry(entry); !ok {
		return "", false
	}
	p := filepath.Join(s.Dir, entry, ImageFile)
	fi, err := os.Stat(p)
	return p, err == nil && fi.Mode().IsRegular()
}

// Image is one image in the store.
type Image struct {
	Entry  string // its directory's name
	Tenant string // "" for a shared one
	Name   string
}

// Images lists the images in the store, by entry.
func (s Store) Images() []Image {
	var out []Image
	ents, _ := os.ReadDir(s.Dir)
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		t, n, ok := ParseEntry(e.Name())
		if !ok {
			continue
		}
		if _, ok := s.ImagePath(e.Name()); ok {
			out = append(out, Image{Entry: e.Name(), Tenant: t, Name: n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Entry < out[j].Entry })
	return out
}

// Names lists the shared images (no tenant's own) by name.
func (s Store) Names() []string {
	var names []string
	for _, im := range s.Images() {
		if im.Tenant == "" {
			names = append(names, im.Name)
		}
	}
	return names
}

// Remove takes image entry out of the store: out of its names in one step
// (a rename to a hidden name), then its files. A missing image is an
// error wrapping fs.ErrNotExist. tag makes the hidden name unique.
func (s Store) Remove(name, tag string) error {
	if _, _, ok := ParseEntry(name); !ok {
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

// Record is build.json: what an image was made from and how.
type Record struct {
	Key  string `json:"key"`
	Name string `json:"name"`
	// Tenant owns the image ("" for a shared one).
	Tenant string `json:"tenant,omitempty"`
	// Source is sandbox.ImageSource*: build, pull or import.
	Source string `json:"source,omitempty"`
	// Ref and Digest are a pull's reference and an OCI image's manifest
	// digest; Base the image a recipe built on, BaseUUID its ext4 UUID.
	Ref      string `json:"ref,omitempty"`
	Digest   string `json:"digest,omitempty"`
	Base     string `json:"base"`
	BaseUUID string `json:"base_uuid"`
	// Config is the image's config (Env, WorkingDir, User).
	Config buildplan.Config `json:"config"`
	// Python is the image's python3 version ("" when it has none).
	Python string `json:"python,omitempty"`
	// Languages are the cell languages the builder found in the image
	// (their programs on its PATH, answering with a version); none in a
	// record from before languages were recorded: unknown.
	Languages []cell.LanguageInfo `json:"languages,omitempty"`
	// Apt lists the Debian packages the recipe's steps installed; Steps
	// counts its steps.
	Apt   []string `json:"apt,omitempty"`
	Steps int      `json:"steps,omitempty"`
	// Fields of builds made by the old host-side builder, read only.
	Mirror       string `json:"mirror,omitempty"`
	PipWheels    string `json:"pip_wheels,omitempty"`
	Requirements string `json:"requirements,omitempty"`
	PipIndex     string `json:"pip_index,omitempty"`
	Files        string `json:"files,omitempty"`

	BuiltAt   time.Time `json:"built_at"`
	Seconds   float64   `json:"build_seconds"`
	SizeBytes int64     `json:"size_bytes"`
}

// ReadRecord reads an image directory's build.json.
func ReadRecord(dir string) (Record, error) {
	var r Record
	f, err := os.Open(filepath.Join(dir, BuildFile))
	if err != nil {
		return r, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRecordBytes+1))
	if err != nil {
		return r, err
	}
	if len(b) > maxRecordBytes {
		return r, fmt.Errorf("%s is too large", BuildFile)
	}
	return r, json.Unmarshal(b, &r)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
