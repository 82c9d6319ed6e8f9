package sandboxtest

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// CreateImage, by the contract's rules with no builder VM: the request
// is validated; a taken name is ErrBusy unless Replace (and so is a name
// being made); a recipe's base must be an image there is, and the paths
// its steps name must be in its archive (a tar); an import's archive
// must be a tar, and its digest is the SHA-256 of the whole archive. The
// progress events are those a real make sends, in order. Nothing runs:
//
//   - a pull from a registry whose host ends in ".invalid" (RFC 2606:
//     one that never resolves) fails its fetch step with ErrUpstream;
//   - a run step "false" or "exit N" (N not 0) fails the run step with
//     ErrBuildFailed and a tail; any other run step succeeds;
//   - an apt step prints "Setting up PKG" for each package.
//
// A pull's image is 64 MiB, a build's its base's plus 1 MiB a step; an
// import's is the archive's size. The image is the request's Tenant's
// ("" is the operator's, which every tenant sees).
func (m *Manager) CreateImage(ctx context.Context, req sandbox.ImageRequest, progress func(sandbox.ImageEvent)) (sandbox.ImageInfo, error) {
	if err := m.enterLocked("CreateImage", req.Name); err != nil {
		return sandbox.ImageInfo{}, err
	}
	base, err := m.admitImage(req)
	if err != nil {
		m.mu.Unlock()
		return sandbox.ImageInfo{}, err
	}
	m.making[req.Name] = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.making, req.Name)
		m.mu.Unlock()
	}()
	emit := func(ev sandbox.ImageEvent) {
		if progress != nil {
			progress(ev)
		}
	}
	info, err := makeImage(ctx, req, base, emit)
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return sandbox.ImageInfo{}, err
	}
	emit(sandbox.ImageEvent{Step: sandbox.ImageStepInstall})
	m.mu.Lock()
	m.next++
	info.BuiltAt = epoch.Add(time.Duration(m.next) * time.Second)
	m.images[req.Name] = info
	m.note("make image %s (%s)", req.Name, info.Source)
	m.mu.Unlock()
	emit(sandbox.ImageEvent{Step: sandbox.ImageStepDone})
	return info, nil
}

// admitImage checks req against the images there are and returns the
// recipe's base; the caller holds m.mu.
func (m *Manager) admitImage(req sandbox.ImageRequest) (sandbox.ImageInfo, error) {
	if err := req.Validate(); err != nil {
		return sandbox.ImageInfo{}, err
	}
	if m.making[req.Name] {
		return sandbox.ImageInfo{}, fmt.Errorf("%w: image %s is being made by another request", sandbox.ErrBusy, req.Name)
	}
	if _, ok := m.images[req.Name]; ok && !req.Replace {
		return sandbox.ImageInfo{}, fmt.Errorf("%w: image %s exists; replace it with replace (--replace) or pick another name", sandbox.ErrBusy, req.Name)
	}
	if req.Recipe == nil {
		return sandbox.ImageInfo{}, nil
	}
	name := req.Recipe.Base
	if name == "" {
		name = sandbox.DefaultImage
	}
	base, ok := m.images[name]
	if !ok {
		return base, fmt.Errorf("%w: no image %q to build on; the images here are %s", sandbox.ErrInvalid, name, strings.Join(m.imageNames(), ", "))
	}
	return base, nil
}

// makeImage makes the image's record, sending the events a real make
// would.
func makeImage(ctx context.Context, req sandbox.ImageRequest, base sandbox.ImageInfo, emit func(sandbox.ImageEvent)) (sandbox.ImageInfo, error) {
	info := sandbox.ImageInfo{Name: req.Name, Tenant: req.Tenant, Python: "3.11.2"}
	switch {
	case req.Pull != "":
		info.Source, info.Ref, info.SizeBytes = sandbox.ImageSourcePull, req.Pull, 64<<20
		emit(sandbox.ImageEvent{Step: sandbox.ImageStepFetch})
		host, _, _ := strings.Cut(req.Pull, "/")
		if strings.HasSuffix(host, ".invalid") {
			return info, &sandbox.ImageStepError{Step: sandbox.ImageStepFetch,
				Err: fmt.Errorf("%w: registry %s: no such host", sandbox.ErrUpstream, host)}
		}
		sum := sha256.Sum256([]byte(req.Pull))
		info.Digest = "sha256:" + hex.EncodeToString(sum[:])
		emit(sandbox.ImageEvent{Step: sandbox.ImageStepFetch, Done: info.SizeBytes, Total: info.SizeBytes})
	case req.Import:
		info.Source = sandbox.ImageSourceImport
		emit(sandbox.ImageEvent{Step: sandbox.ImageStepRead})
		h := sha256.New()
		n, _, err := readTar(ctx, io.TeeReader(req.Archive, h))
		if err != nil {
			return info, fmt.Errorf("%w: the import's archive: %v", sandbox.ErrInvalid, err)
		}
		info.SizeBytes, info.Digest = n, "sha256:"+hex.EncodeToString(h.Sum(nil))
		emit(sandbox.ImageEvent{Step: sandbox.ImageStepRead, Done: n, Total: n})
	default:
		info.Source, info.Base, info.SizeBytes = sandbox.ImageSourceBuild, req.Recipe.Base, base.SizeBytes
		info.Python, info.Modules = base.Python, base.Modules
		info.Env, info.WorkingDir, info.User = base.Env, base.WorkingDir, base.User
		var paths map[string]bool
		if req.Archive != nil {
			var err error
			if _, paths, err = readTar(ctx, req.Archive); err != nil {
				return info, fmt.Errorf("%w: the recipe's archive: %v", sandbox.ErrInvalid, err)
			}
		}
		if err := checkInputs(req.Recipe.Steps, paths); err != nil {
			return info, err
		}
		emit(sandbox.ImageEvent{Step: sandbox.ImageStepBoot})
		emit(sandbox.ImageEvent{Step: sandbox.ImageStepExtract})
		for _, st := range req.Recipe.Steps {
			if err := ctx.Err(); err != nil {
				return info, err
			}
			if err := buildStep(&info, st, emit); err != nil {
				return info, err
			}
		}
	}
	if req.Recipe == nil {
		emit(sandbox.ImageEvent{Step: sandbox.ImageStepBoot})
		emit(sandbox.ImageEvent{Step: sandbox.ImageStepExtract})
	}
	emit(sandbox.ImageEvent{Step: sandbox.ImageStepManifest})
	emit(sandbox.ImageEvent{Step: sandbox.ImageStepMkfs})
	return info, nil
}

// buildStep "runs" one recipe step.
func buildStep(info *sandbox.ImageInfo, st sandbox.RecipeStep, emit func(sandbox.ImageEvent)) error {
	info.SizeBytes += 1 << 20
	switch st.Kind() {
	case "apt":
		emit(sandbox.ImageEvent{Step: sandbox.ImageStepApt})
		for _, p := range st.Apt {
			emit(sandbox.ImageEvent{Step: sandbox.ImageStepApt, Message: "Setting up " + p})
		}
		info.Apt = append(info.Apt, st.Apt...)
	case "pip":
		emit(sandbox.ImageEvent{Step: sandbox.ImageStepPip})
	case "copy":
		emit(sandbox.ImageEvent{Step: sandbox.ImageStepFiles})
	case "run":
		emit(sandbox.ImageEvent{Step: sandbox.ImageStepRun})
		emit(sandbox.ImageEvent{Step: sandbox.ImageStepRun, Message: "+ " + clipLine(st.Run)})
		cmd := strings.TrimSpace(st.Run)
		if code, ok := strings.CutPrefix(cmd, "exit "); cmd == "false" || ok && strings.TrimSpace(code) != "0" {
			if cmd == "false" {
				code = "1"
			}
			return &sandbox.ImageStepError{Step: sandbox.ImageStepRun, Tail: "+ " + clipLine(st.Run) + "\nexit status " + strings.TrimSpace(code),
				Err: fmt.Errorf("%w: run %q exited with status %s", sandbox.ErrBuildFailed, clipLine(st.Run), strings.TrimSpace(code))}
		}
	case "config":
		info.Env = append(append([]string(nil), info.Env...), st.Env...)
		if st.WorkingDir != "" {
			info.WorkingDir = st.WorkingDir
		}
		if st.User != "" {
			info.User = st.User
		}
	}
	return nil
}

func clipLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// checkInputs refuses a step naming a path its archive lacks.
func checkInputs(steps []sandbox.RecipeStep, paths map[string]bool) error {
	for i, st := range steps {
		for _, p := range []string{st.PipWheels, st.Requirements, st.CopyFrom} {
			if p != "" && !paths[path.Clean(p)] {
				return fmt.Errorf("step %d: %w: %q is not in the request's archive", i+1, sandbox.ErrInvalid, p)
			}
		}
	}
	return nil
}

// readTar reads a tar archive to its end and returns its size and its
// paths (directories implied by entries too).
func readTar(ctx context.Context, r io.Reader) (int64, map[string]bool, error) {
	cr := &countReader{r: r}
	tr := tar.NewReader(cr)
	paths := map[string]bool{}
	for {
		if err := ctx.Err(); err != nil {
			return cr.n, nil, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return cr.n, nil, fmt.Errorf("not a tar archive: %v", err)
		}
		for p := path.Clean(strings.TrimPrefix(hdr.Name, "./")); p != "." && p != "/"; p = path.Dir(p) {
			paths[p] = true
		}
		if _, err := io.Copy(io.Discard, tr); err != nil {
			return cr.n, nil, err
		}
	}
	if len(paths) == 0 {
		return cr.n, nil, errors.New("an empty tar archive")
	}
	// The rest (tar's padding) counts too.
	_, _ = io.Copy(io.Discard, cr)
	return cr.n, paths, nil
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
