package interp

import _ "embed"

// driverSource is the Python side of the supervisor; see PROTOCOL.md.
//
//go:embed driver.py
var driverSource []byte
