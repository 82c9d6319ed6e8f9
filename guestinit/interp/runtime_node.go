package interp

import (
	_ "embed"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/cellvm/cellvm/cell"
)

// NodeName is the program JavaScript and TypeScript cells run on, looked
// up on the cells' PATH (Debian's nodejs in cellvm's image).
const NodeName = "node"

// MinNode is the oldest Node.js the driver runs on (driver.js checks it,
// and says so with an "unsupported" frame).
const MinNode = "18"

// DefaultTypeScript is where cellvm's image has TypeScript's compiler; a
// CELLVM_TYPESCRIPT in the cells' environment (Config.Env or SetEnv)
// names another.
const DefaultTypeScript = "/opt/cellvm/node_modules/typescript/lib/typescript.js"

// nodeDriverSource is the Node side of the supervisor; see PROTOCOL.md.
//
//go:embed driver.js
var nodeDriverSource []byte

// nodeRewriteSource is the driver's rewrite of a cell (declarations to
// globals, top-level await), next to it in the run directory.
//
//go:embed rewrite.js
var nodeRewriteSource []byte

func init() { runtimes["node"] = nodeRuntime }

// nodeRuntime runs JavaScript and TypeScript cells in one Node.js
// process (one set of globals): a TypeScript cell's types are stripped by
// the driver, which tells them apart by the exec command's lang.
var nodeRuntime = &runtime{
	name:      "node",
	languages: []cell.Language{cell.JavaScript, cell.TypeScript},
	program:   NodeName,
	files:     map[string][]byte{"cellvm_driver.js": nodeDriverSource, "cellvm_rewrite.js": nodeRewriteSource},
	driver:    "cellvm_driver.js",
	argv: func(driverPath string) []string {
		return []string{driverPath, strconv.Itoa(childCtlFD), strconv.Itoa(childEvFD)}
	},
	env:    (*Interp).nodeEnv,
	encode: encodeJSONLine,
}

// nodeEnv is what Node's driver relies on in its environment: no colours
// anywhere, the text cap, TypeScript's place, and the heap bound.
func (in *Interp) nodeEnv() []string {
	base := in.baseEnv()
	env := []string{
		"NO_COLOR=1",
		"NODE_DISABLE_COLORS=1",
		"FORCE_COLOR=0",
		"TERM=dumb",
		"CELLVM_MAX_TEXT=" + strconv.Itoa(max(in.cfg.HeadBytes+in.cfg.TailBytes, 4096)),
	}
	if _, ok := envValue(base, "CELLVM_TYPESCRIPT"); !ok {
		env = append(env, "CELLVM_TYPESCRIPT="+DefaultTypeScript)
	}
	if mb := nodeHeapMB(in.memoryMax()); mb > 0 {
		opts, _ := envValue(base, "NODE_OPTIONS") // the image's or the user's, kept
		env = append(env, "NODE_OPTIONS="+strings.TrimSpace(opts+" --max-old-space-size="+strconv.FormatInt(mb, 10)))
	}
	return env
}

// memoryMax is the memory budget of the session's cells: its own, or
// that of the Interp whose cgroup it shares.
func (in *Interp) memoryMax() int64 {
	if in.cfg.MemoryMax > 0 || in.cfg.CellsFrom == nil {
		return in.cfg.MemoryMax
	}
	return in.cfg.CellsFrom.cfg.MemoryMax
}

// nodeHeapMB is V8's old-space limit for a memory budget (0: V8's own
// default, from the machine's memory): three quarters of it, so that a
// JavaScript memory bomb ends in V8's "heap out of memory" (a result
// that says OutOfMemory, outOfHeap) before the cgroup's OOM killer picks
// a process of the sandbox.
func nodeHeapMB(memoryMax int64) int64 {
	if memoryMax <= 0 {
		return 0
	}
	return max(memoryMax/4*3>>20, 16)
}

// outOfHeap reports whether the interpreter died of V8's heap limit: it
// aborted after printing V8's fatal "heap out of memory" error. Such a
// death is a cell's OutOfMemory, not a mystery.
func (r *cellRun) outOfHeap(st *os.ProcessState) bool {
	if r.p.rt != nodeRuntime || st == nil {
		return false
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGABRT {
		return false
	}
	text, _ := r.errs.clip.Text()
	return strings.Contains(text, "JavaScript heap out of memory")
}
