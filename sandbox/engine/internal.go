package engine

import (
	"os"

	"github.com/cellvm/cellvm/vmm/control"
)

// Internal VMs are the engine's own: a template build's (template.go) and
// an image build's (imagebuild.go). They are neither listed nor counted
// against the cap on sandboxes (the memory cap counts them: they use the
// host), nor watched for a lost VM (their user waits on them); their
// directories live apart from the sandboxes' (a restarted daemon removes
// what one left, never takes it back).

// internalLaunch makes a launch an internal VM's.
type internalLaunch struct {
	// dir is the VM's directory for its id.
	dir func(id string) string
	// disks are passed to the VMM open, after the root image
	// (/dev/vdb, /dev/vdc, ...). Launch closes them (the caller may
	// close them too: a second close is harmless).
	disks []extraDisk
	// fsize, when above the jail's, is the largest file the jailed VMM
	// may write: an image build's out disk can pass jailFSize.
	fsize uint64
	// priority takes the next free slot to start the VM before any
	// create waiting for one (admit.go): a template build's.
	priority bool
}

// extraDisk is a disk of an internal VM, passed open: a jailed VMM could
// open neither a writable disk nor the daemon's files by their paths.
type extraDisk struct {
	name     string // for messages
	file     *os.File
	readOnly bool
}

// addDisks puts in's disks into st, after those there are.
func (in *internalLaunch) addDisks(st *vmStart) {
	for _, d := range in.disks {
		st.files[control.DiskSlot(len(st.spec.Disks))] = d.file
		st.spec.Disks = append(st.spec.Disks, control.Disk{Path: d.name, ReadOnly: d.readOnly, Passed: true})
	}
}
