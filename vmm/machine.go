package vmm

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/vmm/boot"
	"github.com/cellvm/cellvm/vmm/loader"
	"github.com/cellvm/cellvm/vmm/snapshot"
	"github.com/cellvm/cellvm/vmm/uart"
)

// DefaultCmdline is the kernel command line used when Config.Cmdline is
// empty: console on the 8250, reset through the i8042 on reboot, reboot one
// second after a panic, and a warm reboot after a panic, which is how the
// VMM tells a panic from a reboot (see panicFlag).
const DefaultCmdline = "console=ttyS0 " + RebootArgs + " 8250.nr_uarts=1 nomodule"

// RebootArgs are the kernel arguments the VMM's lifecycle relies on: a
// reboot resets through the i8042 (reboot=k), a panic reboots after a
// second (panic=1), and a panic's reboot is a warm one (panic_warm), for
// which Linux writes 0x1234 to the BIOS warm-boot flag at 0x472 just
// before it resets, where a plain reboot writes 0.
const RebootArgs = "reboot=k,panic_warm panic=1"

// Config describes one machine.
type Config struct {
	Kernel    string // ELF vmlinux or bzImage
	Initrd    string // optional
	Cmdline   string // DefaultCmdline when empty
	VCPUs     int
	MemoryMiB uint64
	// Console receives the serial output; ConsoleInput, when set, feeds the
	// serial input.
	Console      io.Writer
	ConsoleInput io.Reader
	Log          *slog.Logger

	// Devices.
	Disks []Disk
	Vsock *Vsock
	// TAP is an open, attached TAP (netpolicy.OpenTAP) for a virtio-net
	// NIC, handed over by whoever builds the machine and had the
	// privilege to open it; no NIC when nil. The machine owns it from New
	// on.
	TAP *os.File
	// BeforeGuest, if set, runs once in Run after every file is loaded and
	// every vCPU is set up, just before the guest's first instruction: the
	// VMM's jail drops its privileges and installs its seccomp filter there.
	// An error ends Run before the guest runs.
	BeforeGuest func() error
	// QueueGate, if set, runs once, when the first virtio device is about
	// to be handed its queues (a driver's DRIVER_OK, or a restored
	// device's start), before any ring the guest controls is read: the VMM
	// checks there that it is jailed. Its verdict stands for every device
	// after it; an error keeps the device from starting and ends the VM.
	QueueGate func() error
	MAC       [6]byte // the guest NIC's MAC address
	// Pagemap, when set, is this process's /proc/self/pagemap, opened
	// before a jail hid /proc: a save then skips the pages the guest never
	// touched (untouched.go). The machine owns it from New on.
	Pagemap *os.File
	// Checkpoints makes the machine log the pages the guest and its
	// devices write, from its boot or restore on (KVM's dirty log on
	// every memory slot, and guestmem's for the devices), so that
	// Checkpoint writes only those (checkpoint.go).
	Checkpoints bool
	// Prefetch is a restore's recorded working set (workingset.go): the
	// extents of the memory image read ahead before the first vCPU
	// runs. Validated by the caller (snapshot.ValidateExtents); extents
	// outside the memory are skipped.
	Prefetch []snapshot.Extent
}

// Errors that end a VM badly. Run's error is one of them (errors.Is) when
// the guest brought its end on itself; any other is KVM's or the VMM's.
var (
	ErrTripleFault = errors.New("guest triple-faulted (KVM_EXIT_SHUTDOWN)")
	ErrKernelPanic = errors.New("guest kernel panicked")
	// ErrGuestCrashed is a crash the guest reported (a KVM system event
	// other than shutdown or reset).
	ErrGuestCrashed = errors.New("guest crashed")
	// ErrGuestHalted is a vCPU halted with interrupts off: nothing can
	// wake it.
	ErrGuestHalted = errors.New("guest halted with interrupts off (KVM_EXIT_HLT)")
)

// Machine is one VM.
type Machine struct {
	cfg   Config
	log   *slog.Logger
	sys   *kvm.System
	vm    *kvm.VM
	mem   *guestmem.Regions
	unmap func()
	// memSrc is what mem is mapped from, for a save (untouched.go): nil
	// for a booted machine's anonymous memory.
	memSrc *memSource
	diag   diag
	pio    Bus
	mmio   Bus
	uart   *uart.UART
	marker *bootMarker
	kernel loader.Kernel

	cmdline  string
	closers  []io.Closer
	nextMMIO uint64
	nextIRQ  uint32
	started  time.Time // when Run started the vCPU threads
	setup    setupTimes

	// life is the machine's state (built, running, pausing, paused, ended,
	// closed) and what goes with it (state.go).
	life lifecycle

	// vcpuMu guards vcpus: Run (or Restore) appends while end, from a
	// vCPU thread or the host's Stop, and Pause kick them, and Close
	// closes them. Pause takes it inside life.mu, never the other way.
	vcpuMu sync.Mutex
	vcpus  []*kvm.VCPU

	snap snapshotting  // pause, save and restore (pause.go, save.go, restore.go)
	ckpt checkpointing // checkpoints (checkpoint.go), under snap.op

	// gate is QueueGate's one run and its verdict (passQueueGate).
	gate struct {
		once sync.Once
		err  error
	}
}

// New creates the VM, its memory and devices, and loads the kernel. Nothing
// runs until Run.
func New(cfg Config) (*Machine, error) { return build(cfg, nil) }

// build is New, or with from set the first half of Restore: guest memory
// comes from the snapshot's memory file and no kernel is loaded.
func build(cfg Config, from *restoreSource) (_ *Machine, err error) {
	if cfg.VCPUs == 0 {
		cfg.VCPUs = 1
	}
	if cfg.VCPUs < 1 || cfg.VCPUs > boot.MaxVCPUs {
		return nil, fmt.Errorf("%d vCPUs: cellvm supports 1 to %d", cfg.VCPUs, boot.MaxVCPUs)
	}
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = 256
	}
	if cfg.MemoryMiB < 32 {
		return nil, fmt.Errorf("%d MiB of memory: at least 32 MiB is needed", cfg.MemoryMiB)
	}
	if cfg.MemoryMiB > 1<<20 {
		return nil, fmt.Errorf("%d MiB of memory: at most 1 TiB", cfg.MemoryMiB)
	}
	if cfg.Kernel == "" && from == nil {
		return nil, fmt.Errorf("no kernel given")
	}
	if cfg.Cmdline == "" {
		cfg.Cmdline = DefaultCmdline
	}
	if cfg.Console == nil {
		cfg.Console = io.Discard
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m := &Machine{
		cfg:      cfg,
		log:      cfg.Log,
		nextMMIO: boot.VirtioMMIO,
		nextIRQ:  5,
		cmdline:  cfg.Cmdline,
	}
	m.life.ended = make(chan struct{})
	m.setup.mark("")
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	if m.sys, err = kvm.Open(); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		cap  int
		name string
	}{{kvm.CapIRQChip, "KVM_CAP_IRQCHIP"}, {kvm.CapUserMemory, "KVM_CAP_USER_MEMORY"}, {kvm.CapPIT2, "KVM_CAP_PIT2"},
		{kvm.CapIRQFD, "KVM_CAP_IRQFD"}, {kvm.CapIOEventFD, "KVM_CAP_IOEVENTFD"}, {kvm.CapImmediateExit, "KVM_CAP_IMMEDIATE_EXIT"}} {
		if m.sys.CheckExtension(c.cap) == 0 {
			return nil, fmt.Errorf("this KVM lacks %s, which cellvm needs", c.name)
		}
	}
	if m.vm, err = m.sys.CreateVM(); err != nil {
		return nil, err
	}
	if err = m.vm.SetTSSAddr(0xfffbd000); err != nil {
		return nil, err
	}
	if err = m.vm.SetIdentityMapAddr(0xfffbc000); err != nil {
		return nil, err
	}
	if err = m.vm.CreateIRQChip(); err != nil {
		return nil, err
	}
	if err = m.vm.CreatePIT2(); err != nil {
		return nil, err
	}
	m.setup.mark("kvm")
	if from != nil {
		if m.memSrc, err = newChainSource(from.state, from.mem, from.layers, from.memSum, from.hasSum); err != nil {
			return nil, err
		}
		if m.mem, m.unmap, err = mapGuestMemoryChain(m.vm, m.memSrc, from.state.Machine.Memory, m.slotFlags()); err != nil {
			return nil, err
		}
		m.logDeviceWrites()
		m.setup.mark("memory")
	} else {
		if m.mem, m.unmap, err = allocGuestMemory(m.vm, cfg.MemoryMiB<<20, m.slotFlags()); err != nil {
			return nil, err
		}
		m.logDeviceWrites()
		m.setup.mark("memory")
		if m.kernel, err = loader.LoadKernelFile(m.mem, cfg.Kernel); err != nil {
			return nil, err
		}
		m.log.Debug("kernel loaded", "format", m.kernel.Format, "entry", fmt.Sprintf("%#x", m.kernel.Entry))
		m.setup.mark("kernel")
	}

	// The console is the guest's to write: what it says never ends the VM
	// or sets its status (the reset line and panicFlag do).
	m.uart = uart.New(cfg.Console, lineIRQ{m.vm, IRQCOM1})
	m.marker = &bootMarker{onMark: func(d time.Duration) {
		m.log.Info("guest boot marker", "since_start_ms", float64(d.Microseconds())/1000)
	}}
	if err = m.pio.Add(PortCOM1, 8, uartPort{m.uart}); err != nil {
		return nil, err
	}
	if err = m.pio.Add(PortI8042Data, 5, i8042{onReset: func() { m.end(m.resetErr(nil), "i8042 reset") }}); err != nil {
		return nil, err
	}
	if err = m.pio.Add(PortBootMarker, 1, m.marker); err != nil {
		return nil, err
	}
	if err = m.addDevices(); err != nil {
		return nil, err
	}
	m.setup.mark("devices")
	return m, nil
}

// Memory returns guest memory.
func (m *Machine) Memory() guestmem.Memory { return m.mem }

// BootTime is the time from Run to the guest's boot marker (0 if none yet).
func (m *Machine) BootTime() time.Duration { return time.Duration(m.marker.elapsed.Load()) }

// resetErr is the error of a reset: ErrKernelPanic when the guest kernel
// marked it as a panic's (see panicFlag), otherwise other.
func (m *Machine) resetErr(other error) error {
	if m.mem != nil && panicFlag(m.mem) {
		return ErrKernelPanic
	}
	return other
}

// end stops the VM with err (nil for a clean end): the move into ended,
// then a kick for every vCPU, whose thread sees ended closed and leaves.
// The first call wins; the end of an ended or closed machine does nothing.
func (m *Machine) end(err error, reason string) {
	m.life.mu.Lock()
	if _, refused := m.moveLocked(evEnd); refused != nil {
		m.life.mu.Unlock()
		return
	}
	m.life.endErr, m.life.endReason = err, reason
	close(m.life.ended)
	m.life.mu.Unlock()
	m.vcpuMu.Lock()
	for _, c := range m.vcpus {
		c.Kick()
	}
	m.vcpuMu.Unlock()
}

// Stop ends the VM from the host side.
func (m *Machine) Stop() { m.end(nil, "stopped by host") }

// boot writes the boot structures.
func (m *Machine) boot() (uint16, error) {
	memSize := m.cfg.MemoryMiB << 20
	var initrdAddr, initrdSize uint64
	if m.cfg.Initrd != "" {
		var maxAddr uint64 = 0x7fffffff
		if h := m.kernel.SetupHeader; h != nil && len(h) >= 0x230-boot.SetupHeaderOffset {
			maxAddr = uint64(leUint32(h[0x22c-boot.SetupHeaderOffset:]))
		}
		var err error
		initrdAddr, initrdSize, err = loader.LoadInitrd(m.mem, memSize, m.cfg.Initrd, m.kernel, maxAddr)
		if err != nil {
			return 0, err
		}
	}
	if err := boot.WriteZeroPage(m.mem, boot.Params{
		SetupHeader: m.kernel.SetupHeader,
		Cmdline:     m.cmdline,
		InitrdAddr:  initrdAddr,
		InitrdSize:  initrdSize,
		MemSize:     memSize,
	}); err != nil {
		return 0, err
	}
	if err := boot.WritePageTables(m.mem); err != nil {
		return 0, err
	}
	if err := boot.WriteMPTable(m.mem, m.cfg.VCPUs); err != nil {
		return 0, err
	}
	return boot.WriteGDT(m.mem)
}

func leUint32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// Cmdline is the kernel command line the guest gets.
func (m *Machine) Cmdline() string { return m.cmdline }

// Run boots the guest and blocks until it ends. It returns nil when the
// guest reset or powered off, and an error when it failed. Run of a machine
// that ended before its vCPU threads started (Stop came first) returns
// that end; Run of a running or closed machine is refused.
func (m *Machine) Run() error {
	if _, err := m.may(evRun); err != nil {
		return m.notRun(err)
	}
	if m.life.restored != nil {
		return m.runVCPUs("resumed from a snapshot", nil)
	}
	m.setup.mark("")
	gdtLimit, err := m.boot()
	if err != nil {
		return err
	}
	m.setup.mark("boot")
	supported, err := m.sys.SupportedCPUID()
	if err != nil {
		return err
	}
	features := cpuFeatures{tscDeadline: m.sys.CheckExtension(kvm.CapTSCDeadlineTimer) != 0}
	if m.sys.CheckExtension(kvm.CapXCRS) != 0 {
		features.xcr0 = guestXSAVEMask(supported)
	}
	pmu, err := m.disablePMU()
	if err != nil {
		return err
	}
	for i := 0; i < m.cfg.VCPUs; i++ {
		c, err := m.vm.CreateVCPU(i)
		if err != nil {
			return err
		}
		m.addVCPU(c)
		if err := setupVCPU(c, supported, features, m.cfg.VCPUs, m.kernel.Entry, gdtLimit); err != nil {
			return fmt.Errorf("set up vcpu %d: %w", i, err)
		}
	}
	m.setup.mark("vcpus")
	return m.runVCPUs("starting", []any{"setup", m.setup.String(), "tsc_deadline_timer", features.tscDeadline, "pmu", pmu, "xcr0", fmt.Sprintf("%#x", features.xcr0),
		"kernel", m.cfg.Kernel, "format", m.kernel.Format, "cmdline", m.cmdline})
}

// addVCPU appends a created vCPU to the machine's list.
func (m *Machine) addVCPU(c *kvm.VCPU) {
	m.vcpuMu.Lock()
	m.vcpus = append(m.vcpus, c)
	m.vcpuMu.Unlock()
}

// vcpuList is a copy of the machine's vCPU list, for code that ranges over
// it without holding vcpuMu.
func (m *Machine) vcpuList() []*kvm.VCPU {
	m.vcpuMu.Lock()
	defer m.vcpuMu.Unlock()
	return slices.Clone(m.vcpus)
}

// disablePMU turns KVM's virtual PMU off where KVM can (before any vCPU is
// created) and says what the guest has.
func (m *Machine) disablePMU() (string, error) {
	if m.sys.CheckExtension(kvm.CapPMUCapability)&kvm.PMUCapDisable == 0 {
		return "hidden in CPUID; KVM's vPMU on (no KVM_CAP_PMU_CAPABILITY)", nil
	}
	if err := m.vm.EnableCap(kvm.CapPMUCapability, kvm.PMUCapDisable); err != nil {
		return "", fmt.Errorf("turn the virtual PMU off: %w", err)
	}
	return "off", nil
}

// runVCPUs runs the set-up vCPUs, each on its own thread, until the VM
// ends.
func (m *Machine) runVCPUs(how string, attrs []any) error {
	if m.cfg.ConsoleInput != nil {
		go m.uart.FeedFrom(m.cfg.ConsoleInput)
	}
	if err := m.enterGuest(); err != nil {
		return err
	}
	m.started = time.Now()
	if m.life.restored == nil {
		m.marker.start = m.started
	}
	m.log.Info("vm "+how, append([]any{"vcpus", m.cfg.VCPUs, "memory_mib", m.cfg.MemoryMiB}, attrs...)...)
	if _, err := m.move(evRun); err != nil {
		return m.notRun(err)
	}
	var wg sync.WaitGroup
	for _, c := range m.vcpuList() {
		wg.Add(1)
		go func(c *kvm.VCPU) {
			defer wg.Done()
			m.runVCPU(c)
		}(c)
	}
	wg.Wait()
	m.log.Info("vm ended", "reason", m.life.endReason, "error", m.life.endErr, "uptime_ms", time.Since(m.started).Milliseconds())
	return m.life.endErr
}

// enterGuest is the last step before the guest's first instruction, in
// Firecracker's and Cloud Hypervisor's order: BeforeGuest first (the jail
// drops the VMM's privileges and installs its seccomp filter), and only
// then does a restored machine's virtio devices start, reading the rings
// the guest left in its memory. Until then nothing of the VMM has parsed
// anything the guest controls: Restore put the devices back into their
// structs only. A booted machine's devices start later still, when the
// guest's driver sets them up.
func (m *Machine) enterGuest() error {
	if m.cfg.BeforeGuest != nil {
		if err := m.cfg.BeforeGuest(); err != nil {
			return fmt.Errorf("before the guest's first instruction: %w", err)
		}
	}
	if m.life.restored == nil {
		return nil
	}
	for i, d := range m.snap.devices {
		if err := d.t.Start(); err != nil {
			return fmt.Errorf("restore: start virtio device %d (%s at %#x): %w", i, deviceKind(d.dev), d.base, err)
		}
	}
	m.resetVsockAfterRestore(m.life.restored)
	return nil
}

// passQueueGate runs cfg.QueueGate once and gives its verdict to every
// transport that asks (each asks before its device gets its queues). A
// refusal ends the machine: it is the VMM finding itself unjailed where
// it should be jailed, and no device may run then.
func (m *Machine) passQueueGate() error {
	if m.cfg.QueueGate == nil {
		return nil
	}
	m.gate.once.Do(func() {
		if err := m.cfg.QueueGate(); err != nil {
			m.gate.err = err
			// Not inline: the caller holds a transport's lock, which a
			// pause may be waiting for under the machine's.
			go m.end(err, "queue gate refused")
		}
	})
	return m.gate.err
}

// notRun is Run's answer when the run move is refused: the end of a
// machine that ended before its vCPU threads started, or the refusal.
func (m *Machine) notRun(refused error) error {
	m.life.mu.Lock()
	st, endErr, reason := m.life.state, m.life.endErr, m.life.endReason
	m.life.mu.Unlock()
	if st != stateEnded {
		return refused
	}
	uptime := int64(0)
	if !m.started.IsZero() {
		uptime = time.Since(m.started).Milliseconds()
	}
	m.log.Info("vm ended", "reason", reason, "error", endErr, "uptime_ms", uptime)
	return endErr
}

// runVCPU is one vCPU's thread.
func (m *Machine) runVCPU(c *kvm.VCPU) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d := m.diag.register(c)
	for {
		select {
		case <-m.life.ended:
			return
		default:
		}
		if d.dump.Swap(false) {
			// immediate_exit stays as the kick left it: the next KVM_RUN
			// returns at once and interrupted() clears it, where a pause
			// cannot be missed.
			d.log(m.log)
		}
		reason, err := c.Run()
		if errors.Is(err, kvm.ErrInterrupted) {
			d.intr.Add(1)
			m.interrupted(c) // parks the thread while the machine is paused
			continue
		}
		d.count(reason)
		if err != nil {
			m.end(err, "KVM_RUN failed")
			return
		}
		if err := m.handleExit(c, reason); err != nil {
			m.end(err, reason.String())
			return
		}
	}
}

// handleExit serves one exit; a non-nil error ends the VM.
func (m *Machine) handleExit(c *kvm.VCPU, reason kvm.ExitReason) error {
	switch reason {
	case kvm.ExitIO:
		io, err := c.IO()
		if err != nil {
			return err
		}
		for d := io.Data; len(d) >= io.Size; d = d[io.Size:] {
			if io.Out {
				m.pio.Write(uint64(io.Port), d[:io.Size])
			} else {
				m.pio.Read(uint64(io.Port), d[:io.Size])
			}
		}
	case kvm.ExitMMIO:
		mm, err := c.MMIO()
		if err != nil {
			return err
		}
		if mm.Write {
			m.mmio.Write(mm.Addr, mm.Data)
		} else {
			m.mmio.Read(mm.Addr, mm.Data)
		}
	case kvm.ExitShutdown:
		return m.resetErr(ErrTripleFault)
	case kvm.ExitSystemEvent:
		switch t := c.SystemEventType(); t {
		case kvm.SystemEventShutdown, kvm.SystemEventReset:
			m.end(nil, fmt.Sprintf("system event %d", t))
		default:
			return fmt.Errorf("%w (system event %d)", ErrGuestCrashed, t)
		}
	case kvm.ExitHLT:
		return ErrGuestHalted
	case kvm.ExitIntr:
	case kvm.ExitFailEntry:
		return fmt.Errorf("vcpu %d: KVM_EXIT_FAIL_ENTRY, hardware reason %#x", c.ID, c.FailEntryReason())
	case kvm.ExitInternalError:
		return fmt.Errorf("vcpu %d: KVM_EXIT_INTERNAL_ERROR, suberror %d", c.ID, c.InternalError())
	default:
		return fmt.Errorf("vcpu %d: unexpected exit %s", c.ID, reason)
	}
	return nil
}

// Close releases everything the machine holds, each thing once: a second
// Close does nothing. It is safe after a failed New and after Run returns.
// A Pause or Save in progress (the control socket's, which can outlive
// Run) ends first, since it reads the memory and vCPUs Close releases; a
// Save or Resume after Close does nothing. Closing a machine whose vCPU
// threads run (Run has not returned) is refused: Stop it first.
func (m *Machine) Close() error {
	m.snap.op.Lock()
	defer m.snap.op.Unlock()
	if from, err := m.move(evClose); err != nil {
		if from == stateClosed {
			return nil
		}
		return err
	}
	var errs []error
	if m.uart != nil {
		m.uart.Close()
	}
	for i := len(m.closers) - 1; i >= 0; i-- {
		errs = append(errs, m.closers[i].Close())
	}
	m.closers = nil
	m.vcpuMu.Lock()
	for _, c := range m.vcpus {
		errs = append(errs, c.Close())
	}
	m.vcpus = nil
	m.vcpuMu.Unlock()
	if m.vm != nil {
		errs = append(errs, m.vm.Close())
		m.vm = nil
	}
	if m.unmap != nil {
		m.unmap()
		m.unmap = nil
	}
	if m.memSrc != nil {
		errs = append(errs, m.memSrc.close())
		m.memSrc = nil
	}
	if m.cfg.Pagemap != nil {
		errs = append(errs, m.cfg.Pagemap.Close())
		m.cfg.Pagemap = nil
	}
	if m.sys != nil {
		errs = append(errs, m.sys.Close())
		m.sys = nil
	}
	return errors.Join(errs...)
}

// appendCmdline adds args to the kernel command line.
func (m *Machine) appendCmdline(args ...string) {
	m.cmdline = strings.TrimSpace(m.cmdline + " " + strings.Join(args, " "))
}
