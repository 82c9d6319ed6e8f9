package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/build"
	"github.com/cellvm/cellvm/image/manifest"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// TestDefaultImageLanguages, issue 27's image on one real guest: GET
// /v1/images lists the default image's languages as its manifest names
// them (python, javascript on bookworm's Node 18, typescript at the
// pinned version, bash); in a sandbox, as the cell user, node and bash
// answer with those versions and node loads the transpiler from where
// the Node runtime looks for it and strips a type with it. (Cells in
// each language are TestLanguages'.)
func TestDefaultImageLanguages(t *testing.T) {
	kvmtest.Require(t)
	dir := t.TempDir()
	d := startDaemon(t, dir, "--network=false")
	defer d.stop(t)
	c := api.NewClient(d.socket)
	ctx := context.Background()

	want := map[cell.Language]string{}
	for _, l := range manifest.Default().Languages {
		want[l.Name] = l.Version
	}
	im, ok := imageNamed(t, c, sandbox.DefaultImage)
	if got := fmt.Sprint(im.Languages); !ok || got != fmt.Sprint(manifest.Default().Languages) || len(im.Languages) != len(cell.Languages) {
		t.Errorf("GET /v1/images, the default image's languages: %s (listed %v); want the manifest's, all four: %v", got, ok, manifest.Default().Languages)
	}

	sb, err := c.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Delete(ctx, sb.ID); err != nil {
			t.Error(err)
		}
	}()
	for _, p := range []struct {
		argv []string
		want string
	}{
		{[]string{"node", "--version"}, "v" + want[cell.JavaScript] + "\n"},
		{[]string{"node", "-e", "const ts = require(process.argv[1]); process.stdout.write(ts.version + ' ' + ts.transpileModule('let x: number = 41 + 1', {compilerOptions: {target: 'es2022'}}).outputText)", build.TypeScriptInImage},
			want[cell.TypeScript] + " let x = 41 + 1;\n"},
		{[]string{"bash", "-c", `echo "${BASH_VERSINFO[0]}.${BASH_VERSINFO[1]}.${BASH_VERSINFO[2]}"`}, want[cell.Bash] + "\n"},
	} {
		ex, err := c.Exec(ctx, sb.ID, sandbox.ExecRequest{Argv: p.argv, Timeout: 2 * time.Minute})
		if err != nil || ex.ExitCode != 0 || ex.Stdout != p.want {
			t.Errorf("exec %s: %+v, %v; want %q", strings.Join(p.argv[:min(2, len(p.argv))], " "), ex, err, p.want)
		}
	}
}
