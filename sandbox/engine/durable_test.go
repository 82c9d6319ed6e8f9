package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// stateHeader is a state file's header (vmm/snapshot's layout) that says
// its memory file sums to memSum; withSum false leaves the sum out, as an
// older cellvm did. The body is left out: only the header is read here.
func stateHeader(memSum uint32, withSum bool) []byte {
	h := make([]byte, 32)
	copy(h, snapshot.Magic)
	binary.LittleEndian.PutUint32(h[8:], snapshot.FormatVersion)
	if withSum {
		binary.LittleEndian.PutUint32(h[12:], 1)
		binary.LittleEndian.PutUint32(h[28:], memSum)
	}
	return h
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

// writeImage writes a machine image into dir: a memory file of mem and a
// state file header that sums it to sum.
func writeImage(t *testing.T, dir string, mem []byte, state []byte) (stateFile, memFile *os.File) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, snapMemFile), mem, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, snapStateFile), state, 0o600); err != nil {
		t.Fatal(err)
	}
	open := func(name string) *os.File {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	return open(snapStateFile), open(snapMemFile)
}

// TestVerifyImage: a memory file that matches its state file's digest
// passes, one that does not is refused as damaged (errImageCorrupt); a
// state file without a digest (an older cellvm's) or that is no state
// file at all is left to the VMM; an image verified once and changed
// afterwards is checked again.
func TestVerifyImage(t *testing.T) {
	mem := bytes.Repeat([]byte("guest memory "), 10000)
	dir := t.TempDir()
	state, memf := writeImage(t, dir, mem, stateHeader(crc32c(mem), true))
	if err := verifyImage(state, memf); err != nil {
		t.Fatalf("a good image: %v", err)
	}
	// The same image changed after its check (a byte rewritten in place):
	// its times changed, so it is summed again, and refused. (File times
	// move with the kernel's clock tick: the write waits one out.)
	time.Sleep(20 * time.Millisecond)
	f, err := os.OpenFile(filepath.Join(dir, snapMemFile), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("G"), 5000)
	f.Close()
	err = verifyImage(state, memf)
	if !errors.Is(err, errImageCorrupt) || !errors.Is(err, snapshot.ErrMemoryCorrupt) {
		t.Fatalf("a memory file changed after its check: %v, want errImageCorrupt", err)
	}
	if !strings.Contains(err.Error(), "crc32c") {
		t.Errorf("the refusal does not say what differs: %v", err)
	}
	if err := verifyImageDir(dir); !errors.Is(err, errImageCorrupt) {
		t.Errorf("verifyImageDir of the damaged image: %v, want errImageCorrupt", err)
	}
	if err := verifyImageDir(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("verifyImageDir of an empty directory: %v, want ErrNotExist", err)
	}

	for name, st := range map[string][]byte{
		"no digest":      stateHeader(0, false),
		"no state file":  []byte("fake vm state 1\n"),
		"another format": append([]byte(snapshot.Magic), 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
	} {
		state, memf := writeImage(t, t.TempDir(), mem, st)
		if err := verifyImage(state, memf); err != nil {
			t.Errorf("%s: %v, want it left to the VMM", name, err)
		}
	}
	state, memf = writeImage(t, t.TempDir(), mem, stateHeader(crc32c(mem), true)[:20])
	if err := verifyImage(state, memf); !errors.Is(err, errImageCorrupt) {
		t.Errorf("a state file header cut short: %v, want errImageCorrupt", err)
	}
}

// TestResumeRefusesADamagedImage: a paused sandbox whose memory file no
// longer matches its state file's digest is not resumed: the daemon
// refuses it before a VMM starts (the fake VMM would have refused the
// header-only state file with an error of its own), with an error that
// says the image is damaged, and the sandbox stays paused with its image.
func TestResumeRefusesADamagedImage(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	cellText(t, m, info.ID, "x = 41")
	if err := m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	image := filepath.Join(m.sandboxDir(info.ID), pausedDir)
	mem, err := os.ReadFile(filepath.Join(image, snapMemFile))
	if err != nil {
		t.Fatal(err)
	}
	// The image as a real VMM writes it: a state file whose header sums
	// the memory file; then one byte of the memory file goes bad.
	fakeState, err := os.ReadFile(filepath.Join(image, snapStateFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(image, snapStateFile), stateHeader(crc32c(mem), true), 0o600); err != nil {
		t.Fatal(err)
	}
	mem[len(mem)/2] ^= 0x10
	if err := os.WriteFile(filepath.Join(image, snapMemFile), mem, 0o600); err != nil {
		t.Fatal(err)
	}
	err = m.Resume(ctx, info.ID)
	if !errors.Is(err, errImageCorrupt) {
		t.Fatalf("resume of a damaged image: %v, want errImageCorrupt", err)
	}
	t.Log(err)
	if st := stateOf(t, m, info.ID); st != sandbox.StatePaused {
		t.Errorf("after the refused resume the sandbox is %s, want paused", st)
	}
	// The image was kept: mended, it resumes with its variables.
	mem[len(mem)/2] ^= 0x10
	if err := os.WriteFile(filepath.Join(image, snapMemFile), mem, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(image, snapStateFile), fakeState, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := cellText(t, m, info.ID, "x"); got != "41" {
		t.Errorf("x after the mended image's resume: %q, want 41", got)
	}
}

// TestDurableWrites: writeFileSync writes (and replaces) a file's
// contents, and renameDurable moves a directory with what it holds. Their
// syncs cannot be seen without a power cut; this is that they do what
// os.WriteFile and os.Rename did, and fail as they did.
func TestDurableWrites(t *testing.T) {
	dir := t.TempDir()
	tmp := filepath.Join(dir, "snap-1"+partialSuffix)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(tmp, snapMetaFile)
	for _, s := range []string{"a longer first version", "second"} {
		if err := writeFileSync(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(p); string(b) != s {
			t.Fatalf("file holds %q, want %q", b, s)
		}
	}
	to := filepath.Join(dir, "sub", "snap-1")
	if err := os.Mkdir(filepath.Dir(to), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := renameDurable(tmp, to); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(to, snapMetaFile)); string(b) != "second" {
		t.Errorf("the renamed directory holds %q", b)
	}
	if err := renameDurable(tmp, to); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("renaming what is gone: %v, want ErrNotExist", err)
	}
	if err := writeFileSync(filepath.Join(dir, "none", "x"), nil, 0o600); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("writing into a missing directory: %v, want ErrNotExist", err)
	}
}

// TestTrustedImageSkipsTheSum: an image this daemon's VMM wrote (trusted
// at its save) is not summed at its restore, so a resume or a fork pays
// nothing; once either file changes, it is summed again. The trusted
// image here has a wrong digest, which only a sum would see.
func TestTrustedImageSkipsTheSum(t *testing.T) {
	mem := bytes.Repeat([]byte("guest memory "), 10000)
	dir := t.TempDir()
	state, memf := writeImage(t, dir, mem, stateHeader(crc32c(mem)^1, true))
	trustImage(dir)
	if err := verifyImage(state, memf); err != nil {
		t.Fatalf("a trusted image was summed: %v", err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(dir, snapMemFile), mem, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := verifyImage(state, memf); !errors.Is(err, errImageCorrupt) {
		t.Fatalf("a trusted image rewritten since: %v, want it summed and refused", err)
	}
}
