package store

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const testUUID = "0123abcd-4567-89ab-cdef-0123456789ab"

// mkfs makes an ext4 of blocks 4 KiB blocks with uuid in a file of
// fileBytes (no mount, no root needed).
func mkfs(t *testing.T, uuid string, blocks int, fileBytes int64) string {
	t.Helper()
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("no mkfs.ext4")
	}
	p := filepath.Join(t.TempDir(), "fs.ext4")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(fileBytes)
	f.Close()
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-U", uuid, "-b", "4096", p, strconv.Itoa(blocks)).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	return p
}

func checkFile(t *testing.T, p, uuid string, size int64) error {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	return CheckBuilt(f, fi.Size(), uuid, size)
}

func patch(t *testing.T, p string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestSuperblockOfARealExt4(t *testing.T) {
	p := mkfs(t, testUUID, 2048, 16<<20)
	sb, err := ReadSuperblockFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if sb.UUID != testUUID || sb.BlockSize != 4096 || sb.Blocks != 2048 || sb.Bytes() != 8<<20 {
		t.Fatalf("superblock %+v, want UUID %s, 2048 blocks of 4096", sb, testUUID)
	}
	if u, err := FSUUID(p); err != nil || u != testUUID {
		t.Errorf("FSUUID = %q, %v", u, err)
	}
	if err := checkFile(t, p, testUUID, 8<<20); err != nil {
		t.Errorf("CheckBuilt of a good file system: %v", err)
	}
}

func TestCheckBuiltRefusesWhatTheBuildDidNotMake(t *testing.T) {
	p := mkfs(t, testUUID, 2048, 16<<20)
	for _, c := range []struct {
		name, uuid string
		size       int64
		want       string
	}{
		{"another UUID", "ffffffff-4567-89ab-cdef-0123456789ab", 8 << 20, "UUID"},
		{"the builder's size is not the superblock's", testUUID, 12 << 20, "builder said"},
	} {
		if err := checkFile(t, p, c.uuid, c.size); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}

	// A file system that claims more than its file holds.
	big := mkfs(t, testUUID, 2048, 16<<20)
	if err := os.Truncate(big, 4<<20); err != nil {
		t.Fatal(err)
	}
	if err := checkFile(t, big, testUUID, 8<<20); err == nil || !strings.Contains(err.Error(), "more than its disk") {
		t.Errorf("a file system larger than its file: %v", err)
	}

	// A huge block count (64bit feature, s_blocks_count_hi) overflows
	// nothing and is refused.
	huge := mkfs(t, testUUID, 2048, 16<<20)
	f, _ := os.Open(huge)
	sb := make([]byte, 1024)
	f.ReadAt(sb, 1024)
	f.Close()
	incompat := binary.LittleEndian.Uint32(sb[sbIncompat:]) | incompat64bit
	patch(t, huge, 1024+sbIncompat, binary.LittleEndian.AppendUint32(nil, incompat))
	patch(t, huge, 1024+sbBlocksHi, binary.LittleEndian.AppendUint32(nil, 0xffffffff))
	if err := checkFile(t, huge, testUUID, 8<<20); err == nil {
		t.Error("a superblock of 2^64 blocks passed")
	}

	// A wild block size.
	wild := mkfs(t, testUUID, 2048, 16<<20)
	patch(t, wild, 1024+sbLogBlockSize, binary.LittleEndian.AppendUint32(nil, 40))
	if err := checkFile(t, wild, testUUID, 8<<20); err == nil || !strings.Contains(err.Error(), "1024 << 40") {
		t.Errorf("log block size 40: %v", err)
	}

	// No magic, and a file too short to hold a superblock.
	bad := mkfs(t, testUUID, 2048, 16<<20)
	patch(t, bad, 1024+sbMagic, []byte{0, 0})
	if err := checkFile(t, bad, testUUID, 8<<20); err == nil || !strings.Contains(err.Error(), "not an ext4") {
		t.Errorf("no magic: %v", err)
	}
	short := filepath.Join(t.TempDir(), "short")
	os.WriteFile(short, make([]byte, 1500), 0o644)
	if err := checkFile(t, short, testUUID, 8<<20); err == nil {
		t.Error("a 1500-byte file passed")
	}
}

func TestEntriesAreNamesPerTenant(t *testing.T) {
	for _, c := range []struct{ tenant, name, entry string }{
		{"", "web", "web"}, {"default", "web", "web"}, {"acme", "web", "acme~web"},
	} {
		if got := Entry(c.tenant, c.name); got != c.entry {
			t.Errorf("Entry(%q, %q) = %q, want %q", c.tenant, c.name, got, c.entry)
		}
		wantT := c.tenant
		if wantT == "default" {
			wantT = ""
		}
		if tn, n, ok := ParseEntry(c.entry); !ok || tn != wantT || n != c.name {
			t.Errorf("ParseEntry(%q) = %q, %q, %v", c.entry, tn, n, ok)
		}
	}
	for _, bad := range []string{"default~web", "acme~", "~web", "acme~default", "Acme~web", "a~b~c", "../x", "default", ".build-web-1"} {
		if _, _, ok := ParseEntry(bad); ok {
			t.Errorf("ParseEntry(%q) took it", bad)
		}
	}
	s := Store{Dir: t.TempDir()}
	for _, e := range []string{"web", "acme~web", "acme~db", ".build-web-1"} {
		os.MkdirAll(s.ImageDir(e), 0o755)
		os.WriteFile(filepath.Join(s.ImageDir(e), ImageFile), []byte("x"), 0o444)
	}
	var got []string
	for _, im := range s.Images() {
		got = append(got, im.Tenant+"/"+im.Name)
	}
	if strings.Join(got, ",") != "acme/db,acme/web,/web" {
		t.Errorf("Images() = %q", got)
	}
	if n := s.Names(); len(n) != 1 || n[0] != "web" {
		t.Errorf("Names() = %q, want the shared web only", n)
	}
	if err := s.Remove("acme~web", "1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.ImagePath("acme~web"); ok {
		t.Error("acme~web still there after Remove")
	}
}
