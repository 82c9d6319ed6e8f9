package agentclient

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// reseedBytes is how much host entropy a reseed carries.
const reseedBytes = 64

// Reseed tells a guest restored from a snapshot that it is a new machine:
// it gets reseedBytes of the host's entropy for its kernel's pool, the
// host's clock, and its interpreter reseeds its random generators.
func (c *Client) Reseed(ctx context.Context, now time.Time) (proto.Reseeded, error) {
	e := make([]byte, reseedBytes)
	if _, err := rand.Read(e); err != nil {
		return proto.Reseeded{}, fmt.Errorf("agent reseed: host entropy: %w", err)
	}
	resp, err := c.do(ctx, proto.Request{Op: proto.OpReseed, Entropy: e, TimeUnixNS: now.UnixNano()}, nil, nil)
	if err != nil {
		return proto.Reseeded{}, err
	}
	if resp.Reseeded == nil {
		return proto.Reseeded{}, fmt.Errorf("agent reseed: %w: no answer", proto.ErrBadFrame)
	}
	return *resp.Reseeded, nil
}

// DropIdle closes the idle connections, so the next call dials afresh.
// After a snapshot the guest has reset every connection (the vsock
// transport reset); an idle one would fail its next request.
func (c *Client) DropIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.idle {
		s.nc.Close()
	}
	c.idle = nil
}
