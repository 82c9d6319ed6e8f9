package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// NewMachine is what a reseed request does to the guest beyond its
// interpreter (package guestinit/newmachine in the guest; fakes in tests).
type NewMachine struct {
	// Reseed mixes the host's entropy into the kernel's pool and reseeds
	// the CRNG.
	Reseed func(entropy []byte) error
	// SetClock steps the guest's clock.
	SetClock func(time.Time) error
	// SetNetwork gives eth0 a new address and default route, and the
	// guest new name servers. Nil: this guest cannot be reconfigured.
	SetNetwork func(addr netip.Prefix, gw netip.Addr, dns []netip.Addr) error
}

// interpReseeder is an interpreter that can reseed its random generators
// (*interp.Interp).
type interpReseeder interface {
	Reseed() (numpy bool, err error)
}

// reseed makes a guest restored from a snapshot a machine of its own: the
// kernel first, since the interpreter's new seeds come from it. A resume
// of the sandbox's own pause (req.KeepGenerators) renews the kernel's pool
// and the clock only: the machine is the same one later, and a user who
// seeded a generator (np.random.seed(0)) gets the sequence carried on, as
// if it had never been paused. A fork or a template start is a new
// machine, whose generators must not repeat its parent's.
func (ss *session) reseed(req *proto.Request) bool {
	nm := ss.s.cfg.NewMachine
	if nm == nil {
		return ss.reply(errResponse(proto.CodeUnsupported, errors.New("this agent cannot reseed its machine")))
	}
	var r proto.Reseeded
	// The parts' times, for the host's log: where a fork's renewal goes
	// (issue 28).
	var steps []string
	step := time.Now()
	took := func(name string) {
		now := time.Now()
		steps = append(steps, fmt.Sprintf("%s=%d", name, now.Sub(step).Microseconds()))
		step = now
	}
	if err := nm.Reseed(req.Entropy); err != nil {
		return ss.reply(errResponse(proto.CodeInternal, err))
	}
	r.Kernel = true
	took("kernel")
	if req.TimeUnixNS > 0 {
		if err := nm.SetClock(time.Unix(0, req.TimeUnixNS)); err != nil {
			return ss.reply(errResponse(proto.CodeInternal, err))
		}
		r.Clock = true
		// The step's end is read after the clock moved: time.Now's
		// monotonic reading does not jump with it.
		took("clock")
	}
	if req.Net != nil {
		// Validate parsed it already; this cannot fail.
		addr, gw, dns, err := req.Net.Parsed()
		if err != nil {
			return ss.reply(errResponse(proto.CodeBadRequest, err))
		}
		if nm.SetNetwork == nil {
			return ss.reply(errResponse(proto.CodeUnsupported, errors.New("this agent cannot reconfigure its network")))
		}
		if err := nm.SetNetwork(addr, gw, dns); err != nil {
			return ss.reply(errResponse(proto.CodeInternal, err))
		}
		r.Network = true
		took("network")
	}
	if in, ok := ss.s.cfg.Interp.(interpReseeder); ok && !req.KeepGenerators {
		numpy, err := in.Reseed()
		if err != nil {
			return ss.reply(errResponse(proto.CodeInterp, err))
		}
		r.Interpreter, r.NumPy = true, numpy
		took("interpreter")
	}
	r.Steps = strings.Join(steps, " ")
	// At Debug: the host logs the same ("restored guest reseeded"), and
	// this log is the serial console, on the start's path.
	ss.s.log.Debug("agent: reseeded after a restore", "clock", r.Clock, "interpreter", r.Interpreter, "numpy", r.NumPy,
		"network", r.Network, "generators_kept", req.KeepGenerators, "steps_us", r.Steps)
	return ss.reply(proto.Response{Reseeded: &r})
}
