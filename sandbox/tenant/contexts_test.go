package tenant_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/tenant"
)

// TestAnotherTenantsContextsAreMissing: another tenant's sandbox's
// contexts are not found, as a missing sandbox's, and its refused calls
// never reach the inner manager; the owner's go through.
func TestAnotherTenantsContextsAreMissing(t *testing.T) {
	m, inner := newPair(t, tenant.Options{})
	alpha, beta := as("alpha"), as("beta")
	info, err := m.Create(alpha, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	js := sandbox.Session{Language: cell.JavaScript, Context: "w"}
	if _, err := m.CreateContext(alpha, info.ID, sandbox.ContextSpec{Language: js.Language, Name: js.Context}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.RunCell(alpha, info.ID, sandbox.Cell{Session: js, Code: "x = 41", Timeout: time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	const missing = "sb-fake999"
	calls := map[string]func(id string) error{
		"list":    func(id string) error { _, err := m.Contexts(beta, id); return err },
		"create":  func(id string) error { _, err := m.CreateContext(beta, id, sandbox.ContextSpec{Name: "b"}); return err },
		"delete":  func(id string) error { return m.DeleteContext(beta, id, js) },
		"restart": func(id string) error { return m.Restart(beta, id, js) },
	}
	before := len(inner.Calls())
	for name, call := range calls {
		errTheirs, errNone := call(info.ID), call(missing)
		if !errors.Is(errTheirs, sandbox.ErrNotFound) ||
			strings.ReplaceAll(errTheirs.Error(), info.ID, "ID") != strings.ReplaceAll(errNone.Error(), missing, "ID") {
			t.Errorf("%s as beta: %v, and of no sandbox %v; want the same not found", name, errTheirs, errNone)
		}
	}
	for _, c := range inner.Calls()[before:] {
		if !strings.HasPrefix(c, "Get ") && !strings.HasPrefix(c, "Owner ") {
			t.Errorf("beta's refused calls reached the inner manager: %s", c)
		}
	}
	cs, err := m.Contexts(alpha, info.ID)
	if err != nil || len(cs) != 1 || cs[0].Name != "w" || !cs[0].Running {
		t.Errorf("alpha's contexts = %+v, %v", cs, err)
	}
	if err := m.DeleteContext(alpha, info.ID, js); err != nil {
		t.Errorf("alpha deletes its context: %v", err)
	}
}
