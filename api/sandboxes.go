package api

import (
	"net/http"

	"github.com/cellvm/cellvm/audit"
	"github.com/cellvm/cellvm/sandbox"
)

// ListResponse is the body of GET /v1/sandboxes.
type ListResponse struct {
	Sandboxes []sandbox.Info `json:"sandboxes"`
	// Next is the token of the next page (?next=), when a limit cut
	// this one short.
	Next string `json:"next,omitempty"`
}

// create: POST /v1/sandboxes with a sandbox.Config (an empty body means
// all defaults). Validation happens here, before the manager is called, so
// a bad request never starts anything.
func (s *server) create(w http.ResponseWriter, r *http.Request) {
	var cfg sandbox.Config
	if err := decodeJSON(w, r, s.maxJSON, &cfg, true); err != nil {
		s.writeError(w, err)
		return
	}
	withDefaults := cfg.WithDefaults()
	if err := withDefaults.Validate(); err != nil {
		s.writeError(w, err)
		return
	}
	// A fork's vCPUs and memory, when not given, are its snapshot's,
	// which only the manager knows.
	if cfg.Snapshot == "" && cfg.Checkpoint == nil {
		cfg = withDefaults
	}
	ae := AuditOf(r.Context())
	ae.Set(func(rec *audit.Record) {
		rec.Snapshot, rec.Workspace, rec.Image = cfg.Snapshot, cfg.Workspace, cfg.Image
		if cfg.Network != nil {
			rec.Policy = &audit.PolicyChange{OldAllow: []string{}, NewAllow: append([]string{}, cfg.Network.Allow...)}
		}
	})
	info, err := s.m.Create(r.Context(), cfg)
	if err != nil {
		s.writeError(w, err)
		return
	}
	ae.Set(func(rec *audit.Record) { rec.Sandbox = info.ID })
	w.Header().Set("Location", "/v1/sandboxes/"+info.ID)
	s.writeJSON(w, http.StatusCreated, info.Redacted())
}

// list: GET /v1/sandboxes, with the filters and pages of listquery.go.
func (s *server) list(w http.ResponseWriter, r *http.Request) {
	q, err := parseListQuery(r.URL.Query())
	if err != nil {
		s.writeError(w, err)
		return
	}
	infos, err := s.m.List(r.Context())
	if err != nil {
		s.writeError(w, err)
		return
	}
	infos, next := q.page(infos)
	for i := range infos {
		infos[i] = infos[i].Redacted()
	}
	s.writeJSON(w, http.StatusOK, ListResponse{Sandboxes: infos, Next: next})
}

func (s *server) get(w http.ResponseWriter, r *http.Request) {
	info, err := s.m.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeJSON(w, http.StatusOK, info.Redacted())
}

func (s *server) delete(w http.ResponseWriter, r *http.Request) {
	s.noContent(w, s.m.Delete(r.Context(), r.PathValue("id")))
}

func (s *server) interrupt(w http.ResponseWriter, r *http.Request) {
	s.noContent(w, s.m.Interrupt(r.Context(), r.PathValue("id")))
}

// restart: POST /v1/sandboxes/{id}/restart with an optional body
// {"language", "context"} naming the session (none: Python's default).
func (s *server) restart(w http.ResponseWriter, r *http.Request) {
	var in sandbox.Session
	if err := decodeJSON(w, r, s.maxJSON, &in, true); err != nil {
		s.writeError(w, err)
		return
	}
	sess, err := in.Normalize()
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.noContent(w, s.m.Restart(r.Context(), r.PathValue("id"), sess))
}

func (s *server) pause(w http.ResponseWriter, r *http.Request) {
	s.noContent(w, s.m.Pause(r.Context(), r.PathValue("id")))
}

func (s *server) resume(w http.ResponseWriter, r *http.Request) {
	s.noContent(w, s.m.Resume(r.Context(), r.PathValue("id")))
}

func (s *server) snapshot(w http.ResponseWriter, r *http.Request) {
	snap, err := s.m.Snapshot(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	AuditOf(r.Context()).Set(func(rec *audit.Record) { rec.Snapshot = snap.ID })
	s.writeJSON(w, http.StatusCreated, snap)
}

func (s *server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	snaps, err := s.m.ListSnapshots(r.Context())
	if err != nil {
		s.writeError(w, err)
		return
	}
	if snaps == nil {
		snaps = []sandbox.SnapshotInfo{}
	}
	s.writeJSON(w, http.StatusOK, snaps)
}

func (s *server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	snap, err := s.m.GetSnapshot(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeJSON(w, http.StatusOK, snap)
}

func (s *server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	s.noContent(w, s.m.DeleteSnapshot(r.Context(), r.PathValue("id")))
}

func (s *server) listWorkspaces(w http.ResponseWriter, r *http.Request) {
	ws, err := s.m.Workspaces(r.Context())
	if err != nil {
		s.writeError(w, err)
		return
	}
	if ws == nil {
		ws = []sandbox.WorkspaceInfo{}
	}
	s.writeJSON(w, http.StatusOK, ws)
}

func (s *server) listImages(w http.ResponseWriter, r *http.Request) {
	imgs, err := s.m.Images(r.Context())
	if err != nil {
		s.writeError(w, err)
		return
	}
	if imgs == nil {
		imgs = []sandbox.ImageInfo{}
	}
	s.writeJSON(w, http.StatusOK, imgs)
}

func (s *server) deleteImage(w http.ResponseWriter, r *http.Request) {
	s.noContent(w, s.m.DeleteImage(r.Context(), r.PathValue("name")))
}

func (s *server) deleteWorkspace(w http.ResponseWriter, r *http.Request) {
	s.noContent(w, s.m.DeleteWorkspace(r.Context(), r.PathValue("name")))
}

// setNetwork: PUT /v1/sandboxes/{id}/network with {"allow": [...]}.
func (s *server) setNetwork(w http.ResponseWriter, r *http.Request) {
	var p sandbox.NetworkPolicy
	if err := decodeJSON(w, r, s.maxJSON, &p, false); err != nil {
		s.writeError(w, err)
		return
	}
	if err := p.Validate(); err != nil {
		s.writeError(w, err)
		return
	}
	if ae := AuditOf(r.Context()); ae != nil {
		// The record holds the allowlist before and after. What came
		// before is the caller's to read: another tenant's sandbox is
		// not found here, and SetNetwork says so below.
		pc := &audit.PolicyChange{NewAllow: append([]string{}, p.Allow...)}
		if info, err := s.m.Get(r.Context(), r.PathValue("id")); err == nil && info.Config.Network != nil {
			pc.OldAllow = append([]string{}, info.Config.Network.Allow...)
		}
		ae.Set(func(rec *audit.Record) { rec.Policy = pc })
	}
	s.noContent(w, s.m.SetNetwork(r.Context(), r.PathValue("id"), p))
}

// noContent answers 204 for a nil error, the error otherwise.
func (s *server) noContent(w http.ResponseWriter, err error) {
	if err != nil {
		s.writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
