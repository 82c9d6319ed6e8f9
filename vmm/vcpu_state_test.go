package vmm

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

// TestSavedMitigationMSRs: TSX_CTRL, UMWAIT_CONTROL and AMD's
// VIRT_SPEC_CTRL are saved where KVM lists them, their neighbours are not,
// and a host whose KVM does not list them saves without them.
func TestSavedMitigationMSRs(t *testing.T) {
	const tsxCtrl, umwaitControl, virtSpecCtrl = 0x122, 0xe1, 0xc001011f
	intel := []uint32{0x10, 0xe1, 0xe2, 0x121, 0x122, 0x123, 0xc0000080}
	if got, want := savedMSRs(intel), []uint32{0x10, umwaitControl, tsxCtrl, 0xc0000080, msrMTRRDefType}; !slices.Equal(got, want) {
		t.Errorf("Intel list: saved %#x, want %#x", got, want)
	}
	amd := []uint32{0x10, 0xc0010015, 0xc001011e, 0xc001011f, 0xc0010120}
	if got, want := savedMSRs(amd), []uint32{0x10, 0xc0010015, virtSpecCtrl, msrMTRRDefType}; !slices.Equal(got, want) {
		t.Errorf("AMD list: saved %#x, want %#x", got, want)
	}
	if got := savedMSRs([]uint32{0x10}); slices.ContainsFunc(got, func(x uint32) bool { return x == tsxCtrl || x == umwaitControl || x == virtSpecCtrl }) {
		t.Errorf("saved %#x: an MSR KVM does not list", got)
	}
}

// TestRefusedMSRsWarn: an MSR a save leaves out is a warning that names it
// in hex; nothing left out, nothing logged.
func TestRefusedMSRsWarn(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	logRefusedMSRs(log, 1, nil)
	if buf.Len() != 0 {
		t.Fatalf("logged with nothing refused: %s", buf.String())
	}
	logRefusedMSRs(log, 1, []uint32{0x122, 0xc001011f})
	out := buf.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "msrs=0x122,0xc001011f") || !strings.Contains(out, "vcpu=1") {
		t.Errorf("the warning %q does not name the refused MSRs in hex at Warn", out)
	}
}
