// Package buildplan is what the host and the builder microVM agree on:
// the plan the host writes, where the guest finds its inputs and puts its
// result, and the lines it reports progress with. It is a leaf both sides
// import (the engine's builder on the host, guestinit/build in the VM).
//
// The builder VM boots the daemon's default image (its tools: tar, apt,
// python3, e2fsprogs) with two more disks:
//
//	/dev/vdb  InputsDisk: a tar archive, read-only: PlanFile first, then
//	          the inputs the plan names (layers, wheels, files, collect.py)
//	/dev/vdc  OutDisk: the result, writable. For ModeDerive it starts as a
//	          copy of the base image's ext4 (the host copies the file and
//	          never reads it); for ModeLayers it is blank, DiskBytes long.
//
// The host then runs, as root in the guest, `/proc/1/exe build` (the
// guest's own init binary, cmd/cellvm-init). The builder prints progress
// lines (StepPrefix, FailedPrefix, anything else is output) to stdout and
// appends them to ProgressFile; on success it writes ResultFile and exits
// 0. The result disk is then an ext4 whose UUID is Plan.UUID and whose
// size (the superblock's blocks) is Result.SizeBytes: the host checks
// those two against the file, truncates the file to that size and never
// mounts it.
package buildplan

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// Version is the plan's format.
const Version = 1

// Devices and paths in the builder VM.
const (
	InputsDisk = "/dev/vdb"
	OutDisk    = "/dev/vdc"
	// PlanFile is the inputs archive's first entry.
	PlanFile = "plan.json"
	// BuildArg is the init binary's argument that makes it the builder.
	BuildArg = "build"
	// WorkDir holds the builder's own files in the guest (a tmpfs).
	WorkDir      = "/run/cellvm-build"
	ProgressFile = WorkDir + "/progress"
	ResultFile   = WorkDir + "/result.json"
	// ImageConfigFile is the image config written into every image
	// (Config as JSON); the guest's agent applies it to cells and
	// commands.
	ImageConfigFile = "/etc/cellvm-image.json"
	// ManifestFile is the image's manifest (package image/manifest),
	// written by the manifest step.
	ManifestFile = "/etc/cellvm-manifest.json"
	// MarkerFile records the build's key, name and base, as text.
	MarkerFile = "/etc/cellvm-image"
)

// Modes.
const (
	// ModeDerive: the out disk is a copy of the base image; the builder
	// grows it, runs the steps in it and shrinks it.
	ModeDerive = "derive"
	// ModeLayers: the out disk is blank; the builder makes an ext4 on it,
	// applies Layers in order (whiteouts, links, devices, xattrs, owners;
	// nothing lands outside the image's root), then runs the steps.
	ModeLayers = "layers"
)

// Progress lines.
const (
	StepPrefix   = "step "    // "step NAME": a step starts (sandbox.ImageStep*)
	FailedPrefix = "failed: " // "failed: NAME": that step failed; the exit is non-zero
)

// Bounds.
const (
	MaxPlanBytes  = 1 << 20
	MaxLayers     = 256
	MaxResultSize = 1 << 20
)

// Plan is the host's request to the builder.
type Plan struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	// Key is the build's cache key (hex); Base names the base in the
	// marker file.
	Key  string `json:"key"`
	Base string `json:"base,omitempty"`
	// UUID is the ext4 UUID the result must have.
	UUID string `json:"uuid"`
	Mode string `json:"mode"`
	// DiskBytes is the out disk's size: the cap on the image.
	DiskBytes int64 `json:"disk_bytes"`
	// Layers (ModeLayers) are files in the inputs archive.
	Layers []Layer `json:"layers,omitempty"`
	// Config is the image's config before the steps: the OCI image's,
	// or the base's (from its ImageConfigFile).
	Config Config `json:"config"`
	// Steps run in order after the base or the layers. Their archive
	// paths (PipWheels, Requirements, CopyFrom) are relative to
	// InputsDir in the inputs archive.
	Steps []sandbox.RecipeStep `json:"steps,omitempty"`
	// Collect and Modules are the manifest step's collect.py and
	// modules.txt (package image/manifest), files in the archive.
	Collect string `json:"collect"`
	Modules string `json:"modules"`
}

// InputsDir is where a recipe's own files lie in the inputs archive.
const InputsDir = "inputs"

// Layer is one OCI layer.
type Layer struct {
	// File is its path in the inputs archive.
	File string `json:"file"`
	// MediaType says its compression: ...tar, ...tar+gzip (or docker's
	// .tar.gzip), ...tar+zstd.
	MediaType string `json:"media_type"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

// Config is an image's config as cellvm applies it.
type Config struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
}

// Result is what the builder reports on success (ResultFile).
type Result struct {
	SizeBytes int64  `json:"size_bytes"`
	UUID      string `json:"uuid"`
	// Config is the image's config after the steps.
	Config Config `json:"config"`
	// Python is the image's python3 version ("" when it has none).
	Python string `json:"python,omitempty"`
	// Languages are the cell languages whose programs the image has on
	// its PATH (python3, node, bash; TypeScript where node loads the
	// transpiler the default image carries), with their versions.
	Languages []cell.LanguageInfo `json:"languages,omitempty"`
	// Manifest is the image's manifest (image/manifest's format).
	Manifest json.RawMessage `json:"manifest,omitempty"`
}

// The patterns are compiled on first use, not at init: {1,512} alone
// compiles to 512 copies of its class, a cost every cellvm command paid.
var (
	keyRE  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{64}$`) })
	uuidRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	})
	fileRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._/-]{1,512}$`) })
)

// UUIDOf is the ext4 UUID for a build key: its first 32 hex digits.
func UUIDOf(key string) string {
	if len(key) < 32 {
		return ""
	}
	return key[0:8] + "-" + key[8:12] + "-" + key[12:16] + "-" + key[16:20] + "-" + key[20:32]
}

// Validate checks the plan (the guest checks what the host wrote; the
// host checks what it writes).
func (p *Plan) Validate() error {
	if p.Version != Version {
		return fmt.Errorf("plan version %d, want %d", p.Version, Version)
	}
	if !sandbox.ValidImageName(p.Name) {
		return fmt.Errorf("plan: bad image name %q", p.Name)
	}
	if !keyRE().MatchString(p.Key) || !uuidRE().MatchString(p.UUID) || p.UUID != UUIDOf(p.Key) {
		return errors.New("plan: bad key or uuid")
	}
	if p.DiskBytes < 16<<20 || p.DiskBytes > 1<<40 {
		return fmt.Errorf("plan: disk of %d bytes", p.DiskBytes)
	}
	switch p.Mode {
	case ModeDerive:
		if len(p.Layers) > 0 {
			return errors.New("plan: layers in derive mode")
		}
	case ModeLayers:
		if len(p.Layers) == 0 || len(p.Layers) > MaxLayers {
			return fmt.Errorf("plan: %d layers (1 to %d)", len(p.Layers), MaxLayers)
		}
	default:
		return fmt.Errorf("plan: mode %q", p.Mode)
	}
	for _, l := range p.Layers {
		if !fileRE().MatchString(l.File) || strings.Contains(l.File, "..") || l.Size < 0 {
			return fmt.Errorf("plan: layer file %q", l.File)
		}
	}
	for _, f := range []string{p.Collect, p.Modules} {
		if !fileRE().MatchString(f) || strings.Contains(f, "..") {
			return fmt.Errorf("plan: file %q", f)
		}
	}
	if err := sandbox.CheckImageEnv(p.Config.Env); err != nil {
		return err
	}
	if len(p.Steps) > sandbox.MaxRecipeSteps {
		return errors.New("plan: too many steps")
	}
	return (sandbox.ImageRecipe{Steps: p.Steps}).ValidateSteps()
}
