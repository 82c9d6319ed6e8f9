package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// The memory file's digest. A memory file is mostly holes and far larger
// than its state file, so only its size was checked before a restore: a
// file a crash or a failing disk left with wrong bytes restored into a
// guest that ran on garbage. The VMM now sums the file while it writes it
// and keeps the sum in the state file's header, and whoever restores can
// check the file first (the daemon does, before it starts the VMM).
//
// The sum is CRC-32C (Castagnoli) of the file's bytes in order, holes
// read as zeros. Why CRC-32C: it is in the standard library and runs on
// the CPU's crc32 instruction (SSE 4.2, ARMv8 CRC) at memory speed, the
// state file's body already uses it, and it is linear, so a hole of any
// size is added in a few dozen multiplications (Zeros) rather than hashed
// byte by byte: neither the save nor the check reads a hole. The threat is
// a torn or rotten file, not a forger (the image directory is the
// daemon's own): a cryptographic hash would cost several times as much and
// could not skip holes. 32 bits miss a random corruption once in 4 billion.
//
// The sum lives in the state file header's two reserved words (version 1
// wrote them as zero): the flags word's bit 0 says the file has one, and
// the last word is the sum. An older cellvm ignores both, and a state file
// an older cellvm wrote has none (MemorySum says so; it is not checked).

// Header words that carry the memory file's sum.
const (
	hdrFlags  = 12 // uint32: header flags
	hdrMemSum = 28 // uint32: CRC-32C of the memory file
	// flagMemSum: the header holds the memory file's sum.
	flagMemSum = 1 << 0
)

// Errors of the memory file's check.
var (
	// ErrMemoryCorrupt: the memory file's bytes are not those its state
	// file's sum was taken of.
	ErrMemoryCorrupt = errors.New("memory file does not match its state file's digest")
	// ErrNoMemorySum: the state file was written without a memory sum
	// (by an older cellvm).
	ErrNoMemorySum = errors.New("state file has no memory file digest")
)

// MemoryHash is a running CRC-32C of a memory file's bytes in file order,
// to which a run of zeros (a hole) is added at the cost of its length's
// bits, not its bytes.
type MemoryHash struct {
	crc uint32
	n   int64
}

// Write adds p to the sum.
func (h *MemoryHash) Write(p []byte) {
	h.crc = crc32.Update(h.crc, castagnoli, p)
	h.n += int64(len(p))
}

// Zeros adds n zero bytes to the sum.
func (h *MemoryHash) Zeros(n int64) {
	if n <= 0 {
		return
	}
	h.crc = crc32cZeros(h.crc, n)
	h.n += n
}

// Sum32 is the sum of the bytes added so far.
func (h *MemoryHash) Sum32() uint32 { return h.crc }

// Len is how many bytes were added.
func (h *MemoryHash) Len() int64 { return h.n }

// crc32cZeros is crc32.Update(crc, castagnoli, n zero bytes), in
// O(log n). hash/crc32 inverts the register before and after; on the
// register, n zero bytes multiply it by x^(8n) modulo the polynomial (the
// bits reflected, as the table is), which is what zlib's crc32_combine
// does.
func crc32cZeros(crc uint32, n int64) uint32 {
	return ^mulModP(xPow8n(uint64(n)), ^crc)
}

// polyC is the Castagnoli polynomial, reflected.
const polyC = 0x82f63b78

// mulModP multiplies a and b modulo polyC (reflected: bit 31 is x^0).
func mulModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		if b&1 != 0 {
			b = b>>1 ^ polyC
		} else {
			b >>= 1
		}
	}
	return p
}

// x2n[k] is x^(2^k) modulo polyC.
var x2n = func() (t [64]uint32) {
	p := uint32(1) << 30 // x^1
	for k := range t {
		t[k] = p
		p = mulModP(p, p)
	}
	return t
}()

// xPow8n is x^(8n) modulo polyC.
func xPow8n(n uint64) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = mulModP(x2n[k%64], p)
		}
	}
	return p
}

// sumChunk is how much of a data extent SumFile reads at a time.
const sumChunk = 1 << 20

// SumFile is the CRC-32C of f's bytes, holes as zeros, as MemoryHash sums
// them: it reads only f's data extents (lseek SEEK_DATA and SEEK_HOLE, and
// pread; f's offset is put back after). f must not change meanwhile.
func SumFile(f *os.File) (sum uint32, size int64, err error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	size = fi.Size()
	var h MemoryHash
	buf := make([]byte, sumChunk)
	fd := int(f.Fd())
	if was, err := unix.Seek(fd, 0, io.SeekCurrent); err == nil {
		defer unix.Seek(fd, was, io.SeekStart)
	}
	for off := int64(0); off < size; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, unix.ENXIO):
			start = size // only a hole after off
		case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP):
			start = off // no SEEK_DATA here: read it all
		case err != nil:
			return 0, 0, fmt.Errorf("SEEK_DATA: %w", err)
		}
		start = min(start, size)
		h.Zeros(start - off)
		if start == size {
			break
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil || end <= start {
			end = size // no SEEK_HOLE here, or an answer that would not move on
		}
		end = min(end, size)
		for at := start; at < end; {
			chunk := buf[:min(int64(len(buf)), end-at)]
			k, err := f.ReadAt(chunk, at)
			if k < len(chunk) {
				if err == nil || errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return 0, 0, fmt.Errorf("read at %#x: %w", at, err)
			}
			h.Write(chunk)
			at += int64(k)
		}
		off = end
	}
	return h.Sum32(), size, nil
}

// MemorySum reads the memory file's sum from the header of the state file
// r holds (at offset 0; r's offset is not used). It is ErrNoMemorySum for
// a state file written without one, and wraps ErrNotStateFile or
// ErrVersion for a file that is not a state file of this format.
func MemorySum(r io.ReaderAt) (uint32, error) {
	h := make([]byte, headerSize)
	if n, err := r.ReadAt(h, 0); n < len(h) {
		if n >= len(Magic) && string(h[:len(Magic)]) == Magic {
			return 0, fmt.Errorf("%w: header cut short after %d of %d bytes", ErrCorrupt, n, headerSize)
		}
		return 0, fmt.Errorf("%w (%d bytes: %v)", ErrNotStateFile, n, err)
	}
	if string(h[:len(Magic)]) != Magic {
		return 0, fmt.Errorf("%w (it does not start with %q)", ErrNotStateFile, Magic)
	}
	if v := binary.LittleEndian.Uint32(h[8:]); !knownVersion(v) {
		return 0, fmt.Errorf("%w: format version %d, this cellvm reads %d and %d", ErrVersion, v, FormatVersion, LayeredFormatVersion)
	}
	if binary.LittleEndian.Uint32(h[hdrFlags:])&flagMemSum == 0 {
		return 0, ErrNoMemorySum
	}
	return binary.LittleEndian.Uint32(h[hdrMemSum:]), nil
}

// VerifyMemory checks the memory file mem against the sum in the header
// of the state file state: nil when they match, an error wrapping
// ErrMemoryCorrupt when they do not, ErrNoMemorySum (or ErrNotStateFile,
// ErrVersion) when there is nothing to check against. It reads all of
// mem's data.
func VerifyMemory(state io.ReaderAt, mem *os.File) error {
	want, err := MemorySum(state)
	if err != nil {
		return err
	}
	got, size, err := SumFile(mem)
	if err != nil {
		return fmt.Errorf("memory file %s: %w", mem.Name(), err)
	}
	if got != want {
		return fmt.Errorf("%w: %s (%d MiB) sums to crc32c %08x, its state file says %08x", ErrMemoryCorrupt, mem.Name(), size>>20, got, want)
	}
	return nil
}
