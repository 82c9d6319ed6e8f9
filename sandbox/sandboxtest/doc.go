// Package sandboxtest is a test double of sandbox.Manager, as
// net/http/httptest is of an HTTP server: one in-memory manager, with no
// VM, that the tests of every front end drive (the HTTP API, the agent
// loop, its MCP server, the command line, and the Python and JS clients
// through the API). One double keeps those tests honest about the same
// rules; three had drifted apart.
//
// What is real is the contract (package sandbox): configs are validated
// as the VM manager validates them, errors wrap its sentinels, and the
// rules between calls hold. One cell runs at a time (a second is
// ErrBusy). A paused sandbox resumes on the next cell, command or file
// call; a lost one refuses them with ErrLost. A fork has its snapshot's
// machine, image, env, variables and files. A workspace is held by one
// sandbox at a time and its files outlive it. An image is deleted only
// while no sandbox or snapshot uses it. The caps on sandboxes, memory and
// snapshot disk refuse with ErrFull. Checkpoints copy a sandbox's
// variables, files and execution count, so an undo, a restore or a branch
// brings them back (checkpoints.go). Events, logs and capacity follow the
// calls, and every cell ends with its end event.
//
// What is not real: there is no VM, no Python and no network. A cell is
// answered by the test's Script, else by one of the scripted cells below,
// else by a stand-in interpreter that reads one statement a line:
// "name = integer", "name" (the cell's value), "print(name)", comments and
// imports (and JavaScript's and Bash's spellings of those: "let x = 1;",
// "console.log(x)", "export V=7", "echo $V"). Each language and context
// has its own session with its own variables (contexts.go), and a cell in
// a language its sandbox's image lacks is refused as the VM manager
// refuses it. Commands are the few below. Ids are sb-fake1, sb-fake2, ...
// (sb-NODE-000000000001, ... with Node set, as a daemon's --node makes
// them) and snapshot ids snap- and the same counter; sandboxes, snapshots and
// workspaces carry fixed times (from 2023-11-14 on), so output can be
// compared.
//
// Scripted cells, by their code:
//
//	"stream"      stdout, stderr, stdout, a main result, in that order
//	"gate"        stdout "waiting", then blocks until the sandbox is
//	              interrupted, then stdout "released" (a minute at most)
//	"hang"        blocks until the caller goes away (its context ends)
//	"break"       one stdout event, then panics with http.ErrAbortHandler,
//	              which cuts an HTTP response mid-stream (over the API only)
//	"raise"       an error event (KeyError 'x') and status error
//	"timeout"     stdout "started", then status timeout with the state kept
//	"die"         status lost; the sandbox is lost from then on
//	"chart"       a figure (ChartPNG and text) and a main result in five formats
//	"big"         one stdout event of 1 MiB
//	"env"         stdout: the sandbox's env as JSON
//	"timeout_ms"  stdout: the cell's timeout in milliseconds
//	"internal"    a plain error before the cell starts (an internal error)
//
// Commands, by argv[0]: echo (its arguments), cat (stdin), hex (stdin in
// hex), argv (the argv as JSON on stdout, exit 3), sleep (timed out, its
// duration the timeout); anything else exits 127 with its argv as JSON
// on stdout and "not found" on stderr.
//
// Other scenarios: a create with memory past MaxMemoryMiB (in all) or a
// sandbox past MaxSandboxes is full; a network policy naming
// "not-supported.test" is not supported; downloading
// /workspace/fail-midway writes 100 KiB and then fails with ErrLost.
// The images are "default" (the daemon's own), "team" (built with
// --apt jq) and "scratch" (built, used by nothing).
//
// How tests configure it: New returns a manager with its images and caps;
// set the exported fields before the manager is shared. Script answers
// the test's own cells. Fail makes a method return an error; Lose,
// AppendLog and SetNetworkCounters do what a VM would. Calls lists the
// calls the manager received, Happened what it did, Live and Deleted its
// sandboxes. A test that needs a manager breaking the contract wraps this
// one and overrides the method.
package sandboxtest
