// Package imagecfg applies an image's own config to the guest's cells and
// commands: the ENV, WORKDIR and USER of the Dockerfile (or the recipe's
// config steps) that the builder recorded in buildplan.ImageConfigFile.
//
// An image a user brings was made to be run by Docker, so the guest does
// what Docker would, as far as a sandbox for untrusted code allows:
//
//   - Env is the base of the environment of cells and commands: its PATH
//     is where commands and python3 are looked up, its LANG is kept. The
//     guest's defaults fill only what it leaves unset (Env), and the
//     sandbox's own variables (its create request's env) still override it
//     key by key, after it (interp.SetEnv).
//   - WorkingDir is where cells and commands start. It is made when
//     missing, owned by the user that runs them; without one they start
//     in /workspace, as in cellvm's own image.
//   - User is whom cells and commands run as, when it names someone other
//     than root: a name from the image's /etc/passwd, or a numeric uid,
//     each optionally ":group". An image that names no user, or root,
//     gets cellvm's unprivileged cell user (package celluser) instead, as
//     cellvm's own image does: Docker would run its code as root, but a
//     sandbox runs a model's code, which must not be able to reach the
//     init, the agent or the cgroups that bound it. Root is then only the
//     sandbox's explicit "root" option. A user the image names but that
//     does not resolve, or whose group is 0 (root's), falls back to the
//     cell user too, with a log line: the image never gets more than the
//     cell user would have.
//
// The file is hostile input like everything in the image: it is read
// bounded, decoded strictly and checked with the bounds the host applies
// to a recipe (sandbox.CheckImageEnv, sandbox.ValidImageUser). A bad file
// is logged and ignored by the agent (Load's error): the sandbox still
// boots, with cellvm's defaults.
package imagecfg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/sandbox"
)

// MaxFileBytes bounds the config file: the env's bound
// (sandbox.MaxImageEnvBytes) with room for JSON's escapes.
const MaxFileBytes = 4*sandbox.MaxImageEnvBytes + 8<<10

// maxWorkingDir bounds WorkingDir as the host does for a recipe.
const maxWorkingDir = 1024

// Load reads and checks root's image config file. An image without one
// (cellvm's own image, before issue 24) is the zero Config and no error.
func Load(root string) (buildplan.Config, error) {
	name := filepath.Join(root, buildplan.ImageConfigFile)
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return buildplan.Config{}, nil
	}
	if err != nil {
		return buildplan.Config{}, fmt.Errorf("image config %s: %w", buildplan.ImageConfigFile, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && !st.Mode().IsRegular() {
		return buildplan.Config{}, fmt.Errorf("image config %s is not a regular file", buildplan.ImageConfigFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return buildplan.Config{}, fmt.Errorf("image config %s: %w", buildplan.ImageConfigFile, err)
	}
	if len(b) > MaxFileBytes {
		return buildplan.Config{}, fmt.Errorf("image config %s is over %d bytes", buildplan.ImageConfigFile, MaxFileBytes)
	}
	c, err := Parse(b)
	if err != nil {
		return buildplan.Config{}, fmt.Errorf("image config %s: %w", buildplan.ImageConfigFile, err)
	}
	return c, nil
}

// Parse decodes and checks a config: one JSON object with buildplan.Config's
// fields only.
func Parse(b []byte) (buildplan.Config, error) {
	var c buildplan.Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return buildplan.Config{}, fmt.Errorf("decode: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return buildplan.Config{}, errors.New("decode: more than one JSON value")
	}
	if err := sandbox.CheckImageEnv(c.Env); err != nil {
		return buildplan.Config{}, err
	}
	if c.WorkingDir != "" {
		if !strings.HasPrefix(c.WorkingDir, "/") || len(c.WorkingDir) > maxWorkingDir || strings.ContainsAny(c.WorkingDir, "\x00\n") {
			return buildplan.Config{}, fmt.Errorf("working_dir %q: want an absolute path of at most %d bytes", clip(c.WorkingDir), maxWorkingDir)
		}
		c.WorkingDir = path.Clean(c.WorkingDir)
	}
	if c.User != "" && !sandbox.ValidImageUser(c.User) {
		return buildplan.Config{}, fmt.Errorf("user %q: want a name or uid, optionally :group", clip(c.User))
	}
	return c, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
