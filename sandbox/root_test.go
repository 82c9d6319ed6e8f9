package sandbox

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRootOptionReachesTheGuest: "root": true is part of the strict JSON
// config, and only a sandbox created with it tells the guest (on its
// kernel command line) to run cells as root.
func TestRootOptionReachesTheGuest(t *testing.T) {
	var c Config
	if err := json.Unmarshal([]byte(`{"root": true}`), &c); err != nil || !c.Root {
		t.Fatalf("decode {\"root\": true}: %+v, %v", c, err)
	}
	if b, _ := json.Marshal(Config{}); strings.Contains(string(b), "root") {
		t.Errorf("a default config encodes root: %s", b)
	}
	m, _, _ := newHostileManager(t, nil)
	ctx := context.Background()
	for _, root := range []bool{false, true} {
		info, err := m.Create(ctx, Config{Root: root})
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(m.sandboxDir(info.ID), specFile))
		if err != nil {
			t.Fatal(err)
		}
		var spec VMSpec
		json.Unmarshal(b, &spec)
		if got := strings.Contains(spec.Cmdline, "cellvm.cellsroot=1"); got != root {
			t.Errorf("root %v: guest command line %q", root, spec.Cmdline)
		}
		if got, _ := m.Get(ctx, info.ID); got.Config.Root != root {
			t.Errorf("root %v: info says %v", root, got.Config.Root)
		}
	}
}
