package interp

// Running reports whether the session's program runs now: started by a
// cell or Restart and not exited since. The guest's session registry
// (package guestinit/sessions) lists it for each context.
func (in *Interp) Running() bool {
	p := in.cur.Load()
	return p != nil && !p.exited.Load()
}
