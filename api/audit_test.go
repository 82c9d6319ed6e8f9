package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/audit"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

func openAuditLog(t *testing.T) (*audit.Log, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := audit.Open(path, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path
}

func auditRecords(t *testing.T, path string) []audit.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []audit.Record
	if err := audit.Read(f, audit.Filter{}, func(r audit.Record) error { out = append(out, r); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAuditThroughTheGate drives the API over TLS with tokens and checks,
// after each response, that its record is already in the file: written
// before the response, and only for requests that change, run or are
// refused.
func TestAuditThroughTheGate(t *testing.T) {
	l, path := openAuditLog(t)
	tok, err := LoadTokens(writeTokens(t, testToken+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	logBuf := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logBuf, nil))
	srv := httptest.NewTLSServer(RequireToken(NewServer(sandboxtest.New(), log, WithAudit(l)), tok, log, WithGateAudit(l)))
	defer srv.Close()
	tlsCfg := srv.Client().Transport.(*http.Transport).TLSClientConfig
	c, err := Dial(srv.URL, WithToken(testToken), WithTLSConfig(tlsCfg))
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := Dial(srv.URL, WithToken("wrong-token-0123456789"), WithTLSConfig(tlsCfg))
	ctx := context.Background()
	n := 0
	expect := func(what string, want func(audit.Record) bool) {
		t.Helper()
		recs := auditRecords(t, path)
		if len(recs) != n+1 {
			t.Fatalf("%s: %d records, want %d: %+v", what, len(recs), n+1, recs)
		}
		n++
		r := recs[n-1]
		if r.Peer != "127.0.0.1" || r.Time.IsZero() || r.DurationMS < 0 || !want(r) {
			t.Errorf("%s: record %+v", what, r)
		}
	}
	info, err := c.Create(ctx, sandboxConfigForTest())
	if err != nil {
		t.Fatal(err)
	}
	expect("create", func(r audit.Record) bool {
		return r.Action == "POST /v1/sandboxes" && r.Status == http.StatusCreated &&
			r.Tenant == sandbox.DefaultTenant && r.TokenID == TokenID(testToken) && !r.Operator
	})
	if _, err := c.List(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if got := len(auditRecords(t, path)); got != n {
		t.Errorf("reads were audited: %d records", got)
	}
	c.Get(ctx, "sb-nope")
	expect("a refused get", func(r audit.Record) bool {
		return r.Action == "GET /v1/sandboxes/{id}" && r.Sandbox == "sb-nope" && r.Status == 404 && r.Error == CodeNotFound && r.Reason != ""
	})
	if err := c.SetNetwork(ctx, info.ID, sandbox.NetworkPolicy{Allow: []string{"pypi.org"}}); err != nil {
		t.Fatal(err)
	}
	expect("network", func(r audit.Record) bool { return r.Action == "PUT /v1/sandboxes/{id}/network" && r.Sandbox == info.ID })
	bad.List(ctx)
	expect("a wrong token", func(r audit.Record) bool {
		return r.Action == audit.ActionAuth && r.Status == 401 && r.Error == CodeUnauthorized && r.Reason == "GET /v1/sandboxes" &&
			r.Tenant == "" && r.TokenID == ""
	})
	if err := c.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	expect("delete", func(r audit.Record) bool {
		return r.Action == "DELETE /v1/sandboxes/{id}" && r.Sandbox == info.ID && r.Status == 204
	})
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), testToken) || strings.Contains(string(b), "wrong-token") {
		t.Errorf("a token reached the audit log:\n%s", b)
	}

	// A log that fails does not fail the request; the failure is logged.
	l.Close()
	if _, err := c.Create(ctx, sandboxConfigForTest()); err != nil {
		t.Errorf("create with a closed audit log: %v", err)
	}
	if !strings.Contains(logBuf.String(), "audit log: a record was not written") {
		t.Errorf("the audit failure is not logged:\n%s", logBuf.String())
	}
}

// TestAuditEntryOfAStream checks the streamed handler's protocol: nothing
// is written with the status, the handler's fields and Commit write the
// record before the final event, and only once.
func TestAuditEntryOfAStream(t *testing.T) {
	l, path := openAuditLog(t)
	s := NewServer(sandboxtest.New(), nil, WithAudit(l)).(*server)
	req := httptest.NewRequest("POST", "/v1/sandboxes/sb-1/cells", nil)
	req.Pattern = "POST /v1/sandboxes/{id}/cells"
	req.SetPathValue("id", "sb-1")
	r, e := s.startAudit(req, time.Now())
	rec := &statusRecorder{ResponseWriter: httptest.NewRecorder(), audit: e}
	a := AuditOf(r.Context())
	a.Stream()
	rec.WriteHeader(http.StatusOK)
	rec.Write([]byte(`{"type":"stdout"}` + "\n"))
	if len(auditRecords(t, path)) != 0 {
		t.Fatal("a streamed record was written with the status")
	}
	a.Set(func(r *audit.Record) { r.SetCode("print(1)"); r.ResultStatus = "ok" })
	a.Commit()
	recs := auditRecords(t, path)
	if len(recs) != 1 {
		t.Fatalf("%d records after Commit", len(recs))
	}
	if g := recs[0]; g.Sandbox != "sb-1" || g.Status != 200 || g.ResultStatus != "ok" || g.CodeBytes != 8 || g.Code != "" || g.Action != req.Pattern {
		t.Errorf("record %+v", g)
	}
	rec.audit.commit(200, "")
	a.Commit()
	if len(auditRecords(t, path)) != 1 {
		t.Error("a record was written twice")
	}
	// Without an audit log every method is a no-op.
	var none *AuditEntry = AuditOf(context.Background())
	none.Set(func(*audit.Record) { t.Error("Set ran without a log") })
	none.Stream()
	none.Always()
	none.Commit()
	none.atHeader(200, "")
}

// TestAuditedDownloadAndAbort: a GET is written when its handler says so
// (Always), or when it is cut off with an error.
func TestAuditedDownloadAndAbort(t *testing.T) {
	l, path := openAuditLog(t)
	s := NewServer(sandboxtest.New(), nil, WithAudit(l)).(*server)
	get := func(always bool, errCode string) {
		req := httptest.NewRequest("GET", "/v1/sandboxes/sb-1/files/work/a.txt", nil)
		req.Pattern = "GET /v1/sandboxes/{id}/files/{path...}"
		req.SetPathValue("id", "sb-1")
		req.SetPathValue("path", "work/a.txt")
		r, e := s.startAudit(req, time.Now())
		if always {
			AuditOf(r.Context()).Always()
		}
		rec := &statusRecorder{ResponseWriter: httptest.NewRecorder(), audit: e}
		rec.Write([]byte("data"))
		rec.errCode = errCode
		e.commit(rec.status, rec.errCode)
	}
	get(false, "")
	if len(auditRecords(t, path)) != 0 {
		t.Fatal("a plain GET was audited")
	}
	get(true, "")
	get(false, "aborted")
	recs := auditRecords(t, path)
	if len(recs) != 2 || recs[0].Path != "/work/a.txt" || recs[0].Sandbox != "sb-1" || recs[1].Error != "aborted" {
		t.Errorf("records %+v", recs)
	}
}
