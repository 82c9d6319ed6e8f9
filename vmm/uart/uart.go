// Package uart models the 16550A serial port the guest's console runs on
// (8250 driver, ttyS0 at I/O port 0x3f8, IRQ 4): enough of the register set
// for Linux to probe it, print through it with or without interrupts, and
// read console input from the host.
//
// Transmit is immediate (the transmitter is always empty), so THRE
// interrupts fire as soon as the guest enables them or writes a byte; that
// is what drives Linux's interrupt-mode tty output. Receive holds at most
// FIFOSize bytes; the host-side feeder waits when it is full rather than
// buffering without bound.
package uart

import (
	"io"
	"sync"
)

// Register offsets from the base port.
const (
	RBR = 0 // receive buffer (read, DLAB=0)
	THR = 0 // transmit holding (write, DLAB=0)
	IER = 1 // interrupt enable (DLAB=0)
	IIR = 2 // interrupt identification (read)
	FCR = 2 // FIFO control (write)
	LCR = 3 // line control
	MCR = 4 // modem control
	LSR = 5 // line status
	MSR = 6 // modem status
	SCR = 7 // scratch
	DLL = 0 // divisor latch low (DLAB=1)
	DLM = 1 // divisor latch high (DLAB=1)
)

// Bits.
const (
	ierRDI  = 0x01 // received data available
	ierTHRI = 0x02 // transmitter holding register empty
	iirNone = 0x01
	iirTHRI = 0x02
	iirRDI  = 0x04
	iirFIFO = 0xc0
	fcrFIFO = 0x01
	lcrDLAB = 0x80
	lsrDR   = 0x01
	lsrTHRE = 0x20
	lsrTEMT = 0x40
	mcrDTR  = 0x01
	mcrRTS  = 0x02
	mcrOUT1 = 0x04
	mcrOUT2 = 0x08
	mcrLOOP = 0x10
	msrCTS  = 0x10
	msrDSR  = 0x20
	msrRI   = 0x40
	msrDCD  = 0x80
)

// FIFOSize is how many received bytes the UART holds.
const FIFOSize = 64

// IRQ raises the UART's interrupt line (an edge).
type IRQ interface {
	Trigger() error
}

// UART is one 16550A. It is safe for concurrent use by vCPU threads and the
// input feeder.
type UART struct {
	mu         sync.Mutex
	out        io.Writer
	irq        IRQ
	ier        uint8
	lcr        uint8
	mcr        uint8
	scr        uint8
	fcr        uint8
	dll, dlm   uint8
	threIntr   bool // a THRE interrupt is pending
	rx         []byte
	rxSpace    *sync.Cond
	closed     bool
	outErr     error
	interrupts uint64
}

// New returns a UART that writes transmitted bytes to out and raises irq.
func New(out io.Writer, irq IRQ) *UART {
	u := &UART{out: out, irq: irq, dll: 12, mcr: mcrOUT2}
	u.rxSpace = sync.NewCond(&u.mu)
	return u
}

// Interrupts returns how many interrupts the UART has raised.
func (u *UART) Interrupts() uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.interrupts
}

func (u *UART) iir() uint8 {
	v := uint8(iirNone)
	switch {
	case u.ier&ierRDI != 0 && len(u.rx) > 0:
		v = iirRDI
	case u.ier&ierTHRI != 0 && u.threIntr:
		v = iirTHRI
	}
	if u.fcr&fcrFIFO != 0 {
		v |= iirFIFO
	}
	return v
}

// raise triggers the line if an interrupt is pending. Called with mu held.
func (u *UART) raise() {
	if u.iir()&iirNone == 0 && u.mcr&mcrOUT2 != 0 && u.irq != nil {
		u.interrupts++
		u.irq.Trigger()
	}
}

// Read handles a guest read of register off.
func (u *UART) Read(off uint8) uint8 {
	u.mu.Lock()
	defer u.mu.Unlock()
	dlab := u.lcr&lcrDLAB != 0
	switch off & 7 {
	case RBR:
		if dlab {
			return u.dll
		}
		if len(u.rx) == 0 {
			return 0
		}
		b := u.rx[0]
		u.rx = u.rx[1:]
		u.rxSpace.Broadcast()
		return b
	case IER:
		if dlab {
			return u.dlm
		}
		return u.ier
	case IIR:
		v := u.iir()
		if v&0x0f == iirTHRI {
			u.threIntr = false // reading IIR acknowledges THRE
		}
		return v
	case LCR:
		return u.lcr
	case MCR:
		return u.mcr
	case LSR:
		v := uint8(lsrTHRE | lsrTEMT)
		if len(u.rx) > 0 {
			v |= lsrDR
		}
		return v
	case MSR:
		if u.mcr&mcrLOOP != 0 {
			var v uint8
			if u.mcr&mcrRTS != 0 {
				v |= msrCTS
			}
			if u.mcr&mcrDTR != 0 {
				v |= msrDSR
			}
			if u.mcr&mcrOUT1 != 0 {
				v |= msrRI
			}
			if u.mcr&mcrOUT2 != 0 {
				v |= msrDCD
			}
			return v
		}
		return msrDCD | msrDSR | msrCTS
	default: // SCR
		return u.scr
	}
}

// Write handles a guest write of v to register off.
func (u *UART) Write(off uint8, v uint8) {
	u.mu.Lock()
	defer u.mu.Unlock()
	dlab := u.lcr&lcrDLAB != 0
	switch off & 7 {
	case THR:
		if dlab {
			u.dll = v
			return
		}
		if u.mcr&mcrLOOP != 0 {
			if len(u.rx) < FIFOSize {
				u.rx = append(u.rx, v)
			}
		} else if u.outErr == nil {
			// Console output is best effort: a broken writer must not
			// stop the guest.
			_, u.outErr = u.out.Write([]byte{v})
		}
		u.threIntr = true
		u.raise()
	case IER:
		if dlab {
			u.dlm = v
			return
		}
		old := u.ier
		u.ier = v & 0x0f
		if u.ier&ierTHRI != 0 && old&ierTHRI == 0 {
			u.threIntr = true
		}
		u.raise()
	case FCR:
		u.fcr = v & 0xc9
		if v&0x02 != 0 { // clear receive FIFO
			u.rx = u.rx[:0]
			u.rxSpace.Broadcast()
		}
	case LCR:
		u.lcr = v
	case MCR:
		u.mcr = v & 0x1f
	case LSR, MSR:
		// read-only
	default:
		u.scr = v
	}
}

// Enqueue adds up to len(b) received bytes, as many as fit, and returns how
// many it took.
func (u *UART) Enqueue(b []byte) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := min(len(b), FIFOSize-len(u.rx))
	if n <= 0 {
		return 0
	}
	u.rx = append(u.rx, b[:n]...)
	u.raise()
	return n
}

// FeedFrom copies r into the receive FIFO until r ends or Close is called,
// waiting while the FIFO is full.
func (u *UART) FeedFrom(r io.Reader) error {
	buf := make([]byte, FIFOSize)
	for {
		n, err := r.Read(buf)
		b := buf[:n]
		for len(b) > 0 {
			u.mu.Lock()
			for len(u.rx) >= FIFOSize && !u.closed {
				u.rxSpace.Wait()
			}
			if u.closed {
				u.mu.Unlock()
				return nil
			}
			u.mu.Unlock()
			b = b[u.Enqueue(b):]
		}
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// Close releases a FeedFrom waiting for FIFO space.
func (u *UART) Close() {
	u.mu.Lock()
	u.closed = true
	u.rxSpace.Broadcast()
	u.mu.Unlock()
}
