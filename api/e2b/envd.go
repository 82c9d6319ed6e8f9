package e2b

import "net/http"

// serveEnvd answers port 49983: envd's Connect RPC services (process,
// filesystem), /files and /health. Placeholder until the envd work lands.
func serveEnvd(s scope, w http.ResponseWriter, r *http.Request) {
	http.Error(w, "envd is not built yet", http.StatusNotImplemented)
}
