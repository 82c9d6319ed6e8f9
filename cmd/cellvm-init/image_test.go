package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/guestinit/celluser"
	"github.com/cellvm/cellvm/guestinit/imagecfg"
	"github.com/cellvm/cellvm/guestinit/pid1"
	"github.com/cellvm/cellvm/image/buildplan"
)

// TestImageCellsAppliesTheImageConfig: the agent's view of an image's
// config file: applied when good, logged and ignored when bad (the
// sandbox boots with cellvm's defaults), and PID 1's words to the agent
// never reach the cells.
func TestImageCellsAppliesTheImageConfig(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	environ := []string{"PATH=/usr/sbin:/usr/bin", "LANG=C.UTF-8", pid1.EnvReadyFD + "=3", pid1.EnvDebug + "=1"}
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "workspace"), 0o755)
	file := filepath.Join(root, buildplan.ImageConfigFile)
	os.MkdirAll(filepath.Dir(file), 0o755)
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\nsvc:x:2000:2000::/home/svc:/bin/sh\n"), 0o644)

	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	os.WriteFile(file, []byte(`{"env": ["PATH=/opt/python/bin:/usr/bin", "PYTHONDONTWRITEBYTECODE=1"], "working_dir": "/srv", "user": "svc"}`), 0o644)
	c := imageCells(log, root, false, environ, "/workspace")
	if !c.ImageUser || c.UID != 2000 || c.Dir != "/srv" {
		t.Errorf("good config: %+v", c)
	}
	if v, _ := imagecfg.Lookup(c.Env, "PATH"); v != "/opt/python/bin:/usr/bin" {
		t.Errorf("PATH = %q", v)
	}
	for _, kv := range c.Env {
		if strings.HasPrefix(kv, pid1.EnvReadyFD+"=") || strings.HasPrefix(kv, pid1.EnvDebug+"=") {
			t.Errorf("the cells see %s", kv)
		}
	}

	logs.Reset()
	os.WriteFile(file, []byte(`{"user": "svc", "entrypoint": ["x"]}`), 0o644)
	c = imageCells(log, root, false, environ, "/workspace")
	if c.ImageUser || c.UID != celluser.UID || c.Dir != "/workspace" {
		t.Errorf("bad config not ignored: %+v", c)
	}
	if v, _ := imagecfg.Lookup(c.Env, "PATH"); v != "/usr/sbin:/usr/bin" {
		t.Errorf("PATH with a bad config = %q", v)
	}
	if !strings.Contains(logs.String(), "the image's config is ignored") {
		t.Errorf("a bad config was not logged: %s", logs.String())
	}
}
