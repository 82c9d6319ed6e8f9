// Package sessions keeps the guest's language sessions: one persistent
// interpreter (*interp.Interp) per language runtime and context name, so
// a sandbox runs Python, JavaScript, TypeScript and Bash cells each with
// variables of their own, and E2B-style named contexts beside the
// default ones.
//
// The Python default session is made first, by the agent's main, as before
// languages existed: commands and background processes use its
// environment and its cgroup of all user code. Every other session is
// made lazily, on its first cell (or by a context create, which fixes its
// working directory), and shares that cgroup (interp.Config.CellsFrom):
// the sandbox's memory and task budget is one, whatever the language, so
// a fork bomb in Bash or a memory bomb in JavaScript meets the same walls
// as one in Python.
//
// JavaScript and TypeScript share one Node.js session (cell.Language's
// Runtime), so a session is keyed by runtime, not by language. At most
// cell.MaxContexts sessions exist at once, the Python default included:
// each is a process with its own memory, and a guest's memory is small.
package sessions
