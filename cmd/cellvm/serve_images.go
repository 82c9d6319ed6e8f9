package main

import (
	"net/netip"

	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/engine"
)

// The daemon makes images (pull, import, recipe builds) in a builder
// microVM of its own (the engine's CreateImage): these flags size that VM
// and cap what it makes.

// serveImages are serve's flags for image builds.
type serveImages struct {
	memoryMiB int
	diskMiB   int64
	maxMiB    int64
}

func addServeImageFlags(fs *pflag.FlagSet) *serveImages {
	im := &serveImages{}
	fs.IntVar(&im.memoryMiB, "image-build-memory-mib", engine.DefaultImageBuildMemoryMiB, "memory in MiB of the builder VM that makes an image (counted against --max-memory while it runs)")
	fs.Int64Var(&im.diskMiB, "image-build-disk-mib", engine.DefaultImageBuildDiskMiB, "the largest image in MiB a pull, an import or a build may make (its out disk; sparse on the host)")
	fs.Int64Var(&im.maxMiB, "max-image-mib", engine.DefaultImageMaxMiB, "cap in MiB on an OCI image's layers (compressed) that a pull or an import may fetch")
	return im
}

// check refuses flags the engine could not apply.
func (im *serveImages) check() error {
	if im.memoryMiB < sandbox.MinMemoryMiB || im.memoryMiB > sandbox.MaxMemoryMiB {
		return usagef("--image-build-memory-mib %d: want %d to %d", im.memoryMiB, sandbox.MinMemoryMiB, sandbox.MaxMemoryMiB)
	}
	if im.diskMiB < 64 || im.diskMiB > 1<<20 {
		return usagef("--image-build-disk-mib %d: want 64 to %d", im.diskMiB, 1<<20)
	}
	if im.maxMiB < 1 || im.maxMiB > 1<<20 {
		return usagef("--max-image-mib %d: want 1 to %d", im.maxMiB, 1<<20)
	}
	return nil
}

// options are the engine's ImageBuildOptions of the flags; public are
// the --public-ranges (serve_images_oci.go).
func (im *serveImages) options(public []netip.Prefix) engine.ImageBuildOptions {
	return engine.ImageBuildOptions{MemoryMiB: im.memoryMiB, DiskMiB: im.diskMiB, MaxMiB: im.maxMiB, Fetch: ociFetcher{public: public}}
}
