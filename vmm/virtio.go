package vmm

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/virtio"
	"github.com/cellvm/cellvm/virtio/mmio"
)

// queueNotifyOffset is the virtio-mmio QueueNotify register.
const queueNotifyOffset = 0x50

// maxVirtioDevices bounds the virtio-mmio windows (and their IRQs 5..23).
const maxVirtioDevices = 19

// AddVirtio attaches dev at the next virtio-mmio window with its own IRQ,
// announces it on the kernel command line, and routes its queue
// notifications through ioeventfds so they never wait on a vCPU exit. Call
// it before Run.
//
// AddVirtio takes dev, whatever it returns: its transport closes it (if it
// is an io.Closer) when the machine closes, or it is closed at once if it
// could not be attached. Nobody else closes it.
func (m *Machine) AddVirtio(dev virtio.Device) error {
	closeDev := func() {
		if c, ok := dev.(io.Closer); ok {
			c.Close()
		}
	}
	if int(m.nextIRQ)-5 >= maxVirtioDevices {
		closeDev()
		return fmt.Errorf("too many virtio devices (at most %d)", maxVirtioDevices)
	}
	base, gsi := m.nextMMIO, m.nextIRQ
	irq, err := newEventIRQ(m.vm, gsi)
	if err != nil {
		closeDev()
		return err
	}
	m.closers = append(m.closers, irqCloser{m.vm, irq})
	t := mmio.NewMMIO(dev, m.mem, irq, m.log.With("virtio", base))
	t.SetQueueGate(m.passQueueGate)
	m.closers = append(m.closers, t) // the transport owns dev from here
	if err := m.mmio.Add(base, mmio.MMIOSize, t); err != nil {
		return err
	}
	m.snap.devices = append(m.snap.devices, &virtioSlot{dev: dev, t: t, base: base, gsi: gsi})
	for q := range dev.QueueMaxSizes() {
		n, err := newNotifier(m.vm, base+queueNotifyOffset, uint16(q), t)
		if err != nil {
			return err
		}
		m.closers = append(m.closers, n)
	}
	m.nextMMIO += mmio.MMIOSize
	m.nextIRQ++
	m.appendCmdline(mmio.CmdlineArg(base, gsi))
	return nil
}

type irqCloser struct {
	vm  *kvm.VM
	irq *eventIRQ
}

func (c irqCloser) Close() error {
	c.vm.UnregisterIRQFD(c.irq.fd, c.irq.gsi)
	return c.irq.Close()
}

// notifier turns a guest's write of queue index q to QueueNotify into a
// t.Notify(q) on its own goroutine, through an ioeventfd.
//
// The eventfd is non-blocking and read through the runtime's netpoller,
// so a notifier waiting for the guest is a parked goroutine, not a thread
// in poll(2). A thread in a blocking call is what a Go 1.26
// stop-the-world can wait a minute for (package stwguard): the jail's
// privilege drop stops the world about 45 times, and each time its signal
// threw every notifier out of poll and back in. It also kept one thread
// per queue.
type notifier struct {
	vm   *kvm.VM
	ev   kvm.IOEventFD
	file *os.File // ev.FD, which it owns
	done chan struct{}
}

func newNotifier(vm *kvm.VM, addr uint64, q uint16, t *mmio.MMIO) (*notifier, error) {
	file, efd, err := newEventFile(fmt.Sprintf("ioeventfd-%#x-q%d", addr, q))
	if err != nil {
		return nil, err
	}
	match := uint64(q)
	n := &notifier{vm: vm, ev: kvm.IOEventFD{FD: efd, Addr: addr, Len: 4, Datamatch: &match}, file: file, done: make(chan struct{})}
	if err := vm.RegisterIOEventFD(n.ev); err != nil {
		file.Close()
		return nil, fmt.Errorf("queue %d notify: %w", q, err)
	}
	go func() {
		defer close(n.done)
		watchEventFD(file, func() { t.Notify(q) })
	}()
	return n, nil
}

// newEventFile is a new eventfd as a pollable *os.File, and its
// descriptor: non-blocking, so that its Read parks the goroutine in the
// netpoller, and Close wakes it.
func newEventFile(name string) (*os.File, int, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, -1, fmt.Errorf("eventfd: %w", err)
	}
	return os.NewFile(uintptr(efd), name), efd, nil
}

// watchEventFD calls fn once for each read of f, an eventfd, that gives a
// non-zero count, until a read fails (f was closed).
func watchEventFD(f *os.File, fn func()) {
	buf := make([]byte, 8)
	for {
		k, err := f.Read(buf)
		if err != nil {
			return
		}
		if k == len(buf) && binary.LittleEndian.Uint64(buf) > 0 {
			fn()
		}
	}
}

func (n *notifier) Close() error {
	n.vm.UnregisterIOEventFD(n.ev)
	err := n.file.Close() // wakes the watcher's Read, which then returns
	<-n.done
	return err
}
