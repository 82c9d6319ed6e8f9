package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/kvm"
)

// Exit codes. They are part of the CLI's contract (README, `cellvm -h`).
const (
	exitOK          = 0   // the command did what was asked; a cell ended ok
	exitError       = 1   // a cell raised, or the command failed
	exitUsage       = 2   // bad flags or arguments; nothing was done
	exitUnreachable = 3   // no daemon at the socket or URL, or no usable KVM
	exitTimeout     = 124 // the cell (or exec'd command) ran past its timeout
	exitLost        = 125 // the interpreter or the sandbox's VM was lost
)

const exitCodesHelp = `Exit codes:
  0    ok
  1    the cell raised an error, or the command failed
  2    bad flags or arguments (nothing was done)
  3    cannot reach the daemon, or this host's KVM cannot run guests
  124  the cell timed out
  125  the interpreter or the sandbox was lost
With --json, errors are printed to stdout as {"error": {"code", "message"}}.`

// usageError is a bad flag or argument.
type usageError struct{ error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// unreachableError is a daemon that cannot be reached.
type unreachableError struct{ error }

// exitStatus ends a command with a status and no message: the command has
// already said what happened (a cell's result, an exec's output).
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// cellExit is the exit code of a cell's result.
func cellExit(r cell.Result) int {
	switch r.Status {
	case cell.StatusOK:
		return exitOK
	case cell.StatusTimeout:
		return exitTimeout
	case cell.StatusLost:
		return exitLost
	}
	return exitError
}

// classify maps an error to its exit code and the code of its JSON form.
func classify(err error) (int, string) {
	var ue usageError
	var ur unreachableError
	var ae *api.Error
	var ne *net.OpError
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var ch tls.RecordHeaderError
	switch {
	case errors.As(err, &ue), isCobraUsage(err):
		return exitUsage, "usage"
	case errors.Is(err, kvm.ErrNoKVM), errors.Is(err, kvm.ErrUnusable):
		return exitUnreachable, "no_kvm"
	case errors.As(err, &ur):
		return exitUnreachable, "unreachable"
	case errors.As(err, &ae):
		if ae.Code == api.CodeLost {
			return exitLost, ae.Code
		}
		return exitError, ae.Code
	case errors.As(err, &ne) && ne.Op == "dial", errors.As(err, &cv), errors.As(err, &ua), errors.As(err, &ch):
		return exitUnreachable, "unreachable"
	}
	return exitError, "error"
}

// isCobraUsage recognizes cobra's own argument errors (an unknown
// command), which it returns as plain errors.
func isCobraUsage(err error) bool {
	return strings.HasPrefix(err.Error(), "unknown command ") || strings.HasPrefix(err.Error(), "unknown flag") ||
		strings.HasPrefix(err.Error(), "unknown shorthand flag")
}

// exit prints err the way the invocation asked and returns the status.
func (a *app) exit(cmd *cobra.Command, err error) int {
	if err == nil {
		return exitOK
	}
	var st exitStatus
	if errors.As(err, &st) {
		return int(st)
	}
	code, jsonCode := classify(err)
	name := "cellvm"
	if cmd != nil {
		name = cmd.CommandPath()
	}
	if a.jsonOut {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": jsonCode, "message": err.Error(), "exit": code}})
		fmt.Fprintln(a.stdout, string(b))
		return code
	}
	fmt.Fprintf(a.stderr, "%s: %v\n", name, err)
	switch {
	case code == exitUsage:
		fmt.Fprintf(a.stderr, "Run '%s -h' for its flags and arguments.\n", name)
	case errors.Is(err, kvm.ErrNoKVM) || errors.Is(err, kvm.ErrUnusable):
		fmt.Fprintln(a.stderr, "hint: 'cellvm doctor' says what cellvm needs, and 'make test' runs the KVM tests in the nested rig")
	}
	return code
}

// Argument checkers: cobra's own return plain errors; these return usage
// errors, so a bad command line exits 2 before anything is done.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.HasSubCommands() {
			return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
		}
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("want %s, got %d argument(s)", what, len(args))
		}
		return nil
	}
}

func minArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usagef("want %s", what)
		}
		return nil
	}
}
