package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// TestMCPSessionCountedAtItsHeader: a session counts against its tenant's
// cap from the moment its response's header is written, while its handler
// still runs (a client has the id then, and may at once ask for another);
// the same holds for a header sent by a flush.
func TestMCPSessionCountedAtItsHeader(t *testing.T) {
	for _, flush := range []bool{false, true} {
		written, release := make(chan struct{}), make(chan struct{})
		n := 0
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n++
			w.Header().Set(mcpSessionHeader, "s"+string(rune('0'+n)))
			if flush {
				http.NewResponseController(w).Flush()
			} else {
				w.WriteHeader(http.StatusOK)
			}
			if n == 1 {
				close(written)
				<-release
			}
		})
		g := newMCPSessions(next, time.Hour, func(string) int { return 1 })
		req := func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
			return r.WithContext(sandbox.WithCaller(r.Context(), sandbox.Caller{Tenant: "alpha", TokenID: "t1"}))
		}
		done := make(chan struct{})
		go func() { g.ServeHTTP(httptest.NewRecorder(), req()); close(done) }()
		<-written
		second := httptest.NewRecorder()
		g.ServeHTTP(second, req())
		close(release)
		<-done
		if second.Code != http.StatusTooManyRequests {
			t.Errorf("flush %v: a second session while the first's handler runs: %d, want 429", flush, second.Code)
		}
	}
}
