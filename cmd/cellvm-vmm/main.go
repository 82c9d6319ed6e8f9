// Command cellvm-vmm is the process the cellvm daemon starts for each VM:
// `cellvm-vmm vmm --config FILE`, the same body (package vmm/process) as
// `cellvm vmm`, in a binary that links only the VMM.
//
// Why a binary of its own: every process runs the init functions of every
// package its binary links, and cellvm links the daemon, the API, MCP, the
// OCI and DNS libraries and the CLI. As a VMM that cost about 15 MiB of
// resident text and 4 MiB of heap per VM, and the time to start them
// before the first instruction of the guest (issue 28). It also keeps out
// of every VM's process code that no VMM needs. The daemon runs it only
// when it is the one built with it (cmd/cellvm: vmmBinary, by its
// SHA-256); otherwise it runs `cellvm vmm`.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/cellvm/cellvm/vmm/process"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "vmm" {
		fmt.Fprintln(os.Stderr, "usage: cellvm-vmm vmm --config FILE (the cellvm daemon starts it; see cellvm --help)")
		os.Exit(2)
	}
	if err := process.Main(os.Args[2:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "cellvm-vmm:", err)
		if _, ok := errors.AsType[*process.UsageError](err); ok {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
