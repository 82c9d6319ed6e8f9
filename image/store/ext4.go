package store

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// The store tells images apart, and checks what a builder VM made, by
// their ext4 superblock alone: 1024 bytes at offset 1024, read and
// bounded here, never handed to a kernel. A builder VM's out disk is
// hostile (the guest wrote every byte of it), so nothing in it is trusted
// beyond the fields read below, each checked.

// Superblock is what the store reads of an ext4 superblock.
type Superblock struct {
	// UUID is s_uuid, formatted as the ext4 tools do.
	UUID string
	// Blocks is s_blocks_count (lo and, with the 64bit feature, hi);
	// BlockSize is 1024 << s_log_block_size.
	Blocks    uint64
	BlockSize uint64
}

// Bytes is the file system's size: Blocks * BlockSize (0 on overflow,
// which Check refuses).
func (sb Superblock) Bytes() int64 {
	if sb.BlockSize == 0 || sb.Blocks > uint64(1<<62)/sb.BlockSize {
		return 0
	}
	return int64(sb.Blocks * sb.BlockSize)
}

const (
	sbOffset       = 1024
	sbSize         = 1024
	ext4Magic      = 0xEF53
	incompat64bit  = 0x80
	maxLogBlock    = 6 // 64 KiB blocks, ext4's largest
	sbBlocksLo     = 0x04
	sbLogBlockSize = 0x18
	sbMagic        = 0x38
	sbIncompat     = 0x60
	sbUUID         = 0x68
	sbBlocksHi     = 0x150
)

// ReadSuperblock reads r's ext4 superblock. what names r in errors.
func ReadSuperblock(r io.ReaderAt, what string) (Superblock, error) {
	b := make([]byte, sbSize)
	if n, err := r.ReadAt(b, sbOffset); n != sbSize {
		return Superblock{}, fmt.Errorf("image %s: reading its superblock: %v", what, err)
	}
	if binary.LittleEndian.Uint16(b[sbMagic:]) != ext4Magic {
		return Superblock{}, fmt.Errorf("image %s is not an ext4 file system (no superblock magic)", what)
	}
	logBS := binary.LittleEndian.Uint32(b[sbLogBlockSize:])
	if logBS > maxLogBlock {
		return Superblock{}, fmt.Errorf("image %s: its superblock says blocks of 1024 << %d bytes", what, logBS)
	}
	sb := Superblock{BlockSize: 1024 << logBS, Blocks: uint64(binary.LittleEndian.Uint32(b[sbBlocksLo:]))}
	if binary.LittleEndian.Uint32(b[sbIncompat:])&incompat64bit != 0 {
		sb.Blocks |= uint64(binary.LittleEndian.Uint32(b[sbBlocksHi:])) << 32
	}
	u := b[sbUUID : sbUUID+16]
	sb.UUID = fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	return sb, nil
}

// ReadSuperblockFile is ReadSuperblock of the file at path.
func ReadSuperblockFile(path string) (Superblock, error) {
	f, err := os.Open(path)
	if err != nil {
		return Superblock{}, err
	}
	defer f.Close()
	return ReadSuperblock(f, path)
}

// CheckBuilt checks the out disk of a builder VM, of fileSize bytes,
// against what the build must have made: an ext4 whose UUID is uuid and
// whose size, by its superblock, is size bytes, within the file. It
// reads the superblock only.
func CheckBuilt(r io.ReaderAt, fileSize int64, uuid string, size int64) error {
	sb, err := ReadSuperblock(r, "built")
	if err != nil {
		return err
	}
	if sb.UUID != uuid {
		return fmt.Errorf("the built file system's UUID is %s, not the build's %s", sb.UUID, uuid)
	}
	n := sb.Bytes()
	switch {
	case n == 0:
		return fmt.Errorf("the built file system's superblock says %d blocks of %d bytes", sb.Blocks, sb.BlockSize)
	case n != size:
		return fmt.Errorf("the built file system is %d bytes by its superblock, the builder said %d", n, size)
	case n > fileSize:
		return fmt.Errorf("the built file system is %d bytes by its superblock, more than its disk's %d", n, fileSize)
	}
	return nil
}

// FSUUID reads an ext4 file system's UUID from its superblock: an image's
// identity. Each build has its own (derived from its key), so a machine
// whose memory caches one build's files is never resumed over another's.
func FSUUID(path string) (string, error) {
	sb, err := ReadSuperblockFile(path)
	return sb.UUID, err
}
