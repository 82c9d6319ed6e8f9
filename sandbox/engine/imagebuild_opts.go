package engine

import (
	"context"
	"io"

	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/sandbox"
)

// ImageBuildOptions configure how the engine makes images
// (Manager.CreateImage, imagebuild.go).
type ImageBuildOptions struct {
	// MemoryMiB is the builder VM's memory (default 1024).
	MemoryMiB int
	// VCPUs is the builder VM's (default 2).
	VCPUs int
	// DiskMiB is the out disk of a pull or an import, and the most a
	// recipe's may grow to (default DefaultImageBuildDiskMiB): the cap
	// on an image's size.
	DiskMiB int64
	// MaxMiB caps an OCI image's layers, compressed, in all (default
	// DefaultImageMaxMiB); a pull or an import past it is ErrTooLarge.
	MaxMiB int64
	// MaxArchiveMiB caps a recipe's archive of inputs, unpacked
	// (default 4096).
	MaxArchiveMiB int64
	// Fetch pulls and reads OCI images (package image/oci through an
	// adapter: cmd/cellvm wires it); nil: pulls and imports are
	// ErrNotSupported, recipes still build.
	Fetch ImageFetcher

	// progressFile and resultFile are the guest's (buildplan's) unless a
	// test's fake guest keeps them elsewhere.
	progressFile, resultFile string
}

// Defaults of ImageBuildOptions.
const (
	DefaultImageBuildMemoryMiB = 1024
	DefaultImageBuildDiskMiB   = 8192
	DefaultImageMaxMiB         = 4096
	defaultImageArchiveMiB     = 4096
)

func (o ImageBuildOptions) withDefaults() ImageBuildOptions {
	if o.MemoryMiB <= 0 {
		o.MemoryMiB = DefaultImageBuildMemoryMiB
	}
	if o.VCPUs <= 0 {
		o.VCPUs = 2
	}
	if o.DiskMiB <= 0 {
		o.DiskMiB = DefaultImageBuildDiskMiB
	}
	if o.MaxMiB <= 0 {
		o.MaxMiB = DefaultImageMaxMiB
	}
	if o.MaxArchiveMiB <= 0 {
		o.MaxArchiveMiB = defaultImageArchiveMiB
	}
	if o.progressFile == "" {
		o.progressFile, o.resultFile = buildplan.ProgressFile, buildplan.ResultFile
	}
	return o
}

// ImageFetcher is what the engine needs of an OCI client: a pulled or
// imported image whose manifest and config are read and checked, and
// whose layers it streams, each checked against its digest and size,
// into the builder VM's inputs. Package image/oci is one (its adapter
// lives where the daemon is composed, so the engine links no registry
// client).
type ImageFetcher interface {
	Pull(ctx context.Context, ref string, opt FetchOptions) (*FetchedImage, error)
	// Import reads a `docker save` tarball or an OCI layout tar.
	Import(ctx context.Context, r io.Reader, opt FetchOptions) (*FetchedImage, error)
}

// FetchOptions are a pull's or an import's.
type FetchOptions struct {
	Platform string
	Insecure bool
	// Token is a registry bearer token: never logged or recorded.
	Token string
	// MaxBytes caps the layers, compressed, in all.
	MaxBytes int64
	// TempDir is where an import may spool its archive (the build's work
	// directory, removed after it).
	TempDir string
	// Progress gets the fetcher's byte counts and findings (may be nil).
	Progress func(sandbox.ImageEvent)
	// Operator is set when the daemon's operator asked (a Unix-socket
	// peer, or a caller-less use of the engine): only the operator's
	// pulls may use the host's registry logins and reach registries at
	// private, loopback or link-local addresses. A tenant's pull is
	// anonymous (or its own token) and reaches public addresses only.
	Operator bool
}

// FetchedImage is an OCI image ready to stream: its manifest's digest,
// its config, and its layers in order (buildplan.Layer's File is the
// engine's to set).
type FetchedImage struct {
	Ref    string
	Digest string
	Config buildplan.Config
	Layers []buildplan.Layer
	// Open streams layer i as the registry or archive holds it
	// (compressed); the stream fails, at the latest at its end, when
	// its bytes are not Layers[i]'s digest and size. It reads within
	// the context Pull or Import was given.
	Open func(i int) (io.ReadCloser, error)
	// Close releases what the image holds (a spooled archive); may be nil.
	Close func() error
}

func (f *FetchedImage) close() {
	if f != nil && f.Close != nil {
		f.Close()
	}
}
