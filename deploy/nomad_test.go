package deploy

import (
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	nomad "github.com/hashicorp/nomad/api"
)

// The Nomad job is checked against nomad/api's types, by reflection over
// their hcl struct tags (the ones Nomad's jobspec decoder reads): each
// block and attribute in the file must be a field the type declares, with
// the right number of labels. A driver's config block is free-form in
// nomad/api (map[string]any); raw_exec's keys come from its documentation
// (rawExecConfig).

// rawExecConfig is the raw_exec driver's task config
// (https://developer.hashicorp.com/nomad/docs/drivers/raw_exec).
var rawExecConfig = map[string]bool{"command": true, "args": true, "cgroup_v1_override": true,
	"cgroup_v2_override": true, "oom_score_adj": true, "work_dir": true, "denied_envvars": true}

// maxKillTimeout is a Nomad client's default max_kill_timeout: a task's
// kill_timeout above it is cut to it
// (https://developer.hashicorp.com/nomad/docs/configuration/client).
const maxKillTimeout = 30 * time.Second

// hclSchema is what a block of type t may hold.
type hclSchema struct {
	attrs  map[string]bool
	blocks map[string]reflect.Type // nil: a block of free attributes (a map)
	labels int
}

// schemaOf reads t's hcl tags.
func schemaOf(t reflect.Type) hclSchema {
	s := hclSchema{attrs: map[string]bool{}, blocks: map[string]reflect.Type{}}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("hcl")
		if !ok {
			continue
		}
		name, kind, _ := strings.Cut(tag, ",")
		switch kind {
		case "label":
			s.labels++
		case "block":
			s.blocks[name] = elem(f.Type)
		case "", "optional", "attr":
			s.attrs[name] = true
		}
	}
	return s
}

// elem is the struct type a block field holds (through pointers, slices
// and a map's values), or nil for a map of plain values.
func elem(t reflect.Type) reflect.Type {
	for {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice:
			t = t.Elem()
		case reflect.Map:
			if e := t.Elem(); e.Kind() == reflect.Struct || e.Kind() == reflect.Pointer && e.Elem().Kind() == reflect.Struct {
				t = e
				continue
			}
			return nil
		case reflect.Struct:
			return t
		default:
			return nil
		}
	}
}

// checkBody checks body's attributes and blocks against t, recursively.
func checkBody(t *testing.T, where string, body *hclsyntax.Body, typ reflect.Type) {
	t.Helper()
	s := schemaOf(typ)
	for name, a := range body.Attributes {
		if !s.attrs[name] {
			t.Errorf("%s: attribute %q (line %d) is not a field of nomad/api's %s", where, name, a.SrcRange.Start.Line, typ.Name())
		}
	}
	for _, b := range body.Blocks {
		at := where + "." + b.Type
		if len(b.Labels) > 0 {
			at += "[" + strings.Join(b.Labels, ",") + "]"
		}
		inner, ok := s.blocks[b.Type]
		if !ok {
			t.Errorf("%s: block %q (line %d) is not a field of nomad/api's %s", where, b.Type, b.TypeRange.Start.Line, typ.Name())
			continue
		}
		if b.Type == "config" && typ == reflect.TypeFor[nomad.Task]() {
			for name := range b.Body.Attributes {
				if !rawExecConfig[name] {
					t.Errorf("%s: %q is not a raw_exec config key", at, name)
				}
			}
			continue
		}
		if inner == nil { // a map: free attributes, no blocks
			if len(b.Body.Blocks) > 0 || len(b.Labels) > 0 {
				t.Errorf("%s: a map block holds attributes only", at)
			}
			continue
		}
		want := schemaOf(inner).labels
		if isMapField(typ, b.Type) {
			want++ // the map's key
		}
		if len(b.Labels) != want {
			t.Errorf("%s: %d labels, nomad/api's %s takes %d", at, len(b.Labels), inner.Name(), want)
		}
		checkBody(t, at, b.Body, inner)
	}
}

// isMapField reports whether t's block field name is a map (its key is
// the block's label, as a group's volume "NAME" {...}).
func isMapField(t reflect.Type, name string) bool {
	for i := 0; i < t.NumField(); i++ {
		if tag := t.Field(i).Tag.Get("hcl"); tag == name+",block" {
			return t.Field(i).Type.Kind() == reflect.Map
		}
	}
	return false
}

func parseNomadJob(t *testing.T) *hclsyntax.Body {
	t.Helper()
	src, err := os.ReadFile("nomad/cellvm.nomad.hcl")
	if err != nil {
		t.Fatal(err)
	}
	f, diags := hclparse.NewParser().ParseHCL(src, "nomad/cellvm.nomad.hcl")
	if diags.HasErrors() {
		t.Fatalf("HCL: %s", diags.Error())
	}
	return f.Body.(*hclsyntax.Body)
}

// TestNomadJobNames: the file parses, holds one job block, and every name
// in it is one nomad/api's types declare.
func TestNomadJobNames(t *testing.T) {
	body := parseNomadJob(t)
	if len(body.Attributes) != 0 || len(body.Blocks) != 1 || body.Blocks[0].Type != "job" || len(body.Blocks[0].Labels) != 1 {
		t.Fatalf("want one job \"NAME\" block at the top, have %d attributes and %d blocks", len(body.Attributes), len(body.Blocks))
	}
	job := body.Blocks[0]
	checkBody(t, "job["+job.Labels[0]+"]", job.Body, reflect.TypeFor[nomad.Job]())

	// The schema is read from the types, not assumed: the names this job
	// relies on are in it (a renamed tag would fail here, not pass
	// silently).
	for _, c := range []struct {
		typ   reflect.Type
		names []string
	}{
		{reflect.TypeFor[nomad.Job](), []string{"type", "datacenters", "constraint", "group"}},
		{reflect.TypeFor[nomad.TaskGroup](), []string{"network", "service", "task"}},
		{reflect.TypeFor[nomad.Task](), []string{"driver", "config", "template", "kill_signal", "kill_timeout", "resources"}},
	} {
		s := schemaOf(c.typ)
		var have []string
		for n := range s.attrs {
			have = append(have, n)
		}
		for n := range s.blocks {
			have = append(have, n)
		}
		sort.Strings(have)
		for _, n := range c.names {
			if !s.attrs[n] {
				if _, ok := s.blocks[n]; !ok {
					t.Errorf("nomad/api's %s has no %q (it has %v)", c.typ.Name(), n, have)
				}
			}
		}
	}
}

// blockPath finds the nested block by types (the first of each).
func blockPath(body *hclsyntax.Body, types ...string) *hclsyntax.Block {
	var b *hclsyntax.Block
	for _, typ := range types {
		b = nil
		for _, c := range body.Blocks {
			if c.Type == typ {
				b = c
				break
			}
		}
		if b == nil {
			return nil
		}
		body = b.Body
	}
	return b
}

func stringAttr(t *testing.T, b *hclsyntax.Block, name string) string {
	t.Helper()
	a := b.Body.Attributes[name]
	if a == nil {
		t.Fatalf("no %s in %s", name, b.Type)
	}
	v, diags := a.Expr.Value(&hcl.EvalContext{})
	if diags.HasErrors() {
		t.Fatalf("%s: %s", name, diags.Error())
	}
	return v.AsString()
}

// TestNomadJobValues: a system job with raw_exec, and a kill_timeout
// within the client's default max_kill_timeout.
func TestNomadJobValues(t *testing.T) {
	job := blockPath(parseNomadJob(t), "job")
	if got := stringAttr(t, job, "type"); got != "system" {
		t.Errorf("job type %q, want system (one daemon per client)", got)
	}
	task := blockPath(job.Body, "group", "task")
	if task == nil {
		t.Fatal("no group { task { } }")
	}
	if got := stringAttr(t, task, "driver"); got != "raw_exec" {
		t.Errorf("driver %q, want raw_exec", got)
	}
	kt := stringAttr(t, task, "kill_timeout")
	d, err := time.ParseDuration(kt)
	if err != nil {
		t.Fatalf("kill_timeout %q: %v", kt, err)
	}
	if d > maxKillTimeout {
		t.Errorf("kill_timeout %s is past a client's default max_kill_timeout (%s): Nomad would cut it", d, maxKillTimeout)
	}
	if got := stringAttr(t, task, "kill_signal"); got != "SIGTERM" {
		t.Errorf("kill_signal %q: the daemon destroys its sandboxes on SIGTERM", got)
	}
}
