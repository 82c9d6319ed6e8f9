package engine

import (
	"context"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// TestTemplateStarts, through the Manager in real microVMs: the default
// shape's template is built in the background (one boot, the data stack
// imported, a snapshot); two plain creates start from it with pandas
// already imported (and no name of the imports in their namespace) and
// draw different os.urandom bytes; a start "cold" create boots.
func TestTemplateStarts(t *testing.T) {
	start := time.Now()
	m := newRigManagerWith(t, func(o *Options) { o.Templates = TemplateOptions{Enabled: true} })
	ctx := context.Background()
	waitRigTemplate(t, m, start)

	var urandom []string
	for range 2 {
		start := time.Now()
		info, err := m.Create(ctx, sandbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if info.StartedFrom != sandbox.StartedFromTemplate {
			t.Errorf("plain create with a ready template: started_from %q, want %q", info.StartedFrom, sandbox.StartedFromTemplate)
		}
		warm := mainText(t, m, info.ID, "import sys\n('pandas' in sys.modules, 'matplotlib.pyplot' in sys.modules, 'numpy' in globals())")
		version := mainText(t, m, info.ID, "import pandas; pandas.__version__")
		t.Logf("template start %s: create to pandas.__version__ (%s) in %v", info.ID, version, time.Since(start).Round(time.Millisecond))
		if warm != "(True, True, False)" {
			t.Errorf("template-started sandbox: (pandas imported, pyplot imported, numpy bound) = %s, want (True, True, False)", warm)
		}
		urandom = append(urandom, mainText(t, m, info.ID, "import os; os.urandom(16).hex()"))
	}
	if urandom[0] == urandom[1] {
		t.Errorf("two template-started sandboxes drew the same os.urandom bytes: %s", urandom[0])
	}

	start = time.Now()
	cold, err := m.Create(ctx, sandbox.Config{Start: sandbox.StartCold})
	if err != nil {
		t.Fatal(err)
	}
	if cold.StartedFrom != sandbox.StartedFromBoot {
		t.Errorf("start cold: started_from %q, want %q", cold.StartedFrom, sandbox.StartedFromBoot)
	}
	if got := mainText(t, m, cold.ID, "import sys\n'pandas' in sys.modules"); got != "False" {
		t.Errorf("a cold-booted sandbox has pandas imported before its first cell: %s", got)
	}
	t.Logf("cold start %s: create to a first result (no imports) in %v", cold.ID, time.Since(start).Round(time.Millisecond))
}

// waitRigTemplate waits (8 minutes at most) for m's default template to
// be ready, saying its state every minute (the rig ends a test silent
// for 10), and returns it. start is the manager's start.
func waitRigTemplate(t *testing.T, m *VMManager, start time.Time) sandbox.TemplateInfo {
	t.Helper()
	lastSaid := time.Now()
	for deadline := time.Now().Add(8 * time.Minute); ; time.Sleep(time.Second) {
		c, err := m.Capacity(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Templates) == 1 && c.Templates[0].State == sandbox.TemplateReady {
			tpl := c.Templates[0]
			t.Logf("template %s ready %v after the manager started (a cold boot, the imports, a snapshot, a recording restore): %d bytes on disk",
				tpl.Key, time.Since(start).Round(time.Millisecond), tpl.SizeBytes)
			return tpl
		}
		if len(c.Templates) == 1 && c.Templates[0].State == sandbox.TemplateFailed || time.Now().After(deadline) {
			t.Fatalf("the default template did not become ready: %+v", c.Templates)
		}
		if time.Since(lastSaid) > time.Minute {
			t.Logf("templates after %v: %+v", time.Since(start).Round(time.Second), c.Templates)
			lastSaid = time.Now()
		}
	}
}
