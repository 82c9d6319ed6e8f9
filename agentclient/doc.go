// Package agentclient is the host side of the agent protocol
// (guestinit/proto): it reaches a VM's agent through the VMM's vsock Unix
// socket (Firecracker's "CONNECT <port>" handshake) and offers the agent's
// operations as plain Go calls.
//
// The agent serves one request per connection at a time, so a Client keeps
// a small pool of connections and opens another when every one is busy:
// an Interrupt from one goroutine reaches a cell that RunCell runs in
// another. Everything the guest sends is validated and bounded by proto.
package agentclient
