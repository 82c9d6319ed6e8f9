package api

import (
	"encoding/base64"
	"fmt"
	"net/http"

	"github.com/cellvm/cellvm/audit"
	"github.com/cellvm/cellvm/sandbox"
)

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec. Stdin is text;
// bytes that are not UTF-8 go in StdinBase64 instead (at most one of the
// two may be set).
type ExecRequest struct {
	Argv        []string `json:"argv"`
	Stdin       string   `json:"stdin,omitempty"`
	StdinBase64 string   `json:"stdin_base64,omitempty"`
	// TimeoutMS nil means the server's default.
	TimeoutMS *int64 `json:"timeout_ms,omitempty"`
}

// exec runs one command and answers with a cell.ExecResult. A command
// that fails or times out is a result (exit_code, timed_out), not an error.
func (s *server) exec(w http.ResponseWriter, r *http.Request) {
	var req ExecRequest
	if err := decodeJSON(w, r, maxCodeBodyBytes, &req, false); err != nil {
		s.writeError(w, err)
		return
	}
	timeout, err := s.timeoutFrom(req.TimeoutMS)
	if err != nil {
		s.writeError(w, err)
		return
	}
	stdin := []byte(req.Stdin)
	if req.StdinBase64 != "" {
		if req.Stdin != "" {
			s.writeError(w, fmt.Errorf("%w: set stdin or stdin_base64, not both", sandbox.ErrInvalid))
			return
		}
		if base64.StdEncoding.DecodedLen(len(req.StdinBase64)) > sandbox.MaxStdinBytes+3 {
			s.writeError(w, fmt.Errorf("%w: stdin is larger than %d bytes", sandbox.ErrTooLarge, sandbox.MaxStdinBytes))
			return
		}
		if stdin, err = base64.StdEncoding.DecodeString(req.StdinBase64); err != nil {
			s.writeError(w, fmt.Errorf("%w: stdin_base64: %v", sandbox.ErrInvalid, err))
			return
		}
	}
	er := sandbox.ExecRequest{Argv: req.Argv, Stdin: stdin, Timeout: timeout}
	ae := AuditOf(r.Context())
	ae.Set(func(rec *audit.Record) { rec.SetArgv(req.Argv) })
	if err := er.Validate(); err != nil {
		s.writeError(w, err)
		return
	}
	res, err := s.m.Exec(r.Context(), r.PathValue("id"), er)
	if err != nil {
		s.writeError(w, err)
		return
	}
	ae.Set(func(rec *audit.Record) {
		rec.ResultStatus = fmt.Sprintf("exit %d", res.ExitCode)
		if res.TimedOut {
			rec.ResultStatus = "timed_out"
		}
	})
	s.writeJSON(w, http.StatusOK, res)
}
