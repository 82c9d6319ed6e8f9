package e2b

import (
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/cellvm/cellvm/sandbox"
)

// envd (port 49983) is E2B's in-sandbox daemon: the SDK's commands, pty
// and files modules talk to it. Here it is not in the sandbox: each call
// is mapped onto the Manager, which reaches the guest's agent over
// vsock. The services are Connect RPC with JSON (envd_connect.go):
// process.Process (envd_process.go) and filesystem.Filesystem
// (envd_fs.go); /files moves file bodies (envd_files.go); /health says
// the sandbox's envd answers.

// serveEnvd answers port 49983.
func serveEnvd(s scope, w http.ResponseWriter, r *http.Request) {
	switch p := r.URL.Path; {
	case strings.HasPrefix(p, "/process.Process/"):
		envdProcess(s, w, r, strings.TrimPrefix(p, "/process.Process/"))
	case strings.HasPrefix(p, "/filesystem.Filesystem/"):
		envdFilesystem(s, w, r, strings.TrimPrefix(p, "/filesystem.Filesystem/"))
	case p == "/files":
		envdFiles(s, w, r)
	case p == "/health":
		// The SDK reads 502 as the sandbox being gone; a sandbox the
		// router found answers.
		w.WriteHeader(http.StatusNoContent)
	default:
		envdHTTPError(w, http.StatusNotFound, "no such envd route: "+clipCaller(p))
	}
}

// envdUser is the guest user a call acts as: the SDK sends it as HTTP
// Basic authentication's user name ("user", "root"); none is the
// default, the cell user. An Authorization of another scheme is not
// envd's and names no user.
func envdUser(r *http.Request) (string, error) {
	a := r.Header.Get("Authorization")
	enc, ok := strings.CutPrefix(a, "Basic ")
	if !ok {
		return sandbox.GuestUserDefault, nil
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", connectErrorf(codeInvalidArgument, "the Authorization header is not base64")
	}
	name, _, _ := strings.Cut(string(b), ":")
	if !sandbox.ValidGuestUser(name) {
		return "", connectErrorf(codeInvalidArgument, "user %q: a cellvm sandbox has %q and %q", clipCaller(name), sandbox.GuestUserCell, sandbox.GuestUserRoot)
	}
	return name, nil
}

// envdHome is the user's home directory, where relative paths start.
func envdHome(user string) string {
	if user == sandbox.GuestUserRoot {
		return "/root"
	}
	return "/home/user"
}

// envdPath resolves a path as envd does: relative to the user's home
// ("~" and "~/x" too). Validation is the Manager's (GuestPath).
func envdPath(p, user string) string {
	switch {
	case p == "~" || p == "":
		return envdHome(user)
	case strings.HasPrefix(p, "~/"):
		return envdHome(user) + "/" + p[2:]
	case !strings.HasPrefix(p, "/"):
		return envdHome(user) + "/" + p
	}
	return p
}
