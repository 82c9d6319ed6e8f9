package vmm

import (
	"fmt"
	"os"

	"github.com/cellvm/cellvm/virtio/block"
	vnet "github.com/cellvm/cellvm/virtio/net"
	"github.com/cellvm/cellvm/virtio/rng"
	"github.com/cellvm/cellvm/virtio/vsock"
)

// Disk is a file-backed virtio-blk disk. The guest sees disks as /dev/vda,
// /dev/vdb, ... in the order given.
type Disk struct {
	Path     string
	ReadOnly bool
	// File, when set, is the disk, opened by whoever started the VMM
	// (a jailed VMM cannot open a writable disk by its path); Path then
	// only names it in messages. The device owns it.
	File *os.File `json:"-"`
}

// Vsock is the virtio-vsock device: the guest's context ID and the host
// Unix socket speaking Firecracker's protocol.
type Vsock struct {
	CID uint64
	UDS string
}

// addDevices creates the configured virtio devices and hands each to
// AddVirtio, which owns it from then on: its transport closes it, once.
// The rng always comes first, so the guest's entropy pool is ready early.
func (m *Machine) addDevices() error {
	if err := m.AddVirtio(rng.New(m.log)); err != nil {
		return fmt.Errorf("virtio-rng: %w", err)
	}
	for i, d := range m.cfg.Disks {
		flag := os.O_RDWR
		if d.ReadOnly {
			flag = os.O_RDONLY
		}
		f := d.File
		if f == nil {
			var err error
			if f, err = os.OpenFile(d.Path, flag, 0); err != nil {
				return fmt.Errorf("disk %d: %w", i, err)
			}
		}
		b, err := block.New(f, d.ReadOnly, fmt.Sprintf("cellvm-disk-%d", i), m.log)
		if err != nil {
			f.Close()
			return fmt.Errorf("disk %d: %w", i, err)
		}
		if err := m.AddVirtio(b); err != nil {
			return fmt.Errorf("disk %d: %w", i, err)
		}
	}
	if v := m.cfg.Vsock; v != nil {
		dev, err := vsock.New(v.CID, v.UDS, m.log)
		if err != nil {
			return err
		}
		if err := m.AddVirtio(dev); err != nil {
			return fmt.Errorf("virtio-vsock: %w", err)
		}
	}
	if m.cfg.TAP != nil {
		if err := m.AddVirtio(vnet.New(m.cfg.TAP, m.cfg.MAC, m.log)); err != nil {
			return fmt.Errorf("virtio-net: %w", err)
		}
	}
	return nil
}
