package interp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cellvm/cellvm/cell"
)

// PythonName is the interpreter looked up on the cells' PATH when
// Config.Python is empty: an image's own python3, wherever it has it
// (/usr/bin in Debian's, /usr/local/bin in the python images).
const PythonName = "python3"

// MinPython is the oldest Python the driver runs on (driver.py checks it
// first thing, and says so with an "unsupported" frame).
const MinPython = "3.8"

// defaultPATH is searched when the cells' environment has no PATH.
const defaultPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ErrNoPython matches a *PythonError: the image has no python3 cells can
// run on.
var ErrNoPython = errors.New("no usable python3")

// Names of the cell errors for a missing or too old python3.
const (
	ErrNameNotFound = "InterpreterNotFound"
	ErrNameTooOld   = "InterpreterTooOld"
)

// PythonError says why cells cannot run in this image: it has no program
// for the session's runtime (python3, node, bash) on the cells' PATH, or
// one older than the driver needs (MinPython, MinNode). Commands and
// files do not need it; a cell gets it as its error result, not as a
// crash of the interpreter. (It is named for the first runtime.)
type PythonError struct {
	// Python is what was looked for: a name searched on PATH, or a path.
	Python string
	// PATH is the search path (for a name).
	PATH string
	// Found is the binary that is too old; Version is its version.
	Found, Version string
	// Runtime is the session's runtime ("python", "node", "bash"; ""
	// is Python's): what the message says cells need.
	Runtime string
}

func (e *PythonError) Is(target error) bool { return target == ErrNoPython }

// Name is the cell error's name.
func (e *PythonError) Name() string {
	if e.Found != "" {
		return ErrNameTooOld
	}
	return ErrNameNotFound
}

func (e *PythonError) Error() string {
	need := runtimeNeeds(e.Runtime) + "; exec and files work"
	switch {
	case e.Found != "":
		return fmt.Sprintf("this image's %s (%s) is %s %s: %s", clipText(filepath.Base(e.Python), 64), e.Found, runtimeTitle(e.Runtime), clipText(e.Version, 64), need)
	case strings.Contains(e.Python, "/"):
		return fmt.Sprintf("this image has no %s: %s", clipText(e.Python, 256), need)
	}
	return fmt.Sprintf("this image has no %s on its PATH (PATH=%s): %s", clipText(e.Python, 64), clipText(e.PATH, 512), need)
}

// runtimeTitle is a runtime's program in words.
func runtimeTitle(runtime string) string {
	switch runtime {
	case "node":
		return "Node.js"
	case "bash":
		return "Bash"
	}
	return "Python"
}

// runtimeNeeds says what a runtime's cells need.
func runtimeNeeds(runtime string) string {
	switch runtime {
	case "node":
		return "JavaScript and TypeScript cells need Node.js " + MinNode + " or later"
	case "bash":
		return "Bash cells need bash"
	}
	return "cells need Python " + MinPython + " or later"
}

// result is the cell result for e: an error, with whatever state there
// was (none) kept.
func (e *PythonError) result(n int, kept bool) cell.Result {
	return cell.Result{
		Status:         cell.StatusError,
		ExecutionCount: n,
		StateKept:      kept,
		Error:          &cell.Error{Name: e.Name(), Value: e.Error()},
	}
}

// findPython resolves the configured interpreter in the environment env
// it will run with: a path is taken as it is (if it exists); a name is
// looked up on env's PATH (defaultPATH without one), as the drop step's
// exec would, so the cells run the python3 of the image's PATH.
func findPython(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		if isExecutable(name) {
			return name, nil
		}
		return "", &PythonError{Python: name}
	}
	pathEnv, ok := envValue(env, "PATH")
	if !ok {
		pathEnv = defaultPATH
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if !filepath.IsAbs(dir) {
			continue // "" and relative entries: the working directory, a cell's to fill
		}
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p, nil
		}
	}
	return "", &PythonError{Python: name, PATH: pathEnv}
}

// isExecutable reports whether p is a regular file (links followed) with
// an execute bit.
func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// envValue is key's value in env: the last one, as exec takes it.
func envValue(env []string, key string) (string, bool) {
	v, ok := "", false
	for _, kv := range env {
		if k, val, found := strings.Cut(kv, "="); found && k == key {
			v, ok = val, true
		}
	}
	return v, ok
}

func clipText(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}
