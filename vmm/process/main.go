package process

import (
	"io"

	"github.com/cellvm/cellvm/stwguard"
	"github.com/cellvm/cellvm/vmm/control"
)

// Main is a VMM process's command, `vmm --config FILE` (control.Args):
// args are what follows "vmm". It runs the machine of the spec in FILE,
// with the descriptors the spec names, until the guest ends or SIGTERM or
// SIGINT stops it; the console goes to stdout, the VMM's log to stderr.
// Both binaries that can be a VMM run it: cellvm-vmm, the small one the
// daemon starts, and `cellvm vmm`. A usage error is a *UsageError.
func Main(args []string, stdout, stderr io.Writer) error {
	stwguard.Start() // before the jail's privilege drop stops the world ~45 times
	path, err := control.ConfigPath(args)
	if err != nil {
		return &UsageError{err}
	}
	spec, files, err := control.Load(path)
	if err != nil {
		return err
	}
	return Run(spec, files, Options{Stdout: stdout, Stderr: stderr, StopOnSignal: true})
}

// UsageError is a VMM command line that is not `vmm --config FILE`.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }
