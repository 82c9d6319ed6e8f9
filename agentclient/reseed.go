package agentclient

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// reseedBytes is how much host entropy a reseed carries.
const reseedBytes = 64

// Renew says what a reseed renews.
type Renew uint8

const (
	// RenewAll is for a new machine (a fork, a template start): the
	// kernel's pool, the clock, and every interpreter's generators, so it
	// does not repeat its parent's numbers.
	RenewAll Renew = iota
	// RenewKernel is for the same machine later (a resume of a sandbox's
	// own pause): the kernel's pool and the clock, while the user's
	// generators keep their sequence.
	RenewKernel
)

func (r Renew) String() string {
	if r == RenewKernel {
		return "kernel"
	}
	return "all"
}

// Reseed tells a guest restored from a snapshot that time passed and,
// with RenewAll, that it is a new machine: it gets reseedBytes of the
// host's entropy for its kernel's pool, the host's clock, and (RenewAll)
// its interpreter reseeds its random generators. A non-nil net gives its
// eth0 a new address, route and name servers (a fork of a sandbox with a
// network has a TAP of its own).
//
// A guest whose agent predates RenewKernel (an image paused by an older
// cellvm) refuses the request's unknown field; it is asked again the old
// way, which reseeds its generators too, and Reseeded.Interpreter says so.
func (c *Client) Reseed(ctx context.Context, now time.Time, net *proto.NetConfig, renew Renew) (proto.Reseeded, error) {
	e := make([]byte, reseedBytes)
	if _, err := rand.Read(e); err != nil {
		return proto.Reseeded{}, fmt.Errorf("agent reseed: host entropy: %w", err)
	}
	req := proto.Request{Op: proto.OpReseed, Entropy: e, TimeUnixNS: now.UnixNano(), Net: net, KeepGenerators: renew == RenewKernel}
	resp, err := c.do(ctx, req, nil, nil)
	var pe *proto.Error
	if req.KeepGenerators && errors.As(err, &pe) && pe.Code == proto.CodeBadRequest && strings.Contains(pe.Message, "keep_generators") {
		req.KeepGenerators = false
		resp, err = c.do(ctx, req, nil, nil)
	}
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
