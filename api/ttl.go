package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// TTLRequest is the body of POST /v1/sandboxes/{id}/ttl: the sandbox
// lives ttl_s more seconds from now, whatever its TTL said (E2B's
// setTimeout). The answer is the sandbox's info, whose config's ttl_s is
// then its new total lifetime counted from its creation.
type TTLRequest struct {
	TTLS int64 `json:"ttl_s"`
}

func (s *server) setTTL(w http.ResponseWriter, r *http.Request) {
	var req TTLRequest
	if err := decodeJSON(w, r, s.maxJSON, &req, false); err != nil {
		s.writeError(w, err)
		return
	}
	if req.TTLS < 1 || req.TTLS > int64(sandbox.MaxTTL/time.Second) {
		s.writeError(w, fmt.Errorf("%w: ttl_s %d out of range 1..%d", sandbox.ErrInvalid, req.TTLS, int64(sandbox.MaxTTL/time.Second)))
		return
	}
	info, err := s.m.SetTTL(r.Context(), r.PathValue("id"), time.Duration(req.TTLS)*time.Second)
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeJSON(w, http.StatusOK, info.Redacted())
}
