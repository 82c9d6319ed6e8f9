package snapshot

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"runtime/debug"
)

// Magic opens every state file.
const Magic = "CELLVMST"

// FormatVersion is the state file format this cellvm writes for a
// snapshot whose memory file is a whole image. It changes whenever a field
// changes meaning or a restore would need something an older file lacks.
// A layered snapshot's is LayeredFormatVersion (layers.go); this cellvm
// reads both and no other.
const FormatVersion = 1

// knownVersion reports whether this cellvm reads state files of version v.
func knownVersion(v uint32) bool { return v == FormatVersion || v == LayeredFormatVersion }

// headerSize is the fixed header: magic, version, flags, body length,
// CRC-32C of the body, CRC-32C of the memory file (memdigest.go; the flags
// say whether it is there).
const headerSize = 8 + 4 + 4 + 8 + 4 + 4

// MaxBody bounds the body a reader accepts. A real one is tens of KiB per
// vCPU.
const MaxBody = 64 << 20

// Errors a read wraps, for callers that tell them apart.
var (
	ErrNotStateFile = errors.New("not a cellvm state file")
	ErrVersion      = errors.New("state file of another format version")
	ErrCorrupt      = errors.New("state file is truncated or corrupt")
	ErrInvalid      = errors.New("state file describes an impossible machine")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// VMMVersion names this cellvm build: its module version and, when the
// build recorded it, the source revision.
func VMMVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "cellvm (unknown build)"
	}
	v := "cellvm " + bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			v += " " + s.Value
		}
		if s.Key == "vcs.modified" && s.Value == "true" {
			v += "+dirty"
		}
	}
	return v
}

// Encode writes st as a state file to w, with no memory file digest. st
// must be valid.
func Encode(w io.Writer, st *State) error { return encodeFile(w, st, 0, 0) }

// EncodeWithMemory writes st as a state file to w, with memSum, the
// CRC-32C of its memory file (MemoryHash), in the header. st must be
// valid.
func EncodeWithMemory(w io.Writer, st *State, memSum uint32) error {
	return encodeFile(w, st, flagMemSum, memSum)
}

func encodeFile(w io.Writer, st *State, flags, memSum uint32) error {
	version := uint32(FormatVersion)
	if st.Machine.Layered() {
		version = LayeredFormatVersion
	}
	return encodeVersion(w, st, version, flags, memSum)
}

// encodeVersion writes st as a state file of format version, which it
// must be valid as (alone: a checkpoint's own state, checkpoint.go).
func encodeVersion(w io.Writer, st *State, version, flags, memSum uint32) error {
	if err := st.validateAs(version, false); err != nil {
		return err
	}
	return encodeValid(w, st, version, flags, memSum)
}

// encodeValid writes st, checked, as a state file of format version.
func encodeValid(w io.Writer, st *State, version, flags, memSum uint32) error {
	body, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	if len(body) > MaxBody {
		return fmt.Errorf("state of %d bytes is over the %d-byte limit", len(body), MaxBody)
	}
	h := make([]byte, headerSize)
	copy(h, Magic)
	binary.LittleEndian.PutUint32(h[8:], version)
	binary.LittleEndian.PutUint32(h[hdrFlags:], flags)
	binary.LittleEndian.PutUint32(h[hdrMemSum:], memSum)
	binary.LittleEndian.PutUint64(h[16:], uint64(len(body)))
	binary.LittleEndian.PutUint32(h[24:], crc32.Checksum(body, castagnoli))
	if _, err := w.Write(h); err != nil {
		return fmt.Errorf("write state file: %w", err)
	}
	if _, err := w.Write(body); err != nil {
		return fmt.Errorf("write state file: %w", err)
	}
	return nil
}

// Decode reads a state file from r and checks it (Validate). Whatever r
// holds, Decode returns an error rather than panic, and allocates no more
// than MaxBody. A checkpoint layer's own state file (checkpoint.go) is
// refused (its extents have no chain under them): it restores only
// composed with its chain.
func Decode(r io.Reader) (*State, error) {
	st, v, err := decodeUnchecked(r)
	if err != nil {
		return nil, err
	}
	if err := st.validateAs(v, false); err != nil {
		return nil, err
	}
	return st, nil
}

// decodeUnchecked reads a state file of a version this cellvm knows, not
// yet checked, and returns its version.
func decodeUnchecked(r io.Reader) (*State, uint32, error) {
	h := make([]byte, headerSize)
	if n, err := io.ReadFull(r, h); err != nil {
		if n < len(Magic) || string(h[:len(Magic)]) != Magic {
			return nil, 0, fmt.Errorf("%w (%d bytes, no %q header)", ErrNotStateFile, n, Magic)
		}
		return nil, 0, fmt.Errorf("%w: header cut short after %d of %d bytes", ErrCorrupt, n, headerSize)
	}
	if string(h[:len(Magic)]) != Magic {
		return nil, 0, fmt.Errorf("%w (it does not start with %q)", ErrNotStateFile, Magic)
	}
	v := binary.LittleEndian.Uint32(h[8:])
	if !knownVersion(v) {
		return nil, 0, fmt.Errorf("%w: the file is format version %d, this cellvm (%s) reads versions %d and %d only: take the snapshot again with this cellvm",
			ErrVersion, v, VMMVersion(), FormatVersion, LayeredFormatVersion)
	}
	n := binary.LittleEndian.Uint64(h[16:])
	if n > MaxBody {
		return nil, 0, fmt.Errorf("%w: header claims a %d-byte body, over the %d-byte limit", ErrCorrupt, n, MaxBody)
	}
	body, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil {
		return nil, 0, fmt.Errorf("read state file: %w", err)
	}
	if uint64(len(body)) != n {
		return nil, 0, fmt.Errorf("%w: truncated: the header says %d bytes of state, the file holds %d", ErrCorrupt, n, len(body))
	}
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(h[24:]); got != want {
		return nil, 0, fmt.Errorf("%w: checksum %#08x, the header says %#08x", ErrCorrupt, got, want)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	st := new(State)
	if err := dec.Decode(st); err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if dec.More() {
		return nil, 0, fmt.Errorf("%w: data after the state", ErrCorrupt)
	}
	return st, v, nil
}

// ReadFile decodes the state file at path.
func ReadFile(path string) (*State, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open state file: %w", err)
	}
	defer f.Close()
	st, err := Decode(f)
	if err != nil {
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	return st, nil
}
