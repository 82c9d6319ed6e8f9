package vmm

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/cellvm/cellvm/kvm"
)

// Why a diagnosis: when a guest hangs, a goroutine dump shows only that the
// vCPU thread is inside KVM_RUN. Whether the guest is spinning (exits keep
// coming), halted with interrupts off, or stuck without exits — and where
// its instruction pointer is — says whether the guest, the VMM or the
// emulator under it is at fault. DumpVCPUs asks every vCPU thread to step
// out of KVM_RUN, log its registers and exit counts, and go back in; the
// guest is not otherwise disturbed.

// maxExitReason bounds the per-reason counters; later reasons count as other.
const maxExitReason = 40

// vcpuDiag is one vCPU's counters and its pending dump request.
type vcpuDiag struct {
	vcpu  *kvm.VCPU
	dump  atomic.Bool
	exits [maxExitReason + 1]atomic.Uint64 // by kvm.ExitReason; the last slot is "other"
	intr  atomic.Uint64                    // KVM_RUN interrupted by a signal
}

// diag is a machine's vCPU diagnostics; its zero value is ready.
type diag struct {
	mu    sync.Mutex
	vcpus []*vcpuDiag
}

// register adds c (from its own thread, before its first KVM_RUN).
func (d *diag) register(c *kvm.VCPU) *vcpuDiag {
	v := &vcpuDiag{vcpu: c}
	d.mu.Lock()
	d.vcpus = append(d.vcpus, v)
	d.mu.Unlock()
	return v
}

// request marks every vCPU for a dump and kicks it out of KVM_RUN.
func (d *diag) request() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, v := range d.vcpus {
		v.dump.Store(true)
		v.vcpu.Kick()
	}
	return len(d.vcpus)
}

func (v *vcpuDiag) count(r kvm.ExitReason) {
	if r > maxExitReason {
		r = maxExitReason
	}
	v.exits[r].Add(1)
}

// exitCounts lists the non-zero counters as "NAME=N".
func (v *vcpuDiag) exitCounts() []any {
	var out []any
	for r := range v.exits {
		if n := v.exits[r].Load(); n != 0 {
			name := kvm.ExitReason(r).String()
			if r == maxExitReason {
				name = "other"
			}
			out = append(out, name, n)
		}
	}
	return append(out, "signals", v.intr.Load())
}

// log writes the vCPU's state; called on its own thread, outside KVM_RUN.
func (v *vcpuDiag) log(l *slog.Logger) {
	c := v.vcpu
	attrs := []any{"vcpu", c.ID}
	if r, err := c.Regs(); err == nil {
		attrs = append(attrs, "rip", fmt.Sprintf("%#x", r.RIP), "rsp", fmt.Sprintf("%#x", r.RSP),
			"rflags", fmt.Sprintf("%#x", r.RFLAGS), "interrupts_on", r.RFLAGS&(1<<9) != 0)
	} else {
		attrs = append(attrs, "regs_error", err.Error())
	}
	if s, err := c.Sregs(); err == nil {
		attrs = append(attrs, "cr0", fmt.Sprintf("%#x", s.CR0), "cr3", fmt.Sprintf("%#x", s.CR3),
			"cr4", fmt.Sprintf("%#x", s.CR4), "efer", fmt.Sprintf("%#x", s.EFER), "cs", fmt.Sprintf("%#x", s.CS.Selector))
	}
	if mp, err := c.MPState(); err == nil {
		attrs = append(attrs, "mp_state", mp)
	}
	attrs = append(attrs, v.exitCounts()...)
	l.Warn("vcpu state (diagnosis requested)", attrs...)
}

// DumpVCPUs asks every running vCPU to log its registers, MP state and exit
// counts (see diag). It returns at once; the lines follow within a moment
// unless a vCPU is stuck inside KVM_RUN for good, which is itself the
// answer. cellvm's VMM processes call it on SIGUSR1.
func (m *Machine) DumpVCPUs() int { return m.diag.request() }
