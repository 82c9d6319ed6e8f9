package agentclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/guestinit/agent"
	"github.com/cellvm/cellvm/guestinit/proto"
)

type fakeMachine struct {
	mu      sync.Mutex
	entropy [][]byte
	clock   []time.Time
	nets    []string
	fail    error
}

func (f *fakeMachine) ops() *agent.NewMachine {
	return &agent.NewMachine{
		Reseed: func(e []byte) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.entropy = append(f.entropy, append([]byte(nil), e...))
			return f.fail
		},
		SetClock: func(t time.Time) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.clock = append(f.clock, t)
			return nil
		},
		SetNetwork: func(addr netip.Prefix, gw netip.Addr, dns []netip.Addr) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.nets = append(f.nets, fmt.Sprint(addr, " ", gw, " ", dns))
			return nil
		},
	}
}

func TestReseed(t *testing.T) {
	fm := &fakeMachine{}
	c := serve(t, agent.Config{Interp: newFake(), NewMachine: fm.ops()})
	now := time.Unix(1_800_000_000, 123)
	for range 2 {
		r, err := c.Reseed(ctxT(t), now, nil, RenewAll)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Kernel || !r.Clock || r.Interpreter { // the fake interpreter cannot reseed
			t.Fatalf("reseeded %+v", r)
		}
		// The guest says how long each part it ran took, for the host's log.
		if !regexp.MustCompile(`^kernel=[0-9]+ clock=[0-9]+$`).MatchString(r.Steps) {
			t.Fatalf("reseed steps %q: want kernel=N clock=N", r.Steps)
		}
	}
	if len(fm.entropy) != 2 || len(fm.entropy[0]) != reseedBytes || bytes.Equal(fm.entropy[0], fm.entropy[1]) {
		t.Fatalf("entropy handed to the kernel: %d calls, %d bytes; two reseeds must bring different bytes", len(fm.entropy), len(fm.entropy[0]))
	}
	if !fm.clock[0].Equal(now) {
		t.Fatalf("clock set to %v, want %v", fm.clock[0], now)
	}

	fm.fail = errors.New("RNDADDENTROPY: operation not permitted")
	var pe *proto.Error
	if _, err := c.Reseed(ctxT(t), now, nil, RenewAll); !errors.As(err, &pe) || pe.Code != proto.CodeInternal {
		t.Fatalf("failed kernel reseed: %v", err)
	}
	plain := serve(t, agent.Config{Interp: newFake()})
	if _, err := plain.Reseed(ctxT(t), now, nil, RenewAll); !errors.As(err, &pe) || pe.Code != proto.CodeUnsupported {
		t.Fatalf("reseed on an agent without NewMachine: %v", err)
	}
}

// TestReseedNetwork: a reseed with a network hands the guest's machine its
// new address, gateway and name servers; a bad one is refused before it is
// sent, and an agent that cannot reconfigure says so.
func TestReseedNetwork(t *testing.T) {
	fm := &fakeMachine{}
	c := serve(t, agent.Config{Interp: newFake(), NewMachine: fm.ops()})
	now := time.Unix(1_800_000_000, 0)
	r, err := c.Reseed(ctxT(t), now, &proto.NetConfig{Addr: "10.77.0.6/30", Gateway: "10.77.0.5", DNS: []string{"10.77.0.5"}}, RenewAll)
	if err != nil || !r.Network {
		t.Fatalf("reseed with a network: %+v %v", r, err)
	}
	if !regexp.MustCompile(`^kernel=[0-9]+ clock=[0-9]+ network=[0-9]+$`).MatchString(r.Steps) {
		t.Fatalf("reseed steps %q: want kernel=N clock=N network=N", r.Steps)
	}
	if len(fm.nets) != 1 || fm.nets[0] != "10.77.0.6/30 10.77.0.5 [10.77.0.5]" {
		t.Fatalf("network handed to the machine: %q", fm.nets)
	}
	for _, bad := range []proto.NetConfig{
		{Addr: "10.77.0.6", Gateway: "10.77.0.5"},    // no prefix
		{Addr: "10.77.0.6/30", Gateway: "10.78.0.5"}, // gateway off the link
		{Addr: "10.77.0.6/30", Gateway: "10.77.0.6"}, // gateway is the guest
		{Addr: "fd00::6/64", Gateway: "fd00::5"},     // IPv6
		{Addr: "10.77.0.6/31", Gateway: "10.77.0.7"}, // no room
		{Addr: "10.77.0.6/30", Gateway: "10.77.0.5", DNS: []string{"x"}},
		{Addr: "10.77.0.6/30", Gateway: "10.77.0.5", DNS: []string{"1.1.1.1", "1.1.1.2", "1.1.1.3", "1.1.1.4"}},
	} {
		if _, err := c.Reseed(ctxT(t), now, &bad, RenewAll); err == nil {
			t.Errorf("reseed with network %+v: no error", bad)
		}
	}
	if len(fm.nets) != 1 {
		t.Fatalf("a bad network reached the machine: %q", fm.nets)
	}
	nm := fm.ops()
	nm.SetNetwork = nil
	old := serve(t, agent.Config{Interp: newFake(), NewMachine: nm})
	var pe *proto.Error
	if _, err := old.Reseed(ctxT(t), now, &proto.NetConfig{Addr: "10.77.0.6/30", Gateway: "10.77.0.5"}, RenewAll); !errors.As(err, &pe) || pe.Code != proto.CodeUnsupported {
		t.Fatalf("reseed with a network on an agent that cannot set one: %v", err)
	}
}

// TestReseedRealInterpreter: the real interpreter's random and NumPy
// generators, seeded by a cell, no longer repeat after a reseed.
func TestReseedRealInterpreter(t *testing.T) {
	in := realInterp(t)
	fm := &fakeMachine{}
	c := serve(t, agent.Config{Interp: in, NewMachine: fm.ops()})
	ctx := ctxT(t)
	seed := "import random, numpy\nrandom.seed(7); numpy.random.seed(7)\n" +
		"a, b = random.Random(7).random(), numpy.random.RandomState(7).random_sample()"
	if r, err := c.RunCell(ctx, seed, time.Minute, nil); err != nil || r.Status != "ok" {
		t.Fatalf("seed cell: %+v, %v", r, err)
	}
	r, err := c.Reseed(ctx, time.Now(), nil, RenewAll)
	if err != nil || !r.Interpreter || !r.NumPy {
		t.Fatalf("reseed: %+v, %v", r, err)
	}
	res, err := c.RunCell(ctx, "(random.random() != a, numpy.random.random_sample() != b)", time.Minute, nil)
	if err != nil || len(res.Results) == 0 || res.Results[0].Data["text/plain"] != "(True, True)" {
		t.Fatalf("after the reseed: %+v, %v", res, err)
	}
}

// TestDropIdle: after DropIdle the next call dials a new connection.
func TestDropIdle(t *testing.T) {
	c := serve(t, agent.Config{Interp: newFake()})
	if _, err := c.Health(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	idle := append([]*session(nil), c.idle...)
	c.mu.Unlock()
	if len(idle) != 1 {
		t.Fatalf("%d idle connections after a call", len(idle))
	}
	c.DropIdle()
	if _, err := idle[0].nc.Write([]byte{0}); err == nil {
		t.Error("the dropped connection is still open")
	}
	if _, err := c.Health(ctxT(t)); err != nil {
		t.Fatalf("call after DropIdle: %v", err)
	}
}

// countingInterp is the fake interpreter with generators: it counts the
// reseeds it is asked for.
type countingInterp struct {
	*fakeInterp
	mu      sync.Mutex
	reseeds int
}

func (c *countingInterp) Reseed() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reseeds++
	return true, nil
}

// TestReseedRenewKernelLeavesGenerators: a resume's reseed (RenewKernel)
// renews the kernel's pool and the clock and leaves the interpreter's
// generators alone; a fork's (RenewAll) reseeds them too.
func TestReseedRenewKernelLeavesGenerators(t *testing.T) {
	fm := &fakeMachine{}
	in := &countingInterp{fakeInterp: newFake()}
	c := serve(t, agent.Config{Interp: in, NewMachine: fm.ops()})
	r, err := c.Reseed(ctxT(t), time.Now(), nil, RenewKernel)
	if err != nil || !r.Kernel || !r.Clock || r.Interpreter || r.NumPy {
		t.Fatalf("kernel-only reseed: %+v, %v", r, err)
	}
	if in.reseeds != 0 || len(fm.entropy) != 1 {
		t.Fatalf("kernel-only reseed: interpreter reseeded %d times, kernel %d", in.reseeds, len(fm.entropy))
	}
	r, err = c.Reseed(ctxT(t), time.Now(), nil, RenewAll)
	if err != nil || !r.Interpreter || in.reseeds != 1 {
		t.Fatalf("full reseed: %+v, %v; interpreter reseeded %d times", r, err, in.reseeds)
	}
}

// TestReseedOldAgentFallsBack: an agent that predates keep_generators
// (a guest paused by an older cellvm) refuses the unknown field, as its
// strict decoder does; the client asks again the old way rather than fail
// the resume, and says the generators were reseeded.
func TestReseedOldAgentFallsBack(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "old.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var seen []bool // per request: did it carry keep_generators
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				pc := proto.NewConn(nc, proto.MaxRequest)
				var h proto.Hello
				if pc.ReadJSON(proto.TypeHello, &h) != nil || pc.WriteJSON(proto.TypeHello, proto.Hello{Version: proto.Version}) != nil {
					return
				}
				m, err := pc.ReadMessage()
				if err != nil {
					return
				}
				keep := bytes.Contains(m.Payload, []byte(`"keep_generators"`))
				mu.Lock()
				seen = append(seen, keep)
				mu.Unlock()
				if keep { // the old agent's words, as its DecodeJSON wrote them
					pc.WriteJSON(proto.TypeResponse, proto.Response{Error: &proto.Error{Code: proto.CodeBadRequest,
						Message: `bad frame: decode *proto.Request: json: unknown field "keep_generators"`}})
					return
				}
				pc.WriteJSON(proto.TypeResponse, proto.Response{Reseeded: &proto.Reseeded{Kernel: true, Clock: true, Interpreter: true}})
			}()
		}
	}()
	c := New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	defer c.Close()
	r, err := c.Reseed(ctxT(t), time.Now(), nil, RenewKernel)
	if err != nil || !r.Kernel || !r.Interpreter {
		t.Fatalf("reseed of an old agent: %+v, %v", r, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || !seen[0] || seen[1] {
		t.Fatalf("requests (carried keep_generators): %v, want [true false]", seen)
	}
}

// TestReseedRealInterpreterKeepsTheUsersSequence: the proof on
// the real interpreter: np.random.seed(0); a = draw; a resume's reseed;
// b = draw equals the unpaused sequence's second draw, while a fork's
// reseed breaks it.
func TestReseedRealInterpreterKeepsTheUsersSequence(t *testing.T) {
	in := realInterp(t)
	fm := &fakeMachine{}
	c := serve(t, agent.Config{Interp: in, NewMachine: fm.ops()})
	ctx := ctxT(t)
	run := func(code string) string {
		t.Helper()
		r, err := c.RunCell(ctx, code, time.Minute, nil)
		if err != nil || r.Status != "ok" {
			t.Fatalf("cell %q: %+v, %v", code, r, err)
		}
		if len(r.Results) == 0 {
			return ""
		}
		return r.Results[0].Data["text/plain"]
	}
	run("import numpy as np, random\nnp.random.seed(0); ref = np.random.random(2)\nrandom.seed(0); pref = [random.random() for _ in range(2)]")
	run("np.random.seed(0); a = np.random.random()\nrandom.seed(0); pa = random.random()")
	if _, err := c.Reseed(ctx, time.Now(), nil, RenewKernel); err != nil {
		t.Fatal(err)
	}
	if got := run("(np.random.random() == ref[1], random.random() == pref[1])"); got != "(True, True)" {
		t.Fatalf("after a resume's reseed the user's sequences changed: %s", got)
	}
	run("np.random.seed(0); a = np.random.random()\nrandom.seed(0); pa = random.random()")
	if _, err := c.Reseed(ctx, time.Now(), nil, RenewAll); err != nil {
		t.Fatal(err)
	}
	if got := run("(np.random.random() == ref[1], random.random() == pref[1])"); got != "(False, False)" {
		t.Fatalf("after a fork's reseed the parent's sequences carry on: %s", got)
	}
}
