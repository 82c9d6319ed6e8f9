package api

import (
	"net/http"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// Contexts: a sandbox's sessions. Each language's cells run in its
// default session; named ones (E2B's contexts) are further sessions of a
// language with their own variables and working directory, picked by a
// cell's "context".
//
//	GET    /v1/sandboxes/{id}/contexts                     the sessions
//	POST   /v1/sandboxes/{id}/contexts                     {"language", "name", "cwd"} -> 201
//	DELETE /v1/sandboxes/{id}/contexts/{name}?language=L   -> 204

func (s *server) listContexts(w http.ResponseWriter, r *http.Request) {
	list, err := s.m.Contexts(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	if list == nil {
		list = []sandbox.ContextInfo{}
	}
	s.writeJSON(w, http.StatusOK, list)
}

func (s *server) createContext(w http.ResponseWriter, r *http.Request) {
	var spec sandbox.ContextSpec
	if err := decodeJSON(w, r, s.maxJSON, &spec, true); err != nil {
		s.writeError(w, err)
		return
	}
	spec, err := spec.Normalize()
	if err != nil {
		s.writeError(w, err)
		return
	}
	info, err := s.m.CreateContext(r.Context(), r.PathValue("id"), spec)
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeJSON(w, http.StatusCreated, info)
}

func (s *server) deleteContext(w http.ResponseWriter, r *http.Request) {
	sess, err := sandbox.Session{Language: cell.Language(r.URL.Query().Get("language")), Context: r.PathValue("name")}.Normalize()
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.noContent(w, s.m.DeleteContext(r.Context(), r.PathValue("id"), sess))
}
