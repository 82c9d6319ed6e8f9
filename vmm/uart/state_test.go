package uart

import (
	"bytes"
	"reflect"
	"testing"
)

func TestStateRoundTrip(t *testing.T) {
	var out bytes.Buffer
	u := New(&out, nil)
	u.Write(LCR, lcrDLAB)
	u.Write(DLL, 1)
	u.Write(DLM, 2)
	u.Write(LCR, 0x03)
	u.Write(FCR, fcrFIFO)
	u.Write(MCR, mcrDTR|mcrRTS|mcrOUT2)
	u.Write(SCR, 0x5a)
	u.Write(IER, ierRDI|ierTHRI)
	u.Enqueue([]byte("typed"))
	st := u.Save()

	irq := &countIRQ{}
	v := New(&out, irq)
	if err := v.Restore(st); err != nil {
		t.Fatal(err)
	}
	if got := v.Save(); !reflect.DeepEqual(got, st) {
		t.Fatalf("restored %+v, saved %+v", got, st)
	}
	// The restored UART behaves as the saved one: the guest reads the
	// pending input and the registers it set.
	if v.Read(IIR)&0x0f != iirRDI || v.Read(LSR)&lsrDR == 0 {
		t.Fatalf("IIR %#x LSR %#x: received data not pending", v.Read(IIR), v.Read(LSR))
	}
	var got []byte
	for v.Read(LSR)&lsrDR != 0 {
		got = append(got, v.Read(RBR))
	}
	if string(got) != "typed" || v.Read(SCR) != 0x5a || v.Read(LCR) != 0x03 {
		t.Fatalf("read %q, SCR %#x, LCR %#x", got, v.Read(SCR), v.Read(LCR))
	}
	v.Write(LCR, lcrDLAB)
	if v.Read(DLL) != 1 || v.Read(DLM) != 2 {
		t.Fatal("divisor latch not restored")
	}
	if err := v.Restore(State{RX: make([]byte, FIFOSize+1)}); err == nil {
		t.Fatal("an oversized receive FIFO was restored")
	}
}
