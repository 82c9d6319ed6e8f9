package main

import (
	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/sandbox/engine"
)

// How the daemon keeps templates' memory resident (the engine's
// resident.go says why): --template-resident off, cache or lock, and
// lock's budget, --template-resident-mib.

// serveResident are serve's flags for template residency.
type serveResident struct {
	mode string
	mib  int64
}

func addServeResidentFlags(fs *pflag.FlagSet) *serveResident {
	r := &serveResident{}
	fs.StringVar(&r.mode, "template-resident", string(engine.ResidentOff), "keep templates' memory resident: off, cache (read into the page cache after a build and every few minutes) or lock (mapped and mlocked, within --template-resident-mib; a template past it is cached)")
	fs.Int64Var(&r.mib, "template-resident-mib", 2048, "the most template memory --template-resident lock locks, in MiB")
	return r
}

func (r *serveResident) check() error {
	if _, err := engine.ParseResidentMode(r.mode); err != nil {
		return usagef("--template-resident: %v", err)
	}
	if r.mib < 0 || r.mib > 1<<30 {
		return usagef("--template-resident-mib %d: want 0 to %d", r.mib, int64(1<<30))
	}
	return nil
}

// apply sets the engine's template residency.
func (r *serveResident) apply(t *engine.TemplateOptions) {
	t.Resident, _ = engine.ParseResidentMode(r.mode)
	t.ResidentBytes = r.mib << 20
}
