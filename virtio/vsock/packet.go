package vsock

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/virtio/queue"
)

// Packet operations (virtio 1.x, 5.10.6).
const (
	OpInvalid       uint16 = 0
	OpRequest       uint16 = 1
	OpResponse      uint16 = 2
	OpRST           uint16 = 3
	OpShutdown      uint16 = 4
	OpRW            uint16 = 5
	OpCreditUpdate  uint16 = 6
	OpCreditRequest uint16 = 7
)

// Other protocol constants.
const (
	TypeStream uint16 = 1
	// ShutdownRcv and ShutdownSend are SHUTDOWN flags: the sender will
	// receive, or send, no more.
	ShutdownRcv  uint32 = 1
	ShutdownSend uint32 = 2
	// HostCID is the host's address; the guest's is configured.
	HostCID uint64 = 2
	// HeaderLen is the size of struct virtio_vsock_hdr.
	HeaderLen = 44
	// MaxPayload bounds one packet's data, as Linux does
	// (VIRTIO_VSOCK_MAX_PKT_BUF_SIZE).
	MaxPayload = 64 << 10
)

// Header is struct virtio_vsock_hdr.
type Header struct {
	SrcCID, DstCID   uint64
	SrcPort, DstPort uint32
	Len              uint32
	Type, Op         uint16
	Flags            uint32
	BufAlloc, FwdCnt uint32
}

// Decode fills h from the 44 bytes of b.
func (h *Header) Decode(b []byte) {
	_ = b[HeaderLen-1]
	h.SrcCID = binary.LittleEndian.Uint64(b[0:])
	h.DstCID = binary.LittleEndian.Uint64(b[8:])
	h.SrcPort = binary.LittleEndian.Uint32(b[16:])
	h.DstPort = binary.LittleEndian.Uint32(b[20:])
	h.Len = binary.LittleEndian.Uint32(b[24:])
	h.Type = binary.LittleEndian.Uint16(b[28:])
	h.Op = binary.LittleEndian.Uint16(b[30:])
	h.Flags = binary.LittleEndian.Uint32(b[32:])
	h.BufAlloc = binary.LittleEndian.Uint32(b[36:])
	h.FwdCnt = binary.LittleEndian.Uint32(b[40:])
}

// Encode writes h to the first 44 bytes of b.
func (h *Header) Encode(b []byte) {
	_ = b[HeaderLen-1]
	binary.LittleEndian.PutUint64(b[0:], h.SrcCID)
	binary.LittleEndian.PutUint64(b[8:], h.DstCID)
	binary.LittleEndian.PutUint32(b[16:], h.SrcPort)
	binary.LittleEndian.PutUint32(b[20:], h.DstPort)
	binary.LittleEndian.PutUint32(b[24:], h.Len)
	binary.LittleEndian.PutUint16(b[28:], h.Type)
	binary.LittleEndian.PutUint16(b[30:], h.Op)
	binary.LittleEndian.PutUint32(b[32:], h.Flags)
	binary.LittleEndian.PutUint32(b[36:], h.BufAlloc)
	binary.LittleEndian.PutUint32(b[40:], h.FwdCnt)
}

// parsePacket reads a guest tx packet: the header from the chain's readable
// part and a reader positioned at its payload, which the chain must hold
// entirely. Only RW packets carry a payload.
func parsePacket(mem guestmem.Memory, c *queue.Chain) (Header, *queue.Reader, error) {
	var h Header
	if c.ReadableLen < HeaderLen {
		return h, nil, fmt.Errorf("packet of %d bytes is shorter than its header", c.ReadableLen)
	}
	r := c.NewReader(mem)
	var b [HeaderLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return h, nil, fmt.Errorf("read header: %w", err)
	}
	h.Decode(b[:])
	if h.Len > MaxPayload {
		return h, nil, fmt.Errorf("payload of %d bytes exceeds %d", h.Len, MaxPayload)
	}
	if h.Len > r.Remaining() {
		return h, nil, fmt.Errorf("payload of %d bytes but chain holds %d", h.Len, r.Remaining())
	}
	if h.Op != OpRW && h.Len != 0 {
		return h, nil, fmt.Errorf("op %d with a %d-byte payload", h.Op, h.Len)
	}
	return h, r, nil
}
