package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
	"github.com/cellvm/cellvm/sandbox/tenant"
)

// TestListFiltersByLabelAndState: ?label= keeps the sandboxes with every
// label given, ?state= those in any state given; labels come back as
// created.
func TestListFiltersByLabelAndState(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	mk := func(labels map[string]string) string {
		info, err := e.client.Create(ctx, sandbox.Config{Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Config.Labels) != len(labels) {
			t.Fatalf("created with labels %v, info shows %v", labels, info.Config.Labels)
		}
		return info.ID
	}
	a := mk(map[string]string{"run": "42", "user": "alice"})
	b := mk(map[string]string{"run": "42", "user": "bob"})
	c := mk(map[string]string{"run": "7"})
	if err := e.client.Pause(ctx, b); err != nil {
		t.Fatal(err)
	}
	ids := func(q ListQuery) string {
		t.Helper()
		lr, err := e.client.ListPage(ctx, q)
		if err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
		var out []string
		for _, i := range lr.Sandboxes {
			out = append(out, i.ID)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		q    ListQuery
		want string
	}{
		{ListQuery{}, a + "," + b + "," + c},
		{ListQuery{Filter: sandbox.ListFilter{Labels: map[string]string{"run": "42"}}}, a + "," + b},
		{ListQuery{Filter: sandbox.ListFilter{Labels: map[string]string{"run": "42", "user": "bob"}}}, b},
		{ListQuery{Filter: sandbox.ListFilter{Labels: map[string]string{"run": "nope"}}}, ""},
		{ListQuery{Filter: sandbox.ListFilter{States: []sandbox.State{sandbox.StateRunning}}}, a + "," + c},
		{ListQuery{Filter: sandbox.ListFilter{Labels: map[string]string{"run": "42"}, States: []sandbox.State{sandbox.StatePaused}}}, b},
	} {
		if got := ids(tc.q); got != tc.want {
			t.Errorf("list %+v: %q, want %q", tc.q.Filter, got, tc.want)
		}
	}
	// Commas in state, as a shell user writes them.
	status, _, body := e.do(t, "GET", "/v1/sandboxes?state=paused,running&label=user%3Dalice", nil)
	if status != http.StatusOK || !strings.Contains(string(body), a) || strings.Contains(string(body), b) {
		t.Errorf("state=paused,running&label=user=alice: %d %s", status, body)
	}
}

// TestListPages: limit cuts the list into pages chained by next, which
// together hold every sandbox once, even when one is deleted between
// pages.
func TestListPages(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	var all []string
	for range 5 {
		info, err := e.client.Create(ctx, sandbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, info.ID)
	}
	full, _ := e.client.ListPage(ctx, ListQuery{})
	var order []string
	for _, i := range full.Sandboxes {
		order = append(order, i.ID)
	}
	if full.Next != "" || len(order) != 5 {
		t.Fatalf("list without limit: %v next %q", order, full.Next)
	}
	var got []string
	q := ListQuery{Limit: 2}
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pages never end")
		}
		lr, err := e.client.ListPage(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(lr.Sandboxes) > 2 {
			t.Fatalf("a page of %d with limit 2", len(lr.Sandboxes))
		}
		for _, i := range lr.Sandboxes {
			got = append(got, i.ID)
		}
		if pages == 0 {
			// The last of the first page goes: the next page still
			// starts after it.
			if err := e.client.Delete(ctx, lr.Sandboxes[1].ID); err != nil {
				t.Fatal(err)
			}
		}
		if lr.Next == "" {
			break
		}
		q.Next = lr.Next
	}
	if strings.Join(got, ",") != strings.Join(order, ",") {
		t.Errorf("pages gave %v, want %v", got, order)
	}
}

// TestListQueryRefusesBadInput: malformed filters and pages are 400 with
// a message naming what is wrong, and the manager is never asked.
func TestListQueryRefusesBadInput(t *testing.T) {
	e := newTestEnv(t)
	long := strings.Repeat("k", sandbox.MaxLabelKeyBytes+1)
	for q, want := range map[string]string{
		"label=novalue":        "key=value",
		"label=a%0Ab=1":        "label key",
		"label=" + long + "=1": "label key",
		"label=a=x&label=a=y":  "two values",
		"state=asleep":         "state",
		"limit=0":              "limit",
		"limit=1001":           "limit",
		"limit=x":              "limit",
		"next=%21%21":          "page token",
		"next=bm9jb2xvbg":      "page token",
		"sort=id":              "unknown query parameter",
	} {
		status, _, body := e.do(t, "GET", "/v1/sandboxes?"+q, nil)
		if status != http.StatusBadRequest || !strings.Contains(string(body), want) {
			t.Errorf("?%s: %d %s, want 400 with %q", q, status, body, want)
		}
	}
	for _, c := range e.fake.Calls() {
		if c == "List" {
			t.Errorf("a refused list query reached the manager")
		}
	}
}

// TestListFilterNeverShowsAnotherTenant: a tenant's filter for labels
// another tenant's sandbox has finds nothing, and a page token cannot
// reach past the tenant's own.
func TestListFilterNeverShowsAnotherTenant(t *testing.T) {
	e := newTestEnvWith(t, func(m *sandboxtest.Manager) sandbox.Manager { return tenant.New(m, tenant.Options{}) }, nil)
	ctx := context.Background()
	alpha, beta := e.client.ForTenant("alpha"), e.client.ForTenant("beta")
	if _, err := alpha.Create(ctx, sandbox.Config{Labels: map[string]string{"secret": "alpha"}}); err != nil {
		t.Fatal(err)
	}
	lr, err := beta.ListPage(ctx, ListQuery{Filter: sandbox.ListFilter{Labels: map[string]string{"secret": "alpha"}}})
	if err != nil || len(lr.Sandboxes) != 0 {
		t.Errorf("beta filtering by alpha's label: %+v %v", lr, err)
	}
	lr, err = alpha.ListPage(ctx, ListQuery{Filter: sandbox.ListFilter{Labels: map[string]string{"secret": "alpha"}}})
	if err != nil || len(lr.Sandboxes) != 1 {
		t.Errorf("alpha filtering by its label: %+v %v", lr, err)
	}
}

// TestSetTTLRoute: POST .../ttl gives the sandbox its new TTL and answers
// its info; bad bodies are 400 and reach no manager; an unknown sandbox or
// another tenant's is 404.
func TestSetTTLRoute(t *testing.T) {
	e := newTestEnvWith(t, func(m *sandboxtest.Manager) sandbox.Manager { return tenant.New(m, tenant.Options{}) }, nil)
	ctx := context.Background()
	alpha, beta := e.client.ForTenant("alpha"), e.client.ForTenant("beta")
	info, err := alpha.Create(ctx, sandbox.Config{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got, err := alpha.SetTTL(ctx, info.ID, 2*time.Hour)
	if err != nil || got.Config.TTL != 2*time.Hour {
		t.Fatalf("SetTTL 2h: %v %v", got.Config.TTL, err)
	}
	if again, _ := alpha.Get(ctx, info.ID); again.Config.TTL != 2*time.Hour {
		t.Errorf("Get after SetTTL: TTL %v", again.Config.TTL)
	}
	_, err = beta.SetTTL(ctx, info.ID, time.Hour)
	wantClientError(t, "beta sets alpha's TTL", err, http.StatusNotFound, CodeNotFound)
	_, err = alpha.SetTTL(ctx, "sb-nope", time.Hour)
	wantClientError(t, "unknown sandbox", err, http.StatusNotFound, CodeNotFound)
	before := len(e.fake.Calls())
	for _, body := range []string{`{}`, `{"ttl_s":0}`, `{"ttl_s":-5}`, `{"ttl_s":99999999}`, `{"ttl_s":"1"}`, `{"ttl_s":5,"x":1}`, ``} {
		status, _, b := e.do(t, "POST", "/v1/sandboxes/"+info.ID+"/ttl", strings.NewReader(body),
			"Content-Type", "application/json", TenantHeader, "alpha")
		if status != http.StatusBadRequest {
			t.Errorf("body %q: %d %s, want 400", body, status, b)
		}
	}
	for _, c := range e.fake.Calls()[before:] {
		if strings.HasPrefix(c, "SetTTL") {
			t.Errorf("a refused body reached the manager: %s", c)
		}
	}
}

// TestVersionRoute: GET /v1/version answers what WithVersion gave, and
// the build info's without it.
func TestVersionRoute(t *testing.T) {
	want := VersionInfo{Version: "v1.2.3", Commit: "abc123", Go: "go1.99"}
	e := newTestEnv(t, WithVersion(want))
	got, err := e.client.Version(context.Background())
	if err != nil || got != want {
		t.Errorf("version: %+v %v, want %+v", got, err, want)
	}
	plain := newTestEnv(t)
	got, err = plain.client.Version(context.Background())
	if err != nil || got.Version == "" || !strings.HasPrefix(got.Go, "go") {
		t.Errorf("version from the build info: %+v %v", got, err)
	}
}
