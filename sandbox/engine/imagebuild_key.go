package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/cellvm/cellvm/image/manifest"
	"github.com/cellvm/cellvm/sandbox"
)

// A build's key names its inputs: an unchanged request is a cache hit
// (no VM), and the key's first 128 bits are the image's ext4 UUID
// (buildplan.UUIDOf), so that every different image, and the same image
// under another name or tenant, has its own: a machine whose memory
// caches one image's files is never resumed or forked over another's.

// imageBuilderVersion changes whenever what the builder makes of the same
// inputs changes (the guest's builder, the plan), so that no cache hit
// returns an image an older builder made.
const imageBuilderVersion = "cellvm image builder 1"

// ociKey is the key of a pull or an import: the OCI manifest's digest.
func ociKey(entry, digest string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\noci\nentry %q\ndigest %q\nsteps none\n", imageBuilderVersion, entry, digest)
	manifestInputs(h)
	return hex.EncodeToString(h.Sum(nil))
}

// recipeKey is the key of a recipe: its base (by ext4 UUID and size), its
// steps, and what its archive holds (recipeInputs.digest).
func recipeKey(entry, baseUUID string, baseSize int64, steps []sandbox.RecipeStep, archive []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\nrecipe\nentry %q\nbase %s %d\n", imageBuilderVersion, entry, baseUUID, baseSize)
	b, _ := json.Marshal(steps) // plain data: never fails
	fmt.Fprintf(h, "steps %x\narchive %x\n", sha256.Sum256(b), archive)
	manifestInputs(h)
	return hex.EncodeToString(h.Sum(nil))
}

func manifestInputs(h interface{ Write([]byte) (int, error) }) {
	fmt.Fprintf(h, "collect %x\nmodules %x\n", sha256.Sum256(manifest.CollectScript()), sha256.Sum256(manifest.ModulesList()))
}
