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
// host's clock, and its interpreter reseeds its random generators. A
// non-nil net gives its eth0 a new address, route and name servers (a
// fork of a sandbox with a network has a TAP of its own).
func (c *Client) Reseed(ctx context.Context, now time.Time, net *proto.NetConfig) (proto.Reseeded, error) {
	e := make([]byte, reseedBytes)
	if _, err := rand.Read(e); err != nil {
		return proto.Reseeded{}, fmt.Errorf("agent reseed: host entropy: %w", err)
	}
	resp, err := c.do(ctx, proto.Request{Op: proto.OpReseed, Entropy: e, TimeUnixNS: now.UnixNano(), Net: net}, nil, nil)
	if err != nil {
		return proto.Reseeded{}, err
	}
	if resp.Reseeded == nil {
		return proto.Reseeded{}, fmt.Errorf("agent reseed: %w: no answer", proto.ErrBadFrame)
	}
	if net != nil && !resp.Reseeded.Network {
		return *resp.Reseeded, fmt.Errorf("agent reseed: the guest did not take its new network (%s via %s)", net.Addr, net.Gateway)
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
