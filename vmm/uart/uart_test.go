package uart

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

type countIRQ struct{ n atomic.Int32 }

func (c *countIRQ) Trigger() error { c.n.Add(1); return nil }

func TestTransmit(t *testing.T) {
	var out bytes.Buffer
	u := New(&out, nil)
	for _, c := range []byte("hello\n") {
		if u.Read(LSR)&(lsrTHRE|lsrTEMT) != lsrTHRE|lsrTEMT {
			t.Fatal("transmitter not empty")
		}
		u.Write(THR, c)
	}
	if out.String() != "hello\n" {
		t.Errorf("out = %q", out.String())
	}
}

func TestDivisorLatch(t *testing.T) {
	var out bytes.Buffer
	u := New(&out, nil)
	u.Write(LCR, lcrDLAB|0x03)
	u.Write(DLL, 1)
	u.Write(DLM, 0)
	if u.Read(DLL) != 1 || u.Read(DLM) != 0 {
		t.Error("divisor latch not kept")
	}
	u.Write(LCR, 0x03)
	if out.Len() != 0 {
		t.Error("DLL write was transmitted")
	}
	if u.Read(IER) != 0 {
		t.Error("IER changed by DLM write")
	}
}

func TestTHREInterrupt(t *testing.T) {
	irq := &countIRQ{}
	u := New(&bytes.Buffer{}, irq)
	if u.Read(IIR)&0x0f != iirNone {
		t.Fatal("interrupt pending at reset")
	}
	u.Write(IER, ierTHRI)
	if irq.n.Load() != 1 {
		t.Fatalf("enabling THRI raised %d interrupts, want 1", irq.n.Load())
	}
	if u.Read(IIR)&0x0f != iirTHRI {
		t.Fatal("IIR does not report THRE")
	}
	if u.Read(IIR)&0x0f != iirNone {
		t.Fatal("reading IIR did not acknowledge THRE")
	}
	u.Write(THR, 'x')
	if irq.n.Load() != 2 || u.Read(IIR)&0x0f != iirTHRI {
		t.Fatal("THR write did not raise THRE again")
	}
	u.Write(IER, 0)
	u.Write(THR, 'y')
	if irq.n.Load() != 2 {
		t.Fatal("interrupt raised with IER clear")
	}
}

func TestReceive(t *testing.T) {
	irq := &countIRQ{}
	u := New(&bytes.Buffer{}, irq)
	u.Write(IER, ierRDI)
	if n := u.Enqueue([]byte("ab")); n != 2 {
		t.Fatalf("enqueued %d", n)
	}
	if irq.n.Load() == 0 {
		t.Fatal("no interrupt on receive")
	}
	if u.Read(IIR)&0x0f != iirRDI || u.Read(LSR)&lsrDR == 0 {
		t.Fatal("data ready not reported")
	}
	if u.Read(RBR) != 'a' || u.Read(RBR) != 'b' {
		t.Fatal("wrong bytes")
	}
	if u.Read(LSR)&lsrDR != 0 || u.Read(IIR)&0x0f != iirNone {
		t.Fatal("data ready after FIFO drained")
	}
	if n := u.Enqueue(make([]byte, 1000)); n != FIFOSize {
		t.Fatalf("FIFO took %d bytes, want %d", n, FIFOSize)
	}
}

func TestFeedFromWaitsForSpace(t *testing.T) {
	u := New(&bytes.Buffer{}, nil)
	input := strings.Repeat("z", 3*FIFOSize)
	done := make(chan error)
	go func() { done <- u.FeedFrom(strings.NewReader(input)) }()
	got := 0
	deadline := time.Now().Add(5 * time.Second)
	for got < len(input) && time.Now().Before(deadline) {
		if u.Read(LSR)&lsrDR != 0 {
			if u.Read(RBR) != 'z' {
				t.Fatal("wrong byte")
			}
			got++
		}
	}
	if got != len(input) {
		t.Fatalf("received %d of %d bytes", got, len(input))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestLoopbackModemStatus(t *testing.T) {
	var out bytes.Buffer
	u := New(&out, nil)
	u.Write(MCR, mcrLOOP|mcrRTS|mcrOUT2)
	if got := u.Read(MSR) & 0xf0; got != msrCTS|msrDCD {
		t.Errorf("loopback MSR = %#x, want %#x (what Linux's probe checks)", got, msrCTS|msrDCD)
	}
	u.Write(THR, 'q')
	if out.Len() != 0 || u.Read(RBR) != 'q' {
		t.Error("loopback byte not received")
	}
	u.Write(SCR, 0x5a)
	if u.Read(SCR) != 0x5a {
		t.Error("scratch register")
	}
}

func TestFIFOIdentification(t *testing.T) {
	u := New(&bytes.Buffer{}, nil)
	u.Write(FCR, fcrFIFO)
	if u.Read(IIR)&iirFIFO != iirFIFO {
		t.Error("16550A FIFO bits not reported")
	}
}
