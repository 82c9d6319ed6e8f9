package e2b

import (
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// TestCreateQueueFull: a create refused for a full line of VM starts is
// E2B's 503 (the SDK's busy class) with a Retry-After, and leaves nothing.
func TestCreateQueueFull(t *testing.T) {
	r := newRig(t)
	r.fake.Fail("Create", &sandbox.QueueFullError{Retry: 7 * time.Second})
	res := r.api("POST", "/sandboxes", keyAlpha, map[string]any{}, nil)
	if ra := res.Header.Get("Retry-After"); ra == "" {
		t.Error("no Retry-After on a queue-full refusal")
	}
	wantE2BError(t, "queue full", res, 503, "queue full")
	if n := r.fake.Live(); n != 0 {
		t.Fatalf("%d sandboxes left behind", n)
	}
}
