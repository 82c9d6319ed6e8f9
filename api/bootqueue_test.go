package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// TestQueueFullIs503WithItsRetryAfter: a create refused for a full line
// of VM starts is 503 "full" with the Retry-After the manager gave, and
// the client reads it back as ErrFull.
func TestQueueFullIs503WithItsRetryAfter(t *testing.T) {
	e := newTestEnv(t)
	e.fake.Fail("Create", &sandbox.QueueFullError{Retry: 7 * time.Second})
	status, hdr, body := e.do(t, "POST", "/v1/sandboxes", jsonBody(`{}`))
	wantAPIError(t, "queue full", status, body, http.StatusServiceUnavailable, CodeFull)
	if got := hdr.Get("Retry-After"); got != "7" {
		t.Errorf("Retry-After %q, want the manager's 7", got)
	}
	if !strings.Contains(string(body), "queue full") {
		t.Errorf("body %s does not say the queue is full", body)
	}
	if _, err := e.client.Create(context.Background(), sandbox.Config{}); !errors.Is(err, sandbox.ErrFull) {
		t.Errorf("client: %v, want ErrFull", err)
	}
}
