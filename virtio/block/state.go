package block

import (
	"bytes"
	"fmt"
)

// State is what a snapshot keeps of a disk: what the guest's driver learnt
// of it at probe time. The disk's contents are the host file's, which the
// snapshot's owner keeps with it; a restore checks the new file fits.
type State struct {
	Sectors  uint64
	ReadOnly bool
	ID       string
}

// Pause implements virtio.Pauser: it waits for every request in flight
// and pushes it (run), so no chain is left popped and not pushed, and the
// saved queue position is exact.
func (b *Block) Pause() { b.workers.Stop() }

// Resume implements virtio.Pauser.
func (b *Block) Resume() {
	a := b.act
	b.workers.Start(func(stop <-chan struct{}) { b.run(a, stop) })
}

// Save returns the disk's state.
func (b *Block) Save() State {
	return State{Sectors: b.sectors, ReadOnly: b.readOnly, ID: string(bytes.TrimRight(b.id[:], "\x00"))}
}

// Restore checks that this disk can stand in for the saved one: the guest
// knows its size, whether it is read-only, and its serial.
func (b *Block) Restore(st State) error {
	if got := b.Save(); got != st {
		return fmt.Errorf("virtio-blk %s: the snapshot's disk was %d sectors, read-only %v, id %q; this one is %d, %v, %q",
			b.file.Name(), st.Sectors, st.ReadOnly, st.ID, got.Sectors, got.ReadOnly, got.ID)
	}
	return nil
}
