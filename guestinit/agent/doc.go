// Package agent is the guest side of the host<->guest protocol
// (guestinit/proto): a server, normally on vsock port 1024, that runs
// cells in the persistent session of their language and context
// (guestinit/sessions; contexts.go), runs commands, moves files in and
// out, and reports health.
//
// Each connection carries one request at a time; the host opens several
// connections to do things at once (an interrupt while a cell runs). The
// agent trusts nothing it reads: requests are validated by proto, paths by
// the policy in files.go, and every stream is bounded.
package agent
