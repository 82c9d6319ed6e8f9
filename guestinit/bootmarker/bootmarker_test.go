package bootmarker

import (
	"os"
	"testing"
)

// TestWriteWithoutPermission checks that a process without I/O
// permission gets an error, not a crash. (The real write is covered in the
// VM boot tests, where the VMM sees the marker.)
func TestWriteWithoutPermission(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("as root ioperm would succeed and the outb would hit a real port on this host")
	}
	if err := Write(); err == nil {
		t.Fatal("Write succeeded without CAP_SYS_RAWIO")
	}
}
