package buildplan

import (
	"strings"
	"testing"
)

// TestValidate: a plan the host wrote is checked field by field, with
// the patterns compiled on first use.
func TestValidate(t *testing.T) {
	key := strings.Repeat("ab", 32)
	good := func() Plan {
		return Plan{Version: Version, Name: "py", Key: key, UUID: UUIDOf(key), Mode: ModeDerive,
			DiskBytes: 1 << 30, Collect: "out/collect.tar", Modules: "out/modules.json"}
	}
	if p := good(); p.Validate() != nil {
		t.Fatalf("a good plan: %v", p.Validate())
	}
	for name, edit := range map[string]func(*Plan){
		"short key":          func(p *Plan) { p.Key = key[:63] },
		"upper-case key":     func(p *Plan) { p.Key = strings.ToUpper(key) },
		"uuid of other key":  func(p *Plan) { p.UUID = UUIDOf(strings.Repeat("cd", 32)) },
		"bad uuid":           func(p *Plan) { p.UUID = "x" },
		"collect with ..":    func(p *Plan) { p.Collect = "../etc/passwd" },
		"collect with space": func(p *Plan) { p.Collect = "a b" },
		"modules too long":   func(p *Plan) { p.Modules = strings.Repeat("a", 513) },
		"layer file":         func(p *Plan) { p.Mode, p.Layers = ModeLayers, []Layer{{File: "a;b"}} },
		"env key":            func(p *Plan) { p.Config.Env = []string{"1A=b"} },
	} {
		p := good()
		edit(&p)
		if p.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	p := good()
	p.Mode, p.Layers = ModeLayers, []Layer{{File: "layers/0.tar", Size: 10}}
	if err := p.Validate(); err != nil {
		t.Errorf("a layers plan: %v", err)
	}
}
