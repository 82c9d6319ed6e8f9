package e2b

import (
	"log/slog"

	"github.com/cellvm/cellvm/sandbox"
)

// scope is one sandbox request's view: the manager acting for the
// authenticated caller (its context carries the caller), the sandbox it
// addresses, and the port of the Host name. The router (server.go) makes
// it once the caller is known to own the sandbox.
type scope struct {
	m    sandbox.Manager
	id   string
	port int
	log  *slog.Logger
}
