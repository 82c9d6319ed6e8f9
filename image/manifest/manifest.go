// Package manifest is what the default guest image has installed, as the
// image's own build recorded it, so that what cellvm tells a model about the
// image (the run_python tool's description) is read from the image rather
// than restated by hand.
//
// image/build.sh runs collect.py inside the image it builds: it imports every
// module in modules.txt, records its version, and lists every installed
// distribution. The result lies in the image (/etc/cellvm-manifest.json),
// next to it (build/rootfs.manifest.json), and here (manifest.json,
// committed, rewritten by a build whose image differs). This package embeds
// the committed copy; its tests check that it matches the built image.
package manifest

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cellvm/cellvm/cell"
)

// PathInImage is where the image carries its manifest.
const PathInImage = "/etc/cellvm-manifest.json"

// BuildFile is the manifest's copy next to the image, relative to the build
// directory.
const BuildFile = "rootfs.manifest.json"

//go:embed manifest.json
var embedded []byte

// Module is one featured module: the name it is imported by, the
// distribution pip knows it as, and that distribution's version.
type Module struct {
	Import       string `json:"import"`
	Distribution string `json:"distribution"`
	Version      string `json:"version"`
}

// Manifest is an image's manifest.
type Manifest struct {
	Comment string `json:"comment,omitempty"`
	// Python is the interpreter's version.
	Python string `json:"python"`
	// Languages are the cell languages the image has, with the versions
	// of their programs (python3, node, the TypeScript transpiler, bash).
	Languages []cell.LanguageInfo `json:"languages,omitempty"`
	// Modules are the featured modules, in modules.txt's order.
	Modules []Module `json:"modules"`
	// Distributions maps every installed distribution to its version.
	Distributions map[string]string `json:"distributions"`
}

// Default is the default image's manifest, the committed copy. It panics
// only if that copy is malformed, which the package's tests rule out.
func Default() Manifest {
	m, err := Parse(embedded)
	if err != nil {
		panic("image/manifest: the embedded manifest.json: " + err.Error())
	}
	return m
}

// Limits on a manifest read from an image (a user's image may be anything).
const (
	maxSize    = 1 << 20
	maxModules = 256
	maxField   = 128
)

// Parse reads and checks a manifest.
func Parse(b []byte) (Manifest, error) {
	var m Manifest
	if len(b) > maxSize {
		return m, fmt.Errorf("manifest is %d bytes, more than %d", len(b), maxSize)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("manifest: %w", err)
	}
	if m.Python == "" {
		return m, errors.New("manifest names no Python version")
	}
	if len(m.Modules) == 0 || len(m.Modules) > maxModules {
		return m, fmt.Errorf("manifest has %d featured modules, want 1 to %d", len(m.Modules), maxModules)
	}
	seen := map[string]bool{}
	for i, mod := range m.Modules {
		for _, f := range []string{mod.Import, mod.Distribution, mod.Version} {
			if f == "" || len(f) > maxField || strings.ContainsAny(f, " ,;()\n\t") {
				return m, fmt.Errorf("manifest module %d: bad field %q", i, f)
			}
		}
		if seen[mod.Import] {
			return m, fmt.Errorf("manifest lists module %s twice", mod.Import)
		}
		seen[mod.Import] = true
		if v, ok := m.Distributions[mod.Distribution]; !ok || v != mod.Version {
			return m, fmt.Errorf("manifest module %s: distribution %s is %q in the distribution list, not %q", mod.Import, mod.Distribution, v, mod.Version)
		}
	}
	return m, nil
}

// Summary is the featured modules as a model reads them: "numpy 1.24.2,
// scikit-learn 1.2.1 (import sklearn), ...".
func (m Manifest) Summary() string {
	parts := make([]string, len(m.Modules))
	for i, mod := range m.Modules {
		parts[i] = mod.Distribution + " " + mod.Version
		if !strings.EqualFold(mod.Import, mod.Distribution) {
			parts[i] += " (import " + mod.Import + ")"
		}
	}
	return strings.Join(parts, ", ")
}

//go:embed collect.py
var collectScript []byte

//go:embed modules.txt
var modulesList []byte

// CollectScript is collect.py, which writes an image's manifest inside
// it, for builds that derive an image from another (package derive).
func CollectScript() []byte { return append([]byte(nil), collectScript...) }

// ModulesList is modules.txt, the featured modules collect.py imports.
func ModulesList() []byte { return append([]byte(nil), modulesList...) }
