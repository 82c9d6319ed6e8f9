package interp

import (
	"log/slog"
	"time"

	"github.com/cellvm/cellvm/cell"
)

// DefaultPython is the interpreter of cellvm's own guest image (Debian's
// python3 with numpy, pandas, matplotlib and IPython), for tests and
// tools that want that one. The guest itself looks python3 up on the
// cells' PATH (PythonName), so an image's own python3 is used.
const DefaultPython = "/usr/bin/python3"

// Config says how to run the interpreter. The zero value of every field
// means its default.
type Config struct {
	// Runtime is the program of this session: "python" (the default),
	// "node" (JavaScript and TypeScript cells) or "bash";
	// cell.Language.Runtime names it for a language.
	Runtime string
	// CellsFrom, when not nil, is the Interp whose user-code cgroup (the
	// memory and pids budget) this one shares: the sessions of one
	// sandbox, all languages, share one budget. It must outlive this
	// Interp; CgroupParent, MemoryMax and PidsMax are then unused.
	CellsFrom *Interp
	// Python is the interpreter of a Python session (other runtimes look
	// their program, node or bash, up on the PATH): a path, or a name
	// looked up on the PATH of the interpreter's environment (Env, then
	// SetEnv's) each time it starts. Default PythonName. A missing one, or one older than
	// MinPython, makes every cell an error result (PythonError) while
	// commands run as usual.
	Python string
	// Dir is the working directory of cells and commands (/workspace in
	// the guest). Default: the supervisor's working directory.
	Dir string
	// Env is the environment of the interpreter and of commands. Default:
	// the supervisor's environment. The supervisor adds MPLBACKEND=Agg,
	// PYTHONUNBUFFERED=1, PYTHONIOENCODING=utf-8 and no-colour settings.
	Env []string
	// RunDir is where driver.py is written. Default: a new temporary
	// directory, removed by Close.
	RunDir string

	// HeadBytes and TailBytes bound what is kept of each output stream
	// (stdout, stderr) of a cell or command. Default cell.DefaultHeadBytes
	// and cell.DefaultTailBytes.
	HeadBytes, TailBytes int
	// Grace is how long a cell has to stop after SIGINT before it is killed
	// with its process group. Default 2s.
	Grace time.Duration
	// StartTimeout bounds the interpreter's start-up. Default 30s.
	StartTimeout time.Duration

	// CgroupParent is a cgroup v2 directory in which the supervisor
	// creates a cgroup for all user code, and in it one for the
	// interpreter and one for each command. Empty: no cgroups.
	CgroupParent string
	// MemoryMax and PidsMax are written to the user code's cgroup's
	// memory.max (bytes) and pids.max (tasks, threads included): the
	// interpreter and every command together stay within them. 0 leaves
	// them at "max". They need CgroupParent.
	MemoryMax int64
	PidsMax   int64
	// Launcher is put before the command line of the interpreter and of
	// every command: in the guest, the agent's drop step (package drop),
	// which starts them with the cells' credentials. Empty: none (they
	// run as the supervisor does).
	Launcher []string
	// AddressSpaceLimit sets RLIMIT_AS of the interpreter (bytes; 0 none),
	// the fallback where no cgroup is available: large allocations then
	// fail with MemoryError inside Python instead of waking the OOM killer.
	AddressSpaceLimit int64

	// MaxCodeBytes bounds the source of one cell. Default 4 MiB.
	MaxCodeBytes int
	// MaxFrameBytes bounds one protocol frame from the driver (one rich
	// result). Default 32 MiB.
	MaxFrameBytes int
	// MaxResultsBytes bounds the rich results of one cell together;
	// results past it are dropped with a note on stderr. Default 64 MiB.
	MaxResultsBytes int

	// Logger receives the supervisor's logs. Default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.HeadBytes <= 0 {
		c.HeadBytes = cell.DefaultHeadBytes
	}
	if c.TailBytes <= 0 {
		c.TailBytes = cell.DefaultTailBytes
	}
	if c.Grace <= 0 {
		c.Grace = 2 * time.Second
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.MaxCodeBytes <= 0 {
		c.MaxCodeBytes = 4 << 20
	}
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = 32 << 20
	}
	if c.MaxResultsBytes <= 0 {
		c.MaxResultsBytes = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
