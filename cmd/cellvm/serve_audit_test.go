package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/cellvm/cellvm/audit"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
	"github.com/cellvm/cellvm/sandbox/tenant"
)

// TestSandboxEndsAreAudited: every deleted or lost sandbox gets an end
// record, including the ones still queued when the log is closed.
func TestSandboxEndsAreAudited(t *testing.T) {
	state := t.TempDir()
	f := &auditFlags{maxMiB: 1, keep: 1, code: "hash"}
	log := slog.New(slog.DiscardHandler)
	_, _, closeAudit, err := f.open(state, log)
	if err != nil {
		t.Fatal(err)
	}
	// Behind the tenant wrapper, as the daemon runs it: the watcher
	// must see every tenant's ends.
	inner := sandboxtest.New()
	m := tenant.New(inner, tenant.Options{})
	if err := f.watchEnds(m, log); err != nil {
		t.Fatal(err)
	}
	ctx := sandbox.WithCaller(context.Background(), sandbox.Caller{Tenant: "alpha", TokenID: "t1", Peer: "192.0.2.1"})
	var ids []string
	for i := 0; i < 3; i++ {
		info, err := m.Create(ctx, sandbox.Config{Network: &sandbox.NetworkPolicy{Allow: []string{"pypi.org"}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	inner.Lose(ids[0], sandbox.LostInfo{Reason: "the VMM was killed", KilledBy: "seccomp"})
	inner.SetNetworkCounters(ids[2], sandbox.NetworkCounters{AllowedPackets: 7, DroppedPackets: 3})
	m.Delete(ctx, ids[1])
	m.Delete(ctx, ids[2])
	closeAudit() // at once: the queued events are written first
	closeAudit()

	fh, err := os.Open(filepath.Join(state, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var got []audit.Record
	if err := audit.Read(fh, audit.Filter{}, func(r audit.Record) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d records: %+v", len(got), got)
	}
	if r := got[0]; r.Action != audit.ActionSandboxEnd || r.Sandbox != ids[0] || r.ResultStatus != "lost" || r.KilledBy != "seccomp" || r.Reason != "lost: the VMM was killed" {
		t.Errorf("lost: %+v", r)
	}
	if r := got[2]; r.Sandbox != ids[2] || r.Reason != "deleted: request" || r.Time.IsZero() || r.Tenant != "alpha" {
		t.Errorf("deleted: %+v", r)
	}
	// The sandbox's egress verdicts come with its end.
	if e := got[2].Egress; e == nil || e.Allowed != 7 || e.Dropped != 3 {
		t.Errorf("deleted sandbox's egress verdicts: %+v", got[2].Egress)
	}
}

// TestEndRecordCarriesEgress: a deleted sandbox's audit record carries
// its egress verdicts (the policy's counters and the resolver's answers
// per name) as the deleted event brought them.
func TestEndRecordCarriesEgress(t *testing.T) {
	ev := sandbox.Event{Type: sandbox.EventDeleted, Sandbox: "sb-1", Tenant: "acme", Reason: "api",
		Egress: &sandbox.EgressReport{AllowedPackets: 7, DroppedPackets: 3, DNSForwarded: 2, DNSRefused: 1,
			Names: []sandbox.DNSNameCount{{Name: "pypi.org", Forwarded: 2}, {Name: "evil.example", Refused: 1}}}}
	rec, ok := endRecord(ev)
	if !ok || rec.Egress == nil {
		t.Fatalf("endRecord: %+v, %v; want a record with egress", rec, ok)
	}
	e := rec.Egress
	if e.Allowed != 7 || e.Dropped != 3 || e.DNSForwarded != 2 || e.DNSRefused != 1 || len(e.Names) != 2 ||
		e.Names[0] != (audit.EgressName{Name: "pypi.org", Forwarded: 2}) || e.Names[1] != (audit.EgressName{Name: "evil.example", Refused: 1}) {
		t.Errorf("the record's egress: %+v", e)
	}
	if rec, _ := endRecord(sandbox.Event{Type: sandbox.EventDeleted, Sandbox: "sb-2"}); rec.Egress != nil {
		t.Errorf("a sandbox without a network: egress %+v, want none", rec.Egress)
	}
}
