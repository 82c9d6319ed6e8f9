package build

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/sandbox"
)

// The recipe's steps, as image/derive's derive.sh ran them on the host,
// now in the VM: apt, pip, copy (files), run, config.

// stepName is the progress name of a step of kind k.
func stepName(k string) string {
	switch k {
	case "apt":
		return sandbox.ImageStepApt
	case "pip":
		return sandbox.ImageStepPip
	case "copy", "config":
		return sandbox.ImageStepFiles
	}
	return sandbox.ImageStepRun
}

func (b *builder) runStep(s sandbox.RecipeStep) error {
	switch s.Kind() {
	case "apt":
		return b.apt(s)
	case "pip":
		return b.pip(s)
	case "copy":
		return b.copyStep(s)
	case "run":
		return b.run(s)
	case "config":
		return b.configStep(s)
	}
	return errors.New("a step of no known kind")
}

// apt installs Debian packages, as derive.sh: from Mirror (which replaces
// the image's sources) or the image's own sources, with no daemon started
// (policy-rc.d), no recommends, and apt's lists and caches cleaned after.
func (b *builder) apt(s sandbox.RecipeStep) error {
	if b.lookPath("apt-get", b.stepEnv(nil)) == "" {
		return fmt.Errorf("the image has no apt-get on its PATH (%s): an apt step needs a Debian-based image", envValue(b.stepEnv(nil), "PATH"))
	}
	if s.Mirror != "" {
		suite, err := b.suite()
		if err != nil {
			return err
		}
		if err := b.writeFile("etc/apt/sources.list", []byte(fmt.Sprintf("deb %s %s main\n", s.Mirror, suite)), 0o644); err != nil {
			return err
		}
		if err := b.removeGlob("etc/apt/sources.list.d", "*"); err != nil {
			return err
		}
		b.p.Printf("mirror: %s %s", s.Mirror, suite)
	}
	restore, err := b.policyRCD()
	if err != nil {
		return err
	}
	defer restore()
	if err := b.inRoot(rootCmd{argv: []string{"apt-get", "-q", "-o", "Dpkg::Use-Pty=0", "update"}}); err != nil {
		return err
	}
	argv := []string{"apt-get", "-q", "-y", "-o", "Dpkg::Use-Pty=0", "-o", "Dpkg::Progress-Fancy=0", "-o", "APT::Install-Recommends=0", "install"}
	if err := b.inRoot(rootCmd{argv: append(argv, s.Apt...)}); err != nil {
		return err
	}
	for _, g := range [][2]string{
		{"var/lib/apt/lists", "*"}, {"var/cache/apt", "*.bin"}, {"var/cache/apt/archives", "*.deb"},
		{"var/log", "apt"}, {"var/log", "dpkg.log"}, {"var/cache/debconf", "*-old"}, {"var/lib/dpkg", "*-old"},
	} {
		if err := b.removeGlob(g[0], g[1]); err != nil {
			return err
		}
	}
	return nil
}

// suite is the image's Debian suite (VERSION_CODENAME of /etc/os-release).
func (b *builder) suite() (string, error) {
	data, err := b.readFile("etc/os-release", 64<<10)
	if err != nil {
		return "", fmt.Errorf("a mirror needs the image's suite from /etc/os-release: %w", err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "VERSION_CODENAME="); ok {
			v = strings.Trim(v, `"'`)
			if v != "" && !strings.ContainsAny(v, " \t/\\") && len(v) < 64 {
				return v, nil
			}
		}
	}
	return "", errors.New("a mirror needs the image's suite, and its /etc/os-release has no VERSION_CODENAME")
}

// policyRCD installs a policy-rc.d that starts no daemon, keeping the
// image's own to put back.
func (b *builder) policyRCD() (func(), error) {
	dir, err := b.root.openDir("usr/sbin", true)
	if err != nil {
		return nil, err
	}
	_, had, _ := lstatAt(dir, "policy-rc.d")
	if had {
		removeAllAt(dir, "policy-rc.d.cellvm-saved")
		if err := unix.Renameat(dir, "policy-rc.d", dir, "policy-rc.d.cellvm-saved"); err != nil {
			unix.Close(dir)
			return nil, err
		}
	}
	unix.Close(dir)
	if err := b.writeFile("usr/sbin/policy-rc.d", []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
		return nil, err
	}
	return func() {
		dir, err := b.root.openDir("usr/sbin", false)
		if err != nil {
			return
		}
		defer unix.Close(dir)
		removeAllAt(dir, "policy-rc.d")
		if had {
			unix.Renameat(dir, "policy-rc.d.cellvm-saved", dir, "policy-rc.d")
		}
	}, nil
}

// pip installs wheels and a requirements file, binary wheels only, as
// derive.sh did, then compiles what it installed in /usr/local.
func (b *builder) pip(s sandbox.RecipeStep) error {
	env := b.stepEnv(nil)
	if b.lookPath("python3", env) == "" {
		return fmt.Errorf("the image has no python3 on its PATH (%s): a pip step needs python3 with pip", envValue(env, "PATH"))
	}
	var out limitBuffer
	out.max = 4096
	if err := b.inRoot(rootCmd{argv: []string{"python3", "-m", "pip", "--version"}, out: &out}); err != nil {
		return fmt.Errorf("the image's python3 has no working pip (python3 -m pip --version: %v; %s)", err, strings.TrimSpace(out.String()))
	}
	b.p.Printf("%s", strings.TrimSpace(out.String()))
	argv := []string{"python3", "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check",
		"--no-warn-script-location", "--only-binary=:all:", "--progress-bar=off"}
	if s.PipIndex != "" {
		argv = append(argv, "--index-url", s.PipIndex)
		// An index on plain http is one the recipe named itself (a
		// private index, a mirror): pip ignores it without
		// --trusted-host. The host is the one the builder's network
		// policy opens; nothing else is trusted.
		if u, err := url.Parse(s.PipIndex); err == nil && u.Scheme == "http" && u.Host != "" {
			argv = append(argv, "--trusted-host", u.Host)
		}
	} else {
		argv = append(argv, "--no-index")
	}
	if s.PipWheels != "" {
		wheels, err := b.inputPath(s.PipWheels)
		if err != nil {
			return err
		}
		names, err := b.wheels(s.PipWheels)
		if err != nil {
			return err
		}
		argv = append(argv, "--find-links", wheels)
		for _, n := range names {
			argv = append(argv, wheels+"/"+n)
		}
		if len(names) == 0 && s.Requirements == "" {
			return fmt.Errorf("pip_wheels %s holds no *.whl file (and no requirements name what to install from it)", s.PipWheels)
		}
	}
	if s.Requirements != "" {
		req, err := b.inputPath(s.Requirements)
		if err != nil {
			return err
		}
		argv = append(argv, "-r", req)
	}
	// As environment variables, which a pip too old for the options
	// ignores rather than fails on.
	extra := []string{"PIP_BREAK_SYSTEM_PACKAGES=1", "PIP_ROOT_USER_ACTION=ignore"}
	if err := b.inRoot(rootCmd{argv: argv, env: extra}); err != nil {
		return err
	}
	for _, d := range b.sitePackages() {
		var discard limitBuffer
		b.inRoot(rootCmd{argv: []string{"python3", "-m", "compileall", "-q", d}, out: &discard})
	}
	return nil
}

// inputPath is the archive path p as a step sees it in the image; it
// must be among the build's inputs.
func (b *builder) inputPath(p string) (string, error) {
	rel, err := cleanName(buildplan.InputsDir + "/" + p)
	if err != nil {
		return "", err
	}
	fd, err := b.inputs.openat2(rel, unix.O_PATH)
	if err != nil {
		return "", fmt.Errorf("%s is not among the build's files (%v)", clip(p), err)
	}
	unix.Close(fd)
	return InputsMount + "/" + rel, nil
}

// wheels lists the *.whl files of the inputs directory dir.
func (b *builder) wheels(dir string) ([]string, error) {
	rel, err := cleanName(buildplan.InputsDir + "/" + dir)
	if err != nil {
		return nil, err
	}
	fd, err := b.inputs.openDir(rel, false)
	if err != nil {
		return nil, fmt.Errorf("pip_wheels %s is not a directory among the build's files", clip(dir))
	}
	defer unix.Close(fd)
	names, err := readNames(fd)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, ".whl") {
			if st, ok, _ := lstatAt(fd, n); ok && st.Mode&unix.S_IFMT == unix.S_IFREG {
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// sitePackages are /usr/local's Python package directories in the image.
func (b *builder) sitePackages() []string {
	fd, err := b.root.openDir("usr/local/lib", false)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	names, _ := readNames(fd)
	sort.Strings(names)
	var out []string
	for _, n := range names {
		if !strings.HasPrefix(n, "python3") {
			continue
		}
		for _, sub := range []string{"dist-packages", "site-packages"} {
			p := "usr/local/lib/" + n + "/" + sub
			if d, err := b.root.openDir(p, false); err == nil {
				unix.Close(d)
				out = append(out, "/"+p)
			}
		}
	}
	return out
}

// run runs a shell command in the image, in its working directory.
func (b *builder) run(s sandbox.RecipeStep) error {
	dir := "/"
	if wd := b.config.WorkingDir; wd != "" {
		if rel, err := cleanName(wd); err == nil {
			if fd, err := b.root.openDir(rel, false); err == nil {
				unix.Close(fd)
				dir = wd
			}
		}
	}
	err := b.inRoot(rootCmd{argv: []string{"sh", "-c", s.Run}, dir: dir})
	var nf *notFoundError
	if errors.As(err, &nf) {
		return fmt.Errorf("%v: a run step needs a shell", err)
	}
	return err
}

// configStep changes the image's config as ENV, WORKDIR and USER do; a
// working directory is made in the image.
func (b *builder) configStep(s sandbox.RecipeStep) error {
	b.config = mergeConfig(b.config, s)
	if s.WorkingDir != "" {
		rel, err := cleanName(s.WorkingDir)
		if err != nil {
			return err
		}
		fd, err := b.root.openDir(rel, true)
		if err != nil {
			return fmt.Errorf("working_dir %s: %w", clip(s.WorkingDir), err)
		}
		unix.Close(fd)
	}
	return nil
}

// mergeConfig applies a config step: Env entries replace those of the
// same key, WorkingDir and User replace theirs.
func mergeConfig(c buildplan.Config, s sandbox.RecipeStep) buildplan.Config {
	c.Env = mergeEnv(c.Env, s.Env)
	if s.WorkingDir != "" {
		c.WorkingDir = path.Clean(s.WorkingDir)
	}
	if s.User != "" {
		c.User = s.User
	}
	return c
}

// readNames lists the directory fd.
func readNames(fd int) ([]string, error) {
	d := dupFd(fd)
	if d < 0 {
		return nil, errors.New("dup failed")
	}
	f := osNewFile(d)
	defer f.Close()
	var out []string
	for {
		names, err := f.Readdirnames(1024)
		out = append(out, names...)
		if len(out) > 1<<20 {
			return nil, errors.New("a directory of more than a million entries")
		}
		if err == io.EOF || len(names) == 0 {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// removeGlob removes the entries of the image's directory dir that match
// pattern, without following links (a link is removed, not what it
// points to); a missing directory has none.
func (b *builder) removeGlob(dir, pattern string) error {
	fd, err := b.root.openDir(dir, false)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	names, err := readNames(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		if ok, _ := path.Match(pattern, n); ok {
			if err := removeAllAt(fd, n); err != nil {
				return fmt.Errorf("cleaning /%s: %w", dir, err)
			}
		}
	}
	return nil
}

// writeFile replaces the image's file name (relative) with data, owned
// by root, never writing through a link.
func (b *builder) writeFile(name string, data []byte, mode uint32) error {
	return writeFileIn(b.root, name, data, mode)
}

func writeFileIn(r *Root, name string, data []byte, mode uint32) error {
	pfd, base, err := r.parent(name, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if _, err := replace(pfd, base, false); err != nil {
		return fmt.Errorf("/%s: %w", name, err)
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("/%s: %w", name, err)
	}
	defer unix.Close(fd)
	if err := writeAll(fd, data); err != nil {
		return fmt.Errorf("/%s: %w", name, err)
	}
	if err := unix.Fchown(fd, 0, 0); err != nil {
		return err
	}
	return unix.Fchmod(fd, mode)
}

// readFile reads the image's file name (resolved in the image), at most
// max bytes.
func (b *builder) readFile(name string, max int64) ([]byte, error) {
	return readFileIn(b.root, name, max)
}

func readFileIn(r *Root, name string, max int64) ([]byte, error) {
	fd, err := r.openat2(name, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("/%s: %w", name, err)
	}
	f := osNewFile(fd)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("/%s is not a regular file", name)
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("/%s is %d bytes, more than %d", name, fi.Size(), max)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("/%s is more than %d bytes", name, max)
	}
	return data, nil
}
