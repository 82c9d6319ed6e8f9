package api

import (
	"net/http"
	"strconv"

	"github.com/cellvm/cellvm/sandbox"
)

// Checkpoints (time travel; sandbox/checkpoints.go): record one, list
// them, restore one in the same sandbox, undo the last. A branch is a
// create with {"checkpoint": {"sandbox": id, "n": n}}.

// CheckpointList is GET /v1/sandboxes/{id}/checkpoints's answer.
type CheckpointList struct {
	Checkpoints []sandbox.CheckpointInfo `json:"checkpoints"`
}

// maxCheckpointN bounds the {n} of a path: past it no checkpoint exists.
const maxCheckpointN = 1 << 40

func (s *server) createCheckpoint(w http.ResponseWriter, r *http.Request) {
	info, err := s.m.Checkpoint(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeJSON(w, http.StatusCreated, info)
}

func (s *server) listCheckpoints(w http.ResponseWriter, r *http.Request) {
	cps, err := s.m.Checkpoints(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	if cps == nil {
		cps = []sandbox.CheckpointInfo{}
	}
	s.writeJSON(w, http.StatusOK, CheckpointList{Checkpoints: cps})
}

func (s *server) restoreCheckpoint(w http.ResponseWriter, r *http.Request) {
	raw := r.PathValue("n")
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < 1 || n > maxCheckpointN {
		s.writeError(w, &Error{Status: http.StatusBadRequest, Code: CodeInvalid,
			Message: "checkpoint number " + strconv.Quote(clipString(raw, 32)) + ": want an integer from 1"})
		return
	}
	info, err := s.m.RestoreCheckpoint(r.Context(), r.PathValue("id"), int(n))
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeJSON(w, http.StatusOK, info)
}

func (s *server) undoCheckpoint(w http.ResponseWriter, r *http.Request) {
	info, err := s.m.Undo(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeJSON(w, http.StatusOK, info)
}
