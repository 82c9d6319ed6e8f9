// Package e2b is cellvm's E2B-compatible front end: E2B's own SDKs (npm
// e2b and @e2b/code-interpreter, unchanged) drive a local cellvm by
// setting E2B_DOMAIN and E2B_API_KEY.
//
// It answers E2B's addressing on cellvm's TLS listener, routed by the
// Host header (cellvm serve --e2b-domain DOMAIN):
//
//	api.DOMAIN              E2B's control plane (create, list, kill, timeout,
//	                        pause, resume, connect)
//	49983-ID.DOMAIN         E2B's in-sandbox daemon, envd: processes and the
//	                        filesystem over Connect RPC (JSON), /files, /health
//	49999-ID.DOMAIN         the code interpreter: /execute (NDJSON), /contexts
//	PORT-ID.DOMAIN          any other port: that TCP port in the guest, over
//	                        vsock through the agent (E2B's getHost(port))
//
// Like every front end it feeds sandbox.Manager and nothing else: the
// E2B SDKs' wire formats are the specification, and each call is mapped
// onto the one internal API. E2B_API_KEY is a cellvm token, so the
// caller's tenant owns what it creates and another tenant's sandbox is
// 404, as a missing one.
package e2b
