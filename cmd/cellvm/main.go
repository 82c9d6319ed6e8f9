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
  run       create a sandbox, run Python (-c CODE | FILE | -), print the result, destroy it
  serve     run the daemon (HTTP API on a Unix socket)
  sandbox   create | ls | inspect | rm sandboxes in the daemon
  cell      run Python in a daemon's sandbox: cellvm cell SANDBOX -c CODE
  exec      run a command in a daemon's sandbox: cellvm exec SANDBOX -- ARGV...
  cp        copy a file to or from a sandbox: cellvm cp LOCAL sb-ID:/path (or the reverse)
  doctor    check this host for what cellvm needs
  chat      ask a model a question; it answers by running Python in a sandbox
  mcp       serve the sandbox tools to an MCP client over stdio
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
	code := 0
	switch args[0] {
	case "run":
		code, err = cmdRun(args[1:], stdin, stdout, stderr)
	case "sandbox":
		code, err = cmdSandbox(args[1:], stdout, stderr)
	case "cell":
		code, err = cmdCell(args[1:], stdin, stdout, stderr)
	case "exec":
		code, err = cmdExec(args[1:], stdin, stdout, stderr)
	case "cp":
		code, err = cmdCp(args[1:], stdout, stderr)
	case "chat":
		code, err = cmdChat(args[1:], stdin, stdout, stderr)
	case "mcp":
		err = cmdMCP(args[1:], stdin, stdout, stderr)
	case "serve":
		err = cmdServe(args[1:], stderr)
	case "doctor":
		code, err = cmdDoctor(args[1:], stdout, stderr)
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
		fmt.Fprintf(stderr, "cellvm %s: %v\n", args[0], err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		if errors.Is(err, kvm.ErrNoKVM) || errors.Is(err, kvm.ErrUnusable) {
			fmt.Fprintln(stderr, "hint: 'cellvm doctor' says what cellvm needs, and 'make test' runs the KVM tests in the nested rig")
		}
		if code == 0 {
			code = 1
		}
		return code
	}
	return code
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
