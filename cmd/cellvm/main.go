// Command cellvm is the cellvm sandbox engine: the daemon, the CLI, and the
// per-VM VMM process, in one binary.
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/cellvm/cellvm/kvm"
)

const usage = `usage: cellvm <command> [flags]

commands:
  boot      boot a kernel with the serial console on stdin/stdout
  vmm       run one VM from a JSON config (started by the daemon)
  version   print the version

Run 'cellvm <command> -h' for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "boot":
		err = cmdBoot(args[1:], stdin, stdout, stderr)
	case "vmm":
		err = cmdVMM(args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "cellvm dev")
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "cellvm: unknown command %q\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "cellvm %s: %v\n", args[0], err)
			return 2
		}
		fmt.Fprintf(stderr, "cellvm %s: %v\n", args[0], err)
		if errors.Is(err, kvm.ErrNoKVM) {
			fmt.Fprintln(stderr, "hint: this host exposes no /dev/kvm; see 'make test' for the nested rig, or run on a host with hardware virtualization")
		}
		return 1
	}
	return 0
}

// usageError is a bad flag or argument.
type usageError struct{ error }

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, usageError{fmt.Errorf("bad --log-level %q (debug, info, warn, error)", level)}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
