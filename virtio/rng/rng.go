// Package rng is virtio-rng (virtio 1.x, 5.4): one request queue whose
// writable buffers the device fills with entropy from the host's getrandom
// (crypto/rand), so the guest's CRNG is seeded at boot without waiting on
// its own jitter entropy.
package rng

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cellvm/cellvm/ratelog"
	"github.com/cellvm/cellvm/virtio"
	"github.com/cellvm/cellvm/virtio/queue"
)

// QueueSize is the largest queue the device accepts.
const QueueSize = 256

// maxRequest bounds the bytes given per request; the spec lets the device
// fill less than offered, and a guest asking for a gigabyte gets it in pieces.
const maxRequest = 64 << 10

// RNG is a virtio entropy device.
type RNG struct {
	log     *slog.Logger
	workers virtio.Workers
	act     *virtio.Activation // while active, for Resume
}

// New returns an entropy device.
func New(log *slog.Logger) *RNG {
	return &RNG{log: ratelog.Wrap(log).With("device", "virtio-rng")}
}

// DeviceType implements virtio.Device.
func (*RNG) DeviceType() uint32 { return virtio.TypeRNG }

// Features implements virtio.Device: none beyond the ring features.
func (*RNG) Features() uint64 { return 0 }

// QueueMaxSizes implements virtio.Device: one request queue.
func (*RNG) QueueMaxSizes() []uint16 { return []uint16{QueueSize} }

// ReadConfig implements virtio.Device: there is no config space.
func (*RNG) ReadConfig(uint64, []byte) {}

// WriteConfig implements virtio.Device.
func (*RNG) WriteConfig(uint64, []byte) {}

// Activate implements virtio.Device.
func (r *RNG) Activate(a *virtio.Activation) error {
	if len(a.Queues) != 1 || a.Queues[0] == nil {
		return errors.New("virtio-rng: request queue not set up")
	}
	r.act = a
	r.workers.Start(func(stop <-chan struct{}) { r.run(a, stop) })
	return nil
}

// Pause implements virtio.Pauser: the batch in progress completes first.
func (r *RNG) Pause() { r.workers.Stop() }

// Resume implements virtio.Pauser.
func (r *RNG) Resume() {
	a := r.act
	r.workers.Start(func(stop <-chan struct{}) { r.run(a, stop) })
}

// Reset implements virtio.Device.
func (r *RNG) Reset() {
	r.workers.Stop()
}

func (r *RNG) run(a *virtio.Activation, stop <-chan struct{}) {
	q := a.Queues[0]
	for {
		select {
		case <-stop:
			return
		case <-a.Kicks[0]:
		}
		if err := r.serve(a, q); err != nil {
			a.Irq.NeedsReset(err)
			return
		}
	}
}

// serve fills every available request.
func (r *RNG) serve(a *virtio.Activation, q *queue.Queue) error {
	defer a.SignalUsed(q)
	for {
		c, err := q.Pop(a.Mem)
		if err != nil {
			return fmt.Errorf("virtio-rng: %w", err)
		}
		if c == nil {
			return nil
		}
		w := c.NewWriter(a.Mem)
		for w.Written() < maxRequest {
			b, err := w.Next(int(maxRequest - w.Written()))
			if err != nil {
				break // chain full
			}
			if _, err := rand.Read(b); err != nil {
				return fmt.Errorf("virtio-rng: getrandom: %w", err)
			}
		}
		if err := q.Push(a.Mem, c.Head, w.Written()); err != nil {
			return fmt.Errorf("virtio-rng: %w", err)
		}
	}
}
