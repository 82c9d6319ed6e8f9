package interp

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/cellvm/cellvm/cell"
)

// BashName is the shell looked up on the cells' PATH for Bash cells.
const BashName = "bash"

// bashDriverSource is the Bash side of the supervisor; see PROTOCOL.md,
// "Bash".
//
//go:embed driver.bash
var bashDriverSource []byte

// bashRuntime is one persistent bash whose cells are sourced into the
// shell itself, so cd, variables, exports, functions and options persist
// from cell to cell, as at a prompt. An interrupt goes to the whole
// process group: the shell waits for its foreground commands, which must
// stop first (a terminal's Ctrl-C does the same).
var bashRuntime = &runtime{
	name:      "bash",
	languages: []cell.Language{cell.Bash},
	program:   BashName,
	files:     map[string][]byte{"cellvm_driver.bash": bashDriverSource},
	driver:    "cellvm_driver.bash",
	argv: func(driverPath string) []string {
		return []string{"--norc", "--noprofile", driverPath, strconv.Itoa(childCtlFD), strconv.Itoa(childEvFD)}
	},
	env:         (*Interp).bashEnv,
	encode:      encodeBash,
	signalGroup: true,
}

func init() { runtimes["bash"] = bashRuntime }

// bashEnv is what the Bash driver's session is given: no colours and a
// dumb terminal, as for Python.
func (in *Interp) bashEnv() []string {
	return []string{"NO_COLOR=1", "TERM=dumb"}
}

// encodeBash writes a command in the Bash driver's line protocol: bash
// reads a line only byte by byte from a pipe, but a counted block at
// once (read -N), so a cell's code follows its header as raw bytes:
//
//	exec N LEN\n<LEN bytes>
//	reap\n
//	reseed\n
//
// A bash string cannot hold a NUL byte (read drops them, and would then
// take bytes of the next command), so they are removed from the code.
func encodeBash(c command) ([]byte, error) {
	switch c.Op {
	case "exec":
		code := strings.ReplaceAll(c.Code, "\x00", "")
		b := make([]byte, 0, len(code)+32)
		b = fmt.Appendf(b, "exec %d %d\n", c.N, len(code))
		return append(b, code...), nil
	case "reap", "reseed":
		return []byte(c.Op + "\n"), nil
	}
	return nil, fmt.Errorf("the bash driver has no command %q", clipText(c.Op, 32))
}
