package kvm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Why a probe and not a stat of /dev/kvm: a /dev/kvm that opens is not one
// that can run a standard Linux guest. kvm_pvm (a paravirtualized KVM for
// hosts that are themselves guests) answers every ioctl and runs 16-bit
// real-mode code, yet a stock x86-64 kernel hangs or dies on it with
// KVM_EXIT_INTERNAL_ERROR. So the check runs a tiny guest set up the way
// vmm/ sets up Linux — 64-bit long mode with paging, a flat GDT and a TSS,
// the host's supported CPUID — and watches it do what every Linux kernel
// does in its first microseconds: CPUID, 64-bit stores, a CR4 write, an SSE
// instruction, an exception taken through its own IDT and returned from with
// iretq, an I/O exit, HLT. (On kvm_pvm the SSE instruction and the int3 each
// end in KVM_EXIT_INTERNAL_ERROR.) It takes milliseconds where KVM works and
// is bounded by a deadline where it does not.

// Probe guest layout (guest-physical addresses in one 4 MiB slot).
const (
	probeMemSize  = 4 << 20
	probeGDT      = 0x500
	probePML4     = 0x1000
	probePDPT     = 0x2000
	probePD       = 0x3000
	probeIDT      = 0x4000
	probeData     = 0x6000 // vendor (12 bytes), pad, magic at +0x10, handler's mark at +0x18
	probeIDTR     = 0x6020 // the operand of lidt: limit (2 bytes), base (8)
	probeStackTop = 0x7ff0
	probeCode     = 0x8000
	probeHandler  = probeCode + 0x60
	probePort     = 0x3f0
	probeOutByte  = 0x5a
	probeMagic    = 0x1122334455667788
	probeMark     = 0xb9
)

// probeCodeBytes is, in 64-bit mode (assembled with GNU as, checked with
// objdump):
//
//	00 xor %eax,%eax ; cpuid               leaf 0: the vendor string
//	04 mov %ebx,0x6000 ; mov %edx,0x6004 ; mov %ecx,0x6008
//	19 movabs $0x1122334455667788,%rax ; mov %rax,0x6010
//	2b mov %cr4,%rax ; or $0x600,%rax ; mov %rax,%cr4     OSFXSR, OSXMMEXCPT
//	37 xorps %xmm0,%xmm0                   an SSE instruction
//	3a lidt 0x6020 ; int3                  an exception through the guest's IDT
//	43 mov $0x3f0,%dx ; mov $0x5a,%al ; out %al,(%dx)
//	4a hlt
//	60 handler: movl $0xb9,0x6018 ; iretq
var probeCodeBytes = []byte{
	0x31, 0xc0, 0x0f, 0xa2, 0x89, 0x1c, 0x25, 0x00, 0x60, 0x00, 0x00, 0x89, 0x14, 0x25, 0x04, 0x60,
	0x00, 0x00, 0x89, 0x0c, 0x25, 0x08, 0x60, 0x00, 0x00, 0x48, 0xb8, 0x88, 0x77, 0x66, 0x55, 0x44,
	0x33, 0x22, 0x11, 0x48, 0x89, 0x04, 0x25, 0x10, 0x60, 0x00, 0x00, 0x0f, 0x20, 0xe0, 0x48, 0x0d,
	0x00, 0x06, 0x00, 0x00, 0x0f, 0x22, 0xe0, 0x0f, 0x57, 0xc0, 0x0f, 0x01, 0x1c, 0x25, 0x20, 0x60,
	0x00, 0x00, 0xcc, 0x66, 0xba, 0xf0, 0x03, 0xb0, 0x5a, 0xee, 0xf4,
}

var probeHandlerBytes = []byte{0xc7, 0x04, 0x25, 0x18, 0x60, 0x00, 0x00, 0xb9, 0x00, 0x00, 0x00, 0x48, 0xcf}

// probeStep names what the probe guest was doing at a code offset, so a
// failure says which part of a Linux guest's needs this KVM cannot meet.
func probeStep(rip uint64) string {
	switch off := rip - probeCode; {
	case rip < probeCode:
		return fmt.Sprintf("outside the probe's code (rip %#x)", rip)
	case off < 0x2b:
		return "CPUID and 64-bit stores"
	case off < 0x37:
		return "a write to CR4"
	case off < 0x3a:
		return "an SSE instruction"
	case off < 0x43:
		return "an exception delivered through the guest's IDT (int3)"
	case off < 0x4a:
		return "an I/O port exit"
	case off < 0x60:
		return "HLT"
	case off < 0x6d:
		return "the exception handler and its iretq"
	default:
		return fmt.Sprintf("outside the probe's code (rip %#x)", rip)
	}
}

// ErrProbeTimeout is wrapped by Probe's error when the probe guest did not
// finish within its deadline.
var ErrProbeTimeout = errors.New("the probe guest did not finish in time")

// Probe runs the probe guest on the KVM at devicePath and returns nil when
// it behaved exactly as real hardware virtualization does. It never takes
// much longer than timeout: a vCPU still in KVM_RUN at the deadline is
// kicked out, and if it will not leave, Probe returns without it (the
// thread and its descriptors are left to the process's exit).
func Probe(devicePath string, timeout time.Duration) error {
	done := make(chan error, 1)
	kicked := make(chan *VCPU, 1)
	go func() { done <- runProbe(devicePath, kicked) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var vcpu *VCPU
	for {
		select {
		case err := <-done:
			return err
		case vcpu = <-kicked:
		case <-timer.C:
			if vcpu != nil {
				vcpu.Kick()
			}
			select {
			case err := <-done:
				if err == nil {
					return nil
				}
				return fmt.Errorf("%w (%v); last state: %v", ErrProbeTimeout, timeout, err)
			case <-time.After(500 * time.Millisecond):
				return fmt.Errorf("%w (%v), and its vCPU would not leave KVM_RUN", ErrProbeTimeout, timeout)
			}
		}
	}
}

// runProbe does the work of Probe on a locked OS thread; it sends the vCPU
// on kicked before its first KVM_RUN so Probe can kick it.
func runProbe(devicePath string, kicked chan<- *VCPU) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	fd, err := unix.Open(devicePath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("%w: %s does not exist", ErrNoKVM, devicePath)
		}
		return fmt.Errorf("open %s: %w", devicePath, err)
	}
	sys := &System{fd: fd}
	defer sys.Close()
	if v, err := ioctl(fd, "KVM_GET_API_VERSION", ioctlGetAPIVersion, 0); err != nil {
		return err
	} else if v != 12 {
		return fmt.Errorf("KVM_GET_API_VERSION: got %d, want 12", v)
	}
	supported, err := sys.SupportedCPUID()
	if err != nil {
		return err
	}
	vm, err := sys.CreateVM()
	if err != nil {
		return err
	}
	defer vm.Close()
	mem, err := unix.Mmap(-1, 0, probeMemSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return fmt.Errorf("probe memory: %w", err)
	}
	defer unix.Munmap(mem)
	writeProbeGuest(mem)
	if err := vm.SetUserMemoryRegion(UserspaceMemoryRegion{
		MemorySize: probeMemSize, UserspaceAddr: addrOf(mem),
	}); err != nil {
		return err
	}
	vcpu, err := vm.CreateVCPU(0)
	if err != nil {
		return err
	}
	defer vcpu.Close()
	if err := vcpu.SetCPUID(supported); err != nil {
		return err
	}
	s, err := vcpu.Sregs()
	if err != nil {
		return err
	}
	probeSregs(&s)
	if err := vcpu.SetSregs(s); err != nil {
		return err
	}
	if err := vcpu.SetRegs(Regs{RFLAGS: 2, RIP: probeCode, RSP: probeStackTop}); err != nil {
		return err
	}
	kicked <- vcpu

	sawOut := false
	for exits := 0; exits < 16; {
		reason, err := vcpu.Run()
		if err != nil {
			if errors.Is(err, ErrInterrupted) {
				if !vcpu.ImmediateExit() {
					// A stray signal (the Go runtime's preemption, under
					// load), not Probe's deadline: run on.
					continue
				}
				return fmt.Errorf("interrupted before the guest halted (I/O exit seen: %v)", sawOut)
			}
			return err
		}
		exits++
		switch reason {
		case ExitIO:
			io, err := vcpu.IO()
			if err != nil {
				return err
			}
			if !io.Out || io.Port != probePort || io.Size != 1 || len(io.Data) != 1 || io.Data[0] != probeOutByte {
				return fmt.Errorf("unexpected I/O exit (out %v, port %#x, size %d, data % x)", io.Out, io.Port, io.Size, io.Data)
			}
			sawOut = true
		case ExitHLT:
			if !sawOut {
				return errors.New("the guest halted without its I/O exit")
			}
			return checkProbeData(mem, supported)
		case ExitInternalError:
			return fmt.Errorf("%v (suberror %d) at %s: this KVM cannot run a standard 64-bit guest", reason, vcpu.InternalError(), probeStepOf(vcpu))
		case ExitFailEntry:
			return fmt.Errorf("%v (hardware reason %#x): this KVM cannot enter a 64-bit guest", reason, vcpu.FailEntryReason())
		default:
			return fmt.Errorf("unexpected %v at %s", reason, probeStepOf(vcpu))
		}
	}
	return errors.New("the guest neither halted nor failed after 16 exits")
}

// writeProbeGuest lays out the GDT, an identity map of the first GiB in
// 2 MiB pages, and the code.
func writeProbeGuest(mem []byte) {
	le := binary.LittleEndian
	for i, e := range []uint64{0, 0, 0x00af9b000000ffff, 0x00cf93000000ffff, 0x00808b0000000067} {
		le.PutUint64(mem[probeGDT+8*i:], e)
	}
	le.PutUint64(mem[probePML4:], probePDPT|3)
	le.PutUint64(mem[probePDPT:], probePD|3)
	for i := uint64(0); i < 512; i++ {
		le.PutUint64(mem[probePD+8*i:], i<<21|0x83)
	}
	// Vector 3 (#BP): a present 64-bit interrupt gate to the handler.
	gate := mem[probeIDT+16*3:]
	le.PutUint16(gate[0:], uint16(probeHandler))
	le.PutUint16(gate[2:], 0x10)
	gate[5] = 0x8e
	le.PutUint16(gate[6:], uint16(probeHandler>>16))
	le.PutUint32(gate[8:], uint32(uint64(probeHandler)>>32))
	le.PutUint16(mem[probeIDTR:], 4*16-1)
	le.PutUint64(mem[probeIDTR+2:], probeIDT)
	copy(mem[probeCode:], probeCodeBytes)
	copy(mem[probeHandler:], probeHandlerBytes)
}

func probeStepOf(c *VCPU) string {
	r, err := c.Regs()
	if err != nil {
		return "an unknown step (" + err.Error() + ")"
	}
	return probeStep(r.RIP)
}

func probeSregs(s *Sregs) {
	code := Segment{Limit: 0xffffffff, Selector: 0x10, Type: 0xb, Present: 1, S: 1, L: 1, G: 1}
	data := Segment{Limit: 0xffffffff, Selector: 0x18, Type: 3, Present: 1, S: 1, DB: 1, G: 1}
	s.CS = code
	s.DS, s.ES, s.FS, s.GS, s.SS = data, data, data, data, data
	s.TR = Segment{Limit: 0x67, Selector: 0x20, Type: 0xb, Present: 1}
	s.GDT = DTable{Base: probeGDT, Limit: 5*8 - 1}
	s.CR0 = 1<<0 | 1<<4 | 1<<31 // PE, ET, PG
	s.CR3 = probePML4
	s.CR4 = 1 << 5        // PAE
	s.EFER = 1<<8 | 1<<10 // LME, LMA
}

// checkProbeData checks what the guest stored: the vendor string CPUID
// leaf 0 gave it (the one KVM offers), and a 64-bit value.
func checkProbeData(mem []byte, supported []CPUIDEntry) error {
	want := make([]byte, 12)
	for _, e := range supported {
		if e.Function == 0 {
			binary.LittleEndian.PutUint32(want[0:], e.EBX)
			binary.LittleEndian.PutUint32(want[4:], e.EDX)
			binary.LittleEndian.PutUint32(want[8:], e.ECX)
		}
	}
	if got := mem[probeData : probeData+12]; !bytes.Equal(got, want) {
		return fmt.Errorf("CPUID in the guest gave vendor %q, KVM offers %q", got, want)
	}
	if got := binary.LittleEndian.Uint64(mem[probeData+0x10:]); got != probeMagic {
		return fmt.Errorf("the guest's 64-bit store wrote %#x, want %#x", got, uint64(probeMagic))
	}
	if got := binary.LittleEndian.Uint32(mem[probeData+0x18:]); got != probeMark {
		return fmt.Errorf("the guest's exception handler did not run (mark %#x, want %#x)", got, probeMark)
	}
	return nil
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }
