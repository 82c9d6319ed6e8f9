package api

import (
	_ "embed"
	"fmt"
	"net/http"
)

// openAPIDoc is the OpenAPI 3.0 description of this API. It is written in
// JSON so that the test keeping it in step with routes() needs no YAML
// parser.
//
//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns a copy of the embedded OpenAPI document.
func OpenAPI() []byte { return append([]byte(nil), openAPIDoc...) }

func (s *server) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(openAPIDoc)))
	_, _ = w.Write(openAPIDoc)
}
