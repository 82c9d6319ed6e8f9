package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellvm/cellvm/agent/mcpserver"
	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/tenant"
)

// lookupGroup resolves --socket-group (a name or a gid).
func lookupGroup(g string) (int, error) {
	if gid, err := strconv.Atoi(g); err == nil && gid >= 0 {
		return gid, nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		return 0, fmt.Errorf("--socket-group %q: %w", g, err)
	}
	return strconv.Atoi(grp.Gid)
}

// serverTLS is the TCP listener's TLS configuration: --tls-cert and
// --tls-key, or a self-signed certificate made now for the listen address
// (and localhost), written to STATE_DIR/tls/cert.pem for clients to trust
// (package api makes it). It returns the certificate's path for the log.
func serverTLS(o *serveOptions, log *slog.Logger) (*tls.Config, string, error) {
	if o.tlsCert != "" {
		cfg, err := api.LoadServerTLS(o.tlsCert, o.tlsKey)
		if err != nil {
			return nil, "", usageError{fmt.Errorf("--tls-cert/--tls-key: %w", err)}
		}
		return cfg, o.tlsCert, nil
	}
	host, _, _ := net.SplitHostPort(strings.TrimPrefix(o.listen, "tcp://"))
	cfg, path, sum, err := api.SelfSignedServerTLS(filepath.Join(o.stateDir, "tls"), host, o.e2b.names()...)
	if err != nil {
		return nil, "", err
	}
	log.Warn("serving TLS with a self-signed certificate made at start; clients must trust it (--tls-ca)",
		"cert", path, "sha256", sum)
	return cfg, path, nil
}

// newMCPHandler serves the sandbox tools over Streamable HTTP: a sandbox
// per MCP session, deleted when the session ends (the client's DELETE) or
// idles out (--mcp-idle-timeout). The returned function ends the sessions.
func newMCPHandler(m sandbox.Manager, o *serveOptions, tenantFile *tenant.File, log *slog.Logger) (http.Handler, func()) {
	cfg := sandbox.Config{IdleTimeout: o.mcpSession + time.Minute}
	cfg.Checkpoints, _ = o.mcpFlags.checkpointConfig() // a plain bool: no error
	srv := mcpserver.New(m, mcpserver.Options{Config: cfg, Toolbox: o.mcpFlags.toolbox(), Log: log, Version: moduleVersion()})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.MCP() }, &mcp.StreamableHTTPOptions{
		SessionTimeout: o.mcpSession,
		Logger:         log,
		// A browser page must not drive the tools: a cross-origin
		// request (Origin or Sec-Fetch-Site) is 403, and so is one that
		// reached a loopback address under another host's name (DNS
		// rebinding).
		CrossOriginProtection: http.NewCrossOriginProtection(),
	})
	perTenant := func(tenant string) int {
		if s := tenantFile.For(tenant); s.MCPSessions != nil {
			return *s.MCPSessions
		}
		return o.mcpMaxSessions
	}
	return newMCPSessions(h, o.mcpSession, perTenant), srv.Close
}
