package api

import "net/http"

// route is one entry of the API. The table below is the only place routes
// are listed: NewServer registers it on the mux, and the OpenAPI test
// checks the document against it.
type route struct {
	method string
	// pattern is the path in http.ServeMux syntax ({path...} for the rest
	// of the path); the OpenAPI document writes {path}.
	pattern string
	handler func(*server, http.ResponseWriter, *http.Request)
}

// routes returns the route table.
func routes() []route {
	return []route{
		{"GET", "/v1/openapi.json", (*server).openAPI},
		{"POST", "/v1/sandboxes", (*server).create},
		{"GET", "/v1/sandboxes", (*server).list},
		{"GET", "/v1/sandboxes/{id}", (*server).get},
		{"DELETE", "/v1/sandboxes/{id}", (*server).delete},
		{"POST", "/v1/sandboxes/{id}/cells", (*server).runCell},
		{"POST", "/v1/sandboxes/{id}/interrupt", (*server).interrupt},
		{"POST", "/v1/sandboxes/{id}/restart", (*server).restart},
		{"GET", "/v1/sandboxes/{id}/contexts", (*server).listContexts},
		{"POST", "/v1/sandboxes/{id}/contexts", (*server).createContext},
		{"DELETE", "/v1/sandboxes/{id}/contexts/{name}", (*server).deleteContext},
		{"POST", "/v1/sandboxes/{id}/exec", (*server).exec},
		{"PUT", "/v1/sandboxes/{id}/files/{path...}", (*server).upload},
		{"GET", "/v1/sandboxes/{id}/files/{path...}", (*server).download},
		{"DELETE", "/v1/sandboxes/{id}/files/{path...}", (*server).removePath},
		{"GET", "/v1/sandboxes/{id}/dir/{path...}", (*server).listDir},
		{"POST", "/v1/sandboxes/{id}/dir/{path...}", (*server).makeDir},
		{"GET", "/v1/sandboxes/{id}/stat/{path...}", (*server).statPath},
		{"POST", "/v1/sandboxes/{id}/move", (*server).movePath},
		{"GET", "/v1/sandboxes/{id}/watch/{path...}", (*server).watchDir},
		{"GET", "/v1/sandboxes/{id}/ports/{port}", (*server).dialPort},
		{"POST", "/v1/sandboxes/{id}/processes", (*server).startProcess},
		{"GET", "/v1/sandboxes/{id}/processes", (*server).listProcesses},
		{"GET", "/v1/sandboxes/{id}/processes/{pid}/attach", (*server).attachProcess},
		{"POST", "/v1/sandboxes/{id}/processes/{pid}/stdin", (*server).processStdin},
		{"POST", "/v1/sandboxes/{id}/processes/{pid}/signal", (*server).signalProcess},
		{"POST", "/v1/sandboxes/{id}/processes/{pid}/resize", (*server).resizeProcess},
		{"PUT", "/v1/sandboxes/{id}/network", (*server).setNetwork},
		{"POST", "/v1/sandboxes/{id}/pause", (*server).pause},
		{"POST", "/v1/sandboxes/{id}/resume", (*server).resume},
		{"POST", "/v1/sandboxes/{id}/snapshot", (*server).snapshot},
		{"POST", "/v1/sandboxes/{id}/checkpoints", (*server).createCheckpoint},
		{"GET", "/v1/sandboxes/{id}/checkpoints", (*server).listCheckpoints},
		{"POST", "/v1/sandboxes/{id}/checkpoints/undo", (*server).undoCheckpoint},
		{"POST", "/v1/sandboxes/{id}/checkpoints/{n}/restore", (*server).restoreCheckpoint},
		{"POST", "/v1/sandboxes/{id}/ttl", (*server).setTTL},
		{"GET", "/v1/sandboxes/{id}/logs", (*server).logs},
		{"GET", "/v1/events", (*server).events},
		{"GET", "/v1/capacity", (*server).capacity},
		{"GET", "/v1/version", (*server).getVersion},
		{"GET", "/metrics", (*server).metrics},
		{"GET", "/v1/snapshots", (*server).listSnapshots},
		{"GET", "/v1/snapshots/{id}", (*server).getSnapshot},
		{"DELETE", "/v1/snapshots/{id}", (*server).deleteSnapshot},
		{"GET", "/v1/workspaces", (*server).listWorkspaces},
		{"GET", "/v1/images", (*server).listImages},
		{"POST", "/v1/images", (*server).createImage},
		{"DELETE", "/v1/images/{name}", (*server).deleteImage},
		{"DELETE", "/v1/workspaces/{name}", (*server).deleteWorkspace},
		// MCP's Streamable HTTP: POST sends messages, GET opens the
		// server's stream, DELETE ends the session (WithMCP).
		{"POST", MCPPath, (*server).serveMCP},
		{"GET", MCPPath, (*server).serveMCP},
		{"DELETE", MCPPath, (*server).serveMCP},
	}
}

// MCPPath is where the server answers MCP's Streamable HTTP when it has an
// MCP handler (WithMCP).
const MCPPath = "/mcp"

// serveMCP hands the request to the MCP handler, or answers 404 when the
// daemon serves no MCP.
func (s *server) serveMCP(w http.ResponseWriter, r *http.Request) {
	if s.mcp == nil {
		s.writeError(w, &Error{Status: http.StatusNotFound, Code: CodeNotFound,
			Message: "this daemon does not serve MCP (cellvm serve --mcp turns it on)"})
		return
	}
	s.mcp.ServeHTTP(w, r)
}
