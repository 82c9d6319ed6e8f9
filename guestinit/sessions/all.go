package sessions

import (
	"errors"
	"fmt"
	"maps"
)

// What reaches every session at once: an interrupt, the sandbox's
// environment, a reseed after a restore, the end.

// entries is a snapshot of the sessions, to call into without holding mu
// (a session's calls may wait for its running cell).
func (r *Registry) entries() []*entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*entry, 0, len(r.sessions))
	for _, e := range r.sessions {
		out = append(out, e)
	}
	return out
}

// Interrupt interrupts whichever cell runs (the host runs one at a time);
// it reports whether one did.
func (r *Registry) Interrupt() bool {
	was := false
	for _, e := range r.entries() {
		if e.s.Interrupt() {
			was = true
		}
	}
	return was
}

// SetEnv gives env to every session, those that exist (an idle one
// restarts to take it, as interp.Interp.SetEnv says) and those made
// later.
func (r *Registry) SetEnv(env map[string]string) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	r.env = maps.Clone(env)
	if r.env == nil {
		r.env = map[string]string{}
	}
	es := make([]*entry, 0, len(r.sessions))
	for _, e := range r.sessions {
		es = append(es, e)
	}
	r.mu.Unlock()
	var errs []error
	for _, e := range es {
		if err := e.s.SetEnv(env); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Reseed has every running session draw new seeds for its generators
// (after a fork or a template start, which would repeat the parent's);
// numpy says whether a Python session's NumPy generator was among them.
// A session that fails is said in the error; the others are reseeded
// still.
func (r *Registry) Reseed() (numpy bool, err error) {
	var errs []error
	for _, e := range r.entries() {
		np, err := e.s.Reseed()
		if err != nil {
			errs = append(errs, fmt.Errorf("reseed the %s session: %w", e.lang, err))
		}
		numpy = numpy || np
	}
	return numpy, errors.Join(errs...)
}

// Close closes every session, the primary last (the others use its
// cgroup). It is idempotent.
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	var rest []*entry
	for _, e := range r.sessions {
		if e.s != r.cfg.Primary {
			rest = append(rest, e)
		}
	}
	clear(r.sessions)
	r.mu.Unlock()
	var errs []error
	for _, e := range rest {
		errs = append(errs, r.closeEntry(e))
	}
	errs = append(errs, r.cfg.Primary.Close())
	return errors.Join(errs...)
}
