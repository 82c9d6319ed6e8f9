// Package net is virtio-net (virtio 1.x, 5.1) over a host TAP device: one
// rx and one tx queue, the MAC address in config space, and no offloads.
// The 12-byte virtio_net_hdr goes between guest and TAP (opened with
// IFF_VNET_HDR): on rx with num_buffers set to 1; on tx zeroed whatever
// the guest wrote, since no checksum or segmentation offload was
// negotiated and the host kernel's GSO parsing is not the guest's to
// reach.
//
// The TAP is read by one goroutine for the device's lifetime, because a
// blocking read on an arbitrary io.Reader cannot be interrupted; the queues
// are served by goroutines that a reset stops.
package net

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/cellvm/cellvm/ratelog"
	"github.com/cellvm/cellvm/virtio"
	"github.com/cellvm/cellvm/virtio/queue"
)

// Feature bits (virtio 1.x, 5.1.3).
const FeatureMAC uint64 = 1 << 5

const (
	rxQueue = 0
	txQueue = 1
	// QueueSize is the largest queue the device accepts.
	QueueSize = 256
	// HeaderLen is struct virtio_net_hdr with VIRTIO_F_VERSION_1.
	HeaderLen = 12
	// MaxFrame bounds a frame with its header: a 64 KiB IP packet plus
	// Ethernet and VLAN headers.
	MaxFrame = HeaderLen + 65550
)

// Net is a virtio network device backed by a TAP.
type Net struct {
	tap    io.ReadWriteCloser
	mac    [6]byte
	log    *slog.Logger
	frames chan []byte // frames read from the TAP, for the rx goroutine

	readerOnce sync.Once
	done       chan struct{} // closed by Close: ends the TAP reader
	readerWG   sync.WaitGroup
	closeOnce  sync.Once
	closeErr   error

	workers virtio.Workers
	act     *virtio.Activation // while active, for Resume
}

// New returns a network device over tap (a TAP file descriptor opened with
// IFF_TAP|IFF_NO_PI|IFF_VNET_HDR and a 12-byte vnet header, as OpenTAP
// does) with the given MAC address. The device owns tap and closes it in
// Close.
func New(tap io.ReadWriteCloser, mac [6]byte, log *slog.Logger) *Net {
	return &Net{
		tap: tap, mac: mac,
		log:    ratelog.Wrap(log).With("device", "virtio-net"),
		frames: make(chan []byte, 16),
		done:   make(chan struct{}),
	}
}

// DeviceType implements virtio.Device.
func (*Net) DeviceType() uint32 { return virtio.TypeNet }

// Features implements virtio.Device.
func (*Net) Features() uint64 { return FeatureMAC }

// QueueMaxSizes implements virtio.Device: receiveq1, transmitq1.
func (*Net) QueueMaxSizes() []uint16 { return []uint16{QueueSize, QueueSize} }

// ReadConfig implements virtio.Device: the config space starts with mac.
func (n *Net) ReadConfig(off uint64, p []byte) {
	if off < uint64(len(n.mac)) {
		copy(p, n.mac[off:])
	}
}

// WriteConfig implements virtio.Device: read-only.
func (*Net) WriteConfig(uint64, []byte) {}

// Activate implements virtio.Device.
func (n *Net) Activate(a *virtio.Activation) error {
	if len(a.Queues) != 2 || a.Queues[rxQueue] == nil || a.Queues[txQueue] == nil {
		return errors.New("virtio-net: rx and tx queues not set up")
	}
	n.readerOnce.Do(func() {
		n.readerWG.Add(1)
		go n.readTAP()
	})
	n.act = a
	n.startQueues(a)
	return nil
}

func (n *Net) startQueues(a *virtio.Activation) {
	n.workers.Start(func(stop <-chan struct{}) { n.rxLoop(a, stop) }, func(stop <-chan struct{}) { n.txLoop(a, stop) })
}

// Reset implements virtio.Device.
func (n *Net) Reset() {
	n.workers.Stop()
}

// Close stops the device and closes the TAP. Only the first call does
// anything; later ones return its result.
func (n *Net) Close() error {
	n.closeOnce.Do(func() {
		n.Reset()
		close(n.done)
		n.closeErr = n.tap.Close()
		n.readerWG.Wait()
		ratelog.Flush(n.log)
	})
	return n.closeErr
}

// readTAP reads frames for as long as the TAP is open.
func (n *Net) readTAP() {
	defer n.readerWG.Done()
	buf := make([]byte, MaxFrame)
	for {
		k, err := n.tap.Read(buf)
		if err != nil {
			select {
			case <-n.done:
			default:
				n.log.Warn("TAP read", "err", err)
			}
			return
		}
		if k < HeaderLen {
			continue
		}
		f := append([]byte(nil), buf[:k]...)
		select {
		case n.frames <- f:
		case <-n.done:
			return
		}
	}
}

// rxLoop puts TAP frames into the guest's receive buffers.
func (n *Net) rxLoop(a *virtio.Activation, stop <-chan struct{}) {
	q := a.Queues[rxQueue]
	var chain *queue.Chain
	// A chain still in hand when the device stops (for a pause, or a
	// reset) goes back to the ring, so a snapshot does not lose it.
	defer func() {
		if chain != nil {
			q.UndoPop()
		}
	}()
	for {
		var f []byte
		select {
		case <-stop:
			return
		case f = <-n.frames:
		}
		// num_buffers is 1 without VIRTIO_NET_F_MRG_RXBUF.
		f[10], f[11] = 1, 0
		for chain == nil {
			c, err := q.Pop(a.Mem)
			if err != nil {
				a.Irq.NeedsReset(fmt.Errorf("virtio-net rx: %w", err))
				return
			}
			if c != nil {
				chain = c
				break
			}
			select {
			case <-stop:
				return
			case <-a.Kicks[rxQueue]:
			}
		}
		if uint64(len(f)) > uint64(chain.WritableLen) {
			n.log.Debug("frame larger than the rx buffer dropped", "len", len(f), "buffer", chain.WritableLen)
			continue // keep the chain for the next frame
		}
		w := chain.NewWriter(a.Mem)
		if _, err := w.Write(f); err != nil {
			a.Irq.NeedsReset(fmt.Errorf("virtio-net rx: %w", err))
			return
		}
		if err := q.Push(a.Mem, chain.Head, w.Written()); err != nil {
			a.Irq.NeedsReset(fmt.Errorf("virtio-net rx: %w", err))
			return
		}
		chain = nil
		a.SignalUsed(q)
	}
}

// txLoop sends the guest's frames to the TAP.
func (n *Net) txLoop(a *virtio.Activation, stop <-chan struct{}) {
	q := a.Queues[txQueue]
	buf := make([]byte, MaxFrame)
	for {
		select {
		case <-stop:
			return
		case <-a.Kicks[txQueue]:
		}
		for {
			c, err := q.Pop(a.Mem)
			if err != nil {
				a.Irq.NeedsReset(fmt.Errorf("virtio-net tx: %w", err))
				return
			}
			if c == nil {
				break
			}
			if c.ReadableLen < HeaderLen || c.ReadableLen > MaxFrame {
				n.log.Debug("bad tx frame dropped", "len", c.ReadableLen)
			} else {
				k, err := io.ReadFull(c.NewReader(a.Mem), buf[:c.ReadableLen])
				if err == nil {
					sanitizeTxHeader(buf[:HeaderLen])
					_, err = n.tap.Write(buf[:k])
				}
				if err != nil {
					n.log.Debug("TAP write", "err", err)
				}
			}
			if err := q.Push(a.Mem, c.Head, 0); err != nil {
				a.Irq.NeedsReset(fmt.Errorf("virtio-net tx: %w", err))
				return
			}
		}
		a.SignalUsed(q)
	}
}

// sanitizeTxHeader zeroes a guest's virtio_net_hdr before the TAP sees it:
// flags (NEEDS_CSUM), gso_type, hdr_len, gso_size, csum_start and
// csum_offset are meaningful only with the offload features, none of
// which the device offers, and num_buffers is unused on tx. A zero header
// is a plain frame with its checksums done.
func sanitizeTxHeader(h []byte) {
	clear(h)
}
