package kvm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Provider names the kernel module behind /dev/kvm, read from /sys/module.
type Provider string

// The providers cellvm tells apart.
const (
	ProviderNone    Provider = "none"      // no KVM module at all
	ProviderIntel   Provider = "kvm_intel" // VT-x
	ProviderAMD     Provider = "kvm_amd"   // AMD-V (SVM)
	ProviderPVM     Provider = "kvm_pvm"   // PVM: runs only guest kernels built for it
	ProviderUnknown Provider = "unknown"   // kvm without a known vendor module, or several
)

// SysModuleDir is where the kernel lists its loaded (and built-in) modules.
const SysModuleDir = "/sys/module"

// DetectProvider reads the vendor module behind KVM from sysModule (a
// /sys/module directory).
func DetectProvider(sysModule string) Provider {
	var found []Provider
	for _, p := range []Provider{ProviderIntel, ProviderAMD, ProviderPVM} {
		if _, err := os.Stat(filepath.Join(sysModule, string(p))); err == nil {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 1:
		return found[0]
	case 0:
		if _, err := os.Stat(filepath.Join(sysModule, "kvm")); err == nil {
			return ProviderUnknown
		}
		return ProviderNone
	default:
		return ProviderUnknown
	}
}

// ErrUnusable is wrapped by Verdict.Err when /dev/kvm exists but cannot run
// cellvm's guests.
var ErrUnusable = errors.New("this host's KVM cannot run cellvm guests")

// DefaultProbeTimeout bounds the probe guest. A working KVM finishes it in
// milliseconds; the bound is for one that hangs.
const DefaultProbeTimeout = 5 * time.Second

// CheckConfig says where Check looks; the zero value is the real host.
type CheckConfig struct {
	DevicePath string                                           // default DevicePath
	SysModule  string                                           // default SysModuleDir
	Timeout    time.Duration                                    // default DefaultProbeTimeout
	Probe      func(device string, timeout time.Duration) error // default Probe
}

// Verdict is what Check found: whether cellvm can run guests on this host's
// KVM, and if not, why and what to do.
type Verdict struct {
	Provider Provider
	Device   string
	Present  bool          // the device node exists
	ProbeErr error         // the probe guest's failure; nil if it passed or did not run
	Probed   bool          // the probe ran
	Took     time.Duration // how long the probe took
	Usable   bool
	Reason   string // when not usable: why, in one sentence
	Fix      string // when not usable: what to do
}

// Check decides, by running the probe guest, whether the host's KVM can run
// cellvm's guests. It never takes much longer than the probe's timeout.
func Check(c CheckConfig) Verdict {
	if c.DevicePath == "" {
		c.DevicePath = DevicePath
	}
	if c.SysModule == "" {
		c.SysModule = SysModuleDir
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultProbeTimeout
	}
	if c.Probe == nil {
		c.Probe = Probe
	}
	v := Verdict{Provider: DetectProvider(c.SysModule), Device: c.DevicePath}
	fi, err := os.Stat(c.DevicePath)
	v.Present = err == nil && fi.Mode()&os.ModeCharDevice != 0
	if v.Present {
		start := time.Now()
		v.ProbeErr = c.Probe(c.DevicePath, c.Timeout)
		v.Took = time.Since(start)
		v.Probed = true
	}
	v.decide()
	return v
}

// decide sets Usable, Reason and Fix from what was found.
func (v *Verdict) decide() {
	v.Usable, v.Reason, v.Fix = false, "", ""
	switch {
	case !v.Present:
		v.Reason = fmt.Sprintf("%s is missing: this host exposes no hardware virtualization", v.Device)
		if v.Provider == ProviderPVM {
			v.Reason += " (kvm_pvm is loaded but did not bind)"
		}
		v.Fix = "run on a host with VT-x or AMD-V and kvm_intel or kvm_amd loaded; 'make test' runs the KVM tests in the nested rig instead"
	case v.Provider == ProviderPVM:
		v.Reason = fmt.Sprintf("%s is provided by kvm_pvm, which runs only guest kernels built for PVM; cellvm's guest is a standard x86-64 Linux", v.Device)
		if v.ProbeErr != nil {
			v.Reason += " (probe: " + v.ProbeErr.Error() + ")"
		}
		v.Fix = "run on a host with VT-x or AMD-V (kvm_intel or kvm_amd); 'make test' runs the KVM tests in the nested rig instead"
	case v.ProbeErr != nil && errors.Is(v.ProbeErr, os.ErrPermission):
		v.Reason = fmt.Sprintf("%s cannot be opened: %v", v.Device, v.ProbeErr)
		v.Fix = "give this user read and write access to " + v.Device + " (usually: add it to group kvm)"
	case v.ProbeErr != nil:
		v.Reason = fmt.Sprintf("%s (%s) failed the probe guest: %v", v.Device, v.Provider, v.ProbeErr)
		v.Fix = "run on a host with VT-x or AMD-V (kvm_intel or kvm_amd); 'make test' runs the KVM tests in the nested rig instead"
	default:
		v.Usable = true
	}
}

// Err is nil when the KVM is usable. Otherwise it wraps ErrNoKVM (no device)
// or ErrUnusable, and says why and what to do.
func (v Verdict) Err() error {
	if v.Usable {
		return nil
	}
	base := ErrUnusable
	if !v.Present {
		base = ErrNoKVM
	}
	return fmt.Errorf("%w: %s; %s", base, v.Reason, v.Fix)
}

// Summary is one line for a human: the provider and the verdict.
func (v Verdict) Summary() string {
	if v.Usable {
		return fmt.Sprintf("%s (%s): the probe guest ran in %v", v.Device, v.Provider, v.Took.Round(time.Millisecond))
	}
	return v.Reason
}
