package control

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEndReport: a report written through the slot's file reads back; no
// report, an empty file and garbage each read as what they are; a huge
// error is clipped.
func TestEndReport(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "end.json")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	want := End{Reason: ReasonTripleFault, Error: "guest triple-faulted (KVM_EXIT_SHUTDOWN)"}
	if err := WriteEnd(f, want); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadEnd(p); err != nil || got == nil || *got != want {
		t.Fatalf("ReadEnd = %+v, %v; want %+v", got, err, want)
	}
	if got, err := ReadEnd(filepath.Join(dir, "none")); got != nil || err != nil {
		t.Errorf("ReadEnd of no file = %+v, %v", got, err)
	}
	os.WriteFile(p, nil, 0o600)
	if got, err := ReadEnd(p); got != nil || err != nil {
		t.Errorf("ReadEnd of an empty file (a VMM that wrote none) = %+v, %v", got, err)
	}
	os.WriteFile(p, []byte("Kernel panic"), 0o600)
	if got, err := ReadEnd(p); got != nil || err == nil {
		t.Errorf("ReadEnd of garbage = %+v, %v", got, err)
	}
	f, _ = os.Create(p)
	if err := WriteEnd(f, End{Reason: ReasonInternalError, Error: strings.Repeat("x", 1<<20)}); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadEnd(p); err != nil || got.Reason != ReasonInternalError || len(got.Error) > maxEndError+3 {
		t.Errorf("a huge error: %v, %d bytes", err, len(got.Error))
	}
}

func TestEndDescribe(t *testing.T) {
	for _, c := range []struct {
		e    End
		want string
	}{
		{End{Reason: ReasonTripleFault, Error: "guest triple-faulted (KVM_EXIT_SHUTDOWN)"}, "guest triple-faulted (KVM_EXIT_SHUTDOWN)"},
		{End{Reason: ReasonGuestReset}, "the guest reset"},
		{End{Reason: ReasonStopped, Signal: "terminated"}, "stopped on signal terminated"},
		{End{Reason: ReasonSnapshotStop}, "stopped after its snapshot"},
	} {
		if got := c.e.Describe(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.e, got, c.want)
		}
	}
}
