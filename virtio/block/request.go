package block

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/virtio"
	"github.com/cellvm/cellvm/virtio/queue"
)

// errShortChain marks a chain that cannot hold a request header and a status
// byte; there is nowhere to report a status, so it completes with nothing
// written.
var errShortChain = errors.New("virtio-blk: chain too short for header and status")

// request is a parsed struct virtio_blk_req.
type request struct {
	typ    uint32
	sector uint64
	// dataLen is the data part: readable bytes after the header for OUT,
	// writable bytes before the status byte otherwise.
	dataLen uint32
}

// parseRequest reads the header of chain c. It checks only the shape of the
// chain; sector bounds are checked against the disk by check.
func parseRequest(mem guestmem.Memory, c *queue.Chain) (request, error) {
	if c.ReadableLen < headerLen || c.WritableLen < 1 {
		return request{}, errShortChain
	}
	var h [headerLen]byte
	if _, err := io.ReadFull(c.NewReader(mem), h[:]); err != nil {
		return request{}, fmt.Errorf("virtio-blk: header: %w", err)
	}
	r := request{
		typ:    binary.LittleEndian.Uint32(h[0:]),
		sector: binary.LittleEndian.Uint64(h[8:]),
	}
	if r.typ == TypeOut {
		r.dataLen = c.ReadableLen - headerLen
	} else {
		r.dataLen = c.WritableLen - 1
	}
	return r, nil
}

// check validates an IN or OUT request against a disk of the given size.
func (r request) check(sectors uint64) error {
	if r.dataLen%SectorSize != 0 {
		return fmt.Errorf("data length %d is not whole sectors", r.dataLen)
	}
	n := uint64(r.dataLen / SectorSize)
	if r.sector > sectors || n > sectors-r.sector {
		return fmt.Errorf("sectors [%d, +%d) past the end of a %d-sector disk", r.sector, n, sectors)
	}
	return nil
}

// handle runs one request and writes its status; it returns the number of
// bytes written to the chain.
func (b *Block) handle(a *virtio.Activation, c *queue.Chain) uint32 {
	r, err := parseRequest(a.Mem, c)
	if err != nil {
		b.log.Warn("bad request", "err", err)
		return 0
	}
	w := c.NewWriter(a.Mem)
	status := b.execute(a.Mem, c, r, w)
	// Whatever the data part did, the status is the chain's last byte.
	for w.Remaining() > 1 {
		s, err := w.Next(int(w.Remaining() - 1))
		if err != nil {
			break
		}
		clear(s)
	}
	if _, err := w.Write([]byte{status}); err != nil {
		b.log.Warn("write status", "err", err)
	}
	return w.Written()
}

func (b *Block) execute(mem guestmem.Memory, c *queue.Chain, r request, w *queue.Writer) byte {
	switch r.typ {
	case TypeIn, TypeOut:
		if err := r.check(b.sectors); err != nil {
			b.log.Debug("request out of bounds", "err", err)
			return StatusIOErr
		}
		if r.typ == TypeOut && b.readOnly {
			return StatusIOErr
		}
		var err error
		if r.typ == TypeIn {
			err = b.read(w, r)
		} else {
			err = b.write(mem, c, r)
		}
		if err != nil {
			b.log.Warn("I/O error", "type", r.typ, "sector", r.sector, "err", err)
			return StatusIOErr
		}
		return StatusOK
	case TypeFlush:
		if b.readOnly {
			return StatusOK
		}
		if err := b.store.sync(); err != nil {
			b.log.Warn("flush", "err", err)
			return StatusIOErr
		}
		return StatusOK
	case TypeGetID:
		if r.dataLen < IDLen {
			return StatusIOErr
		}
		if _, err := w.Write(b.id[:]); err != nil {
			return StatusIOErr
		}
		return StatusOK
	default:
		return StatusUnsupp
	}
}

// read fills the request's data buffers from the disk, in one vectored
// read.
func (b *Block) read(w *queue.Writer, r request) error {
	bufs := make([][]byte, 0, 8)
	for left := r.dataLen; left > 0; {
		s, err := w.Next(int(left))
		if err != nil {
			return err
		}
		bufs = append(bufs, s)
		left -= uint32(len(s))
	}
	return b.store.readv(bufs, int64(r.sector*SectorSize))
}

// write stores the request's data buffers to the disk, in one vectored
// write.
func (b *Block) write(mem guestmem.Memory, c *queue.Chain, r request) error {
	rd := c.NewReader(mem)
	// Skip the header, already parsed; it may span buffers, and Next
	// stops at a buffer's end.
	for rd.Remaining() > r.dataLen {
		if _, err := rd.Next(int(rd.Remaining() - r.dataLen)); err != nil {
			return err
		}
	}
	bufs := make([][]byte, 0, 8)
	for rd.Remaining() > 0 {
		s, err := rd.Next(int(rd.Remaining()))
		if err != nil {
			return err
		}
		bufs = append(bufs, s)
	}
	return b.store.writev(bufs, int64(r.sector*SectorSize))
}
