package build

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/image/manifest"
)

// The manifest step: what the image holds (collect.py in the image, as
// derive.sh ran it), its config (ImageConfigFile) and marker
// (MarkerFile), and the image left as the guest expects it: an empty
// resolv.conf (the guest's init writes it at boot), none of the build's
// own files.

// maxManifest bounds the manifest carried in the result.
const maxManifest = 512 << 10

var pythonVersionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+[0-9A-Za-z.+-]{0,24}$`)

// noModules is an empty modules list among the inputs, for collect.py in
// an image without the featured modules.
const noModules = ".cellvm-no-modules.txt"

// prepareImage looks at the image before the steps: its resolv.conf (a
// link is put aside for the build and back after), its marker and its
// manifest (a base that features modules must keep them importable).
func (b *builder) prepareImage() error {
	etc, err := b.root.openDir("etc", true)
	if err != nil {
		return fmt.Errorf("/etc in the image: %w", err)
	}
	defer unix.Close(etc)
	if st, ok, _ := lstatAt(etc, "resolv.conf"); ok && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		target, err := readlinkAt(etc, "resolv.conf")
		if err != nil {
			return err
		}
		b.resolvLink = target
		if err := removeAllAt(etc, "resolv.conf"); err != nil {
			return err
		}
	}
	if err := ensureFile(etc, "resolv.conf"); err != nil {
		return fmt.Errorf("/etc/resolv.conf in the image: %w", err)
	}
	if data, err := b.readFile(strings.TrimPrefix(buildplan.MarkerFile, "/"), 64<<10); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, ok := strings.CutPrefix(l, "key "); ok && len(k) <= 128 && !strings.ContainsAny(k, " \t") {
				b.baseKey = k
			}
		}
	}
	if b.plan.Mode == buildplan.ModeDerive {
		if data, err := b.readFile(strings.TrimPrefix(buildplan.ManifestFile, "/"), 1<<20); err == nil {
			if m, err := manifest.Parse(data); err == nil && len(m.Modules) > 0 {
				b.featured = true
			}
		}
	}
	return nil
}

func (b *builder) manifestStep() error {
	env := b.stepEnv(nil)
	if b.lookPath("python3", env) == "" {
		b.p.Printf("the image has no python3 on its PATH (%s): its manifest names no Python", envValue(env, "PATH"))
	} else {
		out := &limitBuffer{max: 4096}
		err := b.inRoot(rootCmd{argv: []string{"python3", "-c", "import platform; print(platform.python_version())"}, out: out})
		v := strings.TrimSpace(out.String())
		switch {
		case err != nil:
			b.p.Printf("the image's python3 does not run (%v; %s): its manifest names no Python", err, clip(v))
		case !pythonVersionRE.MatchString(v):
			b.p.Printf("the image's python3 gives the version %q: its manifest names no Python", clip(v))
		default:
			b.python = v
			b.p.Printf("python %s", v)
		}
	}
	b.languages = b.findLanguages()
	var data []byte
	if b.python != "" {
		var err error
		if data, err = b.collect(); err != nil {
			return err
		}
	}
	if data == nil {
		m := manifest.Manifest{
			Comment:       "Written by cellvm's builder: the image has no usable python3, or collect.py could not run in it.",
			Python:        b.python,
			Modules:       []manifest.Module{},
			Distributions: map[string]string{},
		}
		data, _ = json.MarshalIndent(m, "", "  ")
		data = append(data, '\n')
		if err := b.writeFile(strings.TrimPrefix(buildplan.ManifestFile, "/"), data, 0o644); err != nil {
			return err
		}
	}
	b.manifest = data
	cfg, _ := json.MarshalIndent(b.config, "", "  ")
	if err := b.writeFile(strings.TrimPrefix(buildplan.ImageConfigFile, "/"), append(cfg, '\n'), 0o644); err != nil {
		return err
	}
	if err := b.writeFile(strings.TrimPrefix(buildplan.MarkerFile, "/"), []byte(b.marker(time.Now())), 0o644); err != nil {
		return err
	}
	return b.tidy()
}

// collect runs collect.py in the image. An image whose base features
// modules (the default image and those built on it) must keep them; any
// other (a pulled python:slim) is recorded without them when collect.py
// fails on them, and with no manifest of its own (nil) when it fails
// altogether.
func (b *builder) collect() ([]byte, error) {
	run := func(modules string) error {
		return b.inRoot(rootCmd{
			argv: []string{"python3", "-B", InputsMount + "/" + b.plan.Collect, InputsMount + "/" + modules, buildplan.ManifestFile},
			env:  []string{"MPLCONFIGDIR=/var/cache/matplotlib", "MPLBACKEND=Agg"},
		})
	}
	err := run(b.plan.Modules)
	if err != nil && b.featured {
		return nil, fmt.Errorf("collect.py (the featured modules of the base must import): %w", err)
	}
	if err != nil {
		b.p.Printf("collect.py: %v; the manifest lists no featured modules", err)
		if werr := writeFileIn(b.inputs, noModules, nil, 0o644); werr != nil {
			return nil, werr
		}
		if err = run(noModules); err != nil {
			b.p.Printf("collect.py: %v; the manifest lists no distributions", err)
			return nil, nil
		}
	}
	data, err := b.readFile(strings.TrimPrefix(buildplan.ManifestFile, "/"), maxManifest)
	if err == nil && !json.Valid(data) {
		err = fmt.Errorf("%s is not JSON", buildplan.ManifestFile)
	}
	if err != nil {
		if b.featured {
			return nil, fmt.Errorf("collect.py's manifest: %w", err)
		}
		b.p.Printf("collect.py's manifest: %v", err)
		return nil, nil
	}
	return data, nil
}

// marker is MarkerFile's text.
func (b *builder) marker(now time.Time) string {
	base := b.plan.Base
	if base == "" {
		base = b.baseKey
	}
	if base == "" {
		base = "unknown"
	}
	return fmt.Sprintf("key %s\nname %s\nbase %s\nbuilt %s\n", b.plan.Key, b.plan.Name, oneLine(base), now.UTC().Format("2006-01-02T15:04:05Z"))
}

func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '_'
		}
		return r
	}, s)
	return clip(s)
}

// tidy leaves the image as the guest expects it: resolv.conf empty (or
// the image's link back), and the build's mount point gone.
func (b *builder) tidy() error {
	etc, err := b.root.openDir("etc", true)
	if err != nil {
		return err
	}
	defer unix.Close(etc)
	if b.resolvLink != "" {
		if err := removeAllAt(etc, "resolv.conf"); err != nil {
			return err
		}
		if err := unix.Symlinkat(b.resolvLink, etc, "resolv.conf"); err != nil {
			return fmt.Errorf("putting back /etc/resolv.conf: %w", err)
		}
		unix.Fchownat(etc, "resolv.conf", 0, 0, unix.AT_SYMLINK_NOFOLLOW)
	} else if err := writeFileIn(b.root, "etc/resolv.conf", nil, 0o644); err != nil {
		return err
	}
	if b.madeInputsDir {
		dir, base := splitMount(InputsMount)
		if tmp, err := b.root.openDir(dir, false); err == nil {
			err = removeAllAt(tmp, base)
			unix.Close(tmp)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// result is the build's Result, its manifest left out if it would not
// fit.
func (b *builder) result(size int64) ([]byte, error) {
	r := buildplan.Result{SizeBytes: size, UUID: b.plan.UUID, Config: b.config, Python: b.python, Languages: b.languages}
	if len(b.manifest) <= maxManifest && json.Valid(b.manifest) {
		var c bytes.Buffer
		if json.Compact(&c, b.manifest) == nil {
			r.Manifest = c.Bytes()
		}
	}
	data, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(data) > buildplan.MaxResultSize {
		b.p.Printf("the manifest (%d bytes) is left out of the result, which it would make too big", len(r.Manifest))
		r.Manifest = nil
		if data, err = json.Marshal(r); err != nil {
			return nil, err
		}
		if len(data) > buildplan.MaxResultSize {
			return nil, fmt.Errorf("the result is %d bytes, more than %d", len(data), buildplan.MaxResultSize)
		}
	}
	return data, nil
}
