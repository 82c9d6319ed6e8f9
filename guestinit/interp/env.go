package interp

import (
	"os"
	"sort"
)

// SetEnv sets variables that are added to the environment of the
// interpreter and of commands (the sandbox's env from its create request);
// a later call replaces the set. They come after the configured
// environment, so they override it, and before what the driver relies on
// (MPLBACKEND, PYTHONUNBUFFERED, ...), which they cannot override.
//
// A running interpreter keeps the environment it started with, so an idle
// one is stopped and the next cell starts one that sees the variables (its
// variables are lost: the host sets the environment before the first
// cell). A running cell is waited for.
func (in *Interp) SetEnv(env map[string]string) error {
	if in.closed.Load() {
		return ErrClosed
	}
	kv := make([]string, 0, len(env))
	for k, v := range env {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	in.runMu.Lock()
	defer in.runMu.Unlock()
	if in.closed.Load() {
		return ErrClosed
	}
	in.extraEnv.Store(&kv)
	in.stopLocked()
	return nil
}

// baseEnv is the environment of the interpreter and of commands before
// the driver's own settings: the configured one (default: the
// supervisor's) and SetEnv's variables. The result is a fresh slice.
func (in *Interp) baseEnv() []string {
	env := in.cfg.Env
	if env == nil {
		env = os.Environ()
	}
	env = append([]string(nil), env...)
	if extra := in.extraEnv.Load(); extra != nil {
		env = append(env, *extra...)
	}
	return env
}
