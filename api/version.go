package api

import (
	"net/http"
	"runtime/debug"
)

// VersionInfo is the body of GET /v1/version: what the daemon is, so a
// client or an operator can tell which cellvm answers without a shell on
// its host. cellvm serve fills it from the binary (WithVersion: the
// version the Makefile stamps with -ldflags, else the module's build
// info); a server given none reads the build info itself.
type VersionInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Go      string `json:"go"`
}

// WithVersion sets what GET /v1/version answers.
func WithVersion(v VersionInfo) Option { return func(s *server) { s.version = &v } }

// buildInfoVersion is the version the running binary's build info gives.
func buildInfoVersion() VersionInfo {
	v := VersionInfo{Version: "unknown", Commit: "unknown"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Go = info.GoVersion
	if info.Main.Version != "" {
		v.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			v.Commit = s.Value
		}
	}
	return v
}

func (s *server) getVersion(w http.ResponseWriter, r *http.Request) {
	v := buildInfoVersion()
	if s.version != nil {
		v = *s.version
	}
	s.writeJSON(w, http.StatusOK, v)
}
