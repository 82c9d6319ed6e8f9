package interp

import _ "embed"

// notebookFile is the name notebookSource has in the run directory, next
// to the driver (driver.py's NOTEBOOK_FILE).
const notebookFile = "cellvm_notebook.py"

// driverSource is the Python side of the supervisor; see PROTOCOL.md.
//
//go:embed driver.py
var driverSource []byte

// notebookSource is the driver's notebook syntax (shell escapes, magics),
// loaded by the driver only for cells that use it; see PROTOCOL.md.
//
//go:embed notebook.py
var notebookSource []byte
