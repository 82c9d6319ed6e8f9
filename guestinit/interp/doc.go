// Package interp supervises the guest's persistent Python interpreter.
//
// One Interp owns one long-lived python process running driver.py (embedded
// here), which executes cells with notebook semantics: variables, imports
// and the working directory persist between cells, the last expression is
// the main result, and rich objects come back as MIME bundles. The
// supervisor, not the driver, owns everything that must hold when the cell
// misbehaves:
//
//   - fds 1 and 2 of the interpreter are pipes read here, so output of C
//     code and subprocesses is captured, streamed, and clipped to a bounded
//     head and tail (cell.Clipper) however much is written;
//   - the driver's results travel on a separate pipe pair (PROTOCOL.md), so
//     user output can never be mistaken for protocol;
//   - a timeout sends SIGINT, and a cell that ignores it is killed with its
//     whole process group after a grace period; the next cell gets a fresh
//     interpreter and the result says truthfully that state was lost;
//   - processes a cell started do not outlive an interrupted or killed cell;
//   - with a cgroup v2 parent configured, the interpreter runs in its own
//     child cgroup with memory.max, and OOM kills are told apart from other
//     deaths by memory.events.
//
// Cells may also use Jupyter's notebook syntax (`!cmd`, `%magic`,
// `%%magic`): notebook.py, loaded only for a cell that is not plain Python,
// reads it with IPython's input transformers and runs it (PROTOCOL.md).
//
// The interpreter is the image's own python3 (3.8 or later), looked up on
// the cells' PATH at each start; an image without one still runs commands,
// and its cells are error results that say so (PythonError).
//
// Everything the interpreter sends is treated as hostile: frames are
// bounded, unknown frames are ignored, and no guest data can panic the
// supervisor.
package interp
