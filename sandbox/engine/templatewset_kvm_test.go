package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
)

// TestTemplateWorkingSetPrefetched, in real microVMs: the default
// template's build records its restore's working set beside its snapshot
// (a restore and a 1 + 1 more than a build without); a plain create from
// it hands the record to its VMM, whose log says what it prefetched
// before the first vCPU ran, and its first cell answers; with the record
// gone, a create restores with no prefetch and answers too. The
// prefetch's size and each create's time to 1 + 1 are logged, not
// asserted (make bench compares them).
func TestTemplateWorkingSetPrefetched(t *testing.T) {
	start := time.Now()
	m := newRigManagerWith(t, func(o *Options) { o.Templates = TemplateOptions{Enabled: true} })
	ctx := context.Background()
	tpl := waitRigTemplate(t, m, start)
	ws, err := readWorkingSet(filepath.Join(m.opt.StateDir, "templates", tpl.Key))
	if err != nil || ws == nil || len(ws.Extents) == 0 {
		t.Fatalf("the template's recorded working set: %+v, %v", ws, err)
	}
	t.Logf("recorded working set: %d extents, %d KiB of the %d MiB memory file", len(ws.Extents), ws.Bytes()>>10, ws.MemoryBytes>>20)

	start = time.Now()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, info.ID)
	if got := mainText(t, m, info.ID, "1 + 1"); got != "2" {
		t.Fatalf("1 + 1 = %s in a template start with a prefetch", got)
	}
	t.Logf("template start %s: create to 1 + 1 in %v", info.ID, time.Since(start).Round(time.Millisecond))
	if info.StartedFrom != sandbox.StartedFromTemplate {
		t.Fatalf("started_from %q, want %q", info.StartedFrom, sandbox.StartedFromTemplate)
	}
	wantPrefetched(t, m, info.ID, ws.Extents)

	// The same create without the record (the page cache as warm).
	os.Remove(filepath.Join(m.opt.StateDir, "templates", tpl.Key, workingSetFile))
	m.templates.mu.Lock()
	for _, tp := range m.templates.byShape {
		tp.prefetchKey = ""
	}
	m.templates.mu.Unlock()
	start = time.Now()
	bare, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, bare.ID)
	if got := mainText(t, m, bare.ID, "1 + 1"); got != "2" {
		t.Fatalf("1 + 1 = %s in a template start without a prefetch", got)
	}
	t.Logf("template start %s without the record: create to 1 + 1 in %v", bare.ID, time.Since(start).Round(time.Millisecond))
	if spec, err := control.ReadSpec(filepath.Join(m.sandboxDir(bare.ID), specFile)); err != nil || spec.Restore == nil || spec.Restore.Prefetch != nil {
		t.Fatalf("the create without a record restores with %+v (%v), want no prefetch", spec.Restore, err)
	}
}
