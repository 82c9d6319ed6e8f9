package uart

import "fmt"

// State is the UART's registers and its receive FIFO, for a snapshot.
type State struct {
	IER, LCR, MCR, SCR, FCR, DLL, DLM uint8
	THREIntr                          bool // a THRE interrupt is pending
	RX                                []byte
}

// Save returns the UART's state.
func (u *UART) Save() State {
	u.mu.Lock()
	defer u.mu.Unlock()
	return State{
		IER: u.ier, LCR: u.lcr, MCR: u.mcr, SCR: u.scr, FCR: u.fcr, DLL: u.dll, DLM: u.dlm,
		THREIntr: u.threIntr, RX: append([]byte(nil), u.rx...),
	}
}

// Restore puts the UART in state st. Register values are taken as the
// guest could have written them (masked the same way); a receive FIFO
// longer than FIFOSize is refused.
func (u *UART) Restore(st State) error {
	if len(st.RX) > FIFOSize {
		return fmt.Errorf("uart: restore: %d bytes in a %d-byte receive FIFO", len(st.RX), FIFOSize)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ier, u.lcr, u.mcr, u.scr, u.fcr, u.dll, u.dlm = st.IER&0x0f, st.LCR, st.MCR&0x1f, st.SCR, st.FCR&0xc9, st.DLL, st.DLM
	u.threIntr = st.THREIntr
	u.rx = append(u.rx[:0], st.RX...)
	u.rxSpace.Broadcast()
	return nil
}
