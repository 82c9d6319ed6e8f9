package e2b

import "net/http"

// serveInterp answers port 49999: the code interpreter's /execute and
// /contexts. Placeholder until the interpreter work lands.
func serveInterp(s scope, w http.ResponseWriter, r *http.Request) {
	http.Error(w, "the code interpreter front is not built yet", http.StatusNotImplemented)
}
