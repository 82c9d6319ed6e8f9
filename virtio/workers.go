package virtio

import "sync"

// Workers runs a device's goroutines between Activate and Reset: Start
// launches them with a stop channel, Stop closes it and waits for every
// one to return. A zero Workers is ready to use; Stop without Start is a
// no-op, so Reset on an inactive device needs no check of its own.
type Workers struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

// Start runs each fn on its own goroutine with the channel Stop closes.
func (w *Workers) Start(fns ...func(stop <-chan struct{})) {
	w.stop = make(chan struct{})
	for _, fn := range fns {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			fn(w.stop)
		}()
	}
}

// Stop closes the stop channel and waits for the goroutines.
func (w *Workers) Stop() {
	if w.stop == nil {
		return
	}
	close(w.stop)
	w.wg.Wait()
	w.stop = nil
}
