package vmm

import (
	"bytes"
	"io"
	"sync"
)

// consoleWatch passes console output through and calls onLine for each
// complete line (at most maxLine bytes are kept per line), so the VMM can
// notice a kernel panic or a power-off message.
type consoleWatch struct {
	mu     sync.Mutex
	out    io.Writer
	line   []byte
	onLine func(line []byte)
}

const maxLine = 512

func (c *consoleWatch) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range p {
		if b == '\n' {
			c.onLine(bytes.TrimRight(c.line, "\r"))
			c.line = c.line[:0]
			continue
		}
		if len(c.line) < maxLine {
			c.line = append(c.line, b)
		}
	}
	_, err := c.out.Write(p)
	return len(p), err
}

var (
	panicMsg    = []byte("Kernel panic - not syncing")
	powerOffMsg = []byte("reboot: Power down")
)
