package process

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/stwguard"
	"github.com/cellvm/cellvm/vmm/control"
)

// Main is a VMM process's command, `vmm --config FILE` or `vmm --pooled`
// (control.Args, control.PooledArgs): args are what follows "vmm". It
// runs the machine of the spec in FILE, with the descriptors the spec
// names, until the guest ends or SIGTERM or SIGINT stops it; the console
// goes to stdout, the VMM's log to stderr. A pooled process first waits
// for its claim (control.ReceiveClaim), which brings the spec, its files,
// and the console and log it then writes to instead; a launcher that goes
// away without claiming it ends it quietly. Both binaries that can be a
// VMM run it: cellvm-vmm, the small one the daemon starts, and `cellvm
// vmm`. A usage error is a *UsageError.
func Main(args []string, stdout, stderr io.Writer) error {
	stwguard.Start() // before the jail's privilege drop stops the world (about 45 times; a pooled process 41 of them while it waits)
	path, pooled, err := control.ParseArgs(args)
	if err != nil {
		return &UsageError{err}
	}
	if pooled {
		// The ~41 all-threads calls that empty the capability bounding
		// set are made now, while nothing waits for this process, not
		// in the claimed start's jail.Drop. A VMM never executes a
		// program, so an unjailed one loses nothing by it either. It
		// fails where the process may not (an unprivileged daemon's
		// unjailed pool): a jailed start's Drop then tries again, and
		// says why it cannot.
		jail.DropBoundingSet()
		spec, files, claim, err := Claimed()
		if errors.Is(err, control.ErrUnclaimed) {
			return nil
		}
		if err != nil {
			return err
		}
		return Run(spec, files, Options{Stdout: claim.Console, Stderr: claim.Log, StopOnSignal: true, Claimed: time.Now()})
	}
	spec, files, err := control.Load(path)
	if err != nil {
		return err
	}
	return Run(spec, files, Options{Stdout: stdout, Stderr: stderr, StopOnSignal: true})
}

// Claimed waits for a pooled process's claim on control.PoolFD, then makes
// the claim's console and log the process's stdout and stderr (where the
// Go runtime writes a crash too) and closes its end of the pool's socket.
// The returned Claim's files are os.Stdout and os.Stderr.
func Claimed() (control.Spec, control.Files, control.Claim, error) {
	spec, files, claim, err := control.ReceiveClaim(control.PoolFD)
	unix.Close(control.PoolFD)
	if err != nil {
		return spec, nil, claim, err
	}
	for _, d := range []struct {
		from *os.File
		to   int
	}{{claim.Console, 1}, {claim.Log, 2}} {
		err = errors.Join(err, unix.Dup3(int(d.from.Fd()), d.to, 0))
		d.from.Close()
	}
	if err != nil {
		files.Close()
		return spec, nil, control.Claim{}, fmt.Errorf("vmm pool: take the claim's console and log: %w", err)
	}
	return spec, files, control.Claim{Console: os.Stdout, Log: os.Stderr}, nil
}

// UsageError is a VMM command line that is not `vmm --config FILE`.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }
