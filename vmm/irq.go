package vmm

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/kvm"
)

// lineIRQ raises an edge on a GSI with two KVM_IRQ_LINE calls.
type lineIRQ struct {
	vm  *kvm.VM
	gsi uint32
}

func (l lineIRQ) Trigger() error {
	if err := l.vm.IRQLine(l.gsi, true); err != nil {
		return err
	}
	return l.vm.IRQLine(l.gsi, false)
}

// eventIRQ raises a GSI through an irqfd, so a device goroutine never waits
// on the VM file descriptor.
type eventIRQ struct {
	fd  int
	gsi uint32
}

func newEventIRQ(vm *kvm.VM, gsi uint32) (*eventIRQ, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd for irq %d: %w", gsi, err)
	}
	if err := vm.RegisterIRQFD(fd, gsi); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("irq %d: %w", gsi, err)
	}
	return &eventIRQ{fd: fd, gsi: gsi}, nil
}

var one = []byte{1, 0, 0, 0, 0, 0, 0, 0}

func (e *eventIRQ) Trigger() error {
	_, err := unix.Write(e.fd, one)
	if err == unix.EAGAIN { // counter saturated: an interrupt is pending anyway
		return nil
	}
	return err
}

func (e *eventIRQ) Close() error { return unix.Close(e.fd) }
