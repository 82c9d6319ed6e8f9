package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// serveEcho runs TCP and UDP echo servers in ns on addr.
func (tn *testNet) serveEcho(ns nsRunner, addr string) {
	l, _ := tn.listen(ns, "tcp4", addr)
	_, pc := tn.listen(ns, "udp4", addr)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	tn.closers = append(tn.closers, func() { l.Close(); pc.Close() })
}

// flow is a long-lived connection from a guest to an echo server.
type flow struct {
	name string
	c    net.Conn
	n    int
}

func openFlow(t *testing.T, ns nsRunner, network, addr string) *flow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := ns.dial(ctx, network, addr)
	if err != nil {
		t.Fatalf("%s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { c.Close() })
	f := &flow{name: network + " " + addr, c: c}
	if err := f.echo(3 * time.Second); err != nil {
		t.Fatalf("%s: no echo on a fresh flow: %v", f.name, err)
	}
	return f
}

// echo sends a message and waits up to wait for it to come back.
func (f *flow) echo(wait time.Duration) error {
	f.n++
	msg := fmt.Sprintf("message %d", f.n)
	f.c.SetDeadline(time.Now().Add(wait))
	if _, err := f.c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(f.c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return fmt.Errorf("echo %q, want %q", buf, msg)
	}
	return nil
}

func mustEcho(t *testing.T, f *flow) {
	t.Helper()
	if err := f.echo(3 * time.Second); err != nil {
		t.Errorf("%s: %v, want its echo (the flow is still allowed)", f.name, err)
	}
}

// mustBeCut wants the flow to pass no data any more, and to be refused by
// the rules (a reset for TCP, port-unreachable for UDP): a flow that only
// went quiet would time out instead.
func mustBeCut(t *testing.T, f *flow) {
	t.Helper()
	err := f.echo(time.Second)
	switch {
	case err == nil:
		t.Errorf("%s: still echoes, want it cut", f.name)
	case !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.ECONNREFUSED):
		t.Errorf("%s: %v, want a reset or port-unreachable from the rules within 1 s", f.name, err)
	}
}

func TestRevocationCutsFlows(t *testing.T) {
	tn := newTestNet(t)
	h := testHost(t, tn)
	gpath := tn.guest(1)
	g := nsRunner{gpath}
	a, err := h.Attach(context.Background(), "sb-cut",
		mustParse(t, "203.0.113.70", "203.0.113.7", "echo.test"), WithVethPeer(gpath, "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	configureGuest(t, gpath, a)

	t.Run("policy update", func(t *testing.T) {
		tcp := openFlow(t, g, "tcp4", "203.0.113.70:7")
		udp := openFlow(t, g, "udp4", "203.0.113.70:7")
		kept := openFlow(t, g, "tcp4", "203.0.113.7:7")
		keptUDP := openFlow(t, g, "udp4", "203.0.113.7:7")
		if err := a.Update(mustParse(t, "203.0.113.7", "echo.test")); err != nil {
			t.Fatal(err)
		}
		mustBeCut(t, tcp)
		mustBeCut(t, udp)
		mustEcho(t, kept)
		mustEcho(t, keptUDP)
		mustRefuse(t, g, "203.0.113.70:80") // and no new connection either
	})
	t.Run("pin expiry", func(t *testing.T) {
		// echo.test has a TTL of 1 s (clamped to 1 s, no grace): its pin
		// expires a second after the answer.
		rc, addrs := lookup(t, g, a.DNS, "echo.test")
		answered := time.Now()
		if rc != 0 || fmt.Sprint(addrs) != "[203.0.113.71]" {
			t.Fatalf("echo.test: rcode %d %v", rc, addrs)
		}
		tcp := openFlow(t, g, "tcp4", "203.0.113.71:7")
		udp := openFlow(t, g, "udp4", "203.0.113.71:7")
		kept := openFlow(t, g, "tcp4", "203.0.113.7:7")
		pin := netip.MustParseAddr("203.0.113.71")
		deadline := answered.Add(10 * time.Second) // generous: the loop runs every 100 ms
		for pinned(a, pin) {
			if time.Now().After(deadline) {
				t.Fatal("the pin of echo.test did not expire")
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("pin gone %v after the answer (TTL 1 s)", time.Since(answered).Round(time.Millisecond))
		// The pin's expiry cut its flows before the pin was dropped.
		mustBeCut(t, tcp)
		mustBeCut(t, udp)
		mustEcho(t, kept)
	})
}

func pinned(a *Attachment, ip netip.Addr) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.pins[ip]
	return ok
}
