// Package cellpolicy is the operator's validation layer in front of code:
// a sandbox.Manager wrapper that asks an operator's program (the hook,
// `cellvm serve --cell-policy PATH`) about every cell and every exec before
// the inner manager sees it. A process (StartProcess: a background
// command, a shell) is asked about as an exec (processes.go).
//
// Why a separate program, and not rules in the daemon: what an operator
// wants to forbid (a library, a host name, code that looks like a miner,
// anything past a classifier's score) is theirs, changes often and may
// need tools the daemon does not have. A program run per request with the
// request as JSON on stdin is the smallest contract that serves all of
// them, in any language.
//
// The contract. The hook is PATH itself, run with no arguments and no
// shell, in "/", with the daemon's environment, as the daemon's user (it
// is the operator's code, trusted as the daemon is). Its stdin is one
// line of JSON (Request):
//
//	{"kind":"cell","language":"python","code":"...","tenant":"alpha","operator":false,"sandbox":"sb-..."}
//	{"kind":"exec","argv":["ls","-l"],"tenant":"alpha","operator":false,"sandbox":"sb-..."}
//
// tenant is the caller's tenant from the request's context
// (sandbox.CallerFrom), "" when the request names none (an operator on
// the Unix socket acting for no tenant, or a front end that passes no
// caller). Exit status 0 allows. Any other status refuses, with the
// first line of the hook's stderr (control characters dropped, clipped
// to MaxReason bytes) as the reason. A hook that runs past its deadline
// (Options.Timeout), dies from a signal or cannot be started refuses too
// (fail closed), and the reason says which. At the deadline the hook's
// whole process group is killed; its stdout and stderr are read up to
// MaxOutput bytes each and the rest discarded. At most MaxConcurrent
// hooks run at once; a request that waits past the deadline for a slot
// is refused.
//
// What a refusal looks like. A cell is not run: RunCell returns a
// cell.Result with Status "error", Error.Name ErrorName ("PolicyRefused")
// and the reason as Error.Value, StateKept true (the interpreter was not
// touched), and a nil error, so every front end shows it as it shows a
// cell's exception, and a streaming caller gets an error event and its
// end event. An exec is not run either: Exec returns a cell.ExecResult
// with ExitCode ExecExitCode (126, a shell's "cannot execute") and
// Stderr "PolicyRefused: REASON", and a nil error, for the same reason:
// the exec route's results, not its errors, are what a model or a script
// reads. IsRefusedCell and IsRefusedExec recognise both, for the audit
// log and for tests, and Options.OnRefuse is told of each.
//
// Requests that would fail anyway (an unknown or lost sandbox, an
// invalid argv, code over the limit) get the inner manager's error
// before any hook runs, so the hook never sees them and a refusal never
// stands for "not found".
package cellpolicy
