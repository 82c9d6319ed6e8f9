// Package audit is cellvm's audit log: one JSON object a line for every
// request that creates, changes or runs something, every refused one, and
// each sandbox's end (its egress verdicts), in a file the daemon appends to
// (cellvm serve --audit-log, default STATE_DIR/audit.jsonl) and `cellvm
// audit` reads.
//
// Why a file of lines and not a database: it must survive the daemon dying
// at any moment and be readable by anyone's tools (jq, grep, a log
// shipper). Each record is written with one write(2) on a file opened
// O_APPEND, before the API's response completes, and nothing is buffered
// in the process: a kill -9 loses no written record and can at worst leave
// a torn last line (a host crash can leave one too), which Read and Follow
// skip. Records are not fsynced one by one; the page cache survives the
// process, not the host.
//
// The log rotates by size: when a record would take the file past
// Options.MaxBytes, the file is renamed to FILE.1 (FILE.1 to FILE.2 and so
// on, the oldest past Options.Keep removed) and a new FILE begins. A new
// file is made under a temporary name and renamed into place, so FILE
// always exists for a follower.
//
// A record's fields (JSON names are stable; empty ones are left out):
//
//	time           RFC 3339 time the request came (UTC, nanoseconds)
//	tenant         the tenant the request acted for
//	token_id       a short digest of the bearer token (never the token:
//	               Record has no field that could hold one)
//	peer           the client's address, or "uid:N" on the Unix socket
//	operator       true when the caller was the operator (the Unix socket),
//	               acting for tenant when it names one
//	action         "METHOD /route/{pattern}", or ActionSandboxEnd, ActionAuth
//	sandbox, snapshot, workspace, image
//	               the objects the request named or made
//	image_source, image_ref, image_digest
//	               an image a request made: build, pull or import; the
//	               reference pulled (or the base built on); the OCI
//	               manifest's digest (never a registry token)
//	code_sha256, code_bytes
//	               a cell's code, or an exec's argv as a JSON array:
//	               its SHA-256 (hex) and size in bytes
//	code           the code itself, only with Options.FullCode, clipped
//	               to Options.MaxCodeBytes (code_clipped says so)
//	path, size, sha256
//	               a file transfer's guest path, bytes and SHA-256 (hex)
//	policy         a network policy change: {"old_allow":[...],"new_allow":[...]}
//	status         the HTTP status answered
//	result_status  a cell's or exec's result status (ok, error, timeout, lost),
//	               or an image's making: ok, or the error code it ended with
//	killed_by      what killed a cell or command (timeout, oom, ...)
//	duration_ms    from the request's arrival to the record
//	error, reason  a refusal's or failure's error code and message
//	egress         at a sandbox's end: connections allowed and dropped,
//	               DNS answers forwarded and refused, per-name counts
//	suppressed     records a rate limit left out just before this one
//
// Every string and list is clipped by Write (ids to 256 bytes, reasons to
// 1 KiB, paths to 4 KiB, lists to 64 entries), so no line passes
// MaxLineBytes whatever a client sends.
package audit
