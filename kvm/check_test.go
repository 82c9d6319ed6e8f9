package kvm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeHost makes a /sys/module with the given module directories and, if
// device, a character device node standing in for /dev/kvm (a FIFO would not
// do: Check wants a character device; /dev/null is one).
func fakeHost(t *testing.T, modules []string, device bool) CheckConfig {
	t.Helper()
	dir := t.TempDir()
	sys := filepath.Join(dir, "module")
	for _, m := range modules {
		if err := os.MkdirAll(filepath.Join(sys, m, "parameters"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dev := filepath.Join(dir, "kvm")
	if device {
		dev = "/dev/null"
	}
	return CheckConfig{DevicePath: dev, SysModule: sys}
}

func TestDetectProvider(t *testing.T) {
	for _, c := range []struct {
		modules []string
		want    Provider
	}{
		{nil, ProviderNone},
		{[]string{"kvm"}, ProviderUnknown},
		{[]string{"kvm", "kvm_intel"}, ProviderIntel},
		{[]string{"kvm", "kvm_amd", "ccp"}, ProviderAMD},
		{[]string{"kvm", "kvm_pvm"}, ProviderPVM},
		{[]string{"kvm", "kvm_intel", "kvm_pvm"}, ProviderUnknown},
	} {
		if got := DetectProvider(fakeHost(t, c.modules, false).SysModule); got != c.want {
			t.Errorf("modules %v: provider %q, want %q", c.modules, got, c.want)
		}
	}
}

func TestCheckVerdicts(t *testing.T) {
	internal := errors.New("KVM_EXIT_INTERNAL_ERROR (suberror 1) at an SSE instruction: this KVM cannot run a standard 64-bit guest")
	for _, c := range []struct {
		name      string
		modules   []string
		device    bool
		probe     error
		usable    bool
		probed    bool
		base      error    // what Err wraps
		reasonHas []string // in Reason (or Summary when usable)
		fixHas    string
	}{
		{name: "intel, probe ok", modules: []string{"kvm", "kvm_intel"}, device: true, usable: true, probed: true, reasonHas: []string{"kvm_intel", "probe guest ran"}},
		{name: "amd, probe ok", modules: []string{"kvm", "kvm_amd"}, device: true, usable: true, probed: true, reasonHas: []string{"kvm_amd"}},
		{name: "unknown vendor, probe ok", modules: []string{"kvm"}, device: true, usable: true, probed: true, reasonHas: []string{"unknown"}},
		{name: "pvm, probe fails", modules: []string{"kvm", "kvm_pvm"}, device: true, probe: internal, probed: true, base: ErrUnusable,
			reasonHas: []string{"kvm_pvm", "built for PVM", "SSE instruction"}, fixHas: "nested rig"},
		{name: "pvm, probe passes anyway", modules: []string{"kvm", "kvm_pvm"}, device: true, probed: true, base: ErrUnusable,
			reasonHas: []string{"kvm_pvm", "built for PVM"}, fixHas: "VT-x or AMD-V"},
		{name: "pvm, no device", modules: []string{"kvm", "kvm_pvm"}, base: ErrNoKVM, reasonHas: []string{"is missing", "did not bind"}},
		{name: "no kvm at all", base: ErrNoKVM, reasonHas: []string{"is missing", "no hardware virtualization"}, fixHas: "nested rig"},
		{name: "amd, probe times out", modules: []string{"kvm", "kvm_amd"}, device: true, probed: true,
			probe: fmt.Errorf("%w (3s), and its vCPU would not leave KVM_RUN", ErrProbeTimeout), base: ErrUnusable,
			reasonHas: []string{"kvm_amd", "failed the probe guest", "did not finish in time"}},
		{name: "intel, no permission", modules: []string{"kvm", "kvm_intel"}, device: true, probed: true,
			probe: fmt.Errorf("open /dev/kvm: %w", unix.EACCES), base: ErrUnusable, reasonHas: []string{"cannot be opened"}, fixHas: "group kvm"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := fakeHost(t, c.modules, c.device)
			ran := false
			cfg.Probe = func(dev string, timeout time.Duration) error {
				ran = true
				if dev != cfg.DevicePath || timeout != DefaultProbeTimeout {
					t.Errorf("probe(%q, %v), want (%q, %v)", dev, timeout, cfg.DevicePath, DefaultProbeTimeout)
				}
				return c.probe
			}
			v := Check(cfg)
			if v.Usable != c.usable || ran != c.probed || v.Probed != c.probed {
				t.Fatalf("usable %v probed %v (ran %v), want %v %v; verdict %+v", v.Usable, v.Probed, ran, c.usable, c.probed, v)
			}
			text := v.Reason
			if c.usable {
				text = v.Summary()
				if v.Err() != nil || v.Reason != "" {
					t.Errorf("usable verdict has Err %v, Reason %q", v.Err(), v.Reason)
				}
			} else {
				if !errors.Is(v.Err(), c.base) {
					t.Errorf("Err() = %v, want it to wrap %v", v.Err(), c.base)
				}
				if v.Summary() != v.Reason || v.Fix == "" {
					t.Errorf("summary %q, fix %q", v.Summary(), v.Fix)
				}
			}
			for _, w := range c.reasonHas {
				if !strings.Contains(text, w) {
					t.Errorf("%q does not say %q", text, w)
				}
			}
			if !strings.Contains(v.Fix, c.fixHas) {
				t.Errorf("fix %q does not say %q", v.Fix, c.fixHas)
			}
		})
	}
}

func TestProbeStepNames(t *testing.T) {
	for rip, want := range map[uint64]string{
		probeCode:        "CPUID",
		probeCode + 0x34: "CR4",
		probeCode + 0x37: "SSE",
		probeCode + 0x42: "IDT",
		probeCode + 0x49: "I/O",
		probeCode + 0x4a: "HLT",
		probeHandler + 2: "handler",
		0x10:             "outside",
		probeCode + 0x90: "outside",
	} {
		if got := probeStep(rip); !strings.Contains(got, want) {
			t.Errorf("probeStep(%#x) = %q, want it to say %q", rip, got, want)
		}
	}
	if len(probeCodeBytes) != 0x4b || len(probeHandlerBytes) != 0x0d {
		t.Errorf("code is %#x bytes, handler %#x: the step table is out of date", len(probeCodeBytes), len(probeHandlerBytes))
	}
}
