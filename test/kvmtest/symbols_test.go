package kvmtest

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPlaceRIPs(t *testing.T) {
	vmlinux := filepath.Join(RepoRoot(t), "build", "kernel", "vmlinux")
	if _, err := os.Stat(vmlinux); err != nil {
		t.Skip("no build/kernel/vmlinux (make kernel)")
	}
	f, err := elf.Open(vmlinux)
	if err != nil {
		t.Fatal(err)
	}
	syms, _ := f.Symbols()
	f.Close()
	var start uint64
	for _, s := range syms {
		if s.Name == "start_kernel" {
			start = s.Value
		}
	}
	if start == 0 {
		t.Fatal("no start_kernel in vmlinux")
	}
	log := fmt.Sprintf("level=WARN msg=\"vcpu state\" vcpu=0 rip=%#x rsp=0x1\nlevel=WARN msg=x vcpu=1 rip=0x401000 rsp=0x2\n", start+0x10)
	got := PlaceRIPs(vmlinux, log)
	if !strings.Contains(got, "vcpu 0: rip") || !strings.Contains(got, "= start_kernel+0x10") ||
		!strings.Contains(got, "vcpu 1: rip 0x401000 = outside") {
		t.Errorf("PlaceRIPs:\n%s", got)
	}
	if PlaceRIPs(vmlinux, "nothing here") != "" {
		t.Error("PlaceRIPs of a log without vcpu lines is not empty")
	}
}
