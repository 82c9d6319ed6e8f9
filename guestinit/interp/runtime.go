package interp

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/cellvm/cellvm/cell"
)

// A runtime is what differs between the sessions of the languages: the
// program, how it starts, what the supervisor writes to its driver, and
// how an interrupt reaches it. Everything else (the pipes, the frames, the
// cell's states, the grace period, the cgroups, clipping and the result)
// is the supervisor's, and the same for every language (PROTOCOL.md).
type runtime struct {
	// name is Config.Runtime's value for it (cell.Language.Runtime).
	name string
	// languages are the cell languages it runs; the first is Run's.
	languages []cell.Language
	// program is the binary looked up on the cells' PATH (Config.Python
	// overrides it for Python).
	program string
	// files are written to the run directory by New (name -> contents);
	// driver is the one the program runs.
	files  map[string][]byte
	driver string
	// argv is the program's arguments after its path: the driver and the
	// command and event fds.
	argv func(driverPath string) []string
	// env is added to the session's environment.
	env func(in *Interp) []string
	// encode writes a command as one line for the driver (with its '\n').
	encode func(c command) ([]byte, error)
	// signalGroup: an interrupt is SIGINT to the whole process group, as
	// a terminal sends it (a shell waits for its foreground children,
	// which must get it too), not to the program alone.
	signalGroup bool
}

// runtimes are the sessions' programs by name.
var runtimes = map[string]*runtime{
	"python": pythonRuntime,
}

var pythonRuntime = &runtime{
	name:      "python",
	languages: []cell.Language{cell.Python},
	program:   PythonName,
	files:     map[string][]byte{"cellvm_driver.py": driverSource, notebookFile: notebookSource},
	driver:    "cellvm_driver.py",
	argv: func(driverPath string) []string {
		return []string{"-X", "utf8", driverPath, strconv.Itoa(childCtlFD), strconv.Itoa(childEvFD)}
	},
	env:    (*Interp).pythonEnv,
	encode: encodeJSONLine,
}

// lookupRuntime is the runtime called name ("" is Python's).
func lookupRuntime(name string) (*runtime, error) {
	if name == "" {
		name = "python"
	}
	rt, ok := runtimes[name]
	if !ok {
		return nil, fmt.Errorf("no runtime %q", clipText(name, 32))
	}
	return rt, nil
}

// runs reports whether rt runs cells of lang.
func (rt *runtime) runs(lang cell.Language) bool {
	for _, l := range rt.languages {
		if l == lang {
			return true
		}
	}
	return false
}

// encodeJSONLine is the drivers' usual command frame: one JSON object and
// a newline.
func encodeJSONLine(c command) ([]byte, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode command: %w", err)
	}
	return append(b, '\n'), nil
}

// langField is a cell's command's Lang: set only where the runtime runs
// more than one language.
func (in *Interp) langField(lang cell.Language) string {
	if len(in.rt.languages) < 2 {
		return ""
	}
	return string(lang)
}
