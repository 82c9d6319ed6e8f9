package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/cellpolicy"
)

// cellPolicyFlags are serve's --cell-policy flags: the operator's hook
// that allows or refuses every cell and exec (package cellpolicy).
type cellPolicyFlags struct {
	hook    string
	timeout time.Duration
}

// maxCellPolicyTimeout bounds --cell-policy-timeout: every cell waits for
// the hook, and a hook slower than this is a mistake.
const maxCellPolicyTimeout = 5 * time.Minute

func addCellPolicyFlags(fs *pflag.FlagSet) *cellPolicyFlags {
	f := &cellPolicyFlags{}
	fs.StringVar(&f.hook, "cell-policy", "", "`PATH` of an executable (no shell, no arguments) run for every cell and exec, "+
		"as the daemon's user, with the request as one line of JSON on stdin "+
		`({"kind":"cell"|"exec","code"|"argv",...,"language","tenant","operator","sandbox"}); `+
		"exit 0 allows, anything else refuses with its first line of stderr as the reason (a PolicyRefused result); "+
		"a hook that times out or crashes refuses")
	fs.DurationVar(&f.timeout, "cell-policy-timeout", cellpolicy.DefaultTimeout, "how long the --cell-policy hook may take per request; past it the hook's process group is killed and the request refused")
	return f
}

// check checks the flags at start, so a missing hook fails the daemon's
// start rather than every cell.
func (f *cellPolicyFlags) check() error {
	if f == nil {
		return nil
	}
	if f.timeout <= 0 || f.timeout > maxCellPolicyTimeout {
		return usagef("--cell-policy-timeout %v: want more than 0 and at most %v", f.timeout, maxCellPolicyTimeout)
	}
	if f.hook == "" {
		return nil
	}
	if err := cellpolicy.CheckHook(f.hook); err != nil {
		return usagef("--cell-policy: %v", err)
	}
	return nil
}

// wrap puts the hook in front of m (m itself without --cell-policy).
// onRefuse, if not nil, is told of every refusal (the audit log).
func (f *cellPolicyFlags) wrap(m sandbox.Manager, log *slog.Logger, onRefuse func(context.Context, cellpolicy.Refusal)) (sandbox.Manager, error) {
	if f == nil || f.hook == "" {
		return m, nil
	}
	pm, err := cellpolicy.New(m, cellpolicy.Options{Hook: f.hook, Timeout: f.timeout, Log: log, OnRefuse: onRefuse})
	if err != nil {
		return nil, usageError{err}
	}
	log.Info("every cell and exec is asked of the cell policy hook", "hook", f.hook, "timeout", f.timeout)
	return pm, nil
}
