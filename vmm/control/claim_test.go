package control

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// claimPair is a SOCK_SEQPACKET pair as a launcher makes for a pooled
// process: the launcher's end as a file, the process's as a descriptor.
func claimPair(t *testing.T) (*os.File, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[1]) })
	f := os.NewFile(uintptr(fds[0]), "pool")
	t.Cleanup(func() { f.Close() })
	return f, fds[1]
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	return len(ents)
}

// claimFiles are a spec with two slots (a passed disk and the TAP) and
// the files a launcher sends with it, as SendClaim takes them.
type claimFiles struct {
	spec, console, log *os.File
	extra              []*os.File
	s                  Spec
}

func newClaim(t *testing.T) claimFiles {
	t.Helper()
	dir := t.TempDir()
	disk := filepath.Join(dir, "ws.ext4")
	if err := os.WriteFile(disk, []byte("the workspace"), 0o600); err != nil {
		t.Fatal(err)
	}
	var c claimFiles
	open := func(path string, flag int) *os.File {
		f, err := os.OpenFile(path, flag, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	files := Files{DiskSlot(1): open(disk, os.O_RDWR), SlotTAP: open(os.DevNull, os.O_RDWR)}
	c.s = goodSpec()
	extra, err := c.s.Pass(files)
	if err != nil {
		t.Fatal(err)
	}
	c.extra = extra
	c.spec = open(writeSpec(t, c.s), os.O_RDONLY)
	c.console = open(filepath.Join(dir, "console.log"), os.O_CREATE|os.O_RDWR)
	c.log = open(filepath.Join(dir, "vmm.log"), os.O_CREATE|os.O_WRONLY)
	return c
}

// TestClaimRoundTrip: a pooled process receives its spec as Load reads
// it, its slots' files by name (the ones sent, in their slots), and its
// console and log; the descriptors it did not keep are closed.
func TestClaimRoundTrip(t *testing.T) {
	c := newClaim(t)
	sock, fd := claimPair(t)
	before := openFDs(t)
	if err := SendClaim(sock, c.spec, c.console, c.log, c.extra); err != nil {
		t.Fatal(err)
	}
	s, files, cl, err := ReceiveClaim(fd)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s, c.s) {
		t.Errorf("received spec %+v, sent %+v", s, c.s)
	}
	if len(files) != 2 || files[DiskSlot(1)].Name() != "workspace notes" {
		t.Fatalf("received files %v", files)
	}
	b, err := io.ReadAll(files[DiskSlot(1)])
	if err != nil || string(b) != "the workspace" {
		t.Errorf("the disk slot reads %q, %v", b, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(files[SlotTAP].Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		t.Errorf("the TAP slot is not the character device sent: %v", err)
	}
	if _, err := cl.Console.WriteString("console line\n"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(c.console.Name()); string(b) != "console line\n" {
		t.Errorf("the console received is not the one sent: it holds %q", b)
	}
	// The spec, slots, console and log: five descriptors came, four stay.
	if got := openFDs(t); got != before+4 {
		t.Errorf("%d descriptors open after the claim, want %d (the spec's is closed)", got, before+4)
	}
	files.Close()
	cl.Console.Close()
	cl.Log.Close()
	if got := openFDs(t); got != before {
		t.Errorf("%d descriptors open once the claim's files are closed, want %d", got, before)
	}
}

// TestClaimUnclaimed: a launcher that closes its end without a claim
// makes the pooled process's wait end with ErrUnclaimed.
func TestClaimUnclaimed(t *testing.T) {
	sock, fd := claimPair(t)
	sock.Close()
	if _, _, _, err := ReceiveClaim(fd); !errors.Is(err, ErrUnclaimed) {
		t.Fatalf("ReceiveClaim after the launcher closed: %v, want ErrUnclaimed", err)
	}
}

// TestClaimRefused: a claim that is not one the spec describes is refused
// with a message naming what is wrong, and every descriptor it carried is
// closed.
func TestClaimRefused(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for _, tc := range []struct {
		name  string
		send  func(c claimFiles, sock *os.File) error
		wants string
	}{
		{"a slot short", func(c claimFiles, sock *os.File) error {
			return SendClaim(sock, c.spec, c.console, c.log, c.extra[:1])
		}, "carries 1 slot files, its spec names 2"},
		{"a pipe for the disk", func(c claimFiles, sock *os.File) error {
			return SendClaim(sock, c.spec, c.console, c.log, []*os.File{r, c.extra[1]})
		}, "is not a regular file"},
		{"no lead files", func(c claimFiles, sock *os.File) error {
			return unix.Sendmsg(int(sock.Fd()), []byte(claimMagic), unix.UnixRights(int(c.spec.Fd())), nil, 0)
		}, "want the spec, console and log first"},
		{"not a claim", func(c claimFiles, sock *os.File) error {
			return unix.Sendmsg(int(sock.Fd()), []byte("hello"), unix.UnixRights(int(c.spec.Fd()), int(r.Fd())), nil, 0)
		}, "not a claim"},
		{"a spec that is not one", func(c claimFiles, sock *os.File) error {
			junk := filepath.Join(t.TempDir(), "junk.json")
			os.WriteFile(junk, []byte("{not json"), 0o600)
			f, err := os.Open(junk)
			if err != nil {
				return err
			}
			defer f.Close()
			return SendClaim(sock, f, c.console, c.log, c.extra)
		}, "parse the claim's spec"},
		{"a pipe for the spec", func(c claimFiles, sock *os.File) error {
			return SendClaim(sock, r, c.console, c.log, c.extra)
		}, "is not a regular file"},
		{"too many files", func(c claimFiles, sock *os.File) error {
			fds := []int{int(c.spec.Fd()), int(c.console.Fd()), int(c.log.Fd())}
			for range maxClaimFiles {
				fds = append(fds, int(c.extra[0].Fd()))
			}
			return unix.Sendmsg(int(sock.Fd()), []byte(claimMagic), unix.UnixRights(fds...), nil, 0)
		}, "cut short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClaim(t)
			sock, fd := claimPair(t)
			before := openFDs(t)
			if err := tc.send(c, sock); err != nil {
				t.Fatal(err)
			}
			_, files, _, err := ReceiveClaim(fd)
			if err == nil || !strings.Contains(err.Error(), tc.wants) {
				files.Close()
				t.Fatalf("ReceiveClaim = %v, want an error with %q", err, tc.wants)
			}
			if got := openFDs(t); got != before {
				t.Errorf("%d descriptors open after a refused claim, want %d: it leaked what it carried", got, before)
			}
		})
	}
}

// TestSendClaimBounded: a claim of more files than a pooled process
// takes is refused by the launcher before anything is sent.
func TestSendClaimBounded(t *testing.T) {
	c := newClaim(t)
	sock, _ := claimPair(t)
	extra := make([]*os.File, maxClaimFiles)
	for i := range extra {
		extra[i] = c.extra[0]
	}
	if err := SendClaim(sock, c.spec, c.console, c.log, extra); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("SendClaim of %d files: %v", len(extra)+3, err)
	}
}

// TestParseArgs: the VMM's two command lines, and a usage error for
// anything else.
func TestParseArgs(t *testing.T) {
	if p, pooled, err := ParseArgs(PooledArgs()[1:]); err != nil || !pooled || p != "" {
		t.Errorf("ParseArgs(pooled) = %q, %v, %v", p, pooled, err)
	}
	if p, pooled, err := ParseArgs(Args("/x/vmm.json")[1:]); err != nil || pooled || p != "/x/vmm.json" {
		t.Errorf("ParseArgs(config) = %q, %v, %v", p, pooled, err)
	}
	for _, bad := range [][]string{nil, {"--pooled", "x"}, {"--config"}, {"--other"}} {
		if _, _, err := ParseArgs(bad); err == nil || !strings.Contains(err.Error(), "usage") {
			t.Errorf("ParseArgs(%q) = %v, want a usage error", bad, err)
		}
	}
}
