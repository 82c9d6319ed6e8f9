package engine

import (
	"os/exec"
	"strings"
	"testing"
)

// TestTemplateWarmCellFreezesTheHeap runs the template's warm cells in a
// real python3: afterwards the interpreter's heap is frozen (the cyclic
// collector will not walk it in every sandbox started from the template)
// and the user's namespace has no name the cell used.
func TestTemplateWarmCellFreezesTheHeap(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH")
	}
	check := "\nimport gc as _gc\nprint(_gc.get_freeze_count(), sorted(k for k in globals() if not k.startswith('_')))"
	for _, tc := range []struct {
		name, code string
		needs      string // a module the cell imports, or ""
	}{
		{"any image", templateWarmAnyCode, ""},
		{"the default image", templateWarmCode, "numpy, pandas, matplotlib"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needs != "" {
				if err := exec.Command(py, "-c", "import "+tc.needs).Run(); err != nil {
					t.Skipf("python3 (%s) lacks %s", py, tc.needs)
				}
			}
			out, err := exec.Command(py, "-c", tc.code+check).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", py, err, out)
			}
			count, names, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
			if count == "0" {
				t.Errorf("after the warm cell gc.get_freeze_count() = 0: the heap was not frozen")
			}
			if names != "[]" {
				t.Errorf("the warm cell left names in the user's namespace: %s", names)
			}
			t.Logf("frozen objects: %s", count)
		})
	}
}
