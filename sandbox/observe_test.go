package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestEventHubOrderLagAndClose(t *testing.T) {
	var h EventHub
	ctx := context.Background()
	h.Publish(Event{Type: EventCreated, Sandbox: "before"}) // no subscriber yet: not delivered
	s, err := h.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		h.Publish(Event{Type: EventPaused, Sandbox: fmt.Sprint(i)})
	}
	var last uint64
	for i := 0; i < 3; i++ {
		e, err := s.Next(ctx)
		if err != nil || e.Sandbox != fmt.Sprint(i) || e.Seq <= last || e.Time.IsZero() {
			t.Fatalf("event %d: %+v %v", i, e, err)
		}
		last = e.Seq
	}
	s.Close()
	s.Close()
	if _, err := s.Next(ctx); err != io.EOF {
		t.Errorf("Next after Close: %v, want io.EOF", err)
	}

	slow, _ := h.Subscribe(ctx)
	for i := 0; i < eventBuffer+1; i++ {
		h.Publish(Event{Type: EventCreated})
	}
	var got error
	for got == nil {
		_, got = slow.Next(ctx)
	}
	if !errors.Is(got, ErrEventsLagged) {
		t.Errorf("a reader that fell behind got %v, want ErrEventsLagged", got)
	}
	cctx, cancel := context.WithCancel(ctx)
	s2, _ := h.Subscribe(ctx)
	cancel()
	if _, err := s2.Next(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Next with a cancelled context: %v", err)
	}
}

func TestValidNodeAndIDs(t *testing.T) {
	for _, ok := range []string{"", "n1", "node-3.cluster.local", "ip-10-0-1-5.ec2.internal"} {
		if err := ValidNode(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"-a", "a-", "A", "a/b", "a_b", ".a", strings.Repeat("a", MaxNodeLen+1)} {
		if err := ValidNode(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q accepted", bad)
		}
	}
}
