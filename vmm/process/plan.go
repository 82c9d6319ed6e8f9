package process

import (
	"os"

	"github.com/cellvm/cellvm/vmm"
	"github.com/cellvm/cellvm/vmm/control"
)

// Plan is what a VMM builds from its spec and files before it touches
// KVM: the machine's configuration, short of its streams, log and jail
// hook (Run adds them), and for a restore the snapshot's files.
type Plan struct {
	Config vmm.Config
	// State and Memory are the snapshot to restore (nil when the machine
	// boots), and Layers the memory files under Memory, base first; the
	// caller closes them once the machine is built.
	State, Memory *os.File
	Layers        []*os.File
}

// NewPlan turns a spec and the files in its slots into the machine's
// configuration: a disk passed open becomes its file, the NIC gets the
// TAP, a restore its two files. The files are the machine's from here on.
func NewPlan(spec control.Spec, files control.Files) (Plan, error) {
	if err := spec.Validate(); err != nil {
		return Plan{}, err
	}
	if err := spec.CheckFiles(files); err != nil {
		return Plan{}, err
	}
	p := Plan{Config: vmm.Config{
		Kernel: spec.Kernel, Initrd: spec.Initrd, Cmdline: spec.Cmdline,
		VCPUs: spec.VCPUs, MemoryMiB: spec.MemoryMiB, Checkpoints: spec.Checkpoints,
	}}
	for i, d := range spec.Disks {
		disk := vmm.Disk{Path: d.Path, ReadOnly: d.ReadOnly}
		if d.Passed {
			disk.File = files[control.DiskSlot(i)]
		}
		p.Config.Disks = append(p.Config.Disks, disk)
	}
	if v := spec.Vsock; v != nil {
		p.Config.Vsock = &vmm.Vsock{CID: v.CID, UDS: v.UDS}
	}
	if spec.Net != nil {
		p.Config.MAC, _ = spec.Net.HardwareAddr() // Validate checked it
		p.Config.TAP = files[control.SlotTAP]
	}
	if spec.Restore != nil {
		p.State, p.Memory = files[control.SlotRestoreState], files[control.SlotRestoreMemory]
		p.Config.Prefetch = spec.Restore.Prefetch
		for i := range spec.Restore.Layers {
			p.Layers = append(p.Layers, files[control.LayerSlot(i)])
		}
	}
	return p, nil
}

// build is vmm.New, or vmm.Restore for a plan with a snapshot, whose files
// it closes.
func (p Plan) build(cfg vmm.Config) (*vmm.Machine, error) {
	if p.State == nil {
		return vmm.New(cfg)
	}
	defer p.State.Close()
	defer p.Memory.Close()
	for _, f := range p.Layers {
		defer f.Close()
	}
	return vmm.Restore(cfg, p.State, p.Memory, p.Layers...)
}
