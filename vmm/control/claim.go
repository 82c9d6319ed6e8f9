package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// A pooled VMM process (`vmm --pooled`) is started before there is a
// machine for it: its launcher keeps a few waiting (the daemon's VMM pool),
// already cloned into the jail's namespaces and running, so that a start
// skips the clone, the exec and the Go runtime's start. It waits on
// descriptor PoolFD, one end of a SOCK_SEQPACKET socket pair, for one
// claim: a message whose body is claimMagic and whose descriptors
// (SCM_RIGHTS) are, in order,
//
//  0. its spec, open for reading (what `--config FILE` would name);
//  1. its console (what would be its stdout);
//  2. its log (its stderr);
//  3. and on: the files of the spec's slots, in the order of their
//     descriptor numbers as Pass assigned them (3, 4, ...).
//
// A launcher that goes away without a claim closes its end: the process
// reads end of file and exits (ErrUnclaimed), so a pool never outlives its
// daemon. What a claimed process does next is what `--config` does.
const (
	pooledArg = "--pooled"
	// PoolFD is the descriptor a pooled process waits for its claim on
	// (the first of exec.Cmd.ExtraFiles).
	PoolFD = 3
	// claimMagic is the body of a claim.
	claimMagic = "cellvm-claim/1"
	// claimLeadFiles are the descriptors of a claim before the slots':
	// the spec, the console, the log.
	claimLeadFiles = 3
	// maxClaimFiles bounds a claim's descriptors (SCM_MAX_FD is 253): a
	// spec's slots are a few disks, a TAP, a snapshot and its layers.
	maxClaimFiles = 64
)

// ErrUnclaimed is a pooled process's launcher closing its end without a
// claim: the process has nothing to do and exits.
var ErrUnclaimed = errors.New("vmm pool: the launcher went away without a claim")

// PooledArgs are the arguments after the binary of a pooled VMM process.
func PooledArgs() []string { return []string{Command, pooledArg} }

// ParseArgs parses the VMM command's arguments after Command: `--config
// FILE` (path) or `--pooled` (pooled).
func ParseArgs(args []string) (path string, pooled bool, err error) {
	if len(args) == 1 && args[0] == pooledArg {
		return "", true, nil
	}
	path, err = ConfigPath(args)
	if err != nil {
		return "", false, errors.New("usage: cellvm vmm --config FILE, or cellvm vmm --pooled")
	}
	return path, false, nil
}

// Claim is what a claimed pooled process was handed besides its spec and
// slots: its console and its log.
type Claim struct {
	Console, Log *os.File
}

// SendClaim is the launcher's side: it hands the pooled process at the
// other end of sock its spec (open for reading), its console and log, and
// extra, the slots' files in the order Pass returned them. The files stay
// the caller's. Nothing is sent if the claim would be refused for its
// size.
func SendClaim(sock *os.File, spec, console, log *os.File, extra []*os.File) error {
	if len(extra)+claimLeadFiles > maxClaimFiles {
		return fmt.Errorf("vmm pool: a claim of %d files, at most %d", len(extra)+claimLeadFiles, maxClaimFiles)
	}
	fds := []int{int(spec.Fd()), int(console.Fd()), int(log.Fd())}
	for _, f := range extra {
		fds = append(fds, int(f.Fd()))
	}
	rc, err := sock.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), []byte(claimMagic), unix.UnixRights(fds...), nil, 0)
		return serr != unix.EAGAIN
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("vmm pool: send the claim: %w", err)
	}
	return nil
}

// ReceiveClaim is the pooled process's side: it waits on descriptor fd for
// its claim and returns it as Load would have: the spec read strictly and
// validated, and its slots' files checked (each of its slot's kind, every
// slot filled, none extra). End of file without a claim is ErrUnclaimed.
// On any error every descriptor received is closed.
func ReceiveClaim(fd int) (Spec, Files, Claim, error) {
	var s Spec
	buf := make([]byte, len(claimMagic)+1)
	oob := make([]byte, unix.CmsgSpace(4*(maxClaimFiles+1)))
	var n, oobn, flags int
	var err error
	for {
		n, oobn, flags, _, err = unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return s, nil, Claim{}, fmt.Errorf("vmm pool: wait for a claim: %w", err)
	}
	fds, perr := claimFDs(oob[:oobn])
	closeAll := func() {
		for _, d := range fds {
			unix.Close(d)
		}
	}
	switch {
	case perr != nil:
		closeAll()
		return s, nil, Claim{}, perr
	case n == 0 && len(fds) == 0:
		return s, nil, Claim{}, ErrUnclaimed
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		closeAll()
		return s, nil, Claim{}, fmt.Errorf("vmm pool: a claim cut short (more than %d files, or a body that is not a claim's)", maxClaimFiles)
	case string(buf[:n]) != claimMagic:
		closeAll()
		return s, nil, Claim{}, fmt.Errorf("vmm pool: a message that is not a claim (%q)", buf[:n])
	case len(fds) < claimLeadFiles:
		closeAll()
		return s, nil, Claim{}, fmt.Errorf("vmm pool: a claim of %d files, want the spec, console and log first", len(fds))
	}
	s, files, err := claimSpec(fds)
	if err != nil {
		closeAll()
		return s, nil, Claim{}, err
	}
	unix.Close(fds[0]) // read: the spec's reader had its own copy
	return s, files, Claim{Console: os.NewFile(uintptr(fds[1]), "console"), Log: os.NewFile(uintptr(fds[2]), "vmm log")}, nil
}

// claimFDs are the descriptors of a claim's control messages.
func claimFDs(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("vmm pool: a claim's control message: %w", err)
	}
	var fds []int
	var bad error
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			bad = fmt.Errorf("vmm pool: a claim's control message that is not descriptors: %w", err)
			continue
		}
		fds = append(fds, got...)
	}
	return fds, bad
}

// claimSpec reads the spec at fds[0] strictly, checks that the slots'
// descriptors are those the claim carries after its lead files, each of its
// slot's kind, and takes them over. On error it has taken none: the
// caller closes fds.
func claimSpec(fds []int) (Spec, Files, error) {
	var s Spec
	if err := s.checkSlotFD("spec", fds[0]); err != nil {
		return s, nil, fmt.Errorf("vmm pool: the claim's spec: %w", err)
	}
	spec := os.NewFile(uintptr(dupOrNeg(fds[0])), "vmm spec")
	defer spec.Close()
	b, err := io.ReadAll(io.LimitReader(spec, maxSpecBytes+1))
	if err != nil {
		return s, nil, fmt.Errorf("vmm pool: read the claim's spec: %w", err)
	}
	if len(b) > maxSpecBytes {
		return s, nil, fmt.Errorf("vmm pool: the claim's spec is larger than %d bytes", maxSpecBytes)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&s); err != nil {
		return s, nil, fmt.Errorf("vmm pool: parse the claim's spec: %w", err)
	}
	if err := s.Validate(); err != nil {
		return s, nil, err
	}
	slots := fds[claimLeadFiles:]
	if len(s.Files) != len(slots) {
		return s, nil, fmt.Errorf("vmm pool: the claim carries %d slot files, its spec names %d", len(slots), len(s.Files))
	}
	for _, slot := range s.Slots() {
		if _, ok := s.Files[slot]; !ok {
			return s, nil, fmt.Errorf("vmm spec: slot %s has no file", slot)
		}
	}
	// Validate made the numbers distinct and 3 or more; with as many as
	// there are files, each is one of 3 .. 3+len-1.
	for slot, n := range s.Files {
		if n-3 >= len(slots) {
			return s, nil, fmt.Errorf("vmm pool: slot %s: descriptor %d, but the claim carries %d slot files", slot, n, len(slots))
		}
		if err := s.checkSlotFD(slot, slots[n-3]); err != nil {
			return s, nil, err
		}
	}
	files := Files{}
	for slot, n := range s.Files {
		files[slot] = os.NewFile(uintptr(slots[n-3]), s.slotName(slot))
	}
	return s, files, nil
}

// dupOrNeg duplicates fd (close-on-exec), so that the spec's reader can be
// closed without closing the claim's descriptor; -1 on failure, which the
// read then reports.
func dupOrNeg(fd int) int {
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return d
}
