package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// vmmSHA256 is the SHA-256 (hex) of the cellvm-vmm built with this
// binary, which the Makefile passes with -ldflags -X; empty in a build
// without it (`go build ./cmd/cellvm`, a test binary).
var vmmSHA256 string

// vmmBinaryName is cellvm-vmm's file name, next to cellvm's.
const vmmBinaryName = "cellvm-vmm"

// vmmBinary is the binary the daemon starts for each VM: cellvm-vmm next
// to exe (cellvm's own path) when it is exactly the one built with this
// cellvm (its SHA-256 is vmmSHA256), and exe itself (`cellvm vmm`)
// otherwise. A VMM and its daemon share the spec's format and the control
// protocol, so a stale or foreign cellvm-vmm is never run: the fallback
// is the same VMM, only larger. A test binary acting as cellvm (extra, its
// role's environment) is always its own VMM.
func vmmBinary(exe string, extra []string, log *slog.Logger) string {
	if len(extra) > 0 {
		return exe
	}
	path, problem := findVMMBinary(exe)
	if problem != "" {
		log.Warn(problem, "want", filepath.Join(filepath.Dir(exe), vmmBinaryName))
		return exe
	}
	return path
}

// findVMMBinary is cellvm-vmm's path next to exe when it is the one built
// with this cellvm; otherwise exe, and what is wrong, for a log line or
// `cellvm doctor`.
func findVMMBinary(exe string) (path, problem string) {
	if vmmSHA256 == "" {
		return exe, "" // built without cellvm-vmm (go build ./cmd/cellvm): `cellvm vmm` is the VMM
	}
	path = filepath.Join(filepath.Dir(exe), vmmBinaryName)
	sum, err := fileSHA256(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return exe, "no cellvm-vmm next to cellvm: each VM runs as `cellvm vmm`, about 15 MiB larger (copy build/bin/cellvm-vmm beside cellvm)"
	case err != nil:
		return exe, "cellvm-vmm cannot be read (" + err.Error() + "): each VM runs as `cellvm vmm`"
	case sum != vmmSHA256:
		return exe, "cellvm-vmm is not the one built with this cellvm: each VM runs as `cellvm vmm` (rebuild both with make cellvm)"
	}
	return path, ""
}

// fileSHA256 is the hex SHA-256 of the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
