package snapshot

import (
	"bytes"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestZerosIsHashingZeros: adding n zeros (a hole) gives the sum hashing n
// zero bytes gives, from any starting sum.
func TestZerosIsHashingZeros(t *testing.T) {
	for _, start := range []uint32{0, 1, 0xdeadbeef, 0xffffffff} {
		for _, n := range []int64{1, 2, 3, 7, 8, 63, 4096, 4097, 1 << 20, 3<<20 + 5} {
			want := crc32.Update(start, castagnoli, make([]byte, n))
			h := MemoryHash{crc: start}
			h.Zeros(n)
			if got := h.Sum32(); got != want {
				t.Errorf("Zeros(%d) from %08x = %08x, hashing the zeros gives %08x", n, start, got, want)
			}
		}
	}
}

// TestMemoryHashMatchesCRC32C: pieces and holes in order sum as the whole
// file's bytes do.
func TestMemoryHashMatchesCRC32C(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var whole []byte
	var h MemoryHash
	for range 50 {
		n := r.IntN(10000)
		if r.IntN(2) == 0 {
			whole = append(whole, make([]byte, n)...)
			h.Zeros(int64(n))
			continue
		}
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		whole = append(whole, p...)
		h.Write(p)
	}
	if h.Sum32() != crc32.Checksum(whole, castagnoli) || h.Len() != int64(len(whole)) {
		t.Fatalf("sum %08x of %d bytes, want %08x of %d", h.Sum32(), h.Len(), crc32.Checksum(whole, castagnoli), len(whole))
	}
}

// sparseFile writes a file of size bytes with data at the given offsets
// (holes elsewhere) and returns it and its bytes.
func sparseFile(t testing.TB, size int64, data map[int64][]byte) (*os.File, []byte) {
	f, err := os.Create(filepath.Join(t.TempDir(), "vm.mem"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	for off, b := range data {
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
		copy(want[off:], b)
	}
	return f, want
}

// TestSumFileSkipsHolesAndMatches: SumFile over a sparse file is the CRC
// of its bytes.
func TestSumFileSkipsHolesAndMatches(t *testing.T) {
	f, want := sparseFile(t, 8<<20, map[int64][]byte{
		0:         bytes.Repeat([]byte{1}, 4096),
		3 << 20:   bytes.Repeat([]byte{2}, 3<<20),
		8<<20 - 1: {3},
	})
	sum, size, err := SumFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if size != int64(len(want)) || sum != crc32.Checksum(want, castagnoli) {
		t.Fatalf("SumFile = %08x of %d bytes, want %08x of %d", sum, size, crc32.Checksum(want, castagnoli), len(want))
	}
	// An empty file and an all-hole file.
	for _, n := range []int64{0, 5 << 20} {
		g, zeros := sparseFile(t, n, nil)
		if sum, _, err := SumFile(g); err != nil || sum != crc32.Checksum(zeros, castagnoli) {
			t.Errorf("SumFile of %d bytes of hole = %08x, %v; want %08x", n, sum, err, crc32.Checksum(zeros, castagnoli))
		}
	}
}

// stateWithSum writes a state file whose header holds sum.
func stateWithSum(t *testing.T, sum uint32) *bytes.Reader {
	var b bytes.Buffer
	if err := EncodeWithMemory(&b, sample(), sum); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(b.Bytes())
}

// TestVerifyMemoryRefusesACorruptedFile: a memory file that matches its
// state file passes; one byte changed, a page zeroed (a lost write), a
// file cut short or grown are each refused with ErrMemoryCorrupt.
func TestVerifyMemoryRefusesACorruptedFile(t *testing.T) {
	data := map[int64][]byte{4096: bytes.Repeat([]byte{0x5a}, 8192), 1 << 20: []byte("guest")}
	f, want := sparseFile(t, 2<<20, data)
	state := stateWithSum(t, crc32.Checksum(want, castagnoli))
	if err := VerifyMemory(state, f); err != nil {
		t.Fatalf("a good memory file: %v", err)
	}
	// The state file still decodes, and the sum is read back.
	if _, err := Decode(stateWithSum(t, 7)); err != nil {
		t.Fatalf("a state file with a memory sum does not decode: %v", err)
	}
	corrupt := map[string]func(f *os.File) error{
		"a flipped byte": func(f *os.File) error { _, err := f.WriteAt([]byte{0x5b}, 4096+100); return err },
		"a lost page":    func(f *os.File) error { _, err := f.WriteAt(make([]byte, 4096), 4096); return err },
		"cut short":      func(f *os.File) error { return f.Truncate(1 << 20) },
		"grown":          func(f *os.File) error { return f.Truncate(3 << 20) },
	}
	for name, spoil := range corrupt {
		t.Run(name, func(t *testing.T) {
			f, want := sparseFile(t, 2<<20, data)
			state := stateWithSum(t, crc32.Checksum(want, castagnoli))
			if err := spoil(f); err != nil {
				t.Fatal(err)
			}
			err := VerifyMemory(state, f)
			if !errors.Is(err, ErrMemoryCorrupt) {
				t.Fatalf("VerifyMemory = %v, want ErrMemoryCorrupt", err)
			}
			t.Log(err)
		})
	}
}

// TestMemorySumAbsentOrNotAStateFile: a state file without a sum (Encode,
// as an older cellvm wrote) says ErrNoMemorySum; other files say what
// they are not.
func TestMemorySumAbsentOrNotAStateFile(t *testing.T) {
	var b bytes.Buffer
	if err := Encode(&b, sample()); err != nil {
		t.Fatal(err)
	}
	if _, err := MemorySum(bytes.NewReader(b.Bytes())); !errors.Is(err, ErrNoMemorySum) {
		t.Errorf("no sum: %v, want ErrNoMemorySum", err)
	}
	if _, err := MemorySum(bytes.NewReader([]byte("fake vm state 1\n"))); !errors.Is(err, ErrNotStateFile) {
		t.Errorf("garbage: %v, want ErrNotStateFile", err)
	}
	if _, err := MemorySum(bytes.NewReader(b.Bytes()[:20])); !errors.Is(err, ErrCorrupt) {
		t.Errorf("cut header: %v, want ErrCorrupt", err)
	}
	other := bytes.Clone(b.Bytes())
	other[8] = 9
	if _, err := MemorySum(bytes.NewReader(other)); !errors.Is(err, ErrVersion) {
		t.Errorf("another version: %v, want ErrVersion", err)
	}
}

// BenchmarkSumFile is the check's cost per MiB of data (holes cost
// nothing); run with -bench SumFile -benchtime 5x.
func BenchmarkSumFile(b *testing.B) {
	const size = 256 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	f, _ := sparseFile(b, size, map[int64][]byte{0: data})
	b.SetBytes(size)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if _, _, err := SumFile(f); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(size>>20)*float64(b.N)/time.Since(start).Seconds(), "MiB/s")
}
