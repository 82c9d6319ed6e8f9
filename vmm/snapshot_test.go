package vmm

import (
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/virtio/rng"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

func TestSavedMSRs(t *testing.T) {
	kvmList := []uint32{0x10, 0x11, 0x1b, 0xc1, 0x174, 0x277, 0x38f, 0x6e0, 0xc0000080, 0xc0000102, 0x4b564d01, 0x40000000}
	got := savedMSRs(kvmList)
	want := []uint32{0x10, 0x11, 0x1b, 0x174, 0x277, 0x6e0, 0xc0000080, 0xc0000102, 0x4b564d01, msrMTRRDefType}
	if !slices.Equal(got, want) {
		t.Fatalf("saved MSRs %#x, want %#x", got, want)
	}
	// Performance counters (0xc1, 0x38f) and Hyper-V's (0x40000000) are
	// not kept; MTRRdefType is even when KVM does not list it.
}

func TestFixZeroTSCDeadline(t *testing.T) {
	msrs := []kvm.MSR{{Index: msrTSCDeadline}, {Index: msrIA32TSC, Data: 12345}}
	fixZeroTSCDeadline(msrs)
	if msrs[0].Data != 12345 {
		t.Fatalf("a zero TSC deadline became %d, want the TSC", msrs[0].Data)
	}
	armed := []kvm.MSR{{Index: msrIA32TSC, Data: 5}, {Index: msrTSCDeadline, Data: 99}}
	fixZeroTSCDeadline(armed)
	if armed[1].Data != 99 {
		t.Fatalf("an armed TSC deadline changed to %d", armed[1].Data)
	}
}

func TestMatchDevices(t *testing.T) {
	m := &Machine{}
	m.snap.devices = []*virtioSlot{{dev: rng.New(nil), base: 0xd0000000, gsi: 5}}
	same := []snapshot.Device{{Kind: snapshot.KindRNG, MMIOBase: 0xd0000000, IRQ: 5}}
	if err := m.matchDevices(same); err != nil {
		t.Fatal(err)
	}
	for _, saved := range [][]snapshot.Device{
		nil,
		{{Kind: snapshot.KindBlock, MMIOBase: 0xd0000000, IRQ: 5}},
		{{Kind: snapshot.KindRNG, MMIOBase: 0xd0001000, IRQ: 5}},
		{{Kind: snapshot.KindRNG, MMIOBase: 0xd0000000, IRQ: 6}},
		{same[0], {Kind: snapshot.KindVsock, MMIOBase: 0xd0001000, IRQ: 6}},
	} {
		err := m.matchDevices(saved)
		if err == nil {
			t.Errorf("devices %+v matched [rng]", saved)
			continue
		}
		if !strings.Contains(err.Error(), "this configuration makes [rng]") {
			t.Errorf("error %q does not say what this configuration has", err)
		}
	}
}

// TestCloseWaitsForASnapshotInProgress: Close does not release what a
// Pause or Save in progress (the control socket's, which can outlive Run)
// is reading until it ends, and a Save or Resume after Close does nothing.
func TestCloseWaitsForASnapshotInProgress(t *testing.T) {
	m := &Machine{}
	m.life.ended = make(chan struct{})
	m.life.state = statePaused
	// A Save in progress, under which the VM ends (as after a snapshot
	// that stops it) and Run returns.
	m.snap.op.Lock()
	m.end(nil, "stopped by host")
	var saveEnded atomic.Bool
	closed := make(chan bool)
	go func() {
		m.Close()
		closed <- saveEnded.Load()
	}()
	// A Close that does not wait has the time to return here; one that
	// waits returns only after the unlock, whatever the scheduling.
	time.Sleep(50 * time.Millisecond)
	saveEnded.Store(true)
	m.snap.op.Unlock()
	if !<-closed {
		t.Fatal("Close returned while a Save held the machine")
	}
	if err := m.Save(nil, nil); !errors.Is(err, ErrNotPaused) {
		t.Errorf("Save after Close: %v, want ErrNotPaused", err)
	}
	if err := m.Resume(); err != nil {
		t.Errorf("Resume after Close: %v", err)
	}
	if err := m.Pause(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Pause after Close: %v, want ErrNotRunning", err)
	}
	if m.life.state != stateClosed {
		t.Errorf("state %s after Close, want closed", m.life.state)
	}
}
