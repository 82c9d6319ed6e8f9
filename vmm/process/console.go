package process

import (
	"fmt"
	"io"
	"os"

	"github.com/cellvm/cellvm/vmm/consolelog"
)

// cappedConsole returns stdout capped at max bytes (vmm/consolelog); max 0
// means no cap. A cap needs stdout to be a file open read-write, as the
// daemon opens console.log.
func cappedConsole(stdout io.Writer, max int64) (io.Writer, error) {
	if max == 0 {
		return stdout, nil
	}
	f, ok := stdout.(*os.File)
	if !ok {
		return nil, fmt.Errorf("console cap of %d bytes: the console is not a file", max)
	}
	return consolelog.New(f, max)
}
