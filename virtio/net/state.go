package net

import "fmt"

// State is what a snapshot keeps of the NIC: its MAC address, which the
// guest's driver read at probe time. Frames in flight are not kept (a
// network drops packets anyway); the TAP is the restored VM's own.
type State struct {
	MAC [6]byte
}

// Pause implements virtio.Pauser. The TAP's reader goes on filling its
// small buffer of frames, which is not guest state.
func (n *Net) Pause() { n.workers.Stop() }

// Resume implements virtio.Pauser.
func (n *Net) Resume() { n.startQueues(n.act) }

// Save returns the NIC's state.
func (n *Net) Save() State { return State{MAC: n.mac} }

// Restore checks that this NIC stands in for the saved one: the guest knows
// its MAC address.
func (n *Net) Restore(st State) error {
	if st.MAC != n.mac {
		return fmt.Errorf("virtio-net: the snapshot's NIC had MAC %x, this one has %x", st.MAC, n.mac)
	}
	return nil
}
