// Package proto is the wire protocol between the cellvm host and the agent
// in the guest (guestinit/agent), carried over virtio-vsock.
//
// It lives in its own package, free of guest-only code, so the host's
// client (agentclient) and the guest's server share one definition. Both
// ends treat the other as hostile: the guest may be running arbitrary code
// that has taken over the agent, and the host must never let a guest make it
// allocate without bound or panic. Every length is checked before anything
// is allocated, every frame type and field is validated, and unknown types
// are errors. See PROTOCOL.md for the format.
package proto
