package interp

import "time"

// reseedWait bounds the driver's answer to a reseed.
const reseedWait = 5 * time.Second

// Reseed has the running interpreter draw new seeds for Python's random
// module and, if a cell imported it, NumPy's global generator, from the
// kernel (os.urandom). A VM restored from a snapshot has its parent's
// interpreter, generator state included, and would otherwise repeat its
// parent's random numbers; the agent reseeds the kernel first. numpy says
// whether NumPy's generator was reseeded too. With no interpreter running
// there is nothing to reseed: a new one seeds itself.
func (in *Interp) Reseed() (numpy bool, err error) {
	in.runMu.Lock()
	defer in.runMu.Unlock()
	if in.closed.Load() {
		return false, ErrClosed
	}
	if in.p == nil || in.p.exited.Load() {
		return false, nil
	}
	f, err := askDriver(in.p, "reseed", "reseeded", reseedWait)
	return f.NumPy, err
}
