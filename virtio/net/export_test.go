package net

// The queue indexes, for the external tests (tap_real_test.go: it opens
// its TAP with netpolicy.OpenTAP, and netpolicy imports this package).
const (
	RxQueue = rxQueue
	TxQueue = txQueue
)
