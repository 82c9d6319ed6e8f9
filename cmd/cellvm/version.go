package main

import (
	"fmt"
	"runtime/debug"

	"github.com/cellvm/cellvm/api"
	"github.com/spf13/cobra"
)

func (a *app) versionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "print the module version and the git commit cellvm was built from",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			info, _ := debug.ReadBuildInfo()
			if a.jsonOut {
				return printJSON(a.stdout, versionOf(info))
			}
			fmt.Fprintln(a.stdout, versionOf(info).String())
			return nil
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON for scripts")
	return cmd
}

// buildCommit is the commit the Makefile passes with -ldflags -X, for
// builds where Go records no VCS stamp (a git worktree, whose .git is a
// file, or GOFLAGS=-buildvcs=false).
var buildCommit string

// buildRelease is the version the Makefile passes with -ldflags -X (its
// VERSION: the nearest git tag); empty, the build info's module version
// is the version.
var buildRelease string

// buildVersion is what a binary knows about where it came from.
type buildVersion struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Time     string `json:"commit_time,omitempty"`
	Modified bool   `json:"modified"`
	Go       string `json:"go"`
}

// versionOf reads the module version and the VCS stamp (vcs.revision,
// vcs.time, vcs.modified) that `go build` records from a git checkout.
func versionOf(info *debug.BuildInfo) buildVersion {
	v := buildVersion{Module: "github.com/cellvm/cellvm", Version: "unknown", Commit: "unknown"}
	if buildCommit != "" {
		v.Commit = buildCommit
	}
	if buildRelease != "" {
		v.Version = buildRelease
	}
	if info == nil {
		return v
	}
	v.Go = info.GoVersion
	if info.Main.Path != "" {
		v.Module = info.Main.Path
	}
	if info.Main.Version != "" {
		v.Version = info.Main.Version
	}
	if buildRelease != "" {
		v.Version = buildRelease
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func (v buildVersion) String() string {
	s := fmt.Sprintf("cellvm %s (%s) commit %s", v.Version, v.Module, v.Commit)
	if v.Modified {
		s += " (modified)"
	}
	if v.Time != "" {
		s += " " + v.Time
	}
	if v.Go != "" {
		s += " " + v.Go
	}
	return s
}

// moduleVersion is the version reported to MCP clients.
func moduleVersion() string {
	info, _ := debug.ReadBuildInfo()
	v := versionOf(info)
	if v.Commit != "unknown" && len(v.Commit) >= 12 {
		return v.Version + "+" + v.Commit[:12]
	}
	return v.Version
}

// apiVersion is what the daemon's GET /v1/version answers.
func apiVersion() api.VersionInfo {
	info, _ := debug.ReadBuildInfo()
	v := versionOf(info)
	return api.VersionInfo{Version: v.Version, Commit: v.Commit, Go: v.Go}
}
