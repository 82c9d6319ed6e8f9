// Package tenant puts many tenants in front of one sandbox.Manager.
//
// The engine records who owns what (Config.Tenant, SnapshotInfo.Tenant,
// WorkspaceInfo.Tenant, Event.Tenant) but enforces nothing: embedded in
// one program it has one user. A daemon that serves tokens for several
// tenants wraps its manager in a tenant.Manager, and every front end (the
// HTTP API, MCP, the E2B front end) calls the wrapper with the caller in
// the request's context (sandbox.WithCaller). The wrapper then:
//
//   - makes every object the caller creates its tenant's, whatever the
//     request said;
//   - answers ErrNotFound, with the same words as for a missing object,
//     for another tenant's sandbox, snapshot or workspace, so a tenant
//     never learns whether another's object exists;
//   - filters lists, the event stream and the capacity's use to the
//     caller's tenant;
//   - checks the tenant's quotas (sandboxes, vCPUs, memory, disk, creates
//     per minute) before anything is made, answering ErrQuota naming the
//     cap;
//   - checks a network allowlist against the operator's egress rules at
//     create, fork and policy update.
//
// An operator (a peer of the daemon's Unix socket) acting for no tenant
// sees and acts on everything and is bound by no quota (the egress rules
// bind it as they bind everyone: the host enforces them); acting for a
// tenant (Caller.Tenant set) it is that tenant. A request without a caller
// is refused: a front end that forgot to say who calls must not be
// mistaken for the operator.
//
// Env values are write-only: every Info the wrapper returns carries the
// env's names (Info.EnvNames), never its values.
package tenant
