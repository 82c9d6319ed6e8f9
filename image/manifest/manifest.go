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
//
// The manifest also names the cell languages the image has (Languages):
// collect.py runs each language's program (python3, node, TypeScript's
// transpiler under node, bash) and lists those that answer with a
// version, so what the engine allows and what a model is told follow
// what the image holds. An older manifest lists none: unknown, not none.
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

// CheckLanguages checks a list of an image's languages, as a manifest or
// an image builder reports them (either may be an image's own doing):
// each one cellvm knows, by its canonical name, at most once, with a
// version of at most 64 of [0-9A-Za-z.+~_-].
func CheckLanguages(ls []cell.LanguageInfo) error {
	if len(ls) > len(cell.Languages) {
		return fmt.Errorf("%d languages, more than the %d there are", len(ls), len(cell.Languages))
	}
	seen := map[cell.Language]bool{}
	for i, l := range ls {
		known := false
		for _, k := range cell.Languages {
			known = known || l.Name == k
		}
		if !known {
			return fmt.Errorf("language %d: %q is not one of %s", i, clip(string(l.Name)), cell.LanguageList(cell.Languages))
		}
		if seen[l.Name] {
			return fmt.Errorf("language %s is listed twice", l.Name)
		}
		seen[l.Name] = true
		if !validVersion(l.Version) {
			return fmt.Errorf("language %s: bad version %q", l.Name, clip(l.Version))
		}
	}
	return nil
}

// validVersion: 1 to 64 of [0-9A-Za-z.+~_-], starting with a digit.
func validVersion(v string) bool {
	if v == "" || len(v) > 64 || v[0] < '0' || v[0] > '9' {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || strings.IndexByte(".+~_-", c) >= 0) {
			return false
		}
	}
	return true
}

func clip(s string) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

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
	if err := CheckLanguages(m.Languages); err != nil {
		return m, fmt.Errorf("manifest: %w", err)
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

// LanguageSummary is the languages as a model reads them: "python
// 3.11.2, javascript (Node.js 18.19.0), typescript 5.9.3, bash 5.2.15";
// "" when the manifest names none.
func (m Manifest) LanguageSummary() string {
	parts := make([]string, len(m.Languages))
	for i, l := range m.Languages {
		if l.Name == cell.JavaScript {
			parts[i] = "javascript (Node.js " + l.Version + ")"
		} else {
			parts[i] = string(l.Name) + " " + l.Version
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
