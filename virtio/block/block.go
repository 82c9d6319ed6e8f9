// Package block is virtio-blk (virtio 1.x, 5.2) over a host file: the guest
// root image (read-only) and its writable layer (read-write). Requests are
// served on the device's own goroutines with preadv/pwritev straight into
// and out of guest memory, never on the vCPU thread that kicked the queue.
// Several requests are in flight at once (inflight.go): a guest's readahead
// keeps more than one outstanding, and serving them one by one left the
// host's other CPUs idle while the guest waited.
//
// Every request is checked before the file is touched: the sector range must
// lie inside the disk (a request past the end completes with IOERR, as does a
// write to a read-only disk), data lengths must be whole sectors, and a chain
// too short to hold a header and status is answered without I/O.
package block

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/cellvm/cellvm/ratelog"
	"github.com/cellvm/cellvm/virtio"
)

// Feature bits (virtio 1.x, 5.2.3).
const (
	FeatureSegMax  uint64 = 1 << 2
	FeatureRO      uint64 = 1 << 5
	FeatureBlkSize uint64 = 1 << 6
	FeatureFlush   uint64 = 1 << 9
)

// Request types and status values (virtio 1.x, 5.2.6).
const (
	TypeIn    uint32 = 0
	TypeOut   uint32 = 1
	TypeFlush uint32 = 4
	TypeGetID uint32 = 8

	StatusOK     byte = 0
	StatusIOErr  byte = 1
	StatusUnsupp byte = 2
)

const (
	// SectorSize is the unit of capacity and request offsets.
	SectorSize = 512
	// QueueSize is the largest queue the device accepts.
	QueueSize = 256
	// IDLen is the length of the GET_ID serial.
	IDLen = 20
	// headerLen is struct virtio_blk_req's type, reserved and sector.
	headerLen  = 16
	configSize = 24
)

// Block is a virtio block device backed by a file.
type Block struct {
	file     *os.File
	store    store // file, or a test's double
	readOnly bool
	sectors  uint64
	id       [IDLen]byte
	config   [configSize]byte
	log      *slog.Logger

	workers   virtio.Workers
	act       *virtio.Activation // while active, for Resume
	closeOnce sync.Once
	closeErr  error
}

// New returns a block device over f. Its capacity is f's size rounded down
// to whole sectors. id is the serial the guest reads with GET_ID (cut to 20
// bytes). The device owns f from now on and closes it in Close.
func New(f *os.File, readOnly bool, id string, log *slog.Logger) (*Block, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("virtio-blk: stat %s: %w", f.Name(), err)
	}
	b := &Block{
		file:     f,
		store:    newFileStore(f),
		readOnly: readOnly,
		sectors:  uint64(st.Size()) / SectorSize,
		log:      ratelog.Wrap(log).With("device", "virtio-blk", "file", f.Name()),
	}
	copy(b.id[:], id)
	binary.LittleEndian.PutUint64(b.config[0:], b.sectors)    // capacity
	binary.LittleEndian.PutUint32(b.config[12:], QueueSize-2) // seg_max: header and status take two
	binary.LittleEndian.PutUint32(b.config[20:], SectorSize)  // blk_size
	return b, nil
}

// Sectors is the disk's capacity in 512-byte sectors.
func (b *Block) Sectors() uint64 { return b.sectors }

// DeviceType implements virtio.Device.
func (*Block) DeviceType() uint32 { return virtio.TypeBlock }

// Features implements virtio.Device.
func (b *Block) Features() uint64 {
	f := FeatureSegMax | FeatureBlkSize | FeatureFlush
	if b.readOnly {
		f |= FeatureRO
	}
	return f
}

// QueueMaxSizes implements virtio.Device: one request queue.
func (*Block) QueueMaxSizes() []uint16 { return []uint16{QueueSize} }

// ReadConfig implements virtio.Device.
func (b *Block) ReadConfig(off uint64, p []byte) {
	if off < configSize {
		copy(p, b.config[off:])
	}
}

// WriteConfig implements virtio.Device: the config space is read-only.
func (*Block) WriteConfig(uint64, []byte) {}

// Activate implements virtio.Device.
func (b *Block) Activate(a *virtio.Activation) error {
	if len(a.Queues) != 1 || a.Queues[0] == nil {
		return errors.New("virtio-blk: request queue not set up")
	}
	b.act = a
	b.workers.Start(func(stop <-chan struct{}) { b.run(a, stop) })
	return nil
}

// Reset implements virtio.Device. It waits for the requests in flight.
func (b *Block) Reset() {
	b.workers.Stop()
}

// Close closes the backing file. Call it after the transport has reset the
// device (mmio.MMIO.Close does both). Only the first call does anything;
// later ones return its result.
func (b *Block) Close() error {
	b.closeOnce.Do(func() {
		b.Reset()
		ratelog.Flush(b.log)
		b.closeErr = b.file.Close()
	})
	return b.closeErr
}
