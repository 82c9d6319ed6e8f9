package vmm

import (
	"encoding/binary"
	"fmt"
	"io"

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
type notifier struct {
	vm   *kvm.VM
	ev   kvm.IOEventFD
	stop int // eventfd that wakes the goroutine to exit
	done chan struct{}
}

func newNotifier(vm *kvm.VM, addr uint64, q uint16, t *mmio.MMIO) (*notifier, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(efd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	match := uint64(q)
	n := &notifier{vm: vm, ev: kvm.IOEventFD{FD: efd, Addr: addr, Len: 4, Datamatch: &match}, stop: stop, done: make(chan struct{})}
	if err := vm.RegisterIOEventFD(n.ev); err != nil {
		unix.Close(efd)
		unix.Close(stop)
		return nil, fmt.Errorf("queue %d notify: %w", q, err)
	}
	go n.loop(q, t)
	return n, nil
}

func (n *notifier) loop(q uint16, t *mmio.MMIO) {
	defer close(n.done)
	fds := []unix.PollFd{{Fd: int32(n.ev.FD), Events: unix.POLLIN}, {Fd: int32(n.stop), Events: unix.POLLIN}}
	buf := make([]byte, 8)
	for {
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents != 0 {
			if _, err := unix.Read(n.ev.FD, buf); err == nil && binary.LittleEndian.Uint64(buf) > 0 {
				t.Notify(q)
			}
		}
	}
}

func (n *notifier) Close() error {
	n.vm.UnregisterIOEventFD(n.ev)
	unix.Write(n.stop, one)
	<-n.done
	unix.Close(n.stop)
	return unix.Close(n.ev.FD)
}
