// Package api is cellvm's HTTP/1.1 + JSON API on a Unix socket, its
// OpenAPI 3 document, and a Go client.
//
// The server is a thin translation of sandbox.Manager: it decodes and
// bounds requests, calls the manager, and maps sentinel errors to status
// codes. It holds no sandbox state of its own, so the HTTP layer is tested
// completely against a fake manager with no VM.
//
// Access control is the socket: ListenUnix creates it with mode 0600 and
// refuses, by SO_PEERCRED, connections from users other than the daemon's
// own and root. Anyone who can connect can run code in every sandbox, so
// both checks are kept, each covering a mistake in the other (a permissive
// parent directory, a socket passed to another user by a supervisor).
// AllowGroup opens the socket to one group as well.
//
// Over TCP (cellvm serve --listen) the server runs behind TLS and
// RequireToken: every request carries a bearer token from a token file,
// compared in constant time before anything else; failures (only they)
// are rate limited per client address, IPv6 by /64, in a bounded table,
// so a flood of failures can slow guessing but never refuse a valid token.
// Behind proxies named by WithTrustedProxies the client address comes from
// X-Forwarded-For. Dial is the client's side of both.
//
// Routes (the table in routes.go is the one source; the OpenAPI document is
// tested to match it):
//
//	GET    /v1/openapi.json
//	POST   /v1/sandboxes                      create
//	GET    /v1/sandboxes                      list (?label=k=v&state=S&limit=N&next=T)
//	GET    /v1/sandboxes/{id}                 info
//	DELETE /v1/sandboxes/{id}                 destroy
//	POST   /v1/sandboxes/{id}/cells           run a cell: Python, JavaScript, TypeScript or Bash
//	                                          ({"language", "context"}; NDJSON when asked)
//	POST   /v1/sandboxes/{id}/interrupt
//	POST   /v1/sandboxes/{id}/restart         a session afresh ({"language", "context"}; none: Python's)
//	GET    /v1/sandboxes/{id}/contexts        its sessions
//	POST   /v1/sandboxes/{id}/contexts        a named session ({"language", "name", "cwd"})
//	DELETE /v1/sandboxes/{id}/contexts/{name} ?language=L
//	POST   /v1/sandboxes/{id}/exec
//	PUT    /v1/sandboxes/{id}/files/{path...} upload (raw body)
//	GET    /v1/sandboxes/{id}/files/{path...} download (raw body)
//	PUT    /v1/sandboxes/{id}/network
//	POST   /v1/sandboxes/{id}/pause
//	POST   /v1/sandboxes/{id}/resume
//	POST   /v1/sandboxes/{id}/snapshot
//	POST   /v1/sandboxes/{id}/ttl             live ttl_s more from now
//	GET    /v1/sandboxes/{id}/logs        console, agent or vmm log (NDJSON with follow=1)
//	GET    /v1/events                     lifecycle events (NDJSON)
//	GET    /v1/capacity                   the host's caps and their use
//	GET    /v1/version                    the daemon's version, commit and Go
//	GET    /metrics                       Prometheus text format
//	GET    /v1/snapshots                  snapshots (POST /v1/sandboxes {"snapshot"} forks one)
//	GET    /v1/snapshots/{id}
//	DELETE /v1/snapshots/{id}
//	GET    /v1/workspaces                 named volumes kept across sandboxes
//	DELETE /v1/workspaces/{name}
//	GET    /v1/images                     root images sandboxes can boot
//	POST   /v1/images                     pull, import or build one (multipart, NDJSON progress)
//	DELETE /v1/images/{name}
//	GET|POST|DELETE /mcp                  MCP's Streamable HTTP (WithMCP)
//
// Errors are {"error":{"code":...,"message":...}}; see errors.go for the
// mapping of codes to statuses.
package api
