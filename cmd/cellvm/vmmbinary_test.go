package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The daemon starts cellvm-vmm only when it is the one built with it.
func TestVMMBinaryIsTheOneBuiltWithCellvm(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "cellvm")
	vmm := filepath.Join(dir, vmmBinaryName)
	if err := os.WriteFile(exe, []byte("cellvm"), 0o755); err != nil {
		t.Fatal(err)
	}
	defer func(old string) { vmmSHA256 = old }(vmmSHA256)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	vmmSHA256 = ""
	if got := vmmBinary(exe, nil, log); got != exe {
		t.Errorf("a cellvm built without cellvm-vmm's sum runs %s, want itself", got)
	}
	if err := os.WriteFile(vmm, []byte("the vmm"), 0o755); err != nil {
		t.Fatal(err)
	}
	sum, err := fileSHA256(vmm)
	if err != nil {
		t.Fatal(err)
	}
	vmmSHA256 = sum
	if got := vmmBinary(exe, nil, log); got != vmm {
		t.Errorf("the matching cellvm-vmm was not chosen: %s", got)
	}
	if got := vmmBinary(exe, []string{"CELLVM_TEST_MAIN=1"}, log); got != exe {
		t.Errorf("a test binary acting as cellvm runs %s, want itself", got)
	}
	if logs.Len() != 0 {
		t.Errorf("warnings on the good paths: %s", logs.String())
	}
	if err := os.WriteFile(vmm, []byte("a stale vmm"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := vmmBinary(exe, nil, log); got != exe {
		t.Errorf("a stale cellvm-vmm was chosen: %s", got)
	}
	if !strings.Contains(logs.String(), "not the one built with this cellvm") {
		t.Errorf("a stale cellvm-vmm was not reported: %s", logs.String())
	}
	os.Remove(vmm)
	logs.Reset()
	if got := vmmBinary(exe, nil, log); got != exe || !strings.Contains(logs.String(), "no cellvm-vmm next to cellvm") {
		t.Errorf("a missing cellvm-vmm: runs %s, logged %q", got, logs.String())
	}
}

// cellvm doctor says which VMM binary the daemon would run, and what is
// wrong with a cellvm-vmm it would not.
func TestDoctorNamesTheVMMBinary(t *testing.T) {
	defer func(old string) { vmmSHA256 = old }(vmmSHA256)
	vmmSHA256 = "0000" // no cellvm-vmm beside the test binary has this sum
	var out bytes.Buffer
	doctor(false, &out)
	if !strings.Contains(out.String(), "VMM binary") || !strings.Contains(out.String(), "no cellvm-vmm next to cellvm") {
		t.Errorf("doctor did not report the missing cellvm-vmm:\n%s", out.String())
	}
}
