package main

import (
	"errors"
	"io"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/vmm/process"
)

// vmmCommand is `cellvm vmm --config FILE`, one VM's process: the daemon
// starts the same as cellvm-vmm where it can (vmmBinary), and this one
// otherwise (package vmm/process is its body, vmm/control its spec). It
// parses its own arguments so that its argv shape stays fixed; the daemon
// finds its VMMs by what it recorded (pid, start time, cgroup), never by
// argv, which a compromised VMM could rewrite.
func (a *app) vmmCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "vmm --config FILE",
		Short:              "run one VM from a JSON config (started by the daemon)",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
				return cmd.Help()
			}
			return cmdVMM(args, a.stdout, a.stderr)
		},
	}
}

// cmdVMM runs one VM in this process (process.Main) until the guest ends
// or the process gets SIGTERM/SIGINT. The console goes to stdout, the
// VMM's log to stderr. The daemon starts cellvm-vmm instead where it can
// (vmmBinary): the same body in a binary a fifth the size.
func cmdVMM(args []string, stdout, stderr io.Writer) error {
	err := process.Main(args, stdout, stderr)
	if u, ok := errors.AsType[*process.UsageError](err); ok {
		return usageError{u.Err}
	}
	return err
}
