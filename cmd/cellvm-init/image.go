package main

import (
	"log/slog"
	"strings"

	"github.com/cellvm/cellvm/guestinit/imagecfg"
	"github.com/cellvm/cellvm/guestinit/pid1"
	"github.com/cellvm/cellvm/image/buildplan"
)

// imageCells reads the image's config under root and decides how cells
// and commands run (package imagecfg), making the directories they need.
// A bad config file is logged and ignored: the sandbox boots with
// cellvm's defaults rather than not at all. environ is the agent's own
// environment (PID 1's defaults: PATH, locale); workspace the working
// directory of images without one.
func imageCells(log *slog.Logger, root string, asRoot bool, environ []string, workspace string) imagecfg.Cells {
	img, err := imagecfg.Load(root)
	if err != nil {
		log.Error("the image's config is ignored: cells run with cellvm's defaults", "err", err)
		img = buildplan.Config{}
	}
	cells := imagecfg.Decide(imagecfg.Options{Root: root, AsRoot: asRoot, Defaults: agentOnly(environ), Workspace: workspace}, img)
	cells.Prepare(root, workspace)
	for _, n := range cells.Notes {
		log.Warn("image config", "note", n)
	}
	path, _ := imagecfg.Lookup(cells.Env, "PATH")
	log.Info("cells", "root", cells.AsRoot, "uid", cells.UID, "gid", cells.GID, "image_user", cells.ImageUser, "dir", cells.Dir, "path", path)
	return cells
}

// agentOnly returns environ without what PID 1 tells the agent alone
// (its readiness fd, its debug switch).
func agentOnly(environ []string) []string {
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if k != pid1.EnvReadyFD && k != pid1.EnvDebug {
			out = append(out, kv)
		}
	}
	return out
}
