package tenant_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/tenant"
)

func pull(name, ref string) sandbox.ImageRequest {
	return sandbox.ImageRequest{Name: name, Pull: ref}
}

func onBase(name, base string) sandbox.ImageRequest {
	return sandbox.ImageRequest{Name: name, Recipe: &sandbox.ImageRecipe{Base: base, Steps: []sandbox.RecipeStep{{Run: "true"}}}}
}

// TestImagesArePerTenant: a tenant's image is its own whatever the
// request said; another tenant neither lists it, builds on it nor
// deletes it, and hears what it would of an image that does not exist.
func TestImagesArePerTenant(t *testing.T) {
	m, _ := newPair(t, tenant.Options{})
	alpha, beta := as("alpha"), as("beta")
	info, err := m.CreateImage(alpha, sandbox.ImageRequest{Name: "mine", Tenant: "beta", Pull: "alpine:3"}, nil)
	if err != nil || info.Tenant != "alpha" {
		t.Fatalf("alpha's image: %+v %v", info, err)
	}
	list := func(who string) []string {
		imgs, err := m.Images(as(who))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, im := range imgs {
			out = append(out, im.Name)
		}
		return out
	}
	if !slices.Contains(list("alpha"), "mine") || slices.Contains(list("beta"), "mine") || !slices.Contains(list("beta"), "team") {
		t.Errorf("alpha lists %v, beta %v", list("alpha"), list("beta"))
	}
	// Building on it, as on a name that does not exist.
	_, errTaken := m.CreateImage(beta, onBase("b1", "mine"), nil)
	_, errNone := m.CreateImage(beta, onBase("b1", "none"), nil)
	if !errors.Is(errTaken, sandbox.ErrInvalid) || !errors.Is(errNone, sandbox.ErrInvalid) ||
		strings.ReplaceAll(errTaken.Error(), "mine", "X") != strings.ReplaceAll(errNone.Error(), "none", "X") {
		t.Errorf("beta on alpha's base: %v; on no base: %v", errTaken, errNone)
	}
	// Deleting it, likewise.
	errTaken = m.DeleteImage(beta, "mine")
	errNone = m.DeleteImage(beta, "none")
	if !errors.Is(errTaken, sandbox.ErrNotFound) || strings.ReplaceAll(errTaken.Error(), "mine", "X") != strings.ReplaceAll(errNone.Error(), "none", "X") {
		t.Errorf("beta deletes alpha's image: %v; a missing one: %v", errTaken, errNone)
	}
	if !slices.Contains(list("alpha"), "mine") {
		t.Error("alpha's image went")
	}
	// The operator's images: every tenant builds on them, none takes
	// their name or replaces them.
	if _, err := m.CreateImage(beta, onBase("b2", "team"), nil); err != nil {
		t.Errorf("beta on the operator's image: %v", err)
	}
	if _, err := m.CreateImage(alpha, onBase("own", "mine"), nil); err != nil {
		t.Errorf("alpha on its own image: %v", err)
	}
	if _, err := m.CreateImage(beta, pull("team", "alpine:3"), nil); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("beta takes the operator's name: %v", err)
	}
	req := pull("team", "alpine:3")
	req.Replace = true
	if _, err := m.CreateImage(beta, req, nil); !errors.Is(err, sandbox.ErrForbidden) {
		t.Errorf("beta replaces the operator's image: %v", err)
	}
	// The operator makes images for nobody, or for a tenant it names.
	if info, err := m.CreateImage(operator, pull("ops", "alpine:3"), nil); err != nil || info.Tenant != "" {
		t.Errorf("the operator's image: %+v %v", info, err)
	}
	if !slices.Contains(list("beta"), "ops") {
		t.Error("a tenant does not see the operator's new image")
	}
}

// TestImageQuotas: max_images counts a tenant's own images and those
// being made; replacing one at the cap is fine; max_disk_mib counts
// images too. The operator's images count for nobody.
func TestImageQuotas(t *testing.T) {
	two := 2
	m, _ := newPair(t, tenant.Options{Quotas: tenant.Quotas{Images: 5}, File: &tenant.File{Tenants: map[string]tenant.Settings{"alpha": {Images: &two}}}})
	alpha, beta := as("alpha"), as("beta")
	for _, name := range []string{"a1", "a2"} {
		if _, err := m.CreateImage(alpha, pull(name, "alpine:3"), nil); err != nil {
			t.Fatal(err)
		}
	}
	_, err := m.CreateImage(alpha, pull("a3", "alpine:3"), nil)
	if !errors.Is(err, sandbox.ErrQuota) || !strings.Contains(err.Error(), "max_images") {
		t.Errorf("alpha's third image: %v", err)
	}
	if _, ok := sandbox.RetryAfter(err); !ok {
		t.Error("an image quota without a retry time")
	}
	req := pull("a2", "alpine:3.20")
	req.Replace = true
	if _, err := m.CreateImage(alpha, req, nil); err != nil {
		t.Errorf("replacing at the cap: %v", err)
	}
	// beta has the default cap (5) and counts none of alpha's.
	if _, err := m.CreateImage(beta, pull("b1", "alpine:3"), nil); err != nil {
		t.Errorf("beta: %v", err)
	}
	// An image being made counts: a second make while the first runs is
	// refused at a cap of one.
	one := 1
	m, _ = newPair(t, tenant.Options{File: &tenant.File{Tenants: map[string]tenant.Settings{"alpha": {Images: &one}}}})
	var second error
	_, err = m.CreateImage(alpha, pull("first", "alpine:3"), func(ev sandbox.ImageEvent) {
		if ev.Step == sandbox.ImageStepFetch && second == nil {
			_, second = m.CreateImage(alpha, pull("second", "alpine:3"), nil)
		}
	})
	if err != nil || !errors.Is(second, sandbox.ErrQuota) {
		t.Errorf("first %v, second while the first is made: %v", err, second)
	}
	if _, err := m.CreateImage(alpha, pull("third", "alpine:3"), nil); !errors.Is(err, sandbox.ErrQuota) {
		t.Errorf("after the first: %v", err)
	}
	// Disk: the fake's pulls are 64 MiB each; a cap of 100 MiB takes two.
	m, _ = newPair(t, tenant.Options{Quotas: tenant.Quotas{DiskMiB: 100}})
	for i, name := range []string{"d1", "d2", "d3"} {
		_, err := m.CreateImage(alpha, pull(name, "alpine:3"), nil)
		if (i < 2) != (err == nil) || i == 2 && !errors.Is(err, sandbox.ErrQuota) {
			t.Errorf("image %s at 100 MiB: %v", name, err)
		}
	}
	if _, err := m.CreateImage(beta, pull("bd1", "alpine:3"), nil); err != nil {
		t.Errorf("beta is not bound by alpha's disk: %v", err)
	}
	if err := (tenant.Quotas{Images: -1}).Validate(); err == nil {
		t.Error("max_images -1 is valid")
	}
	if _, err := tenant.ParseFile([]byte(`{"tenants":{"alpha":{"max_images":3}}}`)); err != nil {
		t.Errorf("a tenant file with max_images: %v", err)
	}
}
